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


def _or_dash(value: int | None) -> str:
    return "<span class='muted'>-</span>" if value is None else str(value)


def prefill_rate(tokens: int | None, busy_us: int | None) -> str:
    """The engine's lifetime prefill speed from its cumulative counters (SPEC §7), or ``-``."""
    if tokens is None or not busy_us:
        return "-"
    return f"{tokens / (busy_us / 1e6):,.0f}"


def render_loads(workers: Sequence[WorkerRecord], views: Sequence[WorkerView]) -> str:
    """One row per worker: protocol, running/waiting against the running limit, queued prefill
    tokens, KV bar, prefill speed, freshness, age, drops (``-``: an engine that does not send
    SGLang 0.5.23's appended counts)."""
    if not workers:
        return "<p class='muted'>no workers registered</p>"
    by_url = {v.url: v for v in views}
    rows = [
        "<table><tr><th>worker</th><th>protocol</th><th>models</th><th>ranks</th><th>running</th>"
        "<th>limit</th><th>waiting</th><th>queued prefill tokens</th><th>KV tokens</th>"
        "<th>prefill tokens/s</th><th>freshness</th><th>age</th><th>dropped</th></tr>"
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
            _or_dash(view.max_running_requests),
            str(view.num_waiting_reqs),
            _or_dash(view.num_waiting_uncached_tokens),
            _bar(view.num_tokens, view.max_total_num_tokens),
            prefill_rate(view.total_prefill_uncached_tokens, view.total_prefill_busy_us),
            f"<b style='color:{colour}'>{view.freshness.name}</b>",
            f"{view.age_s:.1f} s" if view.freshness is not Freshness.UNKNOWN else "-",
            str(sum(r.dropped_frames for r in view.ranks)),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return "".join(rows)
