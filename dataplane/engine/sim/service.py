"""engine-sim as a process: flags -> ranks + publishers -> HTTP server -> run until a signal.

The one line ``engine-sim listening on http://HOST:PORT`` goes to stdout (flushed) once the
port is bound, so ``fleetplane up`` and tests can start it on port 0; logs go to stderr.
SIGTERM/SIGINT drain the server and exit 0; startup errors exit 2 with one line (SPEC §1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from controlplane.envflags import die_with_parent
from dataplane.engine.endpoints import describe_kv_events
from dataplane.engine.kv_events import KvEventsPublisher
from dataplane.engine.publisher import PublisherBindError
from dataplane.engine.sim.app import SimApp
from dataplane.engine.sim.ranks import SimRank, build_ranks
from dataplane.engine.sim.settings import PAGE_SIZE, PROG, SimSettings, parse_settings
from dataplane.errors import StartupError
from dataplane.http.server import start_server

VERSION = "fleetplane-engine-sim 0.1.0"
DRAIN_GRACE_S = 2.0
STARTUP_ERROR_EXIT = 2


def server_info(settings: SimSettings, model_path: str, port: int) -> dict[str, Any]:
    """``GET /server_info``: the subset of SGLang's server args a router or control plane reads."""
    info: dict[str, Any] = {
        "version": VERSION,
        "model_path": model_path,
        "tokenizer_path": model_path,
        "served_model_name": settings.model,
        "host": settings.host,
        "port": port,
        "dp_size": settings.dp_size,
        "enable_http2": settings.http2,
        "page_size": PAGE_SIZE,
        "max_running_requests": settings.max_running_requests,
        "max_total_num_tokens": settings.max_total_tokens,
        "decode_tokens_per_s": settings.decode_tokens_per_s,
        "chunked_prefill_size": settings.costs.chunked_prefill_size,
        "kv_events_config": json.dumps({"publisher": "zmq", "endpoint": settings.kv_events_endpoint}),
        "load_publish_endpoint": settings.load_publish_endpoint,
    }
    info["kv_events"] = describe_kv_events(
        kv_endpoint=settings.kv_events_endpoint,
        dp_size=settings.dp_size,
        block_size=PAGE_SIZE,
        load_range=settings.load_range,
    )
    return info


def _configure_logging(level: int = logging.INFO) -> None:
    # stdout carries only the listening line; structured logs go to stderr (SPEC §8).
    renderer: Any = (
        structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    return STARTUP_ERROR_EXIT


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def prepare_model_dir(settings: SimSettings) -> tuple[str, str | None]:
    """``(model_path, dir to remove at exit)``: the given local directory, or a temp one we own.

    Always a local path, never a hub name, so consumers never try to download it.
    """
    if settings.model_path is not None:
        path = Path(settings.model_path)
        if not path.is_dir():
            raise StartupError(f"--model-path {settings.model_path!r}: must be an existing local directory")
        return str(path.resolve()), None
    own_dir = tempfile.mkdtemp(prefix="engine-sim-model-")
    config = {"architectures": ["SimForCausalLM"], "model_type": "sim", "name": settings.model}
    Path(own_dir, "config.json").write_text(json.dumps(config))
    return own_dir, own_dir


async def serve(settings: SimSettings, model_path: str) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    ranks: list[SimRank] = []
    kv_events: KvEventsPublisher | None = None
    kv_unbound = ""
    try:
        try:
            ranks = build_ranks(settings)
        except PublisherBindError as exc:
            return _fail(f"--load-publish-endpoint {settings.load_publish_endpoint!r}: {exc}")
        if settings.kv_events is not None:
            try:
                kv_events = KvEventsPublisher.open(settings.kv_events)
            except PublisherBindError as exc:
                if settings.kv_events_explicit:
                    return _fail(f"--kv-events-endpoint {settings.kv_events_endpoint!r}: {exc}")
                # The default port is shared by every engine-sim on the host that was not given
                # one: the first takes it, the others still serve (advertised but silent, C.3).
                kv_unbound = str(exc)
        app = SimApp(
            ranks,
            model=settings.model,
            info=server_info(settings, model_path, settings.port),
            model_path=model_path,
            api_key=settings.api_key,
        )
        try:
            server = await start_server(app, settings.host, settings.port)
        except OSError as exc:
            return _fail(
                f"--listen {_url_host(settings.host)}:{settings.port}: cannot listen ({exc.strerror or exc}); "
                "use a free port on a local address"
            )
        app.set_server_info(server_info(settings, model_path, server.port))
        if kv_unbound:  # logged once serving: a startup error stays the only stderr line
            structlog.get_logger(__name__).warning("KV events publisher not bound", error=kv_unbound)
        return await _run(settings, server, ranks)
    finally:
        for rank in ranks:
            rank.close()
        if kv_events is not None:
            kv_events.close()


async def _run(settings: SimSettings, server: Any, ranks: list[SimRank]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{PROG} listening on http://{_url_host(settings.host)}:{server.port}", flush=True)
    structlog.get_logger(__name__).info(
        "engine-sim started",
        port=server.port,
        dp_size=settings.dp_size,
        http2=settings.http2,
        load_endpoints=[r.publisher.endpoint for r in ranks if r.publisher.enabled],
    )
    try:
        async with asyncio.TaskGroup() as group:
            loops = [group.create_task(rank.run(), name=f"rank-{rank.rank}") for rank in ranks]
            await stop.wait()
            await server.drain(DRAIN_GRACE_S)
            for task in loops:
                task.cancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()
    try:
        settings = parse_settings(argv)
        model_path, own_dir = prepare_model_dir(settings)
    except StartupError as exc:
        return _fail(str(exc))
    _configure_logging(settings.log_level)
    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(serve(settings, model_path))
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
