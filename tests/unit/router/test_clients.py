"""The ``--api-keys`` file: what is accepted, what each bad input is told, and who a request is."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from dataplane.errors import SettingsError
from dataplane.router.clients import ApiKeysError, parse_api_keys
from dataplane.router.settings import build_parser, settings_from_args

KEY_A = "sk-team-a-0123456789abcdef"
KEY_B = "sk-team-b-0123456789abcdef"


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "keys.json"
    path.write_text(text)
    return str(path)


def _args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(list(flags))


def test_a_valid_file_names_its_clients() -> None:
    """Each entry becomes a client name, in file order."""
    keys = parse_api_keys(json.dumps({"team-a": {"key": KEY_A}, "team-b": {"key": KEY_B}}))
    assert keys.names == ("team-a", "team-b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON (line 1 column 2"),
        ('["sk"]', 'must be a JSON object {"NAME": {"key": "..."}}'),
        ("{}", "names no client"),
        (json.dumps({"a": KEY_A}), """client 'a': must be an object {"key": "..."}"""),
        (json.dumps({"a": {}}), """client 'a': must be an object {"key": "..."}"""),
        (json.dumps({"a": {"key": 7}}), "client 'a': key must be a string"),
        (json.dumps({"a": {"key": "short"}}), "client 'a': key must be 16..4096 characters, has 5"),
        (json.dumps({"a": {"key": KEY_A + " x"}}), "client 'a': key must be printable ASCII without spaces"),
        (json.dumps({"a": {"key": KEY_A + "é"}}), "client 'a': key must be printable ASCII without spaces"),
        (json.dumps({"a": {"key": KEY_A, "rate": 3}}), "client 'a': unknown field 'rate' (only 'key')"),
        (json.dumps({"a b": {"key": KEY_A}}), "client name 'a b': must be 1..64 printable characters"),
        (json.dumps({"": {"key": KEY_A}}), "client name '': must be 1..64"),
        (json.dumps({"x" * 65: {"key": KEY_A}}), "must be 1..64 printable characters"),
        (json.dumps({"a": {"key": KEY_A}, "b": {"key": KEY_A}}), "clients 'a' and 'b' have the same key"),
        ('{"a": {"key": "' + KEY_A + '"}, "a": {"key": "' + KEY_B + '"}}', "client 'a' is named twice"),
    ],
)
def test_every_bad_file_gets_a_clear_error(text: str, message: str) -> None:
    """A bad key file is refused with a message saying what is wrong, and never echoing a key."""
    with pytest.raises(ApiKeysError) as info:
        parse_api_keys(text)
    assert message in str(info.value)
    assert KEY_A not in str(info.value) and KEY_B not in str(info.value)


def test_the_startup_error_names_the_flag_and_the_file(tmp_path: Path) -> None:
    """``--api-keys FILE`` errors name the flag and the file, then the problem."""
    path = _file(tmp_path, json.dumps({"a": {"key": "short"}}))
    with pytest.raises(SettingsError) as info:
        settings_from_args(_args("--api-keys", path))
    assert str(info.value) == f"--api-keys {path!r}: client 'a': key must be 16..4096 characters, has 5"
    missing = str(tmp_path / "absent.json")
    with pytest.raises(SettingsError) as info:
        settings_from_args(_args("--api-keys", missing))
    assert str(info.value) == f"--api-keys {missing!r}: cannot read (No such file or directory)"


def test_bearer_and_x_api_key_both_name_the_client() -> None:
    """``Authorization: Bearer KEY`` (OpenAI) and ``x-api-key: KEY`` (Anthropic) find the client; anything else does not."""
    keys = parse_api_keys(json.dumps({"team-a": {"key": KEY_A}, "team-b": {"key": KEY_B}}))
    assert keys.client_of([(b"authorization", b"Bearer " + KEY_B.encode())]) == "team-b"
    assert keys.client_of([(b"authorization", b"bearer " + KEY_A.encode())]) == "team-a"
    assert keys.client_of([(b"x-api-key", KEY_A.encode())]) == "team-a"
    assert keys.client_of([(b"authorization", b"Basic " + KEY_A.encode())]) is None
    assert keys.client_of([(b"authorization", b"Bearer " + KEY_A[:-1].encode())]) is None
    assert keys.client_of([(b"authorization", b"Bearer ")]) is None
    assert keys.client_of([]) is None
    assert keys.requests == {"team-a": 2, "team-b": 1}
    assert KEY_A not in repr(keys)
