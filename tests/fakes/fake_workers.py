"""Hand-written workers for the worker registry (SPEC §6 RegisterWorker, §7 advertisement) and a
LoadService client's helpers.

``FakeWorker`` is a tiny threaded HTTP/1.1 server on loopback answering hand-written
``/server_info`` and ``/v1/models`` bytes (or never answering, to play a hung engine)::

    with FakeWorker({"/server_info": (200, b'{"enable_http2": true}')}) as w:
        register(stub, w.url)"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc

HANG = object()


"""An answer that never comes: the connection is accepted and held open."""


Answer = tuple[int, bytes] | object


def server_info(base: int | None = None, dp_size: int = 1, host: Any = "*", http2: bool = False) -> bytes:
    """``/server_info`` as SGLang advertises it (SPEC §7); ``base=None``: no load range."""
    kv: dict[str, Any] = {
        "publisher": "zmq",
        "endpoint_host": host,
        "endpoint_port_base": 5557,
        "topic": "",
        "block_size": 16,
        "dp_size": dp_size,
    }
    if base is not None:
        kv |= {"load_endpoint_port_base": base, "load_topic": "load"}
    return json.dumps({"enable_http2": http2, "kv_events": kv}).encode()


def models(*ids: str) -> bytes:
    return json.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}).encode()


class FakeWorker:
    """A threaded HTTP/1.1 server on loopback with scripted answers per path (404 elsewhere)."""

    def __init__(self, routes: dict[str, Answer], *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.routes = dict(routes)
        self.hits: dict[str, int] = {}
        self._release = threading.Event()
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                worker.hits[self.path] = worker.hits.get(self.path, 0) + 1
                answer = worker.routes.get(self.path, (404, b'{"detail": "Not Found"}'))
                if answer is HANG:
                    worker._release.wait(60)
                    return
                assert isinstance(answer, tuple)
                status, body = answer
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self._server = Server((host, port), Handler)
        self.port = int(self._server.server_address[1])
        self.url = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        # poll_interval: how long shutdown() waits for the loop to notice (the default 0.5 s was
        # half a second at the end of every test that uses a FakeWorker); answering is unaffected.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> FakeWorker:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def register(
    stub: load_pb2_grpc.LoadServiceStub,
    url: str,
    *,
    protocol: int = pb.WORKER_PROTOCOL_UNSPECIFIED,
    models: tuple[str, ...] = (),
    endpoints: tuple[str, ...] = (),
    timeout_s: float = 30.0,
) -> pb.Worker:
    request = pb.RegisterWorkerRequest(
        url=url, protocol=protocol, models=list(models), load_endpoints=list(endpoints)
    )
    return stub.RegisterWorker(request, timeout=timeout_s).worker


def refusal(call: Callable[[], object]) -> grpc.RpcError:
    """The error a call fails with (the test fails if it succeeds)."""
    try:
        call()
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the call succeeded")


def listed(stub: load_pb2_grpc.LoadServiceStub) -> dict[str, pb.Worker]:
    return {w.url: w for w in stub.ListWorkers(pb.ListWorkersRequest(), timeout=10).workers}


def loads(stub: load_pb2_grpc.LoadServiceStub) -> dict[str, pb.WorkerLoad]:
    return {w.url: w for w in stub.GetLoads(pb.GetLoadsRequest(), timeout=10).workers}


def until(check: Callable[[], Any], timeout_s: float = 15.0, interval_s: float = 0.1) -> Any:
    """Poll ``check()`` until truthy; returns its value, fails with the last one at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"still {value!r} after {timeout_s} s"
        time.sleep(interval_s)


def fresh(stub: load_pb2_grpc.LoadServiceStub, url: str) -> bool:
    view = loads(stub).get(url)
    return view is not None and view.freshness == pb.FRESHNESS_FRESH


def cli_json(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
