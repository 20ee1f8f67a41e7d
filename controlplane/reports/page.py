"""The status page's router sections (SPEC §8): the rollout view with the workers each router has
ejected, and the rejections with their rate over the last hour as an inline SVG chart. Pure.

``*_data`` functions read the reports into JSON-ready values (``/status.json``); ``render_*``
draw those values as HTML fragments for ``controlplane.server.status_page``. Every value is
escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.contracts import FIELD_NAMES
from controlplane.reports.history import RejectionHistory
from controlplane.reports.rejections import RejectionTotals
from controlplane.reports.rollout import RouterView

# One colour per field, in field order (the chart's legend follows it).
FIELD_COLOURS = dict(
    zip(
        FIELD_NAMES,
        ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"),
        strict=True,
    )
)
_CHART_W, _CHART_H, _LEFT, _BOTTOM, _TOP = 720, 170, 40, 22, 10


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def routers_data(views: Sequence[RouterView], current_revision: int, now_unix_s: float) -> dict[str, Any]:
    """Each router's applied revision against the current one, its link and the workers it ejected."""
    return {
        "current_revision": current_revision,
        "routers": [
            {
                "router_id": v.record.router_id,
                "boot_id": v.record.boot_id,
                "applied_revision": v.record.applied_revision,
                "up_to_date": v.up_to_date,
                "connected": v.connected,
                "last_report_unix_s": v.record.last_report_unix_s,
                "last_report_age_s": round(max(0.0, now_unix_s - v.record.last_report_unix_s), 1),
                "apply_error": v.record.apply_error,
                "ejected_workers": list(v.record.ejected_workers),
            }
            for v in views
        ],
    }


