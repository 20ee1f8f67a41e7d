"""``python -m controlplane`` as a process: listening line, restart durability, signals, startup errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.control_plane import ROOT, ControlPlaneProcess


def _update(target: str, scope: str) -> pb.Contract:
    params = {"temperature": pb.ParamSpec(exact=1.0)}  # the contract {"temperature": 1}
    policy = pb.CONFLICT_POLICY_REJECT
    with grpc.insecure_channel(target) as channel:
        stub = contract_pb2_grpc.ContractServiceStub(channel)
        req = pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, allow_missing=True)
        return stub.UpdateContract(req, timeout=5).contract


def test_sigterm_exits_zero_and_a_restart_keeps_contracts_and_revision(tmp_path: Path):
    """SIGTERM stops with exit 0; the next start continues the revision; a second one is refused."""
    cp = ControlPlaneProcess(store_path=tmp_path / "state" / "control.db")
    with cp:
        assert _update(cp.target, "*").revision == 1
        assert _update(cp.target, "llama").revision == 2
        assert cp.stop() == 0
        cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            listed = contract_pb2_grpc.ContractServiceStub(channel).ListContracts(pb.ListContractsRequest())
        assert listed.revision == 2 and [c.scope for c in listed.contracts] == ["*", "llama"]
        assert _update(cp.target, "*").revision == 3
        code, err = _startup_error(
            "--listen", "127.0.0.1:0", "--store", f"sqlite:{cp.store_path}", "--http-listen", "off"
        )
        assert code == 2 and "--store" in err and "in use by another control plane" in err
        changes = [json.loads(line) for line in cp.log_lines if "contract_changed" in line]
        assert changes[-1] | {"timestamp": ""} == {
            "change": "update", "scope": "*", "version": 2, "revision": 3, "author": "anonymous",
            "comment": "", "event": "contract_changed", "level": "info", "timestamp": "",
        }  # fmt: skip


def _startup_error(*flags: str) -> tuple[int, str]:
    # Never a default port (50051, 9464): a control plane or `fleetplane up` running on this
    # machine holds them, and "--listen ...: cannot bind" would come before the error under test.
    defaults = [
        a
        for pair in (("--listen", "127.0.0.1:0"), ("--http-listen", "off"))
        if pair[0] not in flags
        for a in pair
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "controlplane", *defaults, *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.returncode, proc.stderr.strip()


def test_startup_errors_exit_non_zero_with_one_line_naming_the_flag(tmp_path: Path):
    """A malformed or unreachable etcd store, non-loopback without tokens, a taken port: exit 2 and
    one line naming the flag."""
    store = f"sqlite:{tmp_path / 'c.db'}"
    code, err = _startup_error("--store", "etcd://127.0.0.1", "--http-listen", "off")
    assert code == 2 and err.count("\n") == 0 and "--store" in err and "etcd" in err
    code, err = _startup_error("--store", "etcd://127.0.0.1:1/p", "--http-listen", "off")  # nothing listens
    assert code == 2 and "--store etcd://127.0.0.1:1/p" in err.splitlines()[-1]
    code, err = _startup_error("--listen", "0.0.0.0:0", "--store", store, "--http-listen", "off")
    assert code == 2 and "--listen" in err and "--auth-tokens" in err
    code, err = _startup_error("--listen", "127.0.0.1:0", "--store", store, "--http-listen", "0.0.0.0:0")
    assert code == 2 and err.count("\n") == 0
    assert err.startswith("fleetplane control: --http-listen '0.0.0.0:0'") and "--auth-tokens" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = _startup_error("--listen", f"127.0.0.1:{port}", "--store", store, "--http-listen", "off")
        assert code == 2 and "--listen" in err and str(port) in err.splitlines()[-1]
        code, err = _startup_error(
            "--listen", "127.0.0.1:0", "--store", store, "--http-listen", f"127.0.0.1:{port}"
        )
        assert code == 2 and "--http-listen" in err.splitlines()[-1]


def test_listens_on_a_given_ipv6_loopback_port(tmp_path: Path) -> None:
    """--listen [::1]:PORT (a fixed port, so the pre-bind check runs) starts and answers there."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            port = int(probe.getsockname()[1])
    except OSError:
        pytest.skip("no IPv6 loopback (::1) on this machine")
    with ControlPlaneProcess("--listen", f"[::1]:{port}", store_path=tmp_path / "c.db") as cp:
        assert _update(f"[::1]:{port}", "llama").version == 1
        assert cp.port == port
