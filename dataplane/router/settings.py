"""``fleetplane router`` flags (SPEC §1) and the frozen settings they make.

Every flag also reads ``FLEETPLANE_<FLAG>`` (``EnvArgumentParser``). ``settings_from_args`` turns
the parsed flags into ``RouterSettings`` or raises ``SettingsError`` with one line naming the
flag, the value and what is allowed (the entry point prints it and exits non-zero).

Standalone mode: workers from ``--worker``; the ``--override-sampling-params`` contract (policy
``--sampling-param-conflict``, which requires it) becomes scope ``*`` at revision 0. With
``--control-plane`` both come from the control plane, so ``--worker`` and the contract flags
are refused.
"""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.contracts import ContractError, SamplingContract, parse_contract_json
from controlplane.envflags import EnvArgumentParser, read_key
from dataplane.errors import SettingsError
from dataplane.router.balancer import Policy
from dataplane.router.clients import ApiKeysError, ClientKeys, parse_api_keys
from dataplane.router.contract.dialects import DIALECTS
from dataplane.router.contract.routes import RouteTable, build_route_table
from dataplane.router.control.convert import check_replicas, parse_control_plane
from dataplane.router.fleet.health import HealthPolicy
from dataplane.router.fleet.workers import WorkerAddress, WorkerUrlError
from dataplane.router.process.journal import default_journal_path
from dataplane.router.upstream.base import UpstreamTimeouts

MIB = 1024 * 1024
# The longest router id the control plane accepts in a status report (SPEC §6).
MAX_ROUTER_ID_CHARS = 256


@dataclass(frozen=True, slots=True)
class RouterSettings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    workers: tuple[str, ...] = ()
    contract: SamplingContract | None = None
    policy: Policy = Policy.LEAST_LOAD
    max_concurrency: int = 256
    queue_size: int = 100
    queue_timeout_s: float = 60.0
    request_timeout_s: float = 1800.0
    max_body_bytes: int = 32 * MIB
    processes: int = 1
    router_id: str = ""
    # The control-plane replicas (HOST:PORT each, as given); empty: standalone mode.
    control_plane: tuple[str, ...] = ()
    token: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    health: HealthPolicy = field(default_factory=HealthPolicy)
    routes: RouteTable = field(default_factory=build_route_table)
    # Request body memory; 0 = derived (see add_arguments).
    max_buffered_body_bytes: int = 0
    max_connection_body_bytes: int = 0
    upstream: UpstreamTimeouts = field(default_factory=UpstreamTimeouts)
    # The rejection counts journal of a single router (None: none; process/journal.py).
    counts_journal: str | None = None
    # The front door's client keys (None: open to every client, as before).
    api_keys: ClientKeys | None = None
    # Sent to every worker as ``Authorization: Bearer`` (SGLang's --api-key); never shown.
    worker_api_key: str | None = field(default=None, repr=False)
    # The listener's certificate chain and key (None: plain HTTP/1.1 and h2c).
    listen_tls_cert: Path | None = None
    listen_tls_key: Path | None = None
    # --access-log: "stderr" or a file path; None: off.
    access_log: str | None = None
    # Not flags (yet): house defaults.
    retry_attempts: int = 3
    drain_grace_s: float = 30.0

    @property
    def listen_url(self) -> str:
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        scheme = "https" if self.listen_tls_cert is not None else "http"
        return f"{scheme}://{host}:{self.listen_port}"


