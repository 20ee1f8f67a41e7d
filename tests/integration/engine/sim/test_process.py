"""engine-sim as a process, as the independent checks drive it: flags, /server_info, load on the wire."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.fakes.engine_sim import ROOT, EngineSim, free_port_range, kv_endpoint_with_free_load_ports
from tests.fakes.sim_http import Http

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def wildcard_to(host: str, advertised: str) -> str:
    return host if advertised in ("*", "0.0.0.0", "::") else advertised


@pytest.mark.parametrize("protocol", ["http1", "h2c"])
async def test_load_on_the_wire_follows_requests_on_every_rank(protocol: str, load_watcher: Any) -> None:
    """dp-size 2 with auto: /server_info names the load ports; each rank's running/waiting rise and fall."""
    flags = [
        "--dp-size", "2",
        "--load-publish-endpoint", "auto",
        "--kv-events-endpoint", kv_endpoint_with_free_load_ports(2),
        "--max-running-requests", "1",
        "--decode-tokens-per-s", "40",
    ]  # fmt: skip
    if protocol == "h2c":
        flags.append("--http2")
    async with EngineSim(*flags) as sim, Http(sim.url, protocol) as http:
        info = (await http.get("/server_info")).json()
        kv = info["kv_events"]
        assert info["dp_size"] == 2 and info["enable_http2"] is (protocol == "h2c")
        assert kv["load_topic"] == "load" and kv["dp_size"] == 2
        watcher = load_watcher(
            wildcard_to("127.0.0.1", kv["endpoint_host"]), kv["load_endpoint_port_base"], 2
        )
        # Idle: the heartbeat keeps coming, every rank reports zero load and its own rank, in SGLang
        # 0.5.23's eleven positions (nothing waits, nothing was prefilled yet, a limit of 1).
        await watcher.collect(1.5)
        for rank in (0, 1):
            assert watcher.frames[rank], f"no heartbeat from rank {rank}"
            capacity = info["max_total_num_tokens"]
            assert watcher.latest(rank) == ["LoadStat", 0, 0, 0, capacity, rank, 0, 0, 1, 0, 0]
            seqs = [seq for seq, _ in watcher.frames[rank]]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        # Busy: 6 requests of 8 tokens at 40 tok/s, one running slot per rank -> queues on both.
        batch = asyncio.gather(
            *(http.post("/v1/chat/completions", {**CHAT, "max_tokens": 8}) for _ in range(6))
        )
        peak = {0: (0, 0, 0), 1: (0, 0, 0)}
        while not batch.done():
            await watcher.collect(0.02)
            for rank in (0, 1):
                latest = watcher.latest(rank)
                assert latest is not None
                peak[rank] = max(peak[rank], (latest[1], latest[2], latest[3]))
        replies = await batch
        assert all(reply.status == 200 for reply in replies)
        for rank in (0, 1):
            running, waiting, tokens = peak[rank]
            assert running == 1 and waiting >= 1 and tokens > 0, (rank, peak)
        # Drained: the next frames say zero again.
        await watcher.collect(0.3)
        for rank in (0, 1):
            assert watcher.latest(rank)[1:4] == [0, 0, 0]


async def test_explicit_load_endpoint_is_advertised_and_publishes(load_watcher: Any) -> None:
    """--load-publish-endpoint tcp://*:PORT binds rank r at PORT + r and /server_info says so."""
    base = free_port_range(2)
    async with EngineSim("--dp-size", "2", "--load-publish-endpoint", f"tcp://*:{base}") as sim:
        kv = sim.get_json("/server_info")["kv_events"]
        assert kv["load_endpoint_port_base"] == base and kv["load_topic"] == "load"
        watcher = load_watcher("127.0.0.1", base, 2)
        for _ in range(100):
            await watcher.collect(0.02)
            if all(watcher.frames.values()):
                break
        assert watcher.latest(0)[5] == 0 and watcher.latest(1)[5] == 1  # attn_dp_rank


