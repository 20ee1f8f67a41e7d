"""The status page as a person sees it in a browser (headless Chromium, Debian's ``chromium``), on a
real fleet where one worker has died: the summary line, the dead worker greyed with the age of its
last load and named as ejected by the router, the bars, the unserved scope flagged, and the chart
of rejections per minute; ``/status.json`` says the same."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.browser import HeadlessChromium
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports
from tests.fakes.fleet import MODEL, fleetplane, wait_for
from tests.fakes.router import RouterProcess

pytestmark = pytest.mark.timeout(120)
ROUTER_ID = "status-edge"
# What the test reads of the rendered page: the text as laid out, each load row's text, colour and
# bar widths, and the chart's size and tooltips.
READING = """(() => {
  const rows = [...document.querySelectorAll('table.loads tr')].slice(1).map(tr => ({
    text: tr.innerText,
    colour: getComputedStyle(tr.cells[0]).color,
    bars: [...tr.querySelectorAll('.bar')].map(b => Math.round(b.getBoundingClientRect().width)),
  }));
  const svg = document.querySelector('svg.chart');
  const box = svg.getBoundingClientRect();
  return {
    text: document.body.innerText,
    summary: document.querySelector('.summary').innerText,
    rows,
    chart: {width: box.width, height: box.height,
            titles: [...svg.querySelectorAll('rect title')].map(t => t.textContent),
            text: svg.textContent},
  };
})()"""


def _chat(router: RouterProcess, **fields: Any) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}
    request = urllib.request.Request(
        router.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _status(control: ControlPlaneProcess) -> dict[str, Any]:
    with urllib.request.urlopen(control.http_url + "/status.json", timeout=5) as resp:
        document: dict[str, Any] = json.loads(resp.read())
    return document


def _engine() -> EngineSim:
    return EngineSim(
        *("--model", MODEL, "--load-publish-endpoint", "auto"),
        *("--kv-events-endpoint", kv_endpoint_with_free_load_ports(1)),
    )


def test_the_status_page_reads_right_in_a_browser(tmp_path: Path) -> None:
    """After a rejection and a worker's death, the page says 1/1 routers up to date, 1/2 workers
    fresh, greys the dead worker with its age, names the router that ejected it, flags the scope
    nobody serves and charts the rejection; the screenshot is a real rendering."""
    with (
        HeadlessChromium(tmp_path) as browser,  # first: skip before starting a fleet for nothing
        ControlPlaneProcess(store_path=tmp_path / "control.db") as control,
        _engine() as alive,
        _engine() as doomed,
    ):
        for engine in (alive, doomed):
            fleetplane(control.target, "workers", "add", engine.url)
        fleetplane(control.target, "contract", "set", "--fleet", '{"temperature": 1}')
        fleetplane(control.target, "contract", "set", "--scope", "ghost", '{"n": 1}')
        with RouterProcess(
            *("--control-plane", control.target, "--router-id", ROUTER_ID),
            *("--health-check-interval-s", "0.2"),
        ) as router:
            wait_for(lambda: _chat(router) == 200, timeout_s=20, interval_s=0.2)
            assert _chat(router, temperature=0.2) == 400
            doomed.stop()

            def settled() -> dict[str, Any] | None:
                doc = _status(control)
                workers = {w["url"]: w for w in doc["sections"]["loads"]["workers"]}
                dead = workers[doomed.url]
                done = (
                    dead["freshness"] == "STALE"
                    and dead["ejected_by"] == [ROUTER_ID]
                    and doc["summary"]["routers_up_to_date"] == 1
                    and doc["sections"]["rejections"]["total"] == 1
                )
                return doc if done else None

            doc = wait_for(settled, timeout_s=30, interval_s=0.2)
            seen, png = asyncio.run(browser.read(control.http_url + "/status", READING))
            (tmp_path / "status.png").write_bytes(png)  # kept with the test's files, to look at

    summary = " ".join(seen["summary"].split())
    assert "routers up to date 1/1" in summary and "workers fresh 1/2" in summary, summary
    # A control plane up for less than a minute cannot say what the last minute saw.
    assert "rejections per minute ? (known after the first minute)" in summary, summary
    assert "scopes no worker serves: ghost" in summary, summary
    assert "no registered worker serves this model" in seen["text"]

    rows = {row["text"].split()[0]: row for row in seen["rows"]}
    fresh, stale = rows[alive.url], rows[doomed.url]
    assert "FRESH" in fresh["text"] and fresh["bars"] == [90, 90, 90], fresh
    assert "STALE" in stale["text"] and f"ejected by router {ROUTER_ID}" in stale["text"], stale
    # Its numbers are its last known ones, dated: older than the 3 s after which a load is STALE.
    age = re.search(r"last load ([0-9.]+) s ago", stale["text"])
    assert age is not None and float(age.group(1)) >= 3, stale
    (dead,) = [w for w in doc["sections"]["loads"]["workers"] if w["url"] == doomed.url]
    assert dead["current"] is False and dead["age_s"] >= 3
    assert stale["colour"] == "rgb(153, 153, 153)" and fresh["colour"] == "rgb(34, 34, 34)"

    chart = seen["chart"]
    assert (chart["width"], chart["height"]) == (720, 170)
    assert any(t.endswith("(so far): 1 temperature") for t in chart["titles"]), chart["titles"]
    assert "no data: before the control plane started" in chart["text"]

    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1400 and height > 1000, (width, height)