def _whole(text: str) -> int:
    """An integer flag value; the error says what is allowed (SPEC §1)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def _seconds(text: str) -> float:
    """A duration flag value in seconds; the error says what is allowed (SPEC §1)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The SPEC §1 ``fleetplane router`` flags (shared by ``python -m dataplane`` and the CLI)."""
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines written to stderr",
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="address to serve on (port 0: any free port)",
    )
    parser.add_argument(
        "--control-plane",
        action="append",
        default=[],
        metavar="HOST:PORT[,HOST:PORT...]",
        help="subscribe to this control plane; several replicas (comma-separated or repeated, IP "
        "addresses of one family, or one DNS name resolving to several; with TLS one DNS name): "
        "the router stays on one and fails over to another within seconds when it dies or hangs",
    )
    parser.add_argument(
        "--token", default=None, help="bearer token for the control plane (shows in ps: prefer --token-file)"
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="read the bearer token from FILE (not with --token)",
    )
    parser.add_argument(
        "--tls-ca", default=None, metavar="FILE", help="CA bundle to verify the control plane"
    )
    parser.add_argument(
        "--tls-cert",
        default=None,
        metavar="FILE",
        help="client certificate for mTLS to the control plane (PEM; with --tls-key)",
    )
    parser.add_argument("--tls-key", default=None, metavar="FILE", help="client private key for mTLS (PEM)")
    parser.add_argument(
        "--api-keys",
        default=None,
        metavar="FILE",
        help='client API keys, a JSON object {"NAME": {"key": "..."}}: every request but the health, '
        "readiness, metrics and contract pages needs one (Authorization: Bearer KEY or x-api-key: KEY), "
        "else 401 invalid_api_key; NAME is the client in metrics and stats",
    )
    parser.add_argument(
        "--access-log",
        default="off",
        metavar="SINK",
        help="off, on (= stderr), stderr, or FILE (appended to): one JSON line per request (time, route, method, status, "
        "error code, duration_s from arrival, client name, worker URL, contract revision), written in "
        "batches about every 0.5 s; lines past a full buffer are dropped and counted "
        "(fleetplane_access_log_dropped_total)",
    )
    parser.add_argument(
        "--worker-api-key",
        default=None,
        metavar="KEY",
        help="sent to every worker as Authorization: Bearer KEY (SGLang's --api-key; shows in ps: "
        "prefer the environment or --worker-api-key-file)",
    )
    parser.add_argument(
        "--worker-api-key-file",
        default=None,
        metavar="FILE",
        help="read --worker-api-key from FILE (not with --worker-api-key)",
    )
    parser.add_argument(
        "--listen-tls-cert",
        default=None,
        metavar="FILE",
        help="serve HTTPS with this certificate chain (PEM; with --listen-tls-key): HTTP/2 or "
        "HTTP/1.1 chosen by ALPN",
    )
    parser.add_argument(
        "--listen-tls-key", default=None, metavar="FILE", help="private key of --listen-tls-cert (PEM)"
    )
    parser.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="URL",
        help="http://H:P or h2c://H:P (repeatable; standalone mode)",
    )
    parser.add_argument(
        "--override-sampling-params",
        default=None,
        metavar="JSON",
        help='the sampling contract in standalone mode, e.g. \'{"temperature": 1, "top_k": {"min": 1, "max": 50}}\'',
    )
    parser.add_argument(
        "--sampling-param-conflict",
        default=None,
        choices=["reject", "allow"],
        help="conflict policy of --override-sampling-params (default reject)",
    )
    parser.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="PATH=DIALECT",
        help="judge an extra or moved engine route by a dialect (repeatable), e.g. /ollama/chat=ollama; "
        "dialects: " + ", ".join(DIALECTS),
    )
    parser.add_argument(
        "--unjudged-route",
        action="append",
        default=[],
        metavar="PATH",
        help="forward one more path to the workers without judging it (repeatable; every path not "
        "in the route table is refused with 404 route_not_found)",
    )
    parser.add_argument(
        "--policy", default="least_load", choices=[p.value for p in Policy], help="worker selection"
    )
    parser.add_argument(
        "--max-concurrency", default=256, type=_whole, metavar="N", help="requests in flight at once"
    )
    parser.add_argument(
        "--queue-size", default=100, type=_whole, metavar="N", help="requests waiting for a slot (0: none)"
    )
    parser.add_argument(
        "--queue-timeout-s", default=60.0, type=_seconds, metavar="S", help="longest wait for a slot"
    )
    parser.add_argument(
        "--request-timeout-s",
        default=1800.0,
        type=_seconds,
        metavar="S",
        help="longest exchange with a worker, body included",
    )
    parser.add_argument(
        "--max-body-bytes", default=32 * MIB, type=_whole, metavar="N", help="largest request body"
    )
    # SPEC §5: a worker that fails repeatedly is ejected and probed back (``fleet.health``, ``fleet.probing``).
    defaults = HealthPolicy()
    parser.add_argument(
        "--eject-after-failures",
        default=defaults.eject_after_failures,
        type=_whole,
        metavar="N",
        help="consecutive transport failures (unreachable, dropped, timed out) that eject a worker",
    )
    parser.add_argument(
        "--health-probe-interval-s",
        default=defaults.probe_interval_s,
        type=_seconds,
        metavar="S",
        help="first GET /health probe of an ejected worker after S; doubling while it fails",
    )
    parser.add_argument(
        "--health-probe-max-interval-s",
        default=None,
        type=_seconds,
        metavar="S",
        help=f"longest wait between two probes of an ejected worker (default {defaults.probe_interval_max_s:g}, "
        "or --health-probe-interval-s when that is longer)",
    )
    parser.add_argument(
        "--health-probe-timeout-s",
        default=defaults.probe_timeout_s,
        type=_seconds,
        metavar="S",
        help="a probe not answered 2xx within S fails",
    )
    parser.add_argument(
        "--processes",
        default=1,
        type=_whole,
        metavar="N",
        help="router processes sharing the port (SO_REUSEPORT); with --control-plane each reports "
        "as ID/0 .. ID/N-1 (one rollout entry per process; a restarted process keeps its id)",
    )
    parser.add_argument(
        "--router-id",
        default=None,
        metavar="ID",
        help="name reported to the control plane (default HOST-PID; with --processes N: ID/SLOT)",
    )
    # Request body memory, modelled on Envoy's overload manager and its
    # per_connection_buffer_limit_bytes (dataplane.http.limits).
    parser.add_argument(
        "--max-buffered-body-bytes",
        default=None,
        type=_whole,
        metavar="N",
        help="request body bytes held at once across all connections (bodies still arriving and "
        "requests not yet answered; past it the largest bodies still arriving are refused 503 "
        "buffers_full); default the larger of 256 MiB and --max-connection-body-bytes",
    )
    parser.add_argument(
        "--max-connection-body-bytes",
        default=None,
        type=_whole,
        metavar="N",
        help="request body bytes one connection may have in transit (h2: all its streams; the "
        "windows advertised are no larger); default --max-body-bytes",
    )
    # A hung worker (SIGSTOP, deadlock) must not hold requests for --request-timeout-s.
    upstream = UpstreamTimeouts()
    parser.add_argument(
        "--upstream-ttfb-timeout-s",
        default=upstream.first_byte_s,
        type=_seconds,
        metavar="S",
        help="longest wait for a worker's response head (a non-streaming answer's head comes with "
        "the whole answer); 504 upstream_timeout, counted as a worker failure",
    )
    parser.add_argument(
        "--upstream-idle-timeout-s",
        default=upstream.idle_s,
        type=_seconds,
        metavar="S",
        help="longest silence of a worker while its answer is relayed (an SSE stream ends with an "
        "error event); counted as a worker failure",
    )
    parser.add_argument(
        "--health-check-interval-s",
        default=defaults.check_interval_s,
        type=_seconds,
        metavar="S",
        help="GET /health of every worker in rotation every S; --eject-after-failures failed checks "
        "in a row eject it and time out its stalled requests (0: off)",
    )
    parser.add_argument(
        "--counts-journal",
        default=None,
        metavar="FILE|off",
        help="with --control-plane: the file where rejection counts are written before each 400, so "
        "a router killed with SIGKILL and restarted with the same --router-id reports them (default: "
        "a file named after --router-id in a private per-user directory; none without --router-id)",
    )


def build_parser(prog: str = "fleetplane router") -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog=prog,
        description="fleetplane router: OpenAI-compatible front door (HTTP/1.1 and h2c on one port)",
    )
    add_arguments(parser)
    return parser


def parse_listen(value: str, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); port 0 allowed."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise SettingsError(
            f"{flag} {value!r}: expected HOST:PORT with PORT in 0..65535, e.g. 127.0.0.1:8080"
        )
    return host, int(port)


def _positive(flag: str, value: float, *, allow_zero: bool = False) -> None:
    if not (value >= 0 if allow_zero else value > 0) or value != value:
        bound = "0 or more" if allow_zero else "more than 0"
        raise SettingsError(f"{flag} {value!r}: must be {bound}")


def _check_router_id(router_id: str, processes: int) -> None:
    # The control plane refuses a report whose id is empty or longer than 256 characters (SPEC
    # §6): refused there, the router would reconnect forever; refused here, it is one line.
    limit = MAX_ROUTER_ID_CHARS - (len(f"/{processes - 1}") if processes > 1 else 0)
    if not router_id or not router_id.isprintable() or any(c.isspace() for c in router_id):
        raise SettingsError(f"--router-id {router_id!r}: must be non-empty, printable, without spaces")
    if len(router_id) > limit:
        raise SettingsError(f"--router-id {router_id[:20]!r}...: at most {limit} characters")


def _token(token: str | None, token_file: str | None) -> str | None:
    """``--token``, or the contents of ``--token-file`` less one trailing newline (out of ``ps``)."""
    if token_file is None:
        return token
    if token is not None:
        raise SettingsError("--token/--token-file: give one of them, not both")
    try:
        text = Path(token_file).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SettingsError(f"--token-file {token_file!r}: cannot read ({reason})") from None
    if not text or not text.isprintable() or " " in text:
        raise SettingsError(f"--token-file {token_file!r}: must hold one token, printable without spaces")
    return text


def _access_log(sink: str) -> str | None:
    if sink == "off":
        return None
    if sink == "on":
        return "stderr"  # the log's plain switch; a file named "on" would surprise everyone
    if not sink:
        raise SettingsError(f"--access-log {sink!r}: give off, on (stderr), stderr, or the FILE to append to")
    return sink


def _api_keys(path: str | None) -> ClientKeys | None:
    """The clients of ``--api-keys FILE`` (the error names the file and the problem, never a key)."""
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SettingsError(f"--api-keys {path!r}: cannot read ({reason})") from None
    try:
        return parse_api_keys(text)
    except ApiKeysError as exc:
        raise SettingsError(f"--api-keys {path!r}: {exc}") from None


def _worker_api_key(key: str | None, key_file: str | None) -> str | None:
    """``--worker-api-key`` or the contents of ``--worker-api-key-file`` (the key is never shown)."""
    try:
        return read_key("--worker-api-key", key, "--worker-api-key-file", key_file)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def _listen_tls(cert: str | None, key: str | None) -> tuple[Path | None, Path | None]:
    if (cert is None) != (key is None):
        given, missing = (
            ("--listen-tls-cert", "--listen-tls-key") if cert else ("--listen-tls-key", "--listen-tls-cert")
        )
        raise SettingsError(f"{given} {cert or key!r}: needs {missing} too")
    if cert is None or key is None:
        return None, None
    for flag, value in (("--listen-tls-cert", cert), ("--listen-tls-key", key)):
        if not Path(value).is_file():
            raise SettingsError(f"{flag} {value!r}: no such file")
    return Path(cert), Path(key)


def settings_from_args(args: argparse.Namespace) -> RouterSettings:
    """Validate the parsed flags (raises ``SettingsError``)."""
    host, port = parse_listen(args.listen)
    workers = tuple(args.worker or ())
    for url in workers:
        try:
            WorkerAddress.parse(url)
        except WorkerUrlError as exc:
            raise SettingsError(f"--worker {exc}") from None
    control_plane: tuple[str, ...] = ()
    if args.control_plane:
        control_plane = parse_control_plane(args.control_plane)
        # A mix gRPC cannot resolve in one channel, or addresses with TLS: a startup error here,
        # before --processes starts any child.
        check_replicas(control_plane, tls=bool(args.tls_ca or args.tls_cert))
        if workers:
            raise SettingsError(
                "--worker: not allowed with --control-plane (workers come from the control plane)"
            )
        if args.override_sampling_params is not None or args.sampling_param_conflict is not None:
            raise SettingsError(
                "--override-sampling-params/--sampling-param-conflict: not allowed with --control-plane "
                "(contracts come from the control plane)"
            )
    elif any(v is not None for v in (args.token, args.token_file, args.tls_ca, args.tls_cert, args.tls_key)):
        raise SettingsError(
            "--token/--token-file/--tls-ca/--tls-cert/--tls-key: only meaningful with --control-plane"
        )
    contract = None
    if args.override_sampling_params is not None:
        try:
            contract = parse_contract_json(
                args.override_sampling_params, args.sampling_param_conflict or "reject"
            )
        except ContractError as exc:
            raise SettingsError(
                f"--override-sampling-params {args.override_sampling_params!r}: {exc.message}"
            ) from None
    elif args.sampling_param_conflict is not None:
        raise SettingsError(
            f"--sampling-param-conflict {args.sampling_param_conflict!r}: requires --override-sampling-params"
        )
    routes = build_route_table(args.route, args.unjudged_route)
    for flag, value in (
        ("--max-concurrency", args.max_concurrency),
        ("--processes", args.processes),
        ("--max-body-bytes", args.max_body_bytes),
        ("--eject-after-failures", args.eject_after_failures),
    ):
        if value < 1:
            raise SettingsError(f"{flag} {value}: must be at least 1")
    if args.router_id is not None:
        _check_router_id(args.router_id, args.processes)
    per_connection = args.max_connection_body_bytes or args.max_body_bytes
    if per_connection < args.max_body_bytes:
        raise SettingsError(
            f"--max-connection-body-bytes {per_connection}: must be at least --max-body-bytes ({args.max_body_bytes})"
        )
    buffered = args.max_buffered_body_bytes or max(256 * MIB, per_connection)
    if buffered < per_connection:
        raise SettingsError(
            f"--max-buffered-body-bytes {buffered}: must be at least --max-connection-body-bytes "
            f"(or --max-body-bytes) ({per_connection})"
        )
    _positive("--queue-size", args.queue_size, allow_zero=True)
    _positive("--queue-timeout-s", args.queue_timeout_s)
    _positive("--request-timeout-s", args.request_timeout_s)
    _positive("--health-probe-interval-s", args.health_probe_interval_s)
    _positive("--health-probe-timeout-s", args.health_probe_timeout_s)
    _positive("--upstream-ttfb-timeout-s", args.upstream_ttfb_timeout_s)
    _positive("--upstream-idle-timeout-s", args.upstream_idle_timeout_s)
    _positive("--health-check-interval-s", args.health_check_interval_s, allow_zero=True)
    probe_max_s = args.health_probe_max_interval_s
    if probe_max_s is None:
        probe_max_s = max(HealthPolicy().probe_interval_max_s, args.health_probe_interval_s)
    elif not probe_max_s >= args.health_probe_interval_s:
        raise SettingsError(
            f"--health-probe-max-interval-s {probe_max_s!r}: must be at least "
            f"--health-probe-interval-s ({args.health_probe_interval_s!r})"
        )
    if args.counts_journal not in (None, "off") and args.processes > 1:
        raise SettingsError(
            f"--counts-journal {args.counts_journal!r}: one file cannot serve --processes "
            f"{args.processes} (each process keeps its own by default; or off)"
        )
    if args.counts_journal == "off":
        counts_journal = None
    elif args.counts_journal is not None:
        counts_journal = args.counts_journal
    else:
        # A default id (HOST-PID) is never restarted under the same name: nothing to hand over.
        counts_journal = (
            default_journal_path(args.router_id, ",".join(sorted(control_plane)))
            if args.router_id and control_plane
            else None
        )
    listen_tls_cert, listen_tls_key = _listen_tls(args.listen_tls_cert, args.listen_tls_key)
    return RouterSettings(
        listen_tls_cert=listen_tls_cert,
        listen_tls_key=listen_tls_key,
        api_keys=_api_keys(args.api_keys),
        access_log=_access_log(args.access_log),
        worker_api_key=_worker_api_key(args.worker_api_key, args.worker_api_key_file),
        listen_host=host,
        listen_port=port,
        workers=workers,
        contract=contract,
        policy=Policy(args.policy),
        max_concurrency=args.max_concurrency,
        queue_size=args.queue_size,
        queue_timeout_s=args.queue_timeout_s,
        request_timeout_s=args.request_timeout_s,
        max_body_bytes=args.max_body_bytes,
        processes=args.processes,
        router_id=args.router_id or f"{socket.gethostname()}-{os.getpid()}",
        control_plane=control_plane,
        token=_token(args.token, args.token_file),
        tls_ca=Path(args.tls_ca) if args.tls_ca else None,
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        routes=routes,
        max_buffered_body_bytes=buffered,
        max_connection_body_bytes=per_connection,
        counts_journal=counts_journal,
        upstream=UpstreamTimeouts(
            first_byte_s=args.upstream_ttfb_timeout_s, idle_s=args.upstream_idle_timeout_s
        ),
        health=HealthPolicy(
            check_interval_s=args.health_check_interval_s,
            eject_after_failures=args.eject_after_failures,
            probe_interval_s=args.health_probe_interval_s,
            probe_interval_max_s=probe_max_s,
            probe_timeout_s=args.health_probe_timeout_s,
        ),
    )
