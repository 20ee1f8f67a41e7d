"""The ``fleetplane`` console script run as a process, its output captured (SPEC §1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.process import ROOT

COMMAND = [sys.executable, "-c", "import sys; from controlplane.cli.main import main; sys.exit(main())"]


def fleetplane(
    *args: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | str = ROOT,
    timeout_s: float = 40,
) -> subprocess.CompletedProcess[str]:
    """Run ``fleetplane ARGS`` (the console script's entry point) in ``cwd`` and capture its output."""
    return subprocess.run(
        [*COMMAND, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
