"""The status page (SPEC §8): one HTML document made of the components' sections.

Pure rendering; ``controlplane.server.http`` serves it. Every value is escaped here.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from controlplane.contracts import contract_to_json
from controlplane.server.component import StatusSection
from controlplane.store import Snapshot

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:.3em .7em;text-align:left;vertical-align:top}
th{background:#f3f3f3} code{font-size:.95em} .muted{color:#888}
"""


def render_page(title: str, sections: Sequence[StatusSection]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='refresh' content='5'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for heading, render in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        try:
            parts.append(render())
        except Exception as exc:  # one broken section must not take the page down
            parts.append(f"<p class='muted'>unavailable: {html.escape(type(exc).__name__)}</p>")
    parts.append("</body></html>")
    return "".join(parts)


def render_contracts(snapshot: Snapshot) -> str:
    """Live scopes with version, conflict policy, params, author and time."""
    head = f"<p>store revision <b>{snapshot.revision}</b></p>"
    if not snapshot.contracts:
        return head + "<p class='muted'>no contracts: requests are not judged</p>"
    rows = [
        "<table><tr><th>scope</th><th>version</th><th>revision</th><th>conflict</th>"
        "<th>params</th><th>author</th><th>written (UTC)</th><th>comment</th></tr>"
    ]
    for v in snapshot.contracts.values():
        assert v.contract is not None  # a snapshot holds live versions only
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(v.create_time_us / 1e6))
        cells = (
            f"<code>{html.escape(v.scope)}</code>",
            str(v.version),
            str(v.revision),
            v.contract.conflict.value,
            f"<code>{html.escape(contract_to_json(v.contract))}</code>",
            html.escape(v.author),
            written,
            html.escape(v.comment),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return head + "".join(rows)
