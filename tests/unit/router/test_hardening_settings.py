"""The router's hardening flags -> settings (body memory, upstream timeouts, health checks, counts
journal): defaults, derived values and one-line startup errors (SPEC §1)."""

from __future__ import annotations

import pytest

from dataplane.router.process.journal import default_journal_path
from dataplane.router.settings import RouterSettings, SettingsError, build_parser, settings_from_args
from dataplane.router.upstream.base import UpstreamTimeouts

MIB = 1024 * 1024


def _settings(*argv: str) -> RouterSettings:
    return settings_from_args(build_parser().parse_args(list(argv)))


def test_body_memory_defaults_follow_max_body_bytes() -> None:
    """Per connection: --max-body-bytes; in all: the larger of 256 MiB and the per-connection value."""
    s = _settings()
    assert (s.max_connection_body_bytes, s.max_buffered_body_bytes) == (32 * MIB, 256 * MIB)
    s = _settings("--max-body-bytes", str(512 * MIB))
    assert (s.max_connection_body_bytes, s.max_buffered_body_bytes) == (512 * MIB, 512 * MIB)
    s = _settings("--max-buffered-body-bytes", str(64 * MIB), "--max-connection-body-bytes", str(40 * MIB))
    assert (s.max_connection_body_bytes, s.max_buffered_body_bytes) == (40 * MIB, 64 * MIB)


def test_upstream_timeouts_and_health_checks() -> None:
    """First byte within 300 s, silence at most 120 s, checks every 2 s by default; flags set them,
    a check interval of 0 turns checks off."""
    s = _settings()
    assert s.upstream == UpstreamTimeouts(first_byte_s=300.0, idle_s=120.0)
    assert s.health.check_interval_s == 2.0
    s = _settings(
        "--upstream-ttfb-timeout-s", "5", "--upstream-idle-timeout-s", "7.5", "--health-check-interval-s", "0"
    )
    assert (s.upstream.first_byte_s, s.upstream.idle_s, s.health.check_interval_s) == (5.0, 7.5, 0.0)


def test_counts_journal_follows_the_router_id() -> None:
    """No journal without --router-id (a default id is never restarted) or without a control plane;
    with both, a file named after them in the default directory; off and an explicit file too."""
    cp = ("--control-plane", "127.0.0.1:50051")
    assert _settings(*cp).counts_journal is None
    assert _settings("--router-id", "edge").counts_journal is None
    assert _settings(*cp, "--router-id", "edge").counts_journal == default_journal_path("edge", cp[1])
    assert _settings(*cp, "--router-id", "edge", "--counts-journal", "off").counts_journal is None
    assert _settings(*cp, "--counts-journal", "/var/lib/r.counts").counts_journal == "/var/lib/r.counts"


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (
            ["--counts-journal", "/x.counts", "--processes", "2"],
            ["--counts-journal", "'/x.counts'", "--processes 2"],
        ),
        (["--upstream-ttfb-timeout-s", "0"], ["--upstream-ttfb-timeout-s", "0", "more than 0"]),
        (["--upstream-idle-timeout-s", "-1"], ["--upstream-idle-timeout-s", "-1", "more than 0"]),
        (["--health-check-interval-s", "-1"], ["--health-check-interval-s", "-1", "0 or more"]),
        (
            ["--max-connection-body-bytes", "1000"],
            ["--max-connection-body-bytes", "1000", "at least --max-body-bytes (33554432)"],
        ),
        (
            ["--max-buffered-body-bytes", "1000"],
            ["--max-buffered-body-bytes", "1000", "at least --max-connection-body-bytes"],
        ),
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
