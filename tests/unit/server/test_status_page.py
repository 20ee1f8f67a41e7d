"""The status page and /status.json: one document, a summary, cross-section flags, the chart."""

from __future__ import annotations

import json
from typing import Any

from controlplane.contracts import parse_contract_json
from controlplane.load.status import render_loads
from controlplane.reports.history import RejectionHistory
from controlplane.reports.page import (
    rejections_chart,
    rejections_data,
    render_rejections,
    render_routers,
    routers_data,
)
from controlplane.reports.rejections import RejectionLedger
from controlplane.reports.rollout import RouterRecord, RouterView
from controlplane.server.component import StatusSection
from controlplane.server.status_page import contracts_data, render_contracts, render_page, status_document
from controlplane.store.model import ChangeKind, ContractVersion, Snapshot

NOW = 1_800_000_000.0


def _snapshot() -> Snapshot:
    versions = [
        ContractVersion(scope, 1, i + 1, ChangeKind.UPDATE, parse_contract_json(body), "ops", 0, "")
        for i, (scope, body) in enumerate(
            (("*", '{"temperature": 1}'), ("llama", '{"top_p": 0.9}'), ("ghost", '{"n": 1}'))
        )
    ]
    return Snapshot.of(3, versions)


def _loads() -> dict[str, Any]:
    def worker(url: str, freshness: str) -> dict[str, Any]:
        return {
            "url": url, "protocol": "HTTP1", "models": ["llama"], "ranks": 1, "freshness": freshness,
            "current": freshness == "FRESH", "age_s": 0.5, "running": 1, "waiting": 0, "kv_tokens": 1,
            "kv_capacity": 10, "running_limit": None, "waiting_uncached_tokens": None,
            "prefill_tokens_per_s": None, "dropped_frames": 0, "notes": [], "ejected_by": [],
        }  # fmt: skip

    return {"workers": [worker("http://a:1", "FRESH"), worker("http://b:1", "STALE")]}


def _routers() -> dict[str, Any]:
    views = [
        RouterView(
            RouterRecord("edge-1", "b1", 3, "", NOW - 2, ("http://b:1",)), connected=True, up_to_date=True
        ),
        RouterView(RouterRecord("edge-2", "b2", 2, "", NOW - 400), connected=False, up_to_date=False),
    ]
    return routers_data(views, 3, NOW)


def _rejections() -> dict[str, Any]:
    ledger = RejectionLedger()
    history = RejectionHistory()
    history.record(NOW - 120, {})
    ledger.observe("edge-1", "b1", {("*", "temperature", ""): 4, ("llama", "top_p", ""): 1})
    history.record(NOW - 50, dict(ledger.totals().by_field))
    ledger.observe("edge-1", "b1", {("*", "temperature", ""): 6})
    history.record(NOW, dict(ledger.totals().by_field))  # as the section does on every read
    return rejections_data(ledger.totals(), history, NOW)


def _sections() -> list[StatusSection]:
    return [
        StatusSection("contracts", "Contracts", lambda: contracts_data(_snapshot()), render_contracts),
        StatusSection("routers", "Routers", _routers, render_routers),
        StatusSection("rejections", "Rejections", _rejections, render_rejections),
        StatusSection("loads", "Worker load", _loads, render_loads),
    ]


def test_the_summary_counts_routers_up_to_date_workers_fresh_and_last_minute_rejections() -> None:
    """x/y routers on the current revision, x/y workers FRESH, rejections of the last 60 s."""
    summary = status_document("t", _sections(), NOW)["summary"]
    assert (summary["routers_up_to_date"], summary["routers"]) == (1, 2)
    assert (summary["workers_fresh"], summary["workers"]) == (1, 2)
    assert summary["rejections_last_minute"] == 7
    assert summary["scopes_without_workers"] == ["ghost"]


def test_the_document_links_sections_and_is_json() -> None:
    """Workers name the routers that ejected them; scopes say how many workers serve them; the whole
    document is what /status.json serves."""
    doc = json.loads(json.dumps(status_document("t", _sections(), NOW)))
    workers = {w["url"]: w for w in doc["sections"]["loads"]["workers"]}
    assert workers["http://b:1"]["ejected_by"] == ["edge-1"] and workers["http://a:1"]["ejected_by"] == []
    served = {c["scope"]: c["served_by_workers"] for c in doc["sections"]["contracts"]["contracts"]}
    assert served == {"*": None, "ghost": 0, "llama": 2}


def test_the_page_reads_at_a_glance() -> None:
    """The page has the summary line, flags an unserved scope, marks a router behind and
    disconnected, names ejected workers, and draws the hour as SVG; every section is there."""
    sections = _sections()
    page = render_page(status_document("fleetplane control plane", sections, NOW), sections)
    assert "routers up to date <b class='warn'>1/2</b>" in page
    assert (
        "workers fresh <b class='warn'>1/2</b>" in page
        and "rejections per minute <b class='warn'>7</b>" in page
    )
    assert "scopes no worker serves: <code>ghost</code>" in page
    assert page.count("no registered worker serves this model") == 1
    assert "<span class='bad'><code>http://b:1</code></span>" in page and "<b class='bad'>no</b>" in page
    assert "<svg class='chart'" in page and "6 temperature</title>" in page
    assert all(f"<h2>{s.title}</h2>" in page for s in sections)
    assert "<script" not in page


def test_a_broken_section_is_said_and_the_rest_still_shows() -> None:
    """A section whose data fails is 'unavailable' in the page and in the JSON; the others render."""

    def broken() -> dict[str, Any]:
        raise KeyError("x")

    sections = [StatusSection("routers", "Routers", broken, render_routers), *_sections()[2:]]
    doc = status_document("t", sections, NOW)
    assert doc["sections"]["routers"] == {"unavailable": "KeyError"} and doc["summary"]["routers"] is None
    page = render_page(doc, sections)
    assert "unavailable: KeyError" in page and "routers up to date <b class='muted'>?</b>" in page
    assert "<h2>Worker load</h2>" in page


def test_the_chart_shows_unknown_minutes_as_no_data_and_stacks_fields() -> None:
    """Minutes before the history are a grey "no data" band, not zeros; each bar stacks fields and
    names its minute and counts in a tooltip."""
    minutes = [{"end_unix_s": NOW - 60 * (2 - i), "by_field": None} for i in range(2)]
    minutes.append({"end_unix_s": NOW, "by_field": {"temperature": 2, "top_k": 1}})
    svg = rejections_chart(minutes)
    assert "no data: before the control plane started" in svg
    assert "2 temperature</title>" in svg and "1 top_k</title>" in svg and "(so far)" in svg
    assert "<text x='36' y='18' text-anchor='end'>3</text>" in svg  # the scale: the busiest minute
