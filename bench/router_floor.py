"""fleetplane with every feature on against the floor of a Python router, in one run.

    python bench/router_floor.py [--duration-s 2] [--rounds 3] [--connections 32] [--only NAME,...]

Needs wrk (``apt-get install -y wrk``) and, for the h2c front door, h2load (``apt-get install -y
nghttp2-client``); the peers rows need ``.bench-venv`` (see bench/router_peers.py). Runs inside a
loopback-only network namespace (``unshare -n``, re-executing itself; ``--no-netns`` to skip)
with ``HF_HUB_OFFLINE=1``, so the peers cannot reach any hub.

Targets, all up at once, measured in alternating rounds (medians; this 2-core machine is shared):

- ``floor``: ``bench/floor_proxy.py`` (a featureless uvloop + httptools hop) to one HTTP/1.1
  engine-sim; every ratio divides by its CPU per request, plain by plain, streaming by streaming.
  With ``--floor-workers 2`` it serves fp h1→h1's two engines (client connections in turn, each
  pinned to one): with paced decoding, a proxy in front of two engines whose decode steps do not
  line up wakes for fewer events at a time than one in front of one engine (7 % more CPU per
  request for the floor itself at 32 connections), which is the fleet's shape, not the router's
  work;
- ``fp h1→h1``: ``python -m dataplane`` subscribed to a real control plane (SQLite store) that
  holds two HTTP/1.1 engine-sims (load publishers on: ``least_load`` scores their engine load on
  every request) and a fleet contract that checks and injects (``temperature`` band with a
  default, ``top_p`` injected: every request is judged and spliced), ``--router-id`` (its counts
  journal), metrics (always on), the access log (into the run's log directory);
- ``fp h1→h2c``: the same with two ``engine-sim --http2`` workers (its own control plane);
- ``fp h2c→h1``: ``fp h1→h1`` driven by h2load over h2c prior knowledge (one stream at a time
  per connection, as wrk does);
- ``fp h1→h1 -p2``: ``fp h1→h1`` with ``--processes 2`` (throughput at N = 2 on 2 cores);
- ``… mypyc``: each fp target again in the compiled form, the one users run (``scripts/bootstrap.sh``
  builds it; ``FLEETPLANE_FORM=compiled``), from this tree or from ``--compiled-tree DIR`` (a
  checkout where ``scripts/build_mypyc.sh`` ran); the fp rows without it run the plain form
  (``FLEETPLANE_FORM=plain``), the reference; ``--no-compiled`` leaves the mypyc rows out;
- ``vllm-router`` / ``sglang-router`` (PyPI, ``.bench-venv``) in front of the two HTTP/1.1
  engines, when installed.

``--rejections`` adds a mode where every fp request carries ``"temperature": 3``, which the
contract refuses: the router answers 400 ``sampling_contract_violation`` itself (counted, and
journaled before the answer goes out), and the floor forwards its plain request as before (the
peers, which hold no contract, are left out of it).

Load: 1 KiB chat body, ``max_tokens`` 16 (streaming: 16 SSE events + ``[DONE]``),
``--connections`` keep-alive connections for ``--duration-s`` per cell (wrk ``-d``; h2load
``-D``); each request carries Host, Content-Type and Content-Length, or with
``--openai-headers`` the 17 headers the official openai Python client sends. The engines decode
instantly: a stream's head, events and end leave in 5 writes back to back, and how many reads a
proxy takes them in depends on how soon it wakes (a busier proxy batches more). With
``--decode-tokens-per-s R`` each engine decodes one token per sequence every 1/R s, as batched
decode steps do: every event is its own read for every proxy (the per-event relay cost), and at
the few hundred requests a second this allows, the routers' background work (load views from
the control plane, status reports: ~10-15 ms/s) is a visible share of their CPU per request.

Printed: req/s, router CPU µs per request (``/proc`` schedstat of the router's process tree, all
threads, over the cell / answers), the kernel's part of it (``/proc`` stat's stime), the read
and write calls per request (``/proc`` io: how many pieces the proxy took the answer in), and
the CPU over the floor's.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import (  # noqa: E402
    OPENAI_CLIENT_HEADERS,
    chat_body,
    cpu_seconds,
    io_calls,
    kernel_seconds,
    wrk_script,
)
from bench.procs import (  # noqa: E402
    PEERS,
    PY,
    Proc,
    compiled_form_missing,
    control_plane,
    free_port,
    in_loopback_namespace,
    peer_argv,
    peer_env,
    publishing_engine,
    spawn,
    wait_http,
    wait_port,
)

MODEL = "sim-model"
# A band with a default (checked; injected when absent) and a value injected outright.
CONTRACT = '{"temperature": {"min": 0.0, "max": 1.5, "default": 0.7}, "top_p": 0.95}'


def _compiled_env(tree: Path) -> dict[str, str]:
    """The environment that imports ``dataplane`` from ``tree``, compiled (checked: its forwarder is the .so)."""
    why = compiled_form_missing(tree)
    if why is not None:
        raise SystemExit(f"{tree}: no current compiled form (run scripts/build_mypyc.sh there): {why}")
    return dict(os.environ, PYTHONPATH=str(tree), FLEETPLANE_FORM="compiled")


@dataclass
class Cell:
    rps: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    kernel_us: list[float] = field(default_factory=list)
    io_calls: list[float] = field(default_factory=list)
    errors: int = 0


# What every client sends besides Host and Content-Length (``--openai-headers``: the official
# openai client's 15).
_PLAIN_HEADERS: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


def _wrk(
    port: int,
    body: bytes,
    connections: int,
    duration_s: float,
    headers: Sequence[tuple[str, str]],
    rejected: bool = False,
) -> tuple[int, float, int]:
    """(answers as expected, req/s, errors): 2xx answers, or with ``rejected`` the others."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(wrk_script(body, headers))
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{max(1, round(duration_s))}s",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}/v1/chat/completions",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=duration_s + 30,
        ).stdout
    finally:
        os.unlink(script.name)
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors_m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    not_2xx = int(errors_m.group(1)) if errors_m else 0
    broken = sum(int(x) for x in socket_errors.groups()) if socket_errors else 0
    if rejected:
        return not_2xx, rps, requests - not_2xx + broken
    return requests - not_2xx, rps, not_2xx + broken


