"""SGLang 0.5.23's own ``SchedulerLoadPublisher``, run for real: the bytes an engine sends.

``sglang.srt.managers.scheduler_components.load_publisher`` is imported from the wheel with the
guards of ``wheel`` (its import chain names ``psutil`` and, through ``sglang.srt.utils``'s
``__init__``, the whole runtime): ``sglang.srt.utils`` is registered as an empty package over the
wheel's directory, as ``sglang`` itself is, so only ``utils/network.py`` runs. The publisher's
``__init__`` runs unchanged; two things are set around it, neither on the path that encodes and
sends:

- the process's parallel ranks (pp, attention TP/CP and dp rank 0, one dp rank), stamped on the
  wheel's ``ParallelContext`` as its launcher would (``override`` validates them against
  ``ServerArgs``, whose import needs torch);
- ``_open_pub_socket`` binds ``127.0.0.1`` instead of the wildcard the endpoint names (the
  module's docstring: "Module-level so tests can stub the one side effect"; our tests bind
  loopback only). HWM, LINGER and the bind itself are the wheel's code.

:func:`capture` then calls ``publish_load_stat`` and reads the frames from a real ZMQ SUB socket.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import socket
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import zmq

from tests.fakes.sglang_engine import wheel

MODULE = "sglang.srt.managers.scheduler_components.load_publisher"
# The golden capture: what 0.5.23's SchedulerLoadPublisher sent on a real ZMQ socket (seq 0) for
# ``SNAPSHOT``: running 3, waiting 2, 1500 KV tokens of 262144, rank 0, 700 uncached waiting
# tokens, 2200 total, limit 256, 123456 prefilled tokens in 78901 µs — eleven positions.
GOLDEN_SGLANG_0_5_23 = bytes.fromhex(
    "9ba84c6f6164537461740302cd05dcce0004000000cd02bccd0898cd0100ce0001e240ce00013435"
)
_GUARDED = ("psutil", "torch", "numpy")
_RANKS = {
    "pp_rank": 0,
    "attn_tp_rank": 0,
    "attn_cp_rank": 0,
    "num_dp_ranks": 1,
    "attn_dp_size": 1,
    "attn_dp_rank": 0,
    "dp_rank": 0,
}


@dataclass(frozen=True)
class Snapshot:
    """The fields of ``LoadSnapshot`` the publisher reads (``publish_load_stat``)."""

    num_running_reqs: int
    num_waiting_reqs: int
    num_used_tokens: int
    max_total_num_tokens: int
    num_waiting_uncached_tokens: int
    num_total_tokens: int
    max_running_requests: int
    total_prefill_uncached_tokens: int
    total_prefill_busy_us: int


@functools.cache
def module() -> types.ModuleType:
    wheel.modules()  # registers the ``sglang`` stand-in package first
    name = "sglang.srt.utils"
    existing = sys.modules.get(name)
    if existing is None:
        utils = types.ModuleType(name)
        utils.__path__ = [str(wheel.root() / "srt" / "utils")]
        sys.modules[name] = utils
    absent = tuple(n for n in _GUARDED if n not in sys.modules and importlib.util.find_spec(n) is None)
    finder = wheel._GuardFinder(absent)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(MODULE)
    finally:
        sys.meta_path.remove(finder)
        for guarded in [n for n, m in sys.modules.items() if isinstance(m, wheel.Guard)]:
            del sys.modules[guarded]


SNAPSHOT = Snapshot(3, 2, 1500, 262144, 700, 2200, 256, 123456, 78901)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def publisher(port: int, *, publish_interval: int = 15) -> Iterator[Any]:
    """SGLang 0.5.23's ``SchedulerLoadPublisher``, bound at ``127.0.0.1:port``, closed on exit."""
    publisher_module = module()
    parallel = importlib.import_module("sglang.srt.runtime_context").get_parallel()
    real_open: Callable[[str], Any] = publisher_module._open_pub_socket
    publisher_module._open_pub_socket = lambda endpoint: real_open(
        endpoint.replace("tcp://*:", "tcp://127.0.0.1:")
    )
    saved = dict(parallel._stamp)
    parallel._stamp.update(_RANKS)
    try:
        instance = publisher_module.SchedulerLoadPublisher(
            kv_events_config=json.dumps({"publisher": "zmq", "endpoint": f"tcp://*:{_free_port()}"}),
            load_publish_endpoint=f"tcp://*:{port}",
            publish_interval=publish_interval,
        )
    finally:
        parallel._stamp.clear()
        parallel._stamp.update(saved)
        publisher_module._open_pub_socket = real_open
    if not instance.enable:
        raise RuntimeError("SGLang's load publisher did not bind")
    try:
        yield instance
    finally:
        instance.close()


def capture(
    snapshots: Sequence[Snapshot], *, publish_interval: int = 15, force: bool = True
) -> list[list[bytes]]:
    """The frames SGLang's publisher sends for ``snapshots`` (one ``publish_load_stat`` call each),
    as a real SUB socket on loopback receives them."""
    port = _free_port()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub = context.socket(zmq.SUB)
    try:
        with publisher(port, publish_interval=publish_interval) as instance:
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(f"tcp://127.0.0.1:{port}")
            time.sleep(0.3)  # the subscription reaches the PUB before anything is sent
            for snapshot in snapshots:
                instance.publish_load_stat(lambda snapshot=snapshot: snapshot, force=force)
            frames: list[list[bytes]] = []
            while sub.poll(500):
                frames.append(sub.recv_multipart())
            return frames
    finally:
        sub.close(linger=0)
        context.destroy(linger=0)
