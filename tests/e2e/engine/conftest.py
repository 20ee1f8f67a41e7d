"""The engine side as an engine integrator meets it (SPEC §1 engine-sim, §2, §7): load frames read
by our own SUB sockets (``ctx``, ``readers``)."""

from __future__ import annotations

from tests.fakes.load_reader import ctx, readers

__all__ = ["ctx", "readers"]
