"""Which form of the hot modules runs: all compiled (mypyc) or all plain, as the run asked for.

scripts/build_mypyc.sh puts a .so next to each module of scripts/mypyc_modules.txt and Python then
imports the .so, not the .py: a forgotten build would silently test stale compiled code in place
of the source. ``FLEETPLANE_COMPILED=1`` (the CI step that builds them) asks for the compiled
form; without it every hot module must be the plain source.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _hot_modules() -> list[str]:
    lines = (ROOT / "scripts" / "mypyc_modules.txt").read_text().splitlines()
    return [line.removesuffix(".py").replace("/", ".") for line in lines if line and not line.startswith("#")]


def test_hot_modules_are_in_the_form_the_run_asked_for() -> None:
    """Every hot module is imported from a .so when FLEETPLANE_COMPILED=1, from its .py otherwise."""
    compiled = os.environ.get("FLEETPLANE_COMPILED") == "1"
    wrong = [
        f"{name}: {module.__file__}"
        for name in _hot_modules()
        if (module := importlib.import_module(name)).__file__ is not None
        and module.__file__.endswith(".so") != compiled
    ]
    assert wrong == []


def test_the_list_names_existing_sources() -> None:
    """scripts/mypyc_modules.txt lists only modules that exist (a renamed module must be renamed there)."""
    missing = [name for name in _hot_modules() if not (ROOT / (name.replace(".", "/") + ".py")).is_file()]
    assert missing == []