async def test_openai_client_chat_completions_and_streams() -> None:
    """The official openai client works for chat, completions and streaming against engine-sim."""
    openai = pytest.importorskip("openai")
    async with EngineSim("--model", "sim-x") as sim:
        client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
        try:
            models = await client.models.list()
            assert [m.id for m in models.data] == ["sim-x"]
            chat = await client.chat.completions.create(
                model="sim-x", messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0.5
            )
            assert chat.choices[0].message.content is not None
            assert len(chat.choices[0].message.content.split()) == 4
            assert chat.usage is not None and chat.usage.completion_tokens == 4
            comp = await client.completions.create(model="sim-x", prompt="hello", max_tokens=3)
            assert comp.choices[0].text.split() == ["sim", "lorem", "ipsum"]
            stream = await client.chat.completions.create(
                model="sim-x",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=5,
                stream=True,
                stream_options={"include_usage": True},
            )
            pieces, usage = [], None
            async for chunk in stream:
                pieces += [c.delta.content or "" for c in chunk.choices]
                usage = chunk.usage or usage
            assert len("".join(pieces).split()) == 5
            assert usage is not None and usage.completion_tokens == 5
            cstream = await client.completions.create(model="sim-x", prompt="x", max_tokens=2, stream=True)
            texts = [c.choices[0].text async for c in cstream if c.choices]
            assert "".join(texts).split() == ["sim", "lorem"]
        finally:
            await client.close()


def run_sim(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataplane.engine.sim", "--listen", "127.0.0.1:0", *flags],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=20,
    )


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--load-publish-endpoint", "tcp://127.0.0.1:7000"], ["--load-publish-endpoint", "not a wildcard"]),
        (["--load-publish-endpoint", "tcp://*:5557"], ["--load-publish-endpoint", "overlap"]),
        (["--load-publish-endpoint", "auto", "--kv-events-endpoint", "tcp://*:65535"], ["past port 65535"]),
        (["--load-publish-endpoint", "bogus"], ["--load-publish-endpoint", "'bogus'", "off, auto"]),
        (["--dp-size", "0"], ["--dp-size", "'0'", "integer in 1..256"]),
        (["--decode-tokens-per-s", "-1"], ["--decode-tokens-per-s", "'-1'", ">= 0"]),
        (["--listen", "nowhere"], ["--listen", "'nowhere'", "HOST:PORT"]),
        (["--model-path", "/does/not/exist"], ["--model-path", "existing local directory"]),
    ],
)
def test_startup_errors_are_one_line(flags: list[str], words: list[str]) -> None:
    """A bad flag exits non-zero with one stderr line naming flag, value and what is allowed."""
    done = run_sim(*flags)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert "listening" not in done.stdout


def test_port_in_use_is_a_startup_error() -> None:
    """A --listen port already taken fails at startup naming --listen."""
    with EngineSim() as sim:
        done = subprocess.run(
            [sys.executable, "-m", "dataplane.engine.sim", "--listen", f"127.0.0.1:{sim.port}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert done.returncode == 2 and done.stderr.startswith("engine-sim: --listen 127.0.0.1:")


def test_environment_variables_set_flags() -> None:
    """FLEETPLANE_<FLAG> variables configure engine-sim; a flag on the command line wins."""
    env = {**os.environ, "FLEETPLANE_DP_SIZE": "3", "FLEETPLANE_MODEL": "env-model"}
    with EngineSim("--model", "flag-model", env=env) as sim:
        info = sim.get_json("/server_info")
    assert info["dp_size"] == 3 and info["served_model_name"] == "flag-model"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_a_clean_exit(sig: signal.Signals) -> None:
    """SIGTERM and SIGINT stop engine-sim with exit code 0 and remove its temp model dir."""
    sim = EngineSim().start()
    model_path = sim.get_json("/get_model_info")["model_path"]
    assert os.path.isdir(model_path)
    os.kill(sim.pid, sig)
    assert sim._proc is not None and sim._proc.wait(10) == 0
    assert not os.path.exists(model_path)


def test_load_port_taken_is_a_startup_error() -> None:
    """A load port already bound by another engine fails startup naming --load-publish-endpoint."""
    kv = kv_endpoint_with_free_load_ports(1)
    with EngineSim("--load-publish-endpoint", "auto", "--kv-events-endpoint", kv):
        done = run_sim("--load-publish-endpoint", "auto", "--kv-events-endpoint", kv)
    assert done.returncode == 2
    assert done.stderr.startswith("engine-sim: --load-publish-endpoint 'auto': cannot bind")


def test_fleetplane_engine_sim_is_the_same_program() -> None:
    """`fleetplane engine-sim` runs engine-sim with its flags (here: a one-line refusal)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from controlplane.cli.main import main; main()",
            "engine-sim",
            "--dp-size",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "engine-sim: argument --dp-size: must be an integer in 1..256, got '0'"