def _h2load(
    port: int,
    body: bytes,
    connections: int,
    duration_s: float,
    headers: Sequence[tuple[str, str]],
    rejected: bool = False,
) -> tuple[int, float, int]:
    """(answers as expected, req/s, errors): 2xx answers, or with ``rejected`` the 4xx ones."""
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as data:
        data.write(body)
    try:
        out = subprocess.run(
            [
                "h2load",
                "-c",
                str(connections),
                "-m",
                "1",
                "-D",
                str(max(1, round(duration_s))),
                "-d",
                data.name,
                # h2 has no Connection header (RFC 9113 §8.2.2)
                *(f"-H{name}: {value}" for name, value in headers if name.lower() != "connection"),
                f"http://127.0.0.1:{port}/v1/chat/completions",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=duration_s + 30,
        ).stdout
    finally:
        os.unlink(data.name)
    m = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out
    )
    assert m, out
    status = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1))  # type: ignore[union-attr]
    if rejected:
        assert status, out
        codes = [int(c) for c in status.groups()]
        return codes[2], rps, codes[0] + codes[1] + codes[3] + int(m.group(6))
    ok = int(status.group(1)) if status else int(m.group(4))
    # failed: not a 2xx answer; errored: the stream or connection broke
    return ok, rps, int(m.group(5)) + int(m.group(6))


