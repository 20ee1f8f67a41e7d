"""engine-sim's flags (SPEC §1) and the frozen settings they produce.

Every flag also reads ``FLEETPLANE_<FLAG>`` (``EnvArgumentParser``). A bad value is a
startup error of one line naming the flag, the value and what is allowed (SPEC §1),
including the load-publisher endpoint refusals of SPEC §7.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from controlplane.envflags import LOG_LEVELS, EnvArgumentParser
from dataplane.engine.endpoints import KvEventSockets, LoadPubRange, kv_event_sockets, resolve_load_pub_range
from dataplane.engine.publisher import LOAD_PUBLISH_INTERVAL
from dataplane.engine.sim import costs as c
from dataplane.engine.sim.costs import StepCosts
from dataplane.engine.sim.lengths import AnswerLengths, AnswerLengthsError
from dataplane.errors import StartupError

PROG = "engine-sim"
DEFAULT_MODEL = "sim-model"
DEFAULT_KV_EVENTS_ENDPOINT = "tcp://*:5557"
# The KV page size advertised in /server_info's kv_events block (SGLang's page_size).
PAGE_SIZE = 16

# The step-time flags; without any, the calibrated model of ``costs`` (a realistic default: SPEC §7
# consumers watch load follow requests, an instant engine would never show any). Benchmarks of the
# router pass --decode-tokens-per-s 0 (instant).
_STEP_FLAGS = ("step_base_ms", "step_per_sequence_us", "step_per_kv_token_ns", "prefill_per_token_us")


@dataclass(frozen=True, slots=True)
class SimSettings:
    host: str
    port: int
    http2: bool
    model: str
    model_path: str | None
    dp_size: int
    kv_events_endpoint: str
    kv_events: KvEventSockets | None  # the KV events PUB sockets (none for a non-tcp endpoint)
    kv_events_explicit: bool  # given by flag or environment: a bind failure is a startup error
    load_publish_endpoint: str
    load_range: LoadPubRange | None
    max_running_requests: int
    max_total_tokens: int
    costs: StepCosts
    answer_lengths: str
    seed: int
    publish_interval: int
    tick_s: float
    log_level: int = 20
    api_key: str | None = field(default=None, repr=False)

    @property
    def decode_tokens_per_s(self) -> float:
        """One sequence's decode speed on an idle rank (0: instant)."""
        return self.costs.tokens_per_s_alone


class _Parser(EnvArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line on stderr (SPEC §1), not argparse's usage block.
        print(f"{PROG}: {message}", file=sys.stderr)
        raise SystemExit(2)


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    allowed = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
        return value

    return convert


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0 (0 = instant), got {text!r}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def _answer_lengths(text: str) -> str:
    try:
        AnswerLengths(text)
    except AnswerLengthsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _listen(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(
            f"must be HOST:PORT with a port in 0..65535 (IPv6 as [::1]:PORT), got {text!r}"
        )
    return host, int(port_text)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="A simulated SGLang-compatible engine (HTTP/1.1 or h2c).")
    p.add_argument("--listen", type=_listen, default="127.0.0.1:9001", help="HOST:PORT; port 0 = any")
    p.add_argument(
        "--http2",
        "--enable-http2",  # SGLang's spelling of the flag
        action="store_true",
        help="advertise enable_http2 (serve h2c prior knowledge)",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="served model name")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines written to stderr",
    )
    p.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="answer 401 to any request without Authorization: Bearer KEY (as SGLang's --api-key; "
        "every path, /health included)",
    )
    p.add_argument("--model-path", default=None, help="local model directory (default: a temp dir)")
    p.add_argument("--dp-size", type=_int_at_least(1, 256), default=1, help="data-parallel ranks")
    p.add_argument(
        "--kv-events-endpoint",
        default=None,
        help=f"KV events PUB base, one port per dp rank (default {DEFAULT_KV_EVENTS_ENDPOINT}; a wildcard "
        "host binds on --listen's host)",
    )
    p.add_argument(
        "--load-publish-endpoint", default="off", help="off | auto | tcp://*:PORT (one port per dp rank)"
    )
    p.add_argument("--max-running-requests", type=_int_at_least(1), default=256, help="per dp rank")
    p.add_argument("--max-total-tokens", type=_int_at_least(1), default=262144, help="KV pool per dp rank")
    p.add_argument(
        "--decode-tokens-per-s",
        type=_rate,
        default=None,
        help="a fixed decode speed per sequence whatever the batch, prefill free; 0 = instant "
        "(benchmarks); default: the step-time model below",
    )
    # The step-time model t = a + b*batch + c*kv_tokens (costs.py: calibrated to SGLang on an H100).
    p.add_argument(
        "--step-base-ms", type=_non_negative, default=None, help=f"a (default {c.DEFAULT_STEP_BASE_MS})"
    )
    p.add_argument(
        "--step-per-sequence-us",
        type=_non_negative,
        default=None,
        help=f"b, per running sequence (default {c.DEFAULT_STEP_PER_SEQUENCE_US})",
    )
    p.add_argument(
        "--step-per-kv-token-ns",
        type=_non_negative,
        default=None,
        help=f"c, per context token read (default {c.DEFAULT_STEP_PER_KV_TOKEN_NS})",
    )
    p.add_argument(
        "--prefill-per-token-us",
        type=_non_negative,
        default=None,
        help=f"per uncached prompt token (default {c.DEFAULT_PREFILL_PER_TOKEN_US})",
    )
    p.add_argument(
        "--chunked-prefill-size",
        type=_int_at_least(1),
        default=c.DEFAULT_CHUNKED_PREFILL_SIZE,
        help="prompt tokens per prefill step",
    )
    p.add_argument(
        "--answer-lengths",
        type=_answer_lengths,
        default="max",
        help="max | uniform | geometric:MEAN: where answers stop below max_tokens",
    )
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of the answer lengths")
    p.add_argument(
        "--load-snapshot-publish-interval",
        type=_int_at_least(1),
        default=LOAD_PUBLISH_INTERVAL,
        help="publish load at most every N decode steps (SGLang 0.5.23 defaults to 15)",
    )
    p.add_argument("--tick-ms", type=_int_at_least(1, 1000), default=5, help="scheduler loop period")
    return p


