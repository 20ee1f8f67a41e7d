"""The tier markers, applied by folder: ``pytest -m unit``, ``-m integration``, ``-m e2e``, ``-m acceptance``.

- ``unit`` (tests/unit): one module's logic, no sockets, no processes.
- ``integration`` (tests/integration): product modules wired to real parts on loopback (gRPC, ZMQ,
  HTTP, SQLite, etcd, engine-sim processes); they may import any product module.
- ``e2e`` (tests/e2e): the product's own processes, end to end.
- ``acceptance``: the tests bound by the black-box rule of tests/e2e/conftest.py. Every e2e test
  is one (a test that needs a product internal lives under tests/integration instead), so
  ``-m acceptance`` selects tests/e2e; tests/unit/test_test_tree.py checks the rule's imports.

On two workers (pytest-xdist ``-n 2 --dist loadfile``: scripts/test.sh, scripts/test_compiled.sh)
each file runs whole on one worker, so its module-scoped processes start once, as in a serial run;
the files in ``SHARED_VENV`` run as one unit between them, never beside each other: one re-installs
this checkout into .venv (the real ``scripts/bootstrap.sh``: ``pip install -e .``), the others
start ``fleetplane`` from outside the checkout or read its installed version, which that
re-install removes for a moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")
ACCEPTANCE = ("e2e",)  # folders whose every test is an acceptance test
SHARED_VENV = frozenset(
    {
        "tests/e2e/fleet/test_bootstrap.py",  # scripts/bootstrap.sh on this checkout: pip install -e .
        "tests/e2e/fleet/test_docs_walkthrough.py",  # .venv/bin/fleetplane; `up` run from a tmp cwd
        "tests/e2e/control/test_operator_cli.py",  # the CLI run from a tmp cwd (the editable finder)
        "tests/e2e/control/test_build_and_log_level.py",  # the version from the installed metadata
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(item.path).resolve().relative_to(TESTS).parts[0]
        if folder in TIERS:
            item.add_marker(folder)
        if folder in ACCEPTANCE:
            item.add_marker("acceptance")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the ``SHARED_VENV`` files as one unit (pytest-xdist's own
    ``loadgroup`` marks do not group on pytest 9, whose node ids it cannot rewrite)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "shared-venv" if path in SHARED_VENV else path

    return FileScheduling(config, log)
