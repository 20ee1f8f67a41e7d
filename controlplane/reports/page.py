"""The status page's router sections (SPEC §8): the rollout view and rejection counts. Pure.

HTML fragments for ``controlplane.server.status_page.render_page``; every value is escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from controlplane.reports.rejections import RejectionTotals
from controlplane.reports.rollout import RouterView


def _age(now_unix_s: float, then_unix_s: float) -> str:
    seconds = max(0.0, now_unix_s - then_unix_s)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def render_routers(views: Sequence[RouterView], current_revision: int, now_unix_s: float) -> str:
    """Each router's applied revision against the current one, connected, last report."""
    head = f"<p>current revision <b>{current_revision}</b></p>"
    if not views:
        return head + "<p class='muted'>no router has reported yet</p>"
    rows = [
        "<table><tr><th>router</th><th>boot</th><th>applied revision</th><th>up to date</th>"
        "<th>connected</th><th>last report</th><th>apply error</th></tr>"
    ]
    for v in views:
        r = v.record
        cells = (
            f"<code>{html.escape(r.router_id)}</code>",
            f"<code>{html.escape(r.boot_id)}</code>",
            str(r.applied_revision),
            "yes" if v.up_to_date else "<b>no</b>",
            "yes" if v.connected else "<span class='muted'>no</span>",
            _age(now_unix_s, r.last_report_unix_s),
            html.escape(r.apply_error),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return head + "".join(rows)


def render_rejections(totals: RejectionTotals) -> str:
    """Contract rejections across routers and restarts, by scope and field."""
    head = f"<p>total <b>{totals.total}</b></p>"
    if not totals.detail:
        return head + "<p class='muted'>no rejections</p>"
    rows = ["<table><tr><th>scope</th><th>field</th><th>rejections</th></tr>"]
    for scope, param, count in totals.detail:
        rows.append(
            f"<tr><td><code>{html.escape(scope)}</code></td><td>{html.escape(param)}</td><td>{count}</td></tr>"
        )
    rows.append("</table>")
    by_router = ", ".join(f"{html.escape(k)}: {c}" for k, c in totals.by_router)
    return head + "".join(rows) + f"<p>by router: {by_router}</p>"
