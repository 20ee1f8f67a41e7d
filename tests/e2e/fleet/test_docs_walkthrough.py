"""docs/getting-started.md and docs/contracts.md, run as a newcomer runs them: every `sh` and
`python` block, in order, against a real `fleetplane up`; where a block's output is shown (a `text`
block right after it), the output has those lines. Only the ports differ (free ones instead of
8080, 50051 and 9464, which may be taken on a test machine)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.ports import free_port
from tests.fakes.process import ROOT

pytestmark = pytest.mark.timeout(240)
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
# Set-up steps the test has done its own way: the venv exists, `up` runs on free ports.
DONE_ALREADY = ("./scripts/bootstrap.sh", ". .venv/bin/activate")


@dataclass
class Block:
    doc: str
    language: str
    code: str
    shown: str  # the text block that follows it, if any


def blocks(name: str) -> list[Block]:
    text = (DOCS / name).read_text()
    fences = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    found = []
    for i, (language, code, _, end) in enumerate(fences):
        if language not in ("sh", "python"):
            continue
        shown = ""
        if i + 1 < len(fences) and fences[i + 1][0] == "text" and text[end : fences[i + 1][2]].strip() == "":
            shown = fences[i + 1][1]
        found.append(Block(name, language, code, shown))
    return found


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`fleetplane up` on free ports; the doc's port numbers mapped to them."""
    router, control, http = free_port(), free_port(), free_port()
    workdir = tmp_path_factory.mktemp("walkthrough")
    out = (workdir / "up.out").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "controlplane.cli.main", "up", "--workdir", str(workdir / "fleet")),
            *("--router-port", str(router), "--control-port", str(control), "--http-port", str(http)),
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=workdir,
    )
    try:
        deadline = time.monotonic() + 60
        while "Ctrl-C stops everything" not in (workdir / "up.out").read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, (workdir / "up.out").read_text()
            time.sleep(0.1)
        yield {"8080": str(router), "50051": str(control), "9464": str(http)}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()


def _on_our_ports(text: str, ports: dict[str, str]) -> str:
    return re.sub(r"\b(8080|50051|9464)\b", lambda m: ports[m.group(1)], text)


def _run(block: Block, ports: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLEETPLANE_CONTROL_PLANE": f"127.0.0.1:{ports['50051']}",
    }
    code = _on_our_ports(block.code, ports)
    # -e as a careful reader stops at the first failing line; no pipefail: `... | head` ends its
    # writer with SIGPIPE, which an interactive shell (the reader's) does not count as a failure.
    argv = ["bash", "-e", "-c", code] if block.language == "sh" else [sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


WALK = [b for name in ("getting-started.md", "contracts.md") for b in blocks(name)]


def test_the_walkthrough_has_the_tour() -> None:
    """The tour runs curl, the OpenAI client, contract changes, stats, loads and the status page."""
    code = "\n".join(b.code for b in WALK)
    for step in (
        "curl -s",
        "from openai import OpenAI",
        "contract set",
        "--dry-run",
        "contract diff",
        "fleetplane stats",
        "fleetplane loads",
        "status.json",
    ):
        assert step in code, step


@pytest.mark.parametrize("index", range(len(WALK)), ids=[f"{b.doc}:{i}" for i, b in enumerate(WALK)])
def test_every_block_runs_as_written(ports: dict[str, str], index: int) -> None:
    """Each block exits 0 (blocks run in the order of the docs), and shows the output the doc shows."""
    block = WALK[index]
    if any(line.strip().startswith(DONE_ALREADY) for line in block.code.splitlines()):
        pytest.skip("set-up the test did itself (venv, `fleetplane up` on free ports)")
    done = _run(block, ports)
    assert done.returncode == 0, f"{block.code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    out = [" ".join(line.split()) for line in done.stdout.splitlines()]
    for line in _on_our_ports(block.shown, ports).splitlines():
        assert " ".join(line.split()) in out, f"{line!r} not in the output of {block.code}:\n{done.stdout}"
