"""The tier markers, applied by folder: ``pytest -m unit``, ``-m integration``, ``-m e2e``, ``-m acceptance``.

- ``unit`` (tests/unit): one module's logic, no sockets, no processes.
- ``integration`` (tests/integration): product modules wired to real parts on loopback (gRPC, ZMQ,
  HTTP, SQLite, etcd, engine-sim processes); they may import any product module.
- ``e2e`` (tests/e2e): the product's own processes, end to end.
- ``acceptance``: the tests bound by the black-box rule of tests/e2e/conftest.py. Every e2e test
  is one (a test that needs a product internal lives under tests/integration instead), so
  ``-m acceptance`` selects tests/e2e; tests/unit/test_test_tree.py checks the rule's imports.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")
ACCEPTANCE = ("e2e",)  # folders whose every test is an acceptance test


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(item.path).resolve().relative_to(TESTS).parts[0]
        if folder in TIERS:
            item.add_marker(folder)
        if folder in ACCEPTANCE:
            item.add_marker("acceptance")
