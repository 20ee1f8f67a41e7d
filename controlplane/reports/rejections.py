"""Rejection-stat aggregation across routers and their restarts (SPEC §6, §8). Pure: no I/O.

Routers report *cumulative* counts per (scope, param[, client]) since their process started, tagged with
``(router_id, boot_id)``. Keeping the last cumulative count of each boot and summing over boots
gives totals that a router restart neither loses (the old boot's last count stays) nor double
counts (a repeated report replaces, never adds). Within a boot counts only grow, so a report
lower than one already seen (a reordered or replayed message) never takes a count back.

The ledger also remembers which entries changed since the last ``take_dirty()`` so the
persistence adapter can write only those, coalesced (``controlplane/store/routers.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# (scope, param, client) -> cumulative count; client "" for a router without --api-keys.
Counts = Mapping[tuple[str, str, str], int]


@dataclass(frozen=True, slots=True)
class RejectionRow:
    """One persisted entry: the last cumulative count of (scope, param, client) in one router boot."""

    router_id: str
    boot_id: str
    scope: str
    param: str
    count: int
    client: str = ""

    @property
    def key(self) -> _Key:
        return (self.router_id, self.boot_id, self.scope, self.param, self.client)


@dataclass(frozen=True, slots=True)
class RejectionTotals:
    """What ``GetRejectionStats`` answers; every list sorted by key, detail by (scope, param)."""

    total: int
    by_field: tuple[tuple[str, int], ...]
    by_scope: tuple[tuple[str, int], ...]
    by_router: tuple[tuple[str, int], ...]
    detail: tuple[tuple[str, str, int], ...]
    by_client: tuple[tuple[str, int], ...] = ()
    client_detail: tuple[tuple[str, str, str, int], ...] = ()  # (client, scope, param, count)


_Key = tuple[str, str, str, str, str]  # (router_id, boot_id, scope, param, client)


def _row(key: _Key, count: int) -> RejectionRow:
    router_id, boot_id, scope, param, client = key
    return RejectionRow(router_id, boot_id, scope, param, count, client)


class RejectionLedger:
    """The last cumulative count per (router, boot, scope, param), and totals over them."""

    def __init__(self, rows: Iterable[RejectionRow] = ()) -> None:
        self._counts: dict[_Key, int] = {}
        self._dirty: set[_Key] = set()
        for row in rows:
            key = row.key
            self._counts[key] = max(self._counts.get(key, 0), row.count)

    def observe(self, router_id: str, boot_id: str, counts: Counts) -> bool:
        """Record one report's cumulative counts; True when any count grew."""
        grew = False
        for (scope, param, client), count in counts.items():
            key = (router_id, boot_id, scope, param, client)
            # Counts only grow within a boot: a lower (stale, replayed) value changes nothing.
            if count > self._counts.get(key, 0):
                self._counts[key] = count
                self._dirty.add(key)
                grew = True
        return grew

    def merge(self, rows: Iterable[RejectionRow]) -> None:
        """Take up stored counts (written by another control plane on a shared store): the higher
        count of each entry wins, so merging the same rows again changes nothing."""
        for row in rows:
            key = row.key
            if key not in self._counts or row.count > self._counts[key]:
                self._counts[key] = row.count

    def has_dirty(self) -> bool:
        """True when some count changed since the last ``take_dirty()``."""
        return bool(self._dirty)

    def take_dirty(self) -> list[RejectionRow]:
        """The entries changed since the last call (then forgotten as dirty)."""
        rows = [_row(key, self._counts[key]) for key in sorted(self._dirty)]
        self._dirty.clear()
        return rows

    def restore_dirty(self, rows: Iterable[RejectionRow]) -> None:
        """Mark rows dirty again (their write failed; the next flush retries them)."""
        for row in rows:
            self._dirty.add(row.key)

    def rows(self) -> list[RejectionRow]:
        """Every entry, sorted."""
        return [_row(key, count) for key, count in sorted(self._counts.items())]

    def totals(self) -> RejectionTotals:
        """Sums over every boot of every router (the totals of SPEC §6)."""
        total = 0
        by_field: dict[str, int] = {}
        by_scope: dict[str, int] = {}
        by_router: dict[str, int] = {}
        detail: dict[tuple[str, str], int] = {}
        by_client: dict[str, int] = {}
        client_detail: dict[tuple[str, str, str], int] = {}
        for (router_id, _boot, scope, param, client), count in self._counts.items():
            total += count
            by_field[param] = by_field.get(param, 0) + count
            by_scope[scope] = by_scope.get(scope, 0) + count
            by_router[router_id] = by_router.get(router_id, 0) + count
            detail[(scope, param)] = detail.get((scope, param), 0) + count
            if client:
                by_client[client] = by_client.get(client, 0) + count
                cell = (client, scope, param)
                client_detail[cell] = client_detail.get(cell, 0) + count
        return RejectionTotals(
            total=total,
            by_field=tuple(sorted(by_field.items())),
            by_scope=tuple(sorted(by_scope.items())),
            by_router=tuple(sorted(by_router.items())),
            detail=tuple((s, p, c) for (s, p), c in sorted(detail.items())),
            by_client=tuple(sorted(by_client.items())),
            client_detail=tuple((k, s, p, c) for (k, s, p), c in sorted(client_detail.items())),
        )
