"""Rejection counts that outlive a SIGKILLed ``--processes`` child (SPEC §6 "a router restart
neither loses nor double counts").

A child reports its cumulative counts every ``report_check_s``; killed with SIGKILL it cannot send
the counts of its last moments, so clients would have got 400s that ``GetRejectionStats`` never
sees. The supervisor therefore gives each slot a small file (``COUNTS_FILE_ENV``); the child
rewrites it on every rejection, before the 400 is sent, with its boot id and cumulative counts.
Memory written to a file survives the process (the page cache is the kernel's), so the next child
of that slot reads its predecessor's final counts and reports them under the predecessor's boot
id: the control plane keeps the highest count per (router, boot), so counts already reported are
not added twice (``controlplane/reports/rejections.py``).

A successor keeps the boots it took over in its own record until it is itself replaced, so a
child killed before it could report them passes them on (the last ``MAX_CARRIED_BOOTS``).

Record: ``MAGIC``, u32 length, u32 CRC-32 of the JSON, JSON. One ``pwrite`` per rejection; a
record that does not check out (a torn write) is ignored.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

COUNTS_FILE_ENV = "FLEETPLANE_ROUTER_COUNTS_FILE"
MAGIC = b"FPRJ"
_HEADER = struct.Struct(">4sII")
MAX_CARRIED_BOOTS = 32

log = structlog.get_logger(__name__)

Counts = Mapping[tuple[str, str], int]


@dataclass(frozen=True, slots=True)
class BootCounts:
    """The last cumulative counts of one boot of a slot's router."""

    boot_id: str
    counts: dict[tuple[str, str], int]


def encode_record(router_id: str, boots: list[BootCounts]) -> bytes:
    """A record (pure): ``boots[0]`` is the writer's own boot, the rest the ones it carries."""
    body = json.dumps(
        {
            "router_id": router_id,
            "boots": [
                {"boot_id": b.boot_id, "counts": [[s, p, c] for (s, p), c in sorted(b.counts.items())]}
                for b in boots
            ],
        },
        separators=(",", ":"),
    ).encode()
    return _HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body


def decode_record(data: bytes, router_id: str) -> list[BootCounts]:
    """The boots of a record written for ``router_id`` (pure); [] for anything else."""
    if len(data) < _HEADER.size:
        return []
    magic, length, crc = _HEADER.unpack_from(data)
    body = data[_HEADER.size : _HEADER.size + length]
    if magic != MAGIC or len(body) != length or zlib.crc32(body) != crc:
        return []
    try:
        doc = json.loads(body)
        if doc["router_id"] != router_id:
            return []
        return [
            BootCounts(str(b["boot_id"]), {(str(s), str(p)): int(c) for s, p, c in b["counts"]})
            for b in doc["boots"]
        ]
    except (ValueError, KeyError, TypeError):
        return []


class CountsJournal:
    """The slot's file: read the predecessors once, then rewrite the own record per rejection."""

    def __init__(self, fd: int, router_id: str, predecessors: list[BootCounts]) -> None:
        self._fd = fd
        self._router_id = router_id
        self.predecessors = predecessors
        self._boot_id = ""

    @classmethod
    def open(cls, path: str, router_id: str) -> CountsJournal | None:
        """The journal at ``path`` with the boots it holds; None (logged) when it cannot be used."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            data = os.pread(fd, 1 << 20, 0)
        except OSError as exc:
            log.warning("rejection counts journal unusable", path=path, error=str(exc))
            return None
        return cls(fd, router_id, decode_record(data, router_id)[:MAX_CARRIED_BOOTS])

    def start(self, boot_id: str) -> None:
        """Write this boot's (empty) record; the carried boots stay in it."""
        self._boot_id = boot_id
        self.record({})

    def record(self, counts: Counts) -> None:
        """Rewrite the record with this boot's cumulative ``counts`` (called on every rejection)."""
        own = BootCounts(self._boot_id, dict(counts))
        data = encode_record(self._router_id, [own, *self.predecessors])
        try:
            os.pwrite(self._fd, data, 0)
        except OSError as exc:  # a full disk must not fail the request: the report still carries it
            log.warning("rejection counts journal write failed", error=str(exc))

    def close(self) -> None:
        os.close(self._fd)


def journal_from_env(router_id: str) -> CountsJournal | None:
    """The journal the ``--processes`` supervisor gave this child, if any."""
    path = os.environ.get(COUNTS_FILE_ENV)
    return CountsJournal.open(path, router_id) if path else None
