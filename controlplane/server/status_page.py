"""The status page and ``/status.json`` (SPEC §8): one document made of the components' sections.

``status_document`` reads every section once and adds what needs more than one of them: the
summary line (routers up to date, workers fresh, rejections in the last minute), the scopes that
no registered worker serves, and which routers have ejected each worker. ``/status.json`` is that
document; ``render_page`` draws it as HTML without any script (the page reloads itself every 5 s).
Pure rendering, every value escaped here; ``controlplane.server.http`` serves both.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.contracts import contract_to_json
from controlplane.server.component import StatusSection
from controlplane.store import Snapshot

FLEET_SCOPE = "*"
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:90em}
table{border-collapse:collapse;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:.3em .7em;text-align:left;vertical-align:top}
th{background:#f3f3f3} code{font-size:.95em} .muted,.note{color:#888} .note{font-size:.9em}
.bad{color:#c22} .summary{font-size:1.15em;padding:.6em 1em;background:#f6f6f6;border-radius:.4em}
.summary span{margin-right:1.5em} .summary .ok{color:#2a7} .summary .warn{color:#c22}
tr.stale td{color:#999;background:#fafafa} table.loads td{white-space:nowrap}
.bar{display:inline-block;height:.8em;background:#eee;vertical-align:middle}
.bar span{display:block;height:100%}
.legend{margin-right:1em;font-size:.9em}
.legend span{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
"""


def contracts_data(snapshot: Snapshot) -> dict[str, Any]:
    """The live scopes with version, policy, params, author, time and comment."""
    rows = []
    for v in snapshot.contracts.values():
        assert v.contract is not None  # a snapshot holds live versions only
        text = contract_to_json(v.contract)
        rows.append(
            {
                "scope": v.scope,
                "version": v.version,
                "revision": v.revision,
                "conflict": v.contract.conflict.value,
                "params": json.loads(text),
                "params_text": text,  # as the operator writes it (``contract set`` takes it)
                "author": v.author,
                "written_unix_s": v.create_time_us / 1e6,
                "comment": v.comment,
                "served_by_workers": None,  # filled by the document: None for "*" or no load section
            }
        )
    return {"revision": snapshot.revision, "contracts": rows}


def render_contracts(data: Mapping[str, Any]) -> str:
    """Live scopes; a scope that no registered worker serves is flagged (it judges nothing)."""
    head = f"<p>store revision <b>{data['revision']}</b></p>"
    if not data["contracts"]:
        return head + "<p class='muted'>no contracts: requests are not judged</p>"
    rows = [
        "<table><tr><th>scope</th><th>version</th><th>revision</th><th>conflict</th>"
        "<th>params</th><th>author</th><th>written (UTC)</th><th>comment</th></tr>"
    ]
    for c in data["contracts"]:
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c["written_unix_s"]))
        scope = f"<code>{html.escape(c['scope'])}</code>"
        if c["served_by_workers"] == 0:
            scope += "<br><span class='bad'>no registered worker serves this model</span>"
        cells = (
            scope,
            str(c["version"]),
            str(c["revision"]),
            html.escape(c["conflict"]),
            f"<code>{html.escape(c['params_text'])}</code>",
            html.escape(c["author"]),
            written,
            html.escape(c["comment"]),
        )
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    rows.append("</table>")
    return head + "".join(rows)


def _read(section: StatusSection) -> dict[str, Any]:
    try:
        return section.data()
    except Exception as exc:  # one broken section must not take the page down
        return {"unavailable": type(exc).__name__}


def status_document(title: str, sections: Sequence[StatusSection], now_unix_s: float) -> dict[str, Any]:
    """Every section's content, cross-linked, with the summary: what ``/status.json`` answers."""
    content = {s.key: _read(s) for s in sections}
    contracts, routers = content.get("contracts", {}), content.get("routers", {})
    loads, rejections = content.get("loads", {}), content.get("rejections", {})
    workers = loads.get("workers")
    if workers is not None:
        ejected_by: dict[str, list[str]] = {}
        for r in routers.get("routers", []):
            for url in r["ejected_workers"]:
                ejected_by.setdefault(url, []).append(r["router_id"])
        served: dict[str, int] = {}
        for w in workers:
            w["ejected_by"] = ejected_by.get(w["url"], [])
            for model in w["models"]:
                served[model] = served.get(model, 0) + 1
        for c in contracts.get("contracts", []):
            if c["scope"] != FLEET_SCOPE:
                c["served_by_workers"] = served.get(c["scope"], 0)
    router_rows = routers.get("routers")
    summary = {
        "routers_up_to_date": None if router_rows is None else sum(1 for r in router_rows if r["up_to_date"]),
        "routers": None if router_rows is None else len(router_rows),
        "workers_fresh": None if workers is None else sum(1 for w in workers if w["freshness"] == "FRESH"),
        "workers": None if workers is None else len(workers),
        "rejections_last_minute": rejections.get("last_minute"),
        "scopes_without_workers": [
            c["scope"] for c in contracts.get("contracts", []) if c["served_by_workers"] == 0
        ],
    }
    return {"title": title, "generated_unix_s": now_unix_s, "summary": summary, "sections": content}


def _count(label: str, good: int | None, total: int | None) -> str:
    if good is None or total is None:
        return f"<span>{label} <b class='muted'>?</b></span>"
    mark = "ok" if good == total else "warn"
    return f"<span>{label} <b class='{mark}'>{good}/{total}</b></span>"


def render_summary(summary: Mapping[str, Any]) -> str:
    """The line read at a glance: routers up to date, workers fresh, rejections per minute."""
    rate = summary["rejections_last_minute"]
    rate_text = (
        "<b class='muted'>?</b> <span class='note'>(known after the first minute)</span>"
        if rate is None
        else f"<b class='{'warn' if rate else 'ok'}'>{rate}</b>"
    )
    parts = [
        _count("routers up to date", summary["routers_up_to_date"], summary["routers"]),
        _count("workers fresh", summary["workers_fresh"], summary["workers"]),
        f"<span>rejections per minute {rate_text}</span>",
    ]
    unserved = summary["scopes_without_workers"]
    if unserved:
        names = ", ".join(f"<code>{html.escape(s)}</code>" for s in unserved)
        parts.append(f"<span class='warn'>scopes no worker serves: {names}</span>")
    # Spaced in the text too (not only by CSS margins): copied or read aloud, the counts stay apart.
    return f"<p class='summary'>{' '.join(parts)}</p>"


def render_page(document: Mapping[str, Any], sections: Sequence[StatusSection]) -> str:
    """The HTML page of a ``status_document``."""
    title = html.escape(document["title"])
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(document["generated_unix_s"]))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='refresh' content='5'>",
        f"<title>{title}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{title}</h1><p class='muted'>{stamp} · <a href='/status.json'>status.json</a> · "
        "<a href='/metrics'>metrics</a></p>",
        render_summary(document["summary"]),
    ]
    for section in sections:
        data = document["sections"][section.key]
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if "unavailable" in data:
            parts.append(f"<p class='muted'>unavailable: {html.escape(str(data['unavailable']))}</p>")
            continue
        try:
            parts.append(section.render(data))
        except Exception as exc:  # a rendering bug must not take the page down either
            parts.append(f"<p class='muted'>unavailable: {html.escape(type(exc).__name__)}</p>")
    parts.append("</body></html>")
    return "".join(parts)
