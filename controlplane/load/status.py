"""The "Worker load" section of the status page and of ``/status.json`` (SPEC §8). Pure.

``loads_data`` reads the registry and the load views into JSON-ready values; ``render_loads``
draws them: one row per worker with bars for running requests (against the running limit),
waiting requests and KV-cache use, the queued prefill tokens and the prefill speed (``-`` for an
engine that does not send SGLang 0.5.23's appended counts: unknown, not 0), and its freshness. Only a FRESH worker's numbers are current: a STALE worker's are its last known
ones, greyed and dated ("12 s ago"), never shown as if they were now; an UNKNOWN worker has none.
Every value is escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.load.table import Freshness, WorkerView
from controlplane.store.workers import WorkerRecord

_COLOURS = {"FRESH": "#2a7", "STALE": "#c60", "UNKNOWN": "#888"}
_BAR_PX = 90


def loads_data(workers: Sequence[WorkerRecord], views: Sequence[WorkerView]) -> dict[str, Any]:
    """Each registered worker with its load, freshness and the notes that explain a gap."""
    by_url = {v.url: v for v in views}
    rows = []
    for record in workers:
        view = by_url.get(record.url)
        if view is None:
            continue
        notes = [record.discovery_error] if record.discovery_error else []
        notes += [
            f"rank {r.dp_rank} ({r.endpoint}): {r.connect_error}" for r in view.ranks if r.connect_error
        ]
        known = view.freshness is not Freshness.UNKNOWN
        rows.append(
            {
                "url": record.url,
                "protocol": record.resolved_protocol.name,
                "models": list(record.models),
                "ranks": len(view.ranks),
                "freshness": view.freshness.name,
                # Only a FRESH view is now; a STALE one is as of age_s ago.
                "current": view.freshness is Freshness.FRESH,
                "age_s": round(view.age_s, 1) if known else None,
                "running": view.num_running_reqs if known else None,
                "waiting": view.num_waiting_reqs if known else None,
                "kv_tokens": view.num_tokens if known else None,
                "kv_capacity": view.max_total_num_tokens if known else None,
                # SGLang 0.5.23's appended counts (None: an older engine, or nothing heard yet).
                "running_limit": view.max_running_requests if known else None,
                "waiting_uncached_tokens": view.num_waiting_uncached_tokens if known else None,
                "prefill_tokens_per_s": (
                    prefill_speed(view.total_prefill_uncached_tokens, view.total_prefill_busy_us)
                    if known
                    else None
                ),
                "dropped_frames": sum(r.dropped_frames for r in view.ranks),
                "notes": notes,
                "ejected_by": [],  # routers that have it out of rotation (filled by the page)
            }
        )
    return {"workers": rows}


def prefill_speed(tokens: int | None, busy_us: int | None) -> float | None:
    """The engine's lifetime prefill speed from its cumulative counters (SPEC §7), or None."""
    if tokens is None or not busy_us:
        return None
    return round(tokens / (busy_us / 1e6), 1)


def _or_dash(value: object) -> str:
    return "<span class='muted'>-</span>" if value is None else html.escape(str(value))


def _bar(value: int | None, scale: int, label: str, current: bool) -> str:
    """A horizontal bar of ``value`` against ``scale``, the numbers after it."""
    if value is None:
        return "<span class='muted'>-</span>"
    share = 0.0 if scale <= 0 else min(1.0, max(0.0, value / scale))
    colour = "#47c" if current else "#bbb"
    return (
        f"<span class='bar' style='width:{_BAR_PX}px'>"
        f"<span style='width:{round(share * _BAR_PX)}px;background:{colour}'></span></span> "
        f"<span class='num'>{html.escape(label)}</span>"
    )


def _age(age_s: float | None) -> str:
    if age_s is None:
        return "never heard"
    return f"{age_s:.0f} s ago" if age_s >= 10 else f"{age_s:.1f} s ago"


def render_loads(data: Mapping[str, Any]) -> str:
    """The load table: bars for running, waiting and KV tokens; stale values greyed with their age."""
    workers = data["workers"]
    if not workers:
        return "<p class='muted'>no workers registered</p>"
    # Running is drawn against the worker's running limit when it sends one; waiting has no
    # capacity on the wire: those bars are scaled to the busiest worker.
    top_running = max([w["running"] or 0 for w in workers] + [1])
    top_waiting = max([w["waiting"] or 0 for w in workers] + [1])
    rows = [
        "<table class='loads'><tr><th>worker</th><th>protocol</th><th>models</th><th>ranks</th>"
        "<th>freshness</th><th>running</th><th>limit</th><th>waiting</th><th>queued prefill tokens</th>"
        "<th>KV cache</th><th>prefill tokens/s</th><th>dropped frames</th></tr>"
    ]
    for w in workers:
        current = bool(w["current"])
        notes = list(w["notes"])
        if w["ejected_by"]:
            notes.insert(0, f"ejected by router {', '.join(w['ejected_by'])}")
        note = "".join(f"<br><span class='note'>{html.escape(n)}</span>" for n in notes)
        freshness = w["freshness"]
        state = f"<b style='color:{_COLOURS.get(freshness, '#888')}'>{html.escape(freshness)}</b>"
        if not current:
            state += f"<br><span class='muted'>last load {html.escape(_age(w['age_s']))}</span>"
        kv, capacity = w["kv_tokens"], w["kv_capacity"] or 0
        if kv is None:
            kv_cell = "<span class='muted'>-</span>"
        elif capacity <= 0:
            kv_cell = f"{kv} <span class='muted'>(capacity unknown)</span>"
        else:
            kv_cell = _bar(kv, capacity, f"{kv / capacity:.0%} ({kv}/{capacity})", current)
        speed = w["prefill_tokens_per_s"]
        cells = (
            f"<code>{html.escape(w['url'])}</code>{note}",
            html.escape(w["protocol"]),
            html.escape(", ".join(w["models"])) or "<span class='muted'>-</span>",
            str(w["ranks"]),
            state,
            _bar(w["running"], w["running_limit"] or top_running, str(w["running"]), current),
            _or_dash(w["running_limit"]),
            _bar(w["waiting"], top_waiting, str(w["waiting"]), current),
            _or_dash(w["waiting_uncached_tokens"]),
            kv_cell,
            _or_dash(None if speed is None else f"{speed:,.0f}"),
            str(w["dropped_frames"]),
        )
        row_class = "" if current else " class='stale'"
        rows.append(f"<tr{row_class}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    rows.append("</table>")
    return "".join(rows)
