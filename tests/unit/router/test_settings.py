"""``fleetplane router`` flags -> frozen settings, and the one-line startup errors (SPEC §1)."""

from __future__ import annotations

import pytest

from controlplane.contracts import ConflictPolicy
from dataplane.errors import SettingsError
from dataplane.router.balancer import Policy
from dataplane.router.fleet.health import HealthPolicy
from dataplane.router.settings import RouterSettings, build_parser, settings_from_args


def _settings(*argv: str, environ: dict[str, str] | None = None) -> RouterSettings:
    parser = build_parser()
    if environ is not None:
        from controlplane.envflags import EnvArgumentParser
        from dataplane.router.settings import add_arguments

        parser = EnvArgumentParser(prog="fleetplane router", environ=environ)
        add_arguments(parser)
    return settings_from_args(parser.parse_args(list(argv)))


def test_defaults() -> None:
    """Loopback listener, 32 MiB bodies, least_load, no contract."""
    s = _settings()
    assert (s.listen_host, s.listen_port, s.max_body_bytes) == ("127.0.0.1", 8080, 32 * 1024 * 1024)
    assert s.policy is Policy.LEAST_LOAD and s.contract is None and s.workers == ()


def test_contract_flags() -> None:
    """The contract JSON and conflict policy become one contract; port 0 and IPv6 are accepted."""
    s = _settings(
        "--listen",
        "[::1]:0",
        "--worker",
        "http://127.0.0.1:9001",
        "--override-sampling-params",
        '{"temperature": 1}',
        "--sampling-param-conflict",
        "allow",
    )
    assert (s.listen_host, s.listen_port) == ("::1", 0)
    assert s.contract is not None and s.contract.conflict is ConflictPolicy.ALLOW


def test_environment_variables() -> None:
    """Every flag also reads FLEETPLANE_<FLAG>."""
    s = _settings(environ={"FLEETPLANE_MAX_CONCURRENCY": "7", "FLEETPLANE_POLICY": "round_robin"})
    assert s.max_concurrency == 7 and s.policy is Policy.ROUND_ROBIN


def test_the_access_log_is_off_unless_given_a_sink() -> None:
    """Default and ``off``: no access log; ``on`` or ``stderr`` writes to stderr; a path (flag or
    environment) is the sink."""
    assert _settings().access_log is None
    assert _settings("--access-log", "off").access_log is None
    assert _settings("--access-log", "on").access_log == "stderr"
    assert _settings("--access-log", "stderr").access_log == "stderr"
    assert _settings(environ={"FLEETPLANE_ACCESS_LOG": "/var/log/a.jsonl"}).access_log == "/var/log/a.jsonl"


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--listen", "localhost"], ["--listen", "localhost", "HOST:PORT"]),
        (["--worker", "ftp://a:1"], ["--worker", "ftp://a:1", "http://HOST:PORT"]),
        (
            ["--override-sampling-params", '{"temperature": 3}'],
            ["--override-sampling-params", "temperature", "[0, 2]"],
        ),
        (["--override-sampling-params", "{}"], ["--override-sampling-params", "empty"]),
        (
            ["--sampling-param-conflict", "allow"],
            ["--sampling-param-conflict", "requires --override-sampling-params"],
        ),
        (
            [
                "--override-sampling-params",
                '{"top_k": {"min": 1, "max": 5}}',
                "--sampling-param-conflict",
                "allow",
            ],
            ["--override-sampling-params", "top_k"],
        ),
        (["--max-concurrency", "0"], ["--max-concurrency", "0", "at least 1"]),
        (["--queue-timeout-s", "0"], ["--queue-timeout-s", "more than 0"]),
        (["--control-plane", "127.0.0.1:50051", "--worker", "http://a:1"], ["--worker", "--control-plane"]),
        (["--eject-after-failures", "0"], ["--eject-after-failures", "0", "at least 1"]),
        (["--health-probe-interval-s", "0"], ["--health-probe-interval-s", "0", "more than 0"]),
        (["--health-probe-timeout-s", "-1"], ["--health-probe-timeout-s", "-1", "more than 0"]),
        (
            ["--health-probe-interval-s", "5", "--health-probe-max-interval-s", "2"],
            ["--health-probe-max-interval-s", "2", "at least --health-probe-interval-s (5.0)"],
        ),
        (["--router-id", ""], ["--router-id", "''", "non-empty"]),
        (["--access-log", ""], ["--access-log", "''", "off, on (stderr), stderr, or the FILE"]),
        (["--router-id", "edge a"], ["--router-id", "'edge a'", "without spaces"]),
        # The control plane takes ids up to 256 characters; with 3 processes "/2" is appended.
        (["--router-id", "r" * 255, "--processes", "3"], ["--router-id", "at most 254 characters"]),
    ],
)
def test_startup_errors_name_flag_value_and_rule(argv: list[str], names: list[str]) -> None:
    """Each refusal is one line naming the flag, the value and what is allowed."""
    with pytest.raises(SettingsError) as info:
        _settings(*argv)
    message = str(info.value)
    assert "\n" not in message
    for name in names:
        assert name in message, (name, message)


