"""Every ``fleetplane`` command line the docs show as an example (``text`` blocks: templates with a
reader's hosts and paths, which cannot run here) parses with the real parsers: no flag in the docs
is misspelt, removed or given a value it refuses. (The runnable blocks are run by
tests/e2e/fleet/test_docs_walkthrough.py.)"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex

import pytest

from controlplane.cli import main
from dataplane.engine.sim import settings as sim_settings
from dataplane.router import settings as router_settings
from tests.fakes.process import ROOT

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def _example_lines() -> list[tuple[str, str]]:
    found = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for language, code in FENCE.findall(doc.read_text()):
            if language != "text":
                continue
            for line in code.replace("\\\n", " ").splitlines():  # continuation lines joined
                if line.startswith("fleetplane "):
                    found.append((doc.name, line))
    return found


EXAMPLES = _example_lines()


def _parser(command: str) -> argparse.ArgumentParser:
    if command == "router":
        return router_settings.build_parser("fleetplane router")
    if command == "engine-sim":
        return sim_settings.build_parser()
    return main.build_parser()


def test_the_docs_have_examples_of_every_process() -> None:
    """The operations guide shows how to start the control plane and the router by hand."""
    commands = {shlex.split(line)[1] for _, line in EXAMPLES}
    assert {"control", "router", "workers", "contract"} <= commands, commands


@pytest.mark.parametrize(("doc", "line"), EXAMPLES, ids=[f"{d}:{line[:60]}" for d, line in EXAMPLES])
def test_each_example_command_parses(doc: str, line: str) -> None:
    """The line, with its `# comment` and a trailing `...` (more flags) left out, is accepted."""
    words = shlex.split(line, comments=True)[1:]
    if words[-1] == "...":
        words = words[:-1]
    command = words[0]
    argv = words[1:] if command in ("router", "engine-sim") else words
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            _parser(command).parse_args(argv)
        except SystemExit:
            pytest.fail(f"{doc}: {line}\n{errors.getvalue()}")
