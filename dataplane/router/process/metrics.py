"""``/metrics`` of a ``--processes N`` router: every process answers for the whole router (SPEC §1, §8).

A scrape of the shared port reaches one child at random; each child must therefore answer the
metrics of all of them, or every counter would jump between children's values. Nothing of this
runs on the request path: the hot path keeps bumping its own plain ints (``metrics.py``).

The supervisor gives each child a slot directory it owns and removes (``METRICS_DIR_ENV``) and the
child's slot (``METRICS_SLOT_ENV``). In it, child K has

- ``slot-K.sock``: a unix socket on which it serves its *local* families (its own metrics plus
  its slot's earlier boots, below; ``process.merge`` JSON) to a sibling and closes;
- ``slot-K.metrics``: the counters and histograms of its last local families, rewritten (atomic
  rename) *before* they are given out.

A child scraped on ``/metrics`` takes its own local exposition, fetches every sibling's over
their sockets concurrently (``FETCH_TIMEOUT_S``), and merges them (``process.merge``). A sibling
that does not answer (restarting after a crash, or stuck) contributes its ``slot-K.metrics``
instead: counters and histograms as last shown, no gauges (its in-flight requests are gone).

Monotonic counters across a SIGKILL: a slot's new child starts from its predecessor's
``slot-K.metrics`` and adds its own counts on top. Because the file is written before a value is
shown to anyone, every value a scrape ever showed is in it, so the router's totals never go
backwards; what a killed child counted after the last scrape, and nobody saw, is lost (it would
be lost by a single-process router killed with SIGKILL too).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re

import structlog

from dataplane.router.metrics import RouterMetrics
from dataplane.router.process.merge import ExpositionError, MergedFamilies, WireFamily, decode_wire

METRICS_DIR_ENV = "FLEETPLANE_ROUTER_METRICS_DIR"
METRICS_SLOT_ENV = "FLEETPLANE_ROUTER_METRICS_SLOT"
# How long a scrape waits for a sibling before using its snapshot instead. A sibling is a busy
# process on a shared machine: 0.25 s was missed under load (a whole-suite run at load average
# 11), and its gauges then dropped out of a healthy router's answer. A second stays far inside
# Prometheus' default 10 s scrape timeout, and only a stuck sibling ever costs it.
FETCH_TIMEOUT_S = 1.0
_SLOT_FILE = re.compile(r"slot-(\d+)\.(?:sock|metrics)")
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes, NUL included

log = structlog.get_logger(__name__)


def socket_path(directory: str, slot: int) -> str:
    return os.path.join(directory, f"slot-{slot}.sock")


def snapshot_path(directory: str, slot: int) -> str:
    return os.path.join(directory, f"slot-{slot}.metrics")


class ProcessMetrics:
    """One child's part of the router-wide exposition: serve the local one, gather the siblings'."""

    def __init__(self, metrics: RouterMetrics, directory: str, slot: int) -> None:
        self._metrics = metrics
        self._directory = directory
        self._slot = slot
        self._server: asyncio.Server | None = None
        # The counters and histograms of this slot's earlier boots (read once, before serving).
        self._earlier = _read_snapshot(snapshot_path(directory, slot))

    async def start(self) -> None:
        """Listen on this slot's socket (a stale one left by a killed predecessor is replaced)."""
        path = socket_path(self._directory, self._slot)
        if len(os.fsencode(path)) > _SUN_PATH_MAX:
            log.warning("metrics socket path too long: siblings will use snapshots", path=path)
            return
        self._server = await asyncio.start_unix_server(self._serve_local, path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(OSError):
                os.unlink(socket_path(self._directory, self._slot))

    def local(self) -> MergedFamilies:
        """This child's families (its slot's earlier boots included); persisted before they are shown."""
        merged = MergedFamilies()
        merged.add(self._metrics.registry.collect())
        merged.add_wire(self._earlier, carried_only=True)
        self._write_snapshot(merged.wire(carried_only=True))
        return merged

    async def render(self) -> bytes:
        """The exposition of the whole router: this child's and every sibling's, merged."""
        siblings = sorted(self._sibling_slots())
        fetches = [asyncio.ensure_future(self._fetch(slot)) for slot in siblings]
        await asyncio.sleep(0)  # the requests go out; this child's own part is made meanwhile
        merged = self.local()
        answers = await asyncio.gather(*fetches)
        live = 1
        for slot, answer in zip(siblings, answers, strict=True):
            families = _decode_or_none(answer, slot) if answer else None
            if families is not None:
                merged.add_wire(families)
                live += 1
            else:  # restarting or stuck: its counts as last shown, no gauges
                merged.add_wire(_read_snapshot(snapshot_path(self._directory, slot)), carried_only=True)
        merged.add_gauge(
            "fleetplane_router_processes_live",
            "Router processes (--processes) whose live metrics this answer holds; the others "
            "contribute their counters as last shown.",
            live,
        )
        return merged.render()

    def _sibling_slots(self) -> set[int]:
        try:
            names = os.listdir(self._directory)
        except OSError:
            return set()
        slots = {int(m.group(1)) for name in names if (m := _SLOT_FILE.fullmatch(name))}
        slots.discard(self._slot)
        return slots

    async def _fetch(self, slot: int) -> bytes | None:
        """A sibling's local exposition; None when it does not answer in time."""
        writer = None
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(socket_path(self._directory, slot))
                return await reader.read()  # to EOF: the sibling closes after its answer
        except (OSError, TimeoutError):
            return None
        finally:
            if writer is not None:
                writer.close()

    async def _serve_local(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self.local().wire())
            await writer.drain()
        except OSError:
            pass  # the sibling gave up (its timeout): nothing to do
        finally:
            writer.close()

    def _write_snapshot(self, text: bytes) -> None:
        path = snapshot_path(self._directory, self._slot)
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(text)
            os.replace(tmp, path)  # a reader sees the previous file or this one, never half
        except OSError as exc:
            log.warning("metrics snapshot write failed", path=path, error=str(exc))


def _read_snapshot(path: str) -> list[WireFamily]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("metrics snapshot unreadable", path=path, error=str(exc))
        return []
    return _decode_or_none(data, path) or []


def _decode_or_none(data: bytes, source: object) -> list[WireFamily] | None:
    try:
        return decode_wire(data)
    except ExpositionError as exc:
        log.warning("router process metrics unparsable", source=source, error=str(exc))
        return None


def process_metrics_from_env(metrics: RouterMetrics) -> ProcessMetrics | None:
    """The part the ``--processes`` supervisor set this child up for; None in a single process."""
    directory = os.environ.get(METRICS_DIR_ENV)
    slot = os.environ.get(METRICS_SLOT_ENV)
    if not directory or slot is None or not slot.isdigit():
        return None
    return ProcessMetrics(metrics, directory, int(slot))
