"""Rejection counts that outlive a SIGKILLed router (SPEC §6 "a router restart neither loses nor
double counts").

A router reports its cumulative counts every ``report_check_s``; killed with SIGKILL it cannot
send the counts of its last moments, so clients would have got 400s that ``GetRejectionStats``
never sees. So each router id has a small file that the router rewrites on every rejection,
before the 400 is sent, with its boot id and cumulative counts. Memory written to a file survives
the process (the page cache is the kernel's), so the next router with that id reads its
predecessor's final counts and reports them under the predecessor's boot id: the control plane
keeps the highest count per (router, boot), so counts already reported are not added twice
(``controlplane/reports/rejections.py``).

Whose file: a router with ``--router-id`` and ``--control-plane`` uses
``--counts-journal PATH``, by default a file named after the id and the control plane in a private
per-user directory (``default_journal_path``), so the router restarted with that id finds it; so
do the children of ``--processes N --router-id ID`` (ids ``ID/SLOT``), even when the whole tree
was killed. With a default id (``HOST-PID``) a single router keeps none (its successor has another
id) and the supervisor gives each slot a file for its lifetime (``COUNTS_FILE_ENV``). An exclusive
``flock`` keeps two live routers from sharing one file (the second goes without, with a warning);
the kernel drops the lock of a killed one. A router that stops cleanly, its last report taken by
the control plane, removes its file: nothing in it is left to hand over.

A successor keeps the boots it took over in its own record until it is itself replaced, so a
child killed before it could report them passes them on (the last ``MAX_CARRIED_BOOTS``).

Record: ``MAGIC``, u32 length, u32 CRC-32 of the JSON, JSON. One ``pwrite`` per rejection; a
record that does not check out (a torn write) is ignored.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import stat
import struct
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
import structlog

COUNTS_FILE_ENV = "FLEETPLANE_ROUTER_COUNTS_FILE"
MAGIC = b"FPRJ"
_HEADER = struct.Struct(">4sII")
MAX_CARRIED_BOOTS = 32

log = structlog.get_logger(__name__)

# (scope, param, client) -> cumulative count; client "" without --api-keys.
Counts = Mapping[tuple[str, str, str], int]


@dataclass(frozen=True, slots=True)
class BootCounts:
    """The last cumulative counts of one boot of a slot's router."""

    boot_id: str
    counts: dict[tuple[str, str, str], int]


def encode_record(router_id: str, boots: list[BootCounts]) -> bytes:
    """A record (pure): ``boots[0]`` is the writer's own boot, the rest the ones it carries."""
    body = _record_head(router_id) + b",".join(_boot_json(b) for b in boots) + b"]}"
    return _HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body


# msgspec: json.dumps with separators costs ~8 µs a call, which a rejection would pay.
_encode = msgspec.json.Encoder().encode


def _record_head(router_id: str) -> bytes:
    return b'{"router_id":' + _encode(router_id) + b',"boots":['


def _boot_json(boot: BootCounts) -> bytes:
    keys = sorted(boot.counts)
    return b"".join(_filled(_boot_pieces(boot.boot_id, keys), keys, boot.counts))


def _boot_pieces(boot_id: str, keys: list[tuple[str, str, str]]) -> list[bytes]:
    """A boot's JSON, ``{"boot_id": ..., "counts": [...]}``, cut around its counts: the count of
    ``keys[i]`` goes in the empty slot ``2 * i + 1`` (``_filled``). Each count is ``[scope,
    param, count]`` as before --api-keys, ``[scope, param, count, client]`` for a client."""
    pieces: list[bytes] = []
    before = b'{"boot_id":' + _encode(boot_id) + b',"counts":['
    for scope, param, client in keys:
        pieces.append(before + b"[" + _encode(scope) + b"," + _encode(param) + b",")
        pieces.append(b"")  # the count
        before = b"," + _encode(client) + b"]," if client else b"],"
    pieces.append(before.removesuffix(b",") + b"]}")
    return pieces


def _filled(pieces: list[bytes], keys: list[tuple[str, str, str]], counts: Counts) -> list[bytes]:
    """``pieces`` (``_boot_pieces`` of ``keys``) with the ``counts`` in their slots; KeyError for
    a key ``counts`` lacks."""
    for i, key in enumerate(keys):
        pieces[2 * i + 1] = b"%d" % counts[key]
    return pieces


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
            BootCounts(
                str(b["boot_id"]),
                {(str(e[0]), str(e[1]), str(e[3]) if len(e) > 3 else ""): int(e[2]) for e in b["counts"]},
            )
            for b in doc["boots"]
        ]
    except (ValueError, KeyError, TypeError):
        return []


class JournalBusy(Exception):
    """Another live process holds the journal (its lock): a predecessor still stopping, or another
    router with the same id."""