def render_routers(data: Mapping[str, Any]) -> str:
    """The rollout table; a router behind, disconnected or ejecting workers stands out."""
    head = f"<p>current revision <b>{data['current_revision']}</b></p>"
    if not data["routers"]:
        return head + "<p class='muted'>no router has reported yet</p>"
    rows = [
        "<table><tr><th>router</th><th>boot</th><th>applied revision</th><th>up to date</th>"
        "<th>connected</th><th>last report</th><th>workers ejected</th><th>apply error</th></tr>"
    ]
    for r in data["routers"]:
        ejected = ", ".join(f"<code>{html.escape(u)}</code>" for u in r["ejected_workers"])
        cells = (
            f"<code>{html.escape(r['router_id'])}</code>",
            f"<code>{html.escape(r['boot_id'])}</code>",
            str(r["applied_revision"]),
            "yes" if r["up_to_date"] else "<b class='bad'>no</b>",
            "yes" if r["connected"] else "<b class='bad'>no</b>",
            _age(r["last_report_age_s"]),
            f"<span class='bad'>{ejected}</span>" if ejected else "<span class='muted'>none</span>",
            html.escape(r["apply_error"]),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return head + "".join(rows)


def rejections_data(totals: RejectionTotals, history: RejectionHistory, now_unix_s: float) -> dict[str, Any]:
    """Totals across routers and restarts, and the last hour minute by minute (from the history)."""
    return {
        "total": totals.total,
        "by_field": dict(totals.by_field),
        "by_scope": dict(totals.by_scope),
        "by_router": dict(totals.by_router),
        "by_client": dict(totals.by_client),
        "detail": [{"scope": s, "param": p, "count": c} for s, p, c in totals.detail],
        "last_minute": history.last_minute(now_unix_s),
        "per_minute": [
            {"end_unix_s": m.end_unix_s, "by_field": None if m.by_field is None else dict(m.by_field)}
            for m in history.per_minute(now_unix_s)
        ],
    }


def _clock(unix_s: float) -> str:
    """HH:MM in UTC (arithmetic: this module reads no clock and imports no time module)."""
    minutes = int(unix_s // 60)
    return f"{minutes // 60 % 24:02d}:{minutes % 60:02d}"


def rejections_chart(per_minute: Sequence[Mapping[str, Any]]) -> str:
    """Rejections per minute by field over the last hour: stacked bars, one per minute, as SVG.

    Minutes before the history starts are drawn as a grey band ("no data"), not as zero.
    """
    if not per_minute:
        return ""
    plot_w, plot_h = _CHART_W - _LEFT - 10, _CHART_H - _BOTTOM - _TOP
    slot = plot_w / len(per_minute)
    peak = max([sum((m["by_field"] or {}).values()) for m in per_minute] + [1])
    parts = [
        f"<svg class='chart' role='img' aria-label='rejections per minute by field, last hour' "
        f"width='{_CHART_W}' height='{_CHART_H}' viewBox='0 0 {_CHART_W} {_CHART_H}' "
        "xmlns='http://www.w3.org/2000/svg' font-family='system-ui,sans-serif' font-size='11'>",
        f"<line x1='{_LEFT}' y1='{_TOP + plot_h}' x2='{_LEFT + plot_w}' y2='{_TOP + plot_h}' stroke='#999'/>",
        f"<text x='{_LEFT - 4}' y='{_TOP + 8}' text-anchor='end'>{peak}</text>",
        f"<text x='{_LEFT - 4}' y='{_TOP + plot_h}' text-anchor='end'>0</text>",
    ]
    unknown = sum(1 for m in per_minute if m["by_field"] is None)
    if unknown:
        parts.append(
            f"<rect x='{_LEFT}' y='{_TOP}' width='{unknown * slot:.1f}' height='{plot_h}' fill='#f0f0f0'/>"
            f"<text x='{_LEFT + unknown * slot / 2:.1f}' y='{_TOP + plot_h / 2:.1f}' text-anchor='middle' "
            "fill='#888'>no data: before the control plane started</text>"
        )
    for i, minute in enumerate(per_minute):
        x = _LEFT + i * slot
        start = (
            minute["end_unix_s"] - minute["end_unix_s"] % 60
            if i == len(per_minute) - 1
            else minute["end_unix_s"] - 60
        )
        label = f"{_clock(start)} UTC" + (" (so far)" if i == len(per_minute) - 1 else "")
        counts = minute["by_field"]
        if counts is None:
            continue
        y = _TOP + plot_h
        for field in FIELD_NAMES:
            n = counts.get(field, 0)
            if not n:
                continue
            h = n / peak * plot_h
            y -= h
            parts.append(
                f"<rect x='{x + 0.5:.1f}' y='{y:.1f}' width='{max(1.0, slot - 1):.1f}' height='{h:.1f}' "
                f"fill='{FIELD_COLOURS[field]}'><title>{label}: {n} {field}</title></rect>"
            )
    for i, text in ((0, "-60 min"), (len(per_minute) // 2, "-30 min"), (len(per_minute), "now")):
        parts.append(
            f"<text x='{_LEFT + i * slot:.1f}' y='{_CHART_H - 6}' text-anchor='middle'>{text}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def render_rejections(data: Mapping[str, Any]) -> str:
    """Totals by scope and field, the rate of the last minute, and the hour's chart by field."""
    last = data["last_minute"]
    rate = "not known yet" if last is None else f"{last}"
    head = f"<p>total <b>{data['total']}</b> · last minute <b>{rate}</b></p>"
    chart = rejections_chart(data["per_minute"])
    fields = [f for f in FIELD_NAMES if f in data["by_field"]]
    legend = "".join(
        f"<span class='legend'><span style='background:{FIELD_COLOURS[f]}'></span>{html.escape(f)}</span>"
        for f in fields
    )
    chart_block = f"<h3>Rejections per minute by field, last hour</h3>{chart}<div>{legend}</div>"
    if not data["detail"]:
        return head + chart_block + "<p class='muted'>no rejections</p>"
    rows = ["<table><tr><th>scope</th><th>field</th><th>rejections</th></tr>"]
    for d in data["detail"]:
        rows.append(
            f"<tr><td><code>{html.escape(d['scope'])}</code></td><td>{html.escape(d['param'])}</td>"
            f"<td>{d['count']}</td></tr>"
        )
    rows.append("</table>")
    by_router = ", ".join(f"{html.escape(k)}: {c}" for k, c in data["by_router"].items())
    page = head + chart_block + "".join(rows) + f"<p>by router: {by_router}</p>"
    if data.get("by_client"):
        by_client = ", ".join(f"{html.escape(k)}: {c}" for k, c in data["by_client"].items())
        page += f"<p>by client: {by_client}</p>"
    return page
