"""``fleetplane loads [--watch]`` (SPEC §1, §6 GetLoads/WatchLoads): worker load at a glance.

One row per worker: freshness, running requests against the running limit, waiting requests and
their uncached prompt tokens, a KV-cache bar, the prefill speed (from the cumulative counters of
SGLang 0.5.23's LoadStat; ``-`` for an engine that does not send them), the age of the oldest
rank's last frame, and the frame accounting (dropped, restarts, malformed); below the table, the
ranks whose load publisher cannot be reached, and why.
``--watch`` follows WatchLoads until Ctrl-C and draws the table on each message and at least once a
second (so ages move): in place on a terminal; into a pipe or a file without terminal codes, each
table after a time-stamped heading; with ``--output json`` it prints each stream message as one
JSON line.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Iterable

import grpc

from controlplane.cli.client import (
    CommandError,
    ControlPlaneClient,
    add_connection_arguments,
    describe_rpc_error,
    message_json,
    table,
)
from controlplane.v1 import load_pb2, load_pb2_grpc

FRESHNESS = {
    load_pb2.FRESHNESS_FRESH: "FRESH",
    load_pb2.FRESHNESS_STALE: "STALE",
    load_pb2.FRESHNESS_UNKNOWN: "UNKNOWN",
}
BAR_WIDTH = 10
REDRAW_S = 1.0
CLEAR = "\x1b[H\x1b[2J"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch", action="store_true", help="follow WatchLoads and refresh until Ctrl-C")
    add_connection_arguments(parser)


def bar(used: int, capacity: int) -> str:
    """``[####......]  40%`` of KV tokens used; ``-`` when the capacity is unknown."""
    if capacity <= 0:
        return "-"
    share = min(1.0, max(0.0, used / capacity))
    filled = round(share * BAR_WIDTH)
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%}"


def _optional(message: load_pb2.WorkerLoad, name: str) -> str:
    return str(getattr(message, name)) if message.HasField(name) else "-"


def prefill_rate(w: load_pb2.WorkerLoad) -> str:
    """Prefill tokens per second of prefill time since the engine started, or ``-``."""
    if not w.HasField("total_prefill_busy_us") or not w.total_prefill_busy_us:
        return "-"
    return f"{w.total_prefill_uncached_tokens / (w.total_prefill_busy_us / 1e6):.0f}"


def render(workers: Iterable[load_pb2.WorkerLoad], extra_age_s: float = 0.0) -> str:
    """The load table; ``extra_age_s`` is the time since the view was built (for --watch)."""
    rows = []
    unreachable = []
    for w in sorted(workers, key=lambda w: w.url):
        unreachable += [
            f"  {w.url} rank {r.dp_rank} ({r.endpoint}): {r.connect_error}"
            for r in w.ranks
            if r.connect_error
        ]
        known = w.freshness != load_pb2.FRESHNESS_UNKNOWN or any(r.frames_received for r in w.ranks)
        rows.append(
            (
                w.url,
                FRESHNESS.get(w.freshness, "?"),
                w.num_running_reqs,
                _optional(w, "max_running_requests"),
                w.num_waiting_reqs,
                _optional(w, "num_waiting_uncached_tokens"),
                bar(w.num_tokens, w.max_total_num_tokens),
                f"{w.num_tokens}/{w.max_total_num_tokens}",
                prefill_rate(w),
                f"{w.age_s + extra_age_s:.1f}s" if known else "-",
                len(w.ranks),
                sum(r.dropped_frames for r in w.ranks),
                sum(r.publisher_restarts for r in w.ranks),
                sum(r.malformed_frames for r in w.ranks),
            )
        )
    if not rows:
        return "no workers registered"
    headers = (
        "worker",
        "freshness",
        "running",
        "limit",
        "waiting",
        "queued tokens",
        "kv cache",
        "kv tokens",
        "prefill tok/s",
        "age",
        "ranks",
        "dropped",
        "restarts",
        "malformed",
    )
    text = table(headers, rows)
    if unreachable:
        text += "\n\nnot connected to these load publishers:\n" + "\n".join(unreachable)
    return text


def run(args: argparse.Namespace) -> int:
    try:
        with ControlPlaneClient.from_args(args) as client:
            stub = load_pb2_grpc.LoadServiceStub(client.channel)
            if args.watch:
                return _watch(args, client, stub)
            loads = client.call(stub.GetLoads, load_pb2.GetLoadsRequest())
            print(message_json(loads) if args.output == "json" else render(loads.workers))
    except CommandError as exc:
        return exc.report("loads")
    return 0


def _watch(args: argparse.Namespace, client: ControlPlaneClient, stub: load_pb2_grpc.LoadServiceStub) -> int:
    call = stub.WatchLoads(load_pb2.WatchLoadsRequest(router_id=""), metadata=client.metadata)
    inbox: queue.Queue[load_pb2.WatchLoadsResponse | grpc.RpcError | None] = queue.Queue()

    def pump() -> None:
        # The stream is read on a thread so the main thread can redraw on a timer and
        # take Ctrl-C; only the newest state matters, the queue holds what arrived meanwhile.
        try:
            for message in call:
                inbox.put(message)
            inbox.put(None)
        except grpc.RpcError as exc:
            inbox.put(exc)

    threading.Thread(target=pump, name="watch-loads", daemon=True).start()
    view: dict[str, load_pb2.WorkerLoad] = {}
    built_at = time.monotonic()
    # Clear-screen codes only where a terminal interprets them: `loads --watch | cat` or `> file`
    # must get plain text.
    in_place = sys.stdout.isatty()
    try:
        while True:
            try:
                item = inbox.get(timeout=REDRAW_S)
            except queue.Empty:
                item = _NOTHING
            if item is None:
                raise CommandError("the control plane closed the stream")
            if isinstance(item, grpc.RpcError):
                if isinstance(item, grpc.Call) and item.code() == grpc.StatusCode.CANCELLED:
                    return 0
                raise CommandError(describe_rpc_error(item, client.target))
            if item is not _NOTHING:
                assert isinstance(item, load_pb2.WatchLoadsResponse)
                if args.output == "json":
                    print(message_json(item, indent=None), flush=True)
                    continue
                if item.full:
                    view = {}
                view.update((w.url, w) for w in item.workers)
                for url in item.removed_urls:
                    view.pop(url, None)
                built_at = time.monotonic()
            if args.output == "json":
                continue
            heading = f"fleetplane loads --watch  {client.target}  {time.strftime('%H:%M:%S')}"
            table_text = render(view.values(), time.monotonic() - built_at)
            if in_place:
                sys.stdout.write(f"{CLEAR}{heading}  (Ctrl-C to stop)\n\n{table_text}\n")
            else:
                sys.stdout.write(f"{heading}\n{table_text}\n\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    finally:
        call.cancel()


# A sentinel for "no message within the redraw interval" (None means the stream ended).
_NOTHING = load_pb2.WatchLoadsResponse()
