"""The load publisher an engine embeds, over real ZMQ on loopback: frames read by our own SUB
sockets (``ctx``, ``readers``; SPEC §7)."""

from __future__ import annotations

from tests.fakes.load_reader import ctx, readers

__all__ = ["ctx", "readers"]