def test_health_flags_and_their_environment_forms() -> None:
    """Ejection threshold and probe timings come from flags or FLEETPLANE_* variables; defaults unchanged."""
    assert _settings().health == HealthPolicy()
    s = _settings(
        "--eject-after-failures",
        "5",
        "--health-probe-timeout-s",
        "0.5",
        environ={"FLEETPLANE_HEALTH_PROBE_INTERVAL_S": "0.25", "FLEETPLANE_EJECT_AFTER_FAILURES": "9"},
    )
    assert (s.health.eject_after_failures, s.health.probe_interval_s, s.health.probe_timeout_s) == (
        5,
        0.25,
        0.5,
    )
    assert s.health.probe_interval_max_s == HealthPolicy().probe_interval_max_s


def test_a_long_probe_interval_raises_the_default_cap() -> None:
    """--health-probe-interval-s above the 10 s default cap needs no --health-probe-max-interval-s."""
    s = _settings("--health-probe-interval-s", "60")
    assert (s.health.probe_interval_s, s.health.probe_interval_max_s) == (60.0, 60.0)


def test_several_control_plane_replicas_comma_separated_repeated_or_from_the_environment() -> None:
    """--control-plane takes a comma list, repeats, and FLEETPLANE_CONTROL_PLANE; order is kept."""
    given = _settings(
        "--control-plane", "10.0.0.1:50051, 10.0.0.2:50051", "--control-plane", "10.0.0.3:50051"
    )
    assert given.control_plane == ("10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051")
    env = _settings(environ={"FLEETPLANE_CONTROL_PLANE": "[::1]:1,[::1]:2"})
    assert env.control_plane == ("[::1]:1", "[::1]:2")
    assert _settings().control_plane == ()


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("10.0.0.1:50051,,10.0.0.2:50051", "empty address"),
        ("10.0.0.1", "expected HOST:PORT"),
        ("10.0.0.1:", "expected HOST:PORT"),
        ("10.0.0.1:0", "expected HOST:PORT"),
        ("10.0.0.1:65536", "expected HOST:PORT"),
        ("10.0.0.1:http", "expected HOST:PORT"),
        ("::1:50051", "in brackets"),
        ("[nope]:50051", "not an IPv6 address"),
        ("bad host:50051", "not a host name"),
        ("10.0.0.1:1,10.0.0.1:1", "given twice"),
        ("10.0.0.1:1,[::1]:1", "not a mix"),
        ("cp-a:1,cp-b:1", "one DNS name"),
        ("cp-a:1,10.0.0.1:1", "not a mix"),
    ],
)
def test_a_bad_control_plane_list_is_one_line_naming_the_flag_and_the_entry(value: str, needle: str) -> None:
    """Each bad --control-plane entry is a startup error naming the flag and what is allowed."""
    with pytest.raises(SettingsError, match="--control-plane") as caught:
        _settings("--control-plane", value)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_several_control_plane_addresses_with_tls_are_refused_before_any_process_starts() -> None:
    """--tls-ca with several addresses: one line naming --control-plane (one DNS name instead)."""
    with pytest.raises(SettingsError, match=r"--control-plane .*with TLS give one DNS name"):
        _settings("--control-plane", "10.0.0.1:1,10.0.0.2:1", "--tls-ca", "ca.pem")
    assert _settings("--control-plane", "cp.internal:1", "--tls-ca", "ca.pem").control_plane == (
        "cp.internal:1",
    )
