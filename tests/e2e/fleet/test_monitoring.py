"""The shipped Grafana dashboard and Prometheus alert rules (deploy/) work on a real fleet (SPEC §8):
promtool accepts the rules and passes their unit tests, every dashboard query parses, and every
metric and label they use is on the live /metrics of a real router and a real control plane."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fleet import MODEL, Fleet, wait_for
from tests.fakes.process import ROOT

DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULES_TEST = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "fleetplane.json"
METRIC = re.compile(r"\b(fleetplane_[a-z0-9_]+)\b(\{[^}]*\})?")
MATCHER_LABEL = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
# Labels Prometheus itself adds to every scraped series (and `le` of histogram buckets).
SCRAPE_LABELS = {"instance", "job", "le"}


def _promtool() -> str:
    found = shutil.which("promtool") or str(
        ROOT / ".ci" / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
    )
    if not Path(found).is_file():
        pytest.skip(
            "promtool not installed (scripts/install_promtool.sh fetches it from Debian's prometheus)"
        )
    return found


def _dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def _rule_exprs() -> list[str]:
    """The expressions of alerts.yml, read without a YAML library: each ``expr:`` and its block."""
    exprs, lines = [], RULES.read_text().splitlines()
    for i, line in enumerate(lines):
        key, _, value = line.strip().partition(":")
        if key != "expr":
            continue
        value = value.strip()
        if value == "|":
            indent = len(lines[i + 1]) - len(lines[i + 1].lstrip())
            block = []
            for following in lines[i + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) < indent:
                    break
                block.append(following.strip())
            value = " ".join(block)
        exprs.append(value)
    return exprs


def test_promtool_accepts_the_alert_rules() -> None:
    """`promtool check rules deploy/prometheus/alerts.yml` finds every rule and no error."""
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_the_alert_rules_pass_their_unit_tests() -> None:
    """`promtool test rules alerts_test.yml`: each alert fires when it should and not before."""
    done = subprocess.run(
        [_promtool(), "test", "rules", RULES_TEST.name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULES_TEST.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """Each panel query, with Grafana's $__rate_interval filled in, is valid PromQL for promtool."""
    exprs = _dashboard_exprs()
    assert len(exprs) >= 20
    rules = tmp_path / "dashboard_queries.yml"
    body = "".join(
        f"      - record: dashboard:q{i}\n        expr: {json.dumps(e.replace('$__rate_interval', '5m'))}\n"
        for i, e in enumerate(exprs)
    )
    rules.write_text(f"groups:\n  - name: dashboard\n    rules:\n{body}")
    done = subprocess.run(
        [_promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_is_importable_as_written() -> None:
    """One uid, a Prometheus datasource variable every query uses, unique panel ids, no overlap."""
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "fleetplane" and doc["templating"]["list"][0]["type"] == "datasource"
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        g = p["gridPos"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & area, p["title"]
        cells |= area
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["description"], p["title"]


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def _chat(fleet: Fleet, extra: dict[str, Any]) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
    request = urllib.request.Request(
        fleet.router.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


@pytest.fixture(scope="module")
def live_series(fleet: Fleet) -> Iterator[dict[str, set[str]]]:
    """Sample name -> label names, from the router's and the control plane's /metrics after a
    contract, an answered request and a refused one (so the labelled series exist)."""
    fleet.fleetplane("contract", "set", "--fleet", '{"temperature": 1}')
    wait_for(lambda: _chat(fleet, {}) == 200, timeout_s=20, interval_s=0.2)
    assert _chat(fleet, {"temperature": 0.2}) == 400
    wait_for(
        lambda: "fleetplane_control_router_applied_revision{" in _scrape(fleet.control.http_url + "/metrics"),
        20,
    )
    series: dict[str, set[str]] = {}
    for url in (fleet.router.url + "/metrics", fleet.control.http_url + "/metrics"):
        for line in _scrape(url).splitlines():
            if line and not line.startswith("#"):
                name, _, rest = line.partition("{")
                labels = {m.split("=")[0] for m in re.findall(r'(\w+)="', rest)} if rest else set()
                series.setdefault(name.split()[0], set()).update(labels)
    yield series


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_metric_and_label_used_is_on_live_metrics(
    live_series: dict[str, set[str]], source: str
) -> None:
    """Each fleetplane_* series a query names exists on a live router or control plane, with the
    labels the query matches or groups by."""
    exprs = _dashboard_exprs() if source == "dashboard" else _rule_exprs()
    assert exprs
    missing = []
    for expr in exprs:
        used = METRIC.findall(expr)
        assert used or "fleetplane:" in expr, expr  # a recording rule's name has colons
        labels_of_expr: set[str] = set()
        for name, matchers in used:
            if name not in live_series:
                missing.append(f"{name} (in {expr})")
                continue
            labels_of_expr |= live_series[name]
            for label in MATCHER_LABEL.findall(matchers):
                if label not in live_series[name]:
                    missing.append(f"label {label} of {name} (in {expr})")
        for group in GROUPING.findall(expr):
            for label in (g.strip() for g in group.split(",") if g.strip()):
                if label not in labels_of_expr | SCRAPE_LABELS:
                    missing.append(f"label {label} (in {expr})")
    assert missing == []


def test_the_rollout_gauges_say_what_fleetplane_routers_says(
    fleet: Fleet, live_series: dict[str, set[str]]
) -> None:
    """The subscribed router counts as connected and up to date, at the revision `routers` shows."""
    listed = fleet.fleetplane_json("routers")
    (router,) = listed["routers"]
    text = _scrape(fleet.control.http_url + "/metrics")
    assert 'fleetplane_control_routers{connected="true",up_to_date="true"} 1.0' in text
    assert 'fleetplane_control_routers{connected="true",up_to_date="false"} 0.0' in text
    applied = f'fleetplane_control_router_applied_revision{{router="{router["routerId"]}"}} {float(router["appliedRevision"])}'
    assert applied in text
