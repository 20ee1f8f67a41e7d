"""The ``fleetplane`` console script run as a process, its output captured (SPEC §1)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.fakes.process import ROOT


def fleetplane(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``fleetplane ARGS`` (the console script's entry point) and capture its output."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from controlplane.cli.main import main; sys.exit(main())", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=40,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
