"""Flags read FLEETPLANE_* environment variables; the command line wins (SPEC §1)."""

from __future__ import annotations

import argparse

import pytest

from controlplane.envflags import EnvArgumentParser, env_name, freeze_help


def _parser(environ: dict[str, str]) -> EnvArgumentParser:
    p = EnvArgumentParser(prog="t", environ=environ)
    p.add_argument("--max-body-bytes", type=int, default=10)
    p.add_argument("--worker", action="append", default=[])
    p.add_argument("--http2", action="store_true")
    p.add_argument("--policy", choices=["round_robin", "least_load"], default="least_load")
    return p


def test_env_name_is_upper_snake() -> None:
    """--max-body-bytes reads FLEETPLANE_MAX_BODY_BYTES."""
    assert env_name("--max-body-bytes") == "FLEETPLANE_MAX_BODY_BYTES"


def test_environment_sets_defaults_and_flags_win() -> None:
    """An environment value is used unless the flag is on the command line."""
    env = {
        "FLEETPLANE_MAX_BODY_BYTES": "99",
        "FLEETPLANE_HTTP2": "true",
        "FLEETPLANE_WORKER": "http://a,http://b",
    }
    ns = _parser(env).parse_args([])
    assert (ns.max_body_bytes, ns.http2, ns.worker) == (99, True, ["http://a", "http://b"])
    assert _parser(env).parse_args(["--max-body-bytes", "5"]).max_body_bytes == 5


def test_bad_environment_value_exits_naming_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    """An environment value outside the allowed choices is a startup error naming the variable."""
    with pytest.raises(SystemExit) as exc:
        _parser({"FLEETPLANE_POLICY": "random"}).parse_args([])
    assert exc.value.code == 2
    assert "FLEETPLANE_POLICY='random'" in capsys.readouterr().err


def test_repeatable_flag_on_the_command_line_replaces_the_environment_list() -> None:
    """FLEETPLANE_WORKER=a,b with --worker c gives [c]: the flag wins, lists are not merged."""
    env = {"FLEETPLANE_WORKER": "http://a,http://b"}
    assert _parser(env).parse_args(["--worker", "http://c"]).worker == ["http://c"]
    assert _parser(env).parse_args([]).worker == ["http://a", "http://b"]


def test_bad_environment_value_is_ignored_when_the_flag_is_given() -> None:
    """An invalid FLEETPLANE_POLICY does not matter when --policy is on the command line."""
    ns = _parser({"FLEETPLANE_POLICY": "random"}).parse_args(["--policy", "round_robin"])
    assert ns.policy == "round_robin"


def test_parse_errors_are_one_line_naming_flag_and_value(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad flag value exits 2 with one line on stderr (no usage block) naming flag and value."""
    with pytest.raises(SystemExit) as exc:
        _parser({}).parse_args(["--policy", "random"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("t: ") and "--policy" in err and "'random'" in err and "least_load" in err


def test_help_shows_defaults_but_not_missing_ones() -> None:
    """--help prints real defaults; a flag without one gets no "(default: None)" noise."""
    p = EnvArgumentParser(prog="t", environ={})
    p.add_argument("--max-body-bytes", type=int, default=10, help="limit")
    p.add_argument("--worker", action="append", default=[], help="url")
    p.add_argument("--router-id", default=None, help="name")
    text = p.format_help()
    assert "(default: 10)" in text
    assert "(default: None)" not in text and "(default: [])" not in text


def test_help_names_each_flags_environment_variable() -> None:
    """--help shows FLEETPLANE_<FLAG> next to each long flag, with or without a help text."""
    p = EnvArgumentParser(prog="t", environ={})
    p.add_argument("--max-body-bytes", type=int, default=10, help="limit")
    p.add_argument("--router-id", default=None)
    p.add_argument("--hidden", default=None, help=argparse.SUPPRESS)
    text = " ".join(p.format_help().split())
    assert "limit [env FLEETPLANE_MAX_BODY_BYTES] (default: 10)" in text
    assert "--router-id ROUTER_ID [env FLEETPLANE_ROUTER_ID]" in text
    assert "FLEETPLANE_HIDDEN" not in text


def test_help_never_prints_a_secret_from_the_environment() -> None:
    """--help with FLEETPLANE_TOKEN set says a token is set, never the token itself."""
    p = EnvArgumentParser(prog="t", environ={"FLEETPLANE_TOKEN": "s3cret-value"})
    p.add_argument("--token", default=None, help="bearer token")
    text = " ".join(p.format_help().split())
    assert "s3cret-value" not in text
    assert "bearer token [env FLEETPLANE_TOKEN] (set from the environment)" in text
    assert p.parse_args([]).token == "s3cret-value"


def test_help_says_nothing_of_the_environment_when_the_secret_is_not_set() -> None:
    """Without FLEETPLANE_TOKEN, --token's help is its text and variable name, no "(set from ...)"."""
    p = EnvArgumentParser(prog="t", environ={})
    p.add_argument("--token", default=None, help="bearer token")
    text = " ".join(p.format_help().split())
    assert "bearer token [env FLEETPLANE_TOKEN]" in text and "set from the environment" not in text


def test_frozen_help_keeps_the_default_and_never_a_secret() -> None:
    """A flag's help frozen before its default is suppressed (a subcommand's copy of a flag) still
    shows the default; a secret set from the environment shows as set, its value never."""
    p = EnvArgumentParser(prog="t", environ={"FLEETPLANE_TOKEN": "s3cret-value"})
    actions = [
        p.add_argument("--token", default=None, help="bearer token"),
        p.add_argument("--timeout-s", default=10.0),
    ]
    for action in actions:
        freeze_help(action)
        action.default = argparse.SUPPRESS
    text = " ".join(p.format_help().split())
    assert "s3cret-value" not in text and "SUPPRESS" not in text
    assert "bearer token [env FLEETPLANE_TOKEN] (set from the environment)" in text
    assert "[env FLEETPLANE_TIMEOUT_S] (default: 10.0)" in text
