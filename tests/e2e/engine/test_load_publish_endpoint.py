"""``--load-publish-endpoint off|auto|tcp://*:PORT`` as an operator meets it (SPEC §7, §1).

Refusals happen at startup: non-zero exit, one stderr line naming the flag and the value with
the reason, nothing listening. A resolved range is advertised in ``/server_info`` as
``kv_events.load_endpoint_port_base`` + ``kv_events.load_topic = "load"``, and only then.
The replay range cannot be set on engine-sim (SPEC §1 has no flag for it): its rules are checked
on the resolver an engine embeds, in tests/unit/engine/test_replay_range.py.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from tests.fakes.load_reader import LoadReader
from tests.fakes.sim_process import Sim, free_ports, run_sim


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--load-publish-endpoint", "tcp://localhost:7100"], "wildcard"),
        (["--load-publish-endpoint", "tcp://127.0.0.1:7100"], "wildcard"),
        (["--load-publish-endpoint", "tcp://*:5558", "--dp-size", "2"], "overlap"),
        (["--load-publish-endpoint", "tcp://*:5556", "--dp-size", "2"], "overlap"),
        (["--load-publish-endpoint", "tcp://*:65535", "--dp-size", "2"], "65535"),
        (
            ["--load-publish-endpoint", "auto", "--kv-events-endpoint", "tcp://*:65534", "--dp-size", "2"],
            "65535",
        ),
        (["--load-publish-endpoint", "auto", "--kv-events-endpoint", "tcp://127.0.0.1:7200"], "wildcard"),
        (["--load-publish-endpoint", "tcp://:::7100"], "tcp://*:PORT"),
        (["--load-publish-endpoint", "tcp://*:0"], "tcp://*:PORT"),
        (["--load-publish-endpoint", "tcp://*:70000"], "tcp://*:PORT"),
        (["--load-publish-endpoint", "udp://*:7100"], "tcp://*:PORT"),
        (["--load-publish-endpoint", "ipc:///tmp/audit-load"], "tcp://*:PORT"),
    ],
)
def test_refusals_are_one_line_at_startup(flags: list[str], reason: str) -> None:
    """Every SPEC §7 refusal: exit non-zero before listening, one line with flag, value and reason."""
    done = run_sim(*flags)
    value = flags[flags.index("--load-publish-endpoint") + 1]
    assert done.returncode != 0
    assert "listening" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--load-publish-endpoint" in lines[0] and value in lines[0] and reason in lines[0], lines[0]


def test_auto_at_the_last_ports_is_accepted() -> None:
    """auto with the range ending exactly at 65535 is fine (only *past* 65535 is refused)."""
    with Sim("--load-publish-endpoint", "auto", "--kv-events-endpoint", "tcp://*:65534") as sim:
        kv = sim.get("/server_info")["kv_events"]
    assert kv["load_endpoint_port_base"] == 65535 and kv["load_topic"] == "load"


def test_off_advertises_no_load_range() -> None:
    """Off (the default, and spelled out in any case): kv_events has no load keys."""
    for flags in ([], ["--load-publish-endpoint", "off"], ["--load-publish-endpoint", "OFF"]):
        with Sim(*flags) as sim:
            kv = sim.get("/server_info")["kv_events"]
        assert kv is not None
        assert "load_endpoint_port_base" not in kv and "load_topic" not in kv, kv


def test_auto_is_kv_port_plus_dp_size_and_publishes_there(readers: Callable[[list[str]], LoadReader]) -> None:
    """auto with dp-size 3: base = KV port + 3, and each rank's frames arrive on base + rank."""
    kv_port = free_ports(6)
    with Sim(
        "--dp-size", "3", "--load-publish-endpoint", "auto", "--kv-events-endpoint", f"tcp://*:{kv_port}"
    ) as sim:  # fmt: skip
        kv = sim.get("/server_info")["kv_events"]
        assert kv["load_endpoint_port_base"] == kv_port + 3
        assert kv["load_topic"] == "load" and kv["dp_size"] == 3 and kv["endpoint_port_base"] == kv_port
        reader = readers([f"tcp://127.0.0.1:{kv_port + 3 + r}" for r in range(3)])
        assert reader.wait(lambda: all(reader.frames.values()), 10.0), reader.frames
        assert [reader.latest(r)[5] for r in range(3)] == [0, 1, 2]  # type: ignore[index]


def test_explicit_ipv6_wildcard_is_accepted_and_reachable_over_ipv6(
    readers: Callable[[list[str]], LoadReader],
) -> None:
    """tcp://[::]:PORT is a wildcard: accepted, advertised, and an IPv6 subscriber receives frames."""
    base = free_ports(2)
    with Sim("--dp-size", "2", "--load-publish-endpoint", f"tcp://[::]:{base}", listen="[::1]:0") as sim:
        kv = sim.get("/server_info")["kv_events"]
        assert kv["load_endpoint_port_base"] == base
        reader = readers([f"tcp://[::1]:{base}", f"tcp://[::1]:{base + 1}"])
        assert reader.wait(lambda: all(reader.frames.values()), 10.0)


def loopback_only(port: int) -> bool:
    """Is ``port`` reachable on 127.0.0.1 but not on 127.0.0.2 (i.e. bound to 127.0.0.1, not 0.0.0.0)?"""

    def reachable(host: str) -> bool:
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            return False

    return reachable("127.0.0.1") and not reachable("127.0.0.2")


def test_load_publishers_listen_on_the_listen_host_only() -> None:
    """SPEC §1 "every listener defaults to loopback": the load ports too, like HTTP and KV events."""
    kv_port = free_ports(4)
    with Sim(
        "--dp-size", "2", "--load-publish-endpoint", "auto", "--kv-events-endpoint", f"tcp://*:{kv_port}"
    ) as sim:  # fmt: skip
        if not loopback_only(sim.port):
            pytest.skip("127.0.0.2 reaches 127.0.0.1 listeners on this host")
        assert loopback_only(kv_port) and loopback_only(kv_port + 1)
        assert loopback_only(kv_port + 2), "load publisher of rank 0 listens on every interface"
        assert loopback_only(kv_port + 3), "load publisher of rank 1 listens on every interface"
