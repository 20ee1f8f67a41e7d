"""The issue 13 router flags -> settings: defaults, derived values and one-line startup errors."""

from __future__ import annotations

import pytest

from dataplane.router.settings import RouterSettings, SettingsError, build_parser, settings_from_args

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


@pytest.mark.parametrize(
    ("argv", "names"),
    [
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