class CountsJournal:
    """The slot's file: read the predecessors once, then rewrite the own record per rejection."""

    def __init__(self, fd: int, router_id: str, predecessors: list[BootCounts], path: str = "") -> None:
        self._fd = fd
        self.path = path
        self._router_id = router_id
        self.predecessors = predecessors
        self._boot_id = ""
        # The record's fixed parts, encoded once: only this boot's counts change per rejection
        # (the same bytes ``encode_record`` makes).
        self._head = _record_head(router_id)
        self._tail = b"".join(b"," + _boot_json(b) for b in predecessors) + b"]}"
        # The record cut around this boot's counts (``_boot_pieces``, the fixed parts joined to
        # its ends): ``_order`` the keys in record order, a slot for each count at odd indices.
        self._order: list[tuple[str, str, str]] = []
        self._pieces: list[bytes] = []

    @classmethod
    def open(cls, path: str, router_id: str) -> CountsJournal | None:
        """The journal at ``path`` with the boots it holds; None (logged) when it cannot be used.
        Raises ``JournalBusy`` while another live process holds it."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.warning("rejection counts journal unusable", path=path, error=str(exc))
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The holder may have removed the file between our open and our lock: then the lock
            # is on a file nobody will read, and the path is free (try again).
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            raise JournalBusy(path) from None
        try:
            data = os.pread(fd, 1 << 20, 0)
        except OSError as exc:
            os.close(fd)
            log.warning("rejection counts journal unusable", path=path, error=str(exc))
            return None
        return cls(fd, router_id, decode_record(data, router_id)[:MAX_CARRIED_BOOTS], path)

    def start(self, boot_id: str) -> None:
        """Write this boot's (empty) record; the carried boots stay in it."""
        self._boot_id = boot_id
        self._pieces = []  # laid out again with this boot's id
        self.record({})

    def record(self, counts: Counts) -> None:
        """Rewrite the record with this boot's cumulative ``counts`` (called on every rejection).

        Only the numbers are written anew: the keys' bytes are laid out once per key set
        (``_boot_pieces``; a boot's counts only gain keys). Encoding the whole record (sorted,
        listed, msgspec) made a rejection's journal work ~17.5k instructions; this ~8k, the
        ``pwrite`` (~2.5 µs here) the larger part of what is left (bench/README.md, session 22)."""
        body = b"".join(self._filled(counts))
        data = _HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body
        try:
            os.pwrite(self._fd, data, 0)
        except OSError as exc:  # a full disk must not fail the request: the report still carries it
            log.warning("rejection counts journal write failed", error=str(exc))

    def _filled(self, counts: Counts) -> list[bytes]:
        """The record's pieces with ``counts`` in their slots, laid out again for new keys."""
        if len(counts) == len(self._order) and self._pieces:
            try:
                return _filled(self._pieces, self._order, counts)
            except KeyError:  # as many keys, other ones (never from the router: it only adds)
                pass
        self._order = sorted(counts)
        pieces = _boot_pieces(self._boot_id, self._order)
        pieces[0] = self._head + pieces[0]
        pieces[-1] += self._tail
        self._pieces = pieces
        return _filled(pieces, self._order, counts)

    def close(self) -> None:
        os.close(self._fd)

    def remove(self) -> None:
        """Delete the file and close it (a clean stop whose last report was taken)."""
        try:
            os.unlink(self.path)
        except OSError as exc:
            log.warning("rejection counts journal not removed", path=self.path, error=str(exc))
        self.close()


def journal_from_env() -> str | None:
    """The path of the journal the ``--processes`` supervisor gave this child, if any."""
    return os.environ.get(COUNTS_FILE_ENV) or None


async def open_journal_when_free(path: str, router_id: str, wait_s: float = 10.0) -> CountsJournal | None:
    """``open_journal``, waiting up to ``wait_s`` for a predecessor that still holds the file (one
    stopping while its successor starts): it may yet report what it holds, or leave it to us. No
    rejection is counted meanwhile (none before the first contract snapshot, after this)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            return open_journal(path, router_id)
        except JournalBusy:
            if loop.time() >= deadline:
                log.warning(
                    "rejection counts journal held by another process (a router with this id?)", path=path
                )
                return None
            await asyncio.sleep(0.1)


def default_journal_dir() -> str:
    """``$XDG_RUNTIME_DIR/fleetplane``, else ``<tmp>/fleetplane-<uid>``."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return os.path.join(base, "fleetplane")
    return os.path.join(tempfile.gettempdir(), f"fleetplane-{os.getuid()}")


def default_journal_path(router_id: str, control_plane: str) -> str:
    """Where a router keeps the journal of ``router_id`` by default: a file named after the id and
    the control plane it reports to (hashed: ids may hold any printable character; another control
    plane is another store, which must not get these counts) in ``default_journal_dir()``."""
    name = hashlib.sha256(f"{router_id}\0{control_plane}".encode()).hexdigest()[:32]
    return os.path.join(default_journal_dir(), f"router-{name}.counts")


def open_journal(path: str, router_id: str) -> CountsJournal | None:
    """``CountsJournal.open``, making the default directory first: one only this user may enter
    (in a shared /tmp another user could have made it first: then it is not used)."""
    directory = default_journal_dir()
    if os.path.dirname(path) == directory:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            info = os.lstat(directory)
        except OSError as exc:
            log.warning("rejection counts journal directory unusable", path=directory, error=str(exc))
            return None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            log.warning("rejection counts journal directory not private to this user", path=directory)
            return None
    return CountsJournal.open(path, router_id)
