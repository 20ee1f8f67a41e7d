"""engine-sim flag parsing: defaults, environment, one-line refusals (SPEC §1, §7)."""

from __future__ import annotations

import pytest

from dataplane.engine.endpoints import LoadPubRange
from dataplane.engine.sim.costs import StepCosts
from dataplane.engine.sim.settings import build_parser, parse_settings
from dataplane.errors import StartupError


def test_defaults() -> None:
    """Defaults: loopback 9001, one rank, load publishing off, the calibrated step model (load is
    visible), answers to max_tokens, SPEC §7's publish interval."""
    s = parse_settings([])
    assert (s.host, s.port, s.dp_size, s.load_range) == ("127.0.0.1", 9001, 1, None)
    assert s.costs == StepCosts() and s.costs.base_s == pytest.approx(0.00734)
    assert s.decode_tokens_per_s == pytest.approx(1 / (0.00734 + 0.000027))
    assert (s.answer_lengths, s.publish_interval, s.costs.chunked_prefill_size) == ("max", 5, 8192)
    assert s.kv_events_endpoint == "tcp://*:5557" and s.model == "sim-model" and not s.http2


def test_step_flags_set_the_model() -> None:
    """--step-* and --prefill-per-token-us set a, b, c and p; unset ones keep their defaults."""
    s = parse_settings(
        ["--step-base-ms", "20", "--step-per-kv-token-ns", "0", "--chunked-prefill-size", "512"]
    )
    assert s.costs == StepCosts(0.020, StepCosts().per_sequence_s, 0.0, StepCosts().prefill_per_token_s, 512)


def test_fixed_decode_rate_keeps_its_meaning() -> None:
    """--decode-tokens-per-s R: every sequence decodes R tokens/s whatever the batch; 0 is instant."""
    assert parse_settings(["--decode-tokens-per-s", "20"]).costs == StepCosts(0.05, 0.0, 0.0, 0.0)
    assert parse_settings(["--decode-tokens-per-s", "0"]).costs.is_instant


def test_fixed_rate_and_step_model_are_exclusive() -> None:
    """Both a fixed rate and a step flag is a startup error naming both."""
    with pytest.raises(StartupError, match="--decode-tokens-per-s and --step-base-ms"):
        parse_settings(["--decode-tokens-per-s", "20", "--step-base-ms", "5"])


def test_answer_lengths_and_publish_interval() -> None:
    """--answer-lengths takes max, uniform or geometric:MEAN; the interval follows its flag."""
    s = parse_settings(["--answer-lengths", "geometric:40", "--load-snapshot-publish-interval", "15"])
    assert (s.answer_lengths, s.publish_interval) == ("geometric:40", 15)


def test_auto_resolves_after_the_kv_range() -> None:
    """auto with dp-size 2 resolves to KV port + 2, bound on the --listen host (a wildcard only if it is one)."""
    flags = ["--dp-size", "2", "--load-publish-endpoint", "auto", "--kv-events-endpoint", "tcp://*:6000"]
    assert parse_settings(flags).load_range == LoadPubRange("127.0.0.1", 6002, 2)
    assert parse_settings([*flags, "--listen", "0.0.0.0:0"]).load_range == LoadPubRange("0.0.0.0", 6002, 2)
    assert parse_settings([*flags, "--listen", "[::1]:0"]).load_range == LoadPubRange("::1", 6002, 2)


def test_ipv6_listen() -> None:
    """--listen accepts a bracketed IPv6 host."""
    assert parse_settings(["--listen", "[::1]:0"]).host == "::1"


def test_refused_endpoint_names_flag_value_and_reason() -> None:
    """A refused load endpoint raises StartupError naming the flag and value."""
    with pytest.raises(StartupError, match=r"--load-publish-endpoint 'tcp://10\.0\.0\.1:7000': host"):
        parse_settings(["--load-publish-endpoint", "tcp://10.0.0.1:7000"])


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--dp-size", "x"], "--dp-size: must be an integer in 1..256, got 'x'"),
        (["--max-running-requests", "0"], "--max-running-requests: must be an integer >= 1, got '0'"),
        (["--decode-tokens-per-s", "nan"], "--decode-tokens-per-s: must be a number >= 0"),
        (["--listen", "1.2.3.4:99999"], "--listen: must be HOST:PORT"),
        (["--answer-lengths", "poisson"], "--answer-lengths: must be max, uniform or geometric:MEAN"),
        (["--answer-lengths", "geometric:0.5"], "--answer-lengths: geometric:MEAN needs a mean >= 1"),
        (["--step-base-ms", "-1"], "--step-base-ms: must be a number >= 0"),
    ],
)
def test_bad_values_exit_with_one_line(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse refusals print one 'engine-sim: ...' line and exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("engine-sim: ") and words in err[0]


def test_environment_fills_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """FLEETPLANE_* variables set flags that the command line does not."""
    monkeypatch.setenv("FLEETPLANE_DECODE_TOKENS_PER_S", "25")
    monkeypatch.setenv("FLEETPLANE_HTTP2", "true")
    assert build_parser().parse_args([]).decode_tokens_per_s == 25.0
    s = parse_settings(["--decode-tokens-per-s", "5"])
    assert s.decode_tokens_per_s == 5.0 and s.http2


def test_kv_events_sockets_follow_the_endpoint_and_the_listen_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KV events PUBs bind port + rank on --listen's host; only a flag or variable makes them required."""
    s = parse_settings(["--dp-size", "2", "--listen", "127.0.0.1:0"])
    assert s.kv_events is not None and s.kv_events.bind and not s.kv_events_explicit
    assert s.kv_events.endpoints == ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558")
    assert parse_settings(["--kv-events-endpoint", "tcp://*:6000"]).kv_events_explicit
    monkeypatch.setenv("FLEETPLANE_KV_EVENTS_ENDPOINT", "tcp://*:6100")
    s = parse_settings([])
    assert (
        s.kv_events_explicit
        and s.kv_events is not None
        and s.kv_events.endpoints == ("tcp://127.0.0.1:6100",)
    )


def test_kv_events_range_past_the_last_port_is_refused() -> None:
    """dp-size 2 on KV port 65535 is a StartupError naming --kv-events-endpoint."""
    with pytest.raises(StartupError, match=r"--kv-events-endpoint 'tcp://\*:65535': ports 65535..65536"):
        parse_settings(["--dp-size", "2", "--kv-events-endpoint", "tcp://*:65535"])
