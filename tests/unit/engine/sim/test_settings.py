"""engine-sim flag parsing: defaults, environment, one-line refusals (SPEC §1, §7)."""

from __future__ import annotations

import pytest

from dataplane.engine.endpoints import LoadPubRange
from dataplane.engine.sim.settings import build_parser, parse_settings
from dataplane.errors import StartupError


def test_defaults() -> None:
    """Defaults: loopback 9001, one rank, load publishing off, a realistic decode rate (load is visible)."""
    s = parse_settings([])
    assert (s.host, s.port, s.dp_size, s.load_range, s.decode_tokens_per_s) == (
        "127.0.0.1",
        9001,
        1,
        None,
        100.0,
    )
    assert s.kv_events_endpoint == "tcp://*:5557" and s.model == "sim-model" and not s.http2


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
