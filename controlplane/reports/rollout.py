"""The rollout view: which contract revision each router has in force (SPEC §6). Pure: no I/O.

A router is keyed by its stable ``router_id``; its record is its newest report (a restarted router
replaces its previous boot's record). ``connected`` is true while at least one report stream of
that router id is open: several streams may overlap briefly when a router reconnects before the
control plane has noticed that the old stream died.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class RouterRecord:
    """A router's newest report (persisted, so the view survives a control-plane restart)."""

    router_id: str
    boot_id: str
    applied_revision: int
    apply_error: str
    last_report_unix_s: float
    # The workers the router had ejected at that report. Not persisted: a router re-sends its
    # status at least every heartbeat, and an ejection is about now, not about the record's past.
    ejected_workers: tuple[str, ...] = ()
    # The control-plane replica the router reported being on (HOST:PORT as the router reaches
    # it); "" once its stream ended. Stored, so every control plane on a shared store shows it.
    control_plane_address: str = ""


@dataclass(frozen=True, slots=True)
class RouterView:
    """One row of ``ListRouters``."""

    record: RouterRecord
    connected: bool
    up_to_date: bool


class RolloutBoard:
    """Newest record per router id plus the count of its open report streams."""

    def __init__(self, records: Iterable[RouterRecord] = ()) -> None:
        self._records: dict[str, RouterRecord] = {r.router_id: r for r in records}
        self._open: dict[str, int] = {}
        self._dirty: set[str] = set()

    def stream_opened(self, router_id: str) -> None:
        """A report stream of ``router_id`` delivered its first message."""
        self._open[router_id] = self._open.get(router_id, 0) + 1

    def stream_closed(self, router_id: str) -> None:
        """A report stream of ``router_id`` ended (any way)."""
        left = self._open.get(router_id, 0) - 1
        if left > 0:
            self._open[router_id] = left
            return
        self._open.pop(router_id, None)
        record = self._records.get(router_id)
        if record is not None and record.control_plane_address:
            # On no replica as far as this plane knows; a replica it failed over to reports a
            # later time, which wins the merge and the store (``etcd_routers``).
            self._records[router_id] = replace(record, control_plane_address="")
            self._dirty.add(router_id)

    def is_connected(self, router_id: str) -> bool:
        """True while a report stream of ``router_id`` is open."""
        return router_id in self._open

    def report(self, record: RouterRecord) -> None:
        """Take a router's newest report as its record."""
        previous = self._records.get(record.router_id)
        self._records[record.router_id] = record
        # The time alone changing is not worth a disk write on every report; the status is.
        if previous is None or replace(previous, last_report_unix_s=0.0) != replace(
            record, last_report_unix_s=0.0
        ):
            self._dirty.add(record.router_id)

    def merge(self, records: Iterable[RouterRecord]) -> None:
        """Take up stored records (another control plane on a shared store heard from these
        routers): a record newer than the one held wins; connections stay this plane's own."""
        for record in records:
            held = self._records.get(record.router_id)
            if held is None or record.last_report_unix_s > held.last_report_unix_s:
                self._records[record.router_id] = record

    def touch_dirty(self, router_id: str) -> None:
        """Mark a record to be written at the next flush (e.g. its stream ended)."""
        if router_id in self._records:
            self._dirty.add(router_id)

    def take_dirty(self) -> list[RouterRecord]:
        """Records changed since the last call."""
        records = [self._records[rid] for rid in sorted(self._dirty) if rid in self._records]
        self._dirty.clear()
        return records

    def restore_dirty(self, records: Iterable[RouterRecord]) -> None:
        """Mark records dirty again (their write failed)."""
        self._dirty.update(r.router_id for r in records)

    def has_dirty(self) -> bool:
        """True when a record changed since the last ``take_dirty()``."""
        return bool(self._dirty)

    def view(
        self, current_revision: int, *, now_unix_s: float = 0.0, forget_after_s: float = float("inf")
    ) -> list[RouterView]:
        """Every known router, sorted by id, judged against the store's current revision.

        A disconnected router silent for longer than ``forget_after_s`` is left out: routers
        that were replaced (a new id per host and process) must not fill the view forever.
        """
        views: list[RouterView] = []
        for router_id, record in sorted(self._records.items()):
            connected = self.is_connected(router_id)
            if not connected and now_unix_s - record.last_report_unix_s > forget_after_s:
                continue
            views.append(
                RouterView(
                    record=record,
                    connected=connected,
                    # A router that could not apply the newest snapshot is behind, whatever it holds.
                    up_to_date=record.applied_revision == current_revision and not record.apply_error,
                )
            )
        return views
