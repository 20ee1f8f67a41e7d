"""`fleetplane control` startup as a black box (SPEC §1): one stderr line naming flag and value, exit != 0."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.control_plane import ROOT


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def _control(*flags: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "controlplane", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stderr.strip().splitlines()


# (flags, the flag the line must name); TAKEN is replaced by a port another socket listens on.
CASES: list[tuple[list[str], str]] = [
    (["--listen", "0.0.0.0:0"], "--listen"),
    (["--listen", "nonsense"], "--listen"),
    (["--listen", "127.0.0.1:TAKEN"], "--listen"),
    (["--http-listen", "127.0.0.1:TAKEN"], "--http-listen"),
    (["--store", "mysql://x"], "--store"),
    (["--store", "sqlite:/proc/no/such/dir/c.db"], "--store"),
    (["--auth-tokens", "TMP/missing.json"], "--auth-tokens"),
    (["--auth-tokens", "TMP/tokens.json"], "--auth-tokens"),
    (["--tls-cert", "TMP/c.pem"], "--tls-cert TMP/c.pem: needs --tls-key"),
    (["--tls-key", "TMP/k.pem"], "--tls-key TMP/k.pem: needs --tls-cert"),
    (["--tls-client-ca", "TMP/ca.pem"], "--tls-client-ca TMP/ca.pem"),
    (["--tls-cert", "TMP/c.pem", "--tls-key", "TMP/k.pem"], "--tls-"),
    (["--load-stale-after-s", "0"], "--load-stale-after-s"),
    (["--load-push-interval-ms", "0"], "--load-push-interval-ms"),
    (["--load-push-interval-ms", "soon"], "--load-push-interval-ms"),
]


@pytest.mark.parametrize(("flags", "flag"), CASES)
def test_a_startup_error_is_one_line_naming_the_flag(
    tmp_path: Path, taken_port: int, flags: list[str], flag: str
) -> None:
    """A bad flag value exits non-zero with exactly one stderr line naming the flag."""
    (tmp_path / "tokens.json").write_text("[]")
    flags = [f.replace("TAKEN", str(taken_port)).replace("TMP", str(tmp_path)) for f in flags]
    store = f"sqlite:{tmp_path / 'c.db'}"
    defaults = [
        a for pair in (("--store", store), ("--http-listen", "off")) if pair[0] not in flags for a in pair
    ]
    code, lines = _control("--listen", "127.0.0.1:0", *defaults, *flags)
    assert code != 0
    assert len(lines) == 1 and flag.replace("TMP", str(tmp_path)) in lines[0], lines


def test_environment_values_are_flags_too(tmp_path: Path) -> None:
    """FLEETPLANE_LISTEN / FLEETPLANE_LOAD_STALE_AFTER_S are read, and refused by the flag's rule."""
    store = f"sqlite:{tmp_path / 'c.db'}"
    code, lines = _control("--store", store, "--http-listen", "off", env={"FLEETPLANE_LISTEN": "0.0.0.0:0"})
    assert code == 2 and len(lines) == 1 and "--listen" in lines[0] and "0.0.0.0:0" in lines[0]
    code, lines = _control(
        "--listen",
        "127.0.0.1:0",
        "--store",
        store,
        env={"FLEETPLANE_HTTP_LISTEN": "off", "FLEETPLANE_LOAD_STALE_AFTER_S": "-1"},
    )
    assert code == 2 and len(lines) == 1 and "--load-stale-after-s" in lines[0]


def test_unusable_tls_files_are_one_line_naming_them(tmp_path: Path, pki: Path) -> None:
    """A key that is not the certificate's, or a CA file with no certificate, is one line naming the flag."""
    base = ["--listen", "127.0.0.1:0", "--http-listen", "off", "--store", f"sqlite:{tmp_path / 'c.db'}"]
    code, lines = _control(*base, "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "client.key"))
    assert code == 2 and len(lines) == 1 and "--tls-key" in lines[0] and "client.key" in lines[0], lines
    code, lines = _control(
        *base,
        "--tls-cert", str(pki / "server.pem"),
        "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "server.ext"),
    )  # fmt: skip
    assert code == 2 and len(lines) == 1 and "--tls-client-ca" in lines[0], lines