def parse_settings(argv: Sequence[str] | None = None) -> SimSettings:
    """Parse flags; raises :class:`StartupError` for values the flags' types cannot judge alone."""
    args = build_parser().parse_args(argv)
    host, port = args.listen if isinstance(args.listen, tuple) else _listen(args.listen)
    kv_endpoint = args.kv_events_endpoint or DEFAULT_KV_EVENTS_ENDPOINT
    load_range, reason = resolve_load_pub_range(
        kv_endpoint=kv_endpoint,
        replay_endpoint=None,
        dp_size=args.dp_size,
        load_publish_endpoint=args.load_publish_endpoint,
    )
    if reason is not None:
        raise StartupError(f"--load-publish-endpoint {args.load_publish_endpoint!r}: {reason}")
    if load_range is not None:
        # The range's host is always a wildcard; like the KV events sockets, it binds on the
        # --listen host: every listener defaults to loopback (SPEC §1), and consumers dial the
        # worker URL's host (SPEC §7), i.e. that same host. A wildcard --listen binds the wildcard.
        load_range = dataclasses.replace(load_range, host=host)
    costs = _costs(args)
    kv_events, reason = kv_event_sockets(kv_endpoint, args.dp_size, host)
    if reason is not None:
        raise StartupError(f"--kv-events-endpoint {kv_endpoint!r}: {reason}")
    return SimSettings(
        host=host,
        port=port,
        http2=args.http2,
        model=args.model,
        model_path=args.model_path,
        dp_size=args.dp_size,
        kv_events_endpoint=kv_endpoint,
        kv_events=kv_events,
        kv_events_explicit=args.kv_events_endpoint is not None,
        load_publish_endpoint=args.load_publish_endpoint,
        load_range=load_range,
        max_running_requests=args.max_running_requests,
        max_total_tokens=args.max_total_tokens,
        costs=costs,
        answer_lengths=args.answer_lengths,
        seed=args.seed,
        publish_interval=args.load_snapshot_publish_interval,
        tick_s=args.tick_ms / 1000.0,
        api_key=args.api_key,
        log_level=LOG_LEVELS[args.log_level],
    )


def _costs(args: argparse.Namespace) -> StepCosts:
    given = [name for name in _STEP_FLAGS if getattr(args, name) is not None]
    if args.decode_tokens_per_s is not None:
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise StartupError(
                f"--decode-tokens-per-s and {flag}: give a fixed decode speed or the step model"
            )
        return StepCosts.fixed_rate(args.decode_tokens_per_s)

    def value(name: str, default: float) -> float:
        given_value = getattr(args, name)
        return default if given_value is None else float(given_value)

    return StepCosts(
        value("step_base_ms", c.DEFAULT_STEP_BASE_MS) / 1e3,
        value("step_per_sequence_us", c.DEFAULT_STEP_PER_SEQUENCE_US) / 1e6,
        value("step_per_kv_token_ns", c.DEFAULT_STEP_PER_KV_TOKEN_NS) / 1e9,
        value("prefill_per_token_us", c.DEFAULT_PREFILL_PER_TOKEN_US) / 1e6,
        args.chunked_prefill_size,
    )
