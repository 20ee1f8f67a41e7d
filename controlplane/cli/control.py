"""``fleetplane control`` / ``python -m controlplane``: run the control plane (SPEC §1).

Prints ``control plane listening on HOST:PORT`` (the bound port when ``--listen`` asks for port
0) on stdout once it serves, preceded by ``control plane http on HOST:PORT`` when
``--http-listen`` is on. SIGTERM/SIGINT stop it gracefully with exit 0; a startup error prints
one line naming the flag and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import structlog

from controlplane.app import ControlPlane
from controlplane.envflags import LOG_LEVELS
from controlplane.errors import StartupError
from controlplane.server.logs import configure_logging
from controlplane.settings import (
    DEFAULT_HTTP_LISTEN,
    DEFAULT_LISTEN,
    DEFAULT_STORE,
    ControlSettings,
)

STARTUP_ERROR_EXIT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines written to stderr",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help="gRPC address (HOST:PORT; port 0 = any); off loopback only with --auth-tokens",
    )
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help="sqlite:PATH (created on first start) or etcd://HOST:PORT[,HOST:PORT...][/PREFIX] "
        "(control planes on one etcd and prefix share contracts, workers and router stats)",
    )
    parser.add_argument(
        "--auth-tokens",
        default=None,
        metavar="FILE",
        help='JSON {"NAME": {"token": "...", "role": "admin|router|viewer"}} (or lines NAME TOKEN ROLE); '
        "required when --listen or --http-listen is off loopback; with it, /metrics and the status page "
        "need a token too (Bearer, or Basic with the token as password)",
    )
    parser.add_argument("--tls-cert", default=None, metavar="FILE", help="server certificate (PEM)")
    parser.add_argument("--tls-key", default=None, metavar="FILE", help="server private key (PEM)")
    parser.add_argument(
        "--tls-client-ca", default=None, metavar="FILE", help="require client certificates signed by this CA"
    )
    parser.add_argument(
        "--http-listen",
        default=DEFAULT_HTTP_LISTEN,
        help="/metrics, /healthz and the status page (HOST:PORT; off loopback only with --auth-tokens); "
        "'off' disables",
    )
    parser.add_argument("--load-stale-after-s", type=float, default=3.0, help="rank load goes STALE after")
    parser.add_argument("--load-push-interval-ms", type=int, default=50, help="WatchLoads push period")
    parser.add_argument(
        "--worker-api-key",
        default=None,
        metavar="KEY",
        help="sent to workers as Authorization: Bearer KEY when discovering them (SGLang's --api-key; "
        "the routers take their own --worker-api-key); shows in ps: prefer the environment or "
        "--worker-api-key-file",
    )
    parser.add_argument(
        "--worker-api-key-file",
        default=None,
        metavar="FILE",
        help="read --worker-api-key from FILE (not with --worker-api-key)",
    )


def settings_from_args(args: argparse.Namespace) -> ControlSettings:
    return ControlSettings.build(
        listen=args.listen,
        store=args.store,
        auth_tokens=args.auth_tokens,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        http_listen=args.http_listen,
        load_stale_after_s=args.load_stale_after_s,
        load_push_interval_ms=args.load_push_interval_ms,
        worker_api_key=args.worker_api_key,
        worker_api_key_file=args.worker_api_key_file,
    )


async def serve(settings: ControlSettings) -> None:
    """Run until SIGTERM/SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with ControlPlane(settings) as plane:
        if plane.http_address is not None:
            print(f"control plane http on {plane.http_address}", flush=True)
        print(f"control plane listening on {plane.grpc_address}", flush=True)
        await stop.wait()
        structlog.get_logger("controlplane.app").info("stopping", reason="signal")


def _run_loop(settings: ControlSettings) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional off Linux/macOS
        asyncio.run(serve(settings))
    else:
        uvloop.run(serve(settings))


def run(args: argparse.Namespace) -> int:
    configure_logging(LOG_LEVELS[args.log_level])
    try:
        settings = settings_from_args(args)
        _run_loop(settings)
    except StartupError as exc:
        print(f"fleetplane control: {exc}", file=sys.stderr, flush=True)
        return STARTUP_ERROR_EXIT
    return 0