def run(args: argparse.Namespace) -> int:
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        return 2
    logs = Path(tempfile.mkdtemp(prefix="router-floor-"))
    model_dir = logs / "model"
    model_dir.mkdir()
    only = set(args.only.split(",")) if args.only else None
    pace = args.decode_tokens_per_s
    procs: list[Proc] = []
    skipped: dict[str, str] = {}
    # name -> (router proc, port, client: "wrk" | "h2load")
    targets: dict[str, tuple[Proc, str]] = {}
    try:
        h1 = [publishing_engine(f"sim-h1-{i}", MODEL, logs, model_dir, pace) for i in range(2)]
        h2 = [publishing_engine(f"sim-h2-{i}", MODEL, logs, model_dir, pace, "--http2") for i in range(2)]
        procs += h1 + h2
        for e in h1:
            wait_http(e, "/health")
        for e in h2:
            wait_port(e)
        # Into procs at once, so the finally below stops them whatever fails next.
        for_h1, cp_h1 = control_plane("control-h1", h1, False, logs, CONTRACT)
        procs.append(for_h1)
        for_h2, cp_h2 = control_plane("control-h2c", h2, True, logs, CONTRACT)
        procs.append(for_h2)

        def want(name: str) -> bool:
            return only is None or name in only

        tree = args.compiled_tree or ROOT
        compiled = None if args.no_compiled else _compiled_env(tree)
        plain = dict(os.environ, FLEETPLANE_FORM="plain")

        def fleetplane(name: str, control: str, *extra: str, compiled_from: Path | None = None) -> Proc:
            port = free_port()
            argv = [PY, "-m", "dataplane", "--listen", f"127.0.0.1:{port}", "--control-plane", control]
            argv += ["--router-id", name.replace(" ", "-").replace("→", "-"), "--policy", "least_load"]
            # The access log on, into the run's log directory (one file per router: --processes
            # children append to the same one).
            access = logs / f"{name.replace(' ', '-').replace('→', '-')}.access.jsonl"
            argv += ["--max-concurrency", "1024", "--access-log", str(access), *extra]
            if compiled_from is None:
                return spawn(name, argv, port, logs, plain)
            return spawn(name, argv, port, logs, compiled, cwd=compiled_from)

        port = free_port()
        floor = spawn(
            "floor",
            [
                PY,
                str(ROOT / "bench" / "floor_proxy.py"),
                "--listen",
                f"127.0.0.1:{port}",
                *(f"--worker=http://127.0.0.1:{e.port}" for e in h1[: args.floor_workers]),
            ],
            port,
            logs,
        )
        procs.append(floor)
        targets["floor"] = (floor, "wrk")
        fp_h1 = fleetplane("fp h1→h1", cp_h1)
        procs.append(fp_h1)
        targets["fp h1→h1"] = (fp_h1, "wrk")
        if want("fp h1→h2c"):
            fp_h2 = fleetplane("fp h1→h2c", cp_h2)
            procs.append(fp_h2)
            targets["fp h1→h2c"] = (fp_h2, "wrk")
        if want("fp h2c→h1"):
            if shutil.which("h2load") is None:
                skipped["fp h2c→h1"] = "h2load not found: apt-get install -y nghttp2-client"
            else:
                targets["fp h2c→h1"] = (fp_h1, "h2load")
        if want("fp h1→h1 -p2"):
            fp_p2 = fleetplane("fp h1→h1 -p2", cp_h1, "--processes", "2")
            procs.append(fp_p2)
            targets["fp h1→h1 -p2"] = (fp_p2, "wrk")
        if compiled is not None:
            for name, (_, client) in list(targets.items()):
                if not name.startswith("fp"):
                    continue
                if client == "h2load":  # the same router as fp h1→h1, another client
                    targets[f"{name} mypyc"] = (targets["fp h1→h1 mypyc"][0], client)
                    continue
                extra = ("--processes", "2") if name.endswith("-p2") else ()
                control = cp_h2 if "h1→h2c" in name else cp_h1
                c = fleetplane(f"{name} mypyc", control, *extra, compiled_from=tree)
                procs.append(c)
                targets[f"{name} mypyc"] = (c, client)
        h1_urls = [f"http://127.0.0.1:{e.port}" for e in h1]
        for peer in ("vllm-router", "sglang-router"):
            if not want(peer):
                continue
            if not (PEERS / peer).exists():
                skipped[peer] = f"{PEERS.relative_to(ROOT) / peer} missing (see bench/router_peers.py)"
                continue
            port = free_port()
            argv = peer_argv(peer, port, h1_urls, "round_robin")
            p = spawn(peer, argv, port, logs, peer_env())
            procs.append(p)
            targets[peer] = (p, "wrk")
        for name, (p, _) in list(targets.items()):
            try:
                if p.name == "floor":
                    wait_port(p)
                else:
                    wait_http(p, "/v1/models" if p.name.startswith("fp") else "/health")
            except RuntimeError as exc:
                skipped[name] = f"{exc} (log in {logs})"
                del targets[name]
        time.sleep(1.5)  # the routers' first load views from the control planes

        cells: dict[tuple[str, str], Cell] = {}
        modes = {"both": ("plain", "stream"), "plain": ("plain",), "stream": ("stream",)}[args.modes]
        modes += ("reject",) if args.rejections else ()
        headers = OPENAI_CLIENT_HEADERS if args.openai_headers else _PLAIN_HEADERS
        plain_body = chat_body(MODEL, stream=False, size=1024, max_tokens=16)
        for mode in modes:
            body = chat_body(MODEL, stream=mode == "stream", size=1024, max_tokens=16)
            if mode == "reject":  # the contract's band is 0..1.5
                body = body.replace(b'"model":', b'"temperature":3,"model":', 1)
            # In the reject mode the floor forwards its plain request; the peers hold no contract.
            runs = {
                name: (p, client, plain_body if mode == "reject" and name == "floor" else body)
                for name, (p, client) in targets.items()
                if mode != "reject" or name == "floor" or name.startswith("fp")
            }
            for p, client, sent in runs.values():  # warm-up: connections, pools, caches
                (_h2load if client == "h2load" else _wrk)(p.port, sent, args.connections, 1, headers)
            for _ in range(args.rounds):
                for name, (p, client, sent) in runs.items():
                    cell = cells.setdefault((name, mode), Cell())
                    cpu0, kernel0 = cpu_seconds(p.popen.pid), kernel_seconds(p.popen.pid)
                    calls0 = io_calls(p.popen.pid)
                    ok, rps, errors = (_h2load if client == "h2load" else _wrk)(
                        p.port,
                        sent,
                        args.connections,
                        args.duration_s,
                        headers,
                        mode == "reject" and name != "floor",
                    )
                    cpu = cpu_seconds(p.popen.pid) - cpu0
                    kernel = kernel_seconds(p.popen.pid) - kernel0
                    calls = io_calls(p.popen.pid) - calls0
                    cell.rps.append(rps)
                    cell.cpu_us.append(cpu / max(ok, 1) * 1e6)
                    cell.kernel_us.append(kernel / max(ok, 1) * 1e6)
                    cell.io_calls.append(calls / max(ok, 1))
                    cell.errors += errors
    finally:
        for p in reversed(procs):
            p.stop()

    print(
        f"router floor — 1 KiB chat body, max_tokens 16, {len(headers) + 2} request headers, "
        f"{args.connections} connections, median of "
        f"{args.rounds} alternating {args.duration_s:g} s cells; "
        + (f"decode {pace:g} tokens/s per sequence; " if pace > 0 else "instant decode; ")
        + (f"the floor on {args.floor_workers} engines; " if args.floor_workers > 1 else "")
        + f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| target | mode | req/s | router CPU µs/req | of which kernel | reads+writes/req | vs floor | errors |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        floor_cpu = median(cells[("floor", mode)].cpu_us) if ("floor", mode) in cells else float("nan")
        for name in targets:
            if (name, mode) not in cells:
                continue
            cell = cells[(name, mode)]
            cpu = median(cell.cpu_us)
            print(
                f"| {name} | {mode} | {median(cell.rps):.0f} | {cpu:.1f} | "
                f"{median(cell.kernel_us):.1f} | {median(cell.io_calls):.1f} | {cpu / floor_cpu:.2f}x | {cell.errors} |"
            )
    for name, why in skipped.items():
        print(f"| {name} | — | not run: {why} | | | | | |")
    if args.keep_logs:
        print(f"logs: {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--modes", choices=("both", "plain", "stream"), default="both")
    parser.add_argument(
        "--decode-tokens-per-s",
        type=float,
        default=0.0,
        help="the engines' decode speed per sequence (0: instant); e.g. 1000 paces a stream's events 1 ms apart",
    )
    parser.add_argument(
        "--floor-workers",
        type=int,
        choices=(1, 2),
        default=1,
        help="the floor's engines: 1 (the issue's floor), or 2, fp h1→h1's own (client connections in turn)",
    )
    parser.add_argument("--only", default="", help="comma-separated targets besides floor and fp h1→h1")
    parser.add_argument(
        "--compiled-tree",
        type=lambda v: Path(v).resolve(),
        help="the mypyc rows from this checkout (where scripts/build_mypyc.sh ran) instead of this one",
    )
    parser.add_argument("--no-compiled", action="store_true", help="no mypyc rows (the plain form only)")
    parser.add_argument(
        "--rejections", action="store_true", help="also a mode whose fp requests the contract refuses (400)"
    )
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument(
        "--openai-headers",
        action="store_true",
        help="every client sends the 17 headers of the official openai client (bench.loadgen), not 3",
    )
    parser.add_argument("--no-netns", action="store_true", help="run in the current network namespace")
    args = parser.parse_args()
    if not args.no_netns and (code := in_loopback_namespace()) is not None:
        return code  # ran inside a loopback-only namespace: the peers cannot reach any hub
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
