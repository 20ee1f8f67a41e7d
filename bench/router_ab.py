"""Two checkouts of the router side by side against one engine-sim and the floor, cells alternating.

    .venv/bin/python bench/router_ab.py --tree before=/tmp/main-copy --tree after=. --stream --rounds 6

For a before → after figure on this shared machine, where one ``bench/router_floor.py`` run
against another moves by ±0.3x with the other processes: every tree's router (compiled form,
``FLEETPLANE_FORM=compiled``: run ``scripts/build_mypyc.sh`` in each tree first; ``--plain`` for
the source form) and the floor (``bench/floor_proxy.py``) serve the same HTTP/1.1 engine-sim, and
one wrk cell of each follows the other, ``--rounds`` times. Every router has the contract of
``bench/router_floor.py`` (``--override-sampling-params``: judged and spliced) but no control
plane; ``--access-log`` gives each its access log (a file in the run's directory), as
bench/router_floor.py does; ``--openai-headers`` sends the official openai client's 17 headers
instead of 3; ``--rejections`` sends the routers a request the contract refuses (``"temperature":
3``: the router answers 400 itself) while the floor forwards the plain one. Runs inside a loopback-only network namespace, as bench/router_floor.py does
(``--no-netns`` to skip). Printed: router CPU µs per request (``/proc`` schedstat of the process
tree), the median over the cells and each cell, and that over the floor's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import OPENAI_CLIENT_HEADERS, chat_body, cpu_seconds  # noqa: E402
from bench.procs import PY, Proc, free_port, in_loopback_namespace, spawn, wait_http, wait_port  # noqa: E402
from bench.router_floor import _PLAIN_HEADERS, CONTRACT, MODEL, _engine, _wrk  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR, a checkout (repeatable)")
    parser.add_argument("--stream", action="store_true", help="the chat request streamed (16 SSE events)")
    parser.add_argument("--plain", action="store_true", help="the source form instead of the compiled one")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--access-log", action="store_true", help="every router writes its access log")
    parser.add_argument(
        "--rejections", action="store_true", help="the routers get a request the contract refuses (400)"
    )
    parser.add_argument(
        "--openai-headers", action="store_true", help="the official openai client's 17 request headers, not 3"
    )
    parser.add_argument("--no-netns", action="store_true", help="run in the current network namespace")
    args = parser.parse_args()
    if not args.no_netns and (code := in_loopback_namespace()) is not None:
        return code
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        return 2
    logs = Path(tempfile.mkdtemp(prefix="router-ab-"))
    (logs / "model").mkdir()
    env = dict(os.environ, FLEETPLANE_FORM="plain" if args.plain else "compiled")
    procs: dict[str, Proc] = {}
    sim = _engine("sim", logs, logs / "model")
    try:
        wait_http(sim, "/health")
        worker = f"http://127.0.0.1:{sim.port}"
        for spec in args.tree:
            name, tree = spec.split("=", 1)
            port = free_port()
            argv = [PY, "-m", "dataplane", "--listen", f"127.0.0.1:{port}", "--worker", worker]
            argv += ["--max-concurrency", "1024", "--override-sampling-params", CONTRACT]
            if args.access_log:
                argv += ["--access-log", str(logs / f"{name}.access.jsonl")]
            procs[name] = spawn(name, argv, port, logs, env, cwd=Path(tree).resolve())
        port = free_port()
        floor = [
            PY,
            str(ROOT / "bench" / "floor_proxy.py"),
            "--listen",
            f"127.0.0.1:{port}",
            "--worker",
            worker,
        ]
        procs["floor"] = spawn("floor", floor, port, logs)
        for name, p in procs.items():
            if name == "floor":
                wait_port(p)
            else:
                wait_http(p, "/health")
        body = chat_body(MODEL, stream=args.stream, size=1024, max_tokens=16)
        # The contract's band is 0..1.5: the routers refuse this one; the floor forwards ``body``.
        refused = body.replace(b'"model":', b'"temperature":3,"model":', 1)
        sent = {name: refused if args.rejections and name != "floor" else body for name in procs}
        headers = OPENAI_CLIENT_HEADERS if args.openai_headers else _PLAIN_HEADERS
        for name, p in procs.items():  # warm-up: connections, pools, caches
            _wrk(p.port, sent[name], args.connections, 1, headers)
        cells: dict[str, list[float]] = {name: [] for name in procs}
        for _ in range(args.rounds):
            for name, p in procs.items():
                cpu0 = cpu_seconds(p.popen.pid)
                rejected = args.rejections and name != "floor"
                ok, _rps, _errors = _wrk(
                    p.port, sent[name], args.connections, args.duration_s, headers, rejected
                )
                cells[name].append((cpu_seconds(p.popen.pid) - cpu0) / max(ok, 1) * 1e6)
    finally:
        for p in procs.values():
            p.stop()
        sim.stop()
    mode = ("stream" if args.stream else "plain") + (", rejected by the routers" if args.rejections else "")
    form = "plain" if args.plain else "compiled"
    print(
        f"router A/B — {mode}, {form} form, {'access log on, ' if args.access_log else ''}"
        f"{len(headers) + 2} request headers, {args.rounds} alternating {args.duration_s:g} s cells; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    floor_us = median(cells["floor"])
    print("| target | router CPU µs/req | vs floor | cells |")
    print("|---|---:|---:|---|")
    for name, values in cells.items():
        us = median(values)
        print(f"| {name} | {us:.1f} | {us / floor_us:.2f}x | {' '.join(f'{v:.1f}' for v in values)} |")
    shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
