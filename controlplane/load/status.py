"""The "Worker load" section of the status page (SPEC §8): load bars with freshness.

Pure rendering; every value is escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from controlplane.load.table import Freshness, WorkerView
from controlplane.store.workers import WorkerRecord

_COLOURS = {Freshness.FRESH: "#2a7", Freshness.STALE: "#c60", Freshness.UNKNOWN: "#888"}
_BAR_PX = 160


def _bar(used: int, capacity: int) -> str:
    if capacity <= 0:
        return "<span class='muted'>capacity unknown</span>"
    share = min(1.0, used / capacity)
    filled = int(share * _BAR_PX)
    return (
        f"<span style='display:inline-block;width:{_BAR_PX}px;height:.8em;background:#eee'>"
        f"<span style='display:inline-block;width:{filled}px;height:.8em;background:#47c'></span></span>"
        f" {share:.0%} ({used}/{capacity})"
    )


def render_loads(workers: Sequence[WorkerRecord], views: Sequence[WorkerView]) -> str:
    """One row per worker: protocol, running/waiting, KV bar, freshness, age, drops."""
    if not workers:
        return "<p class='muted'>no workers registered</p>"
    by_url = {v.url: v for v in views}
    rows = [
        "<table><tr><th>worker</th><th>protocol</th><th>models</th><th>ranks</th><th>running</th>"
        "<th>waiting</th><th>KV tokens</th><th>freshness</th><th>age</th><th>dropped</th></tr>"
    ]
    for record in workers:
        view = by_url.get(record.url)
        if view is None:
            continue
        colour = _COLOURS[view.freshness]
        notes = [record.discovery_error] if record.discovery_error else []
        notes += [
            f"rank {r.dp_rank} ({r.endpoint}): {r.connect_error}" for r in view.ranks if r.connect_error
        ]
        note = "".join(f"<br><span class='muted'>{html.escape(n)}</span>" for n in notes)
        cells = (
            f"<code>{html.escape(record.url)}</code>{note}",
            record.resolved_protocol.name,
            html.escape(", ".join(record.models)) or "<span class='muted'>-</span>",
            str(len(view.ranks)),
            str(view.num_running_reqs),
            str(view.num_waiting_reqs),
            _bar(view.num_tokens, view.max_total_num_tokens),
            f"<b style='color:{colour}'>{view.freshness.name}</b>",
            f"{view.age_s:.1f} s" if view.freshness is not Freshness.UNKNOWN else "-",
            str(sum(r.dropped_frames for r in view.ranks)),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return "".join(rows)
