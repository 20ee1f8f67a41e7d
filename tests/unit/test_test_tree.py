"""The test tree's own rules, checked on its source: tiers by folder, no test importing another test
module, and the acceptance tests' black-box rule (tests/e2e/conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TIERS = ("unit", "integration", "e2e")  # applied as markers by tests/conftest.py
ACCEPTANCE = TESTS / "e2e"
# What an acceptance test may import from the product: the generated API, as any gRPC client does.
PRODUCT = ("controlplane", "dataplane")
ACCEPTANCE_MAY_IMPORT = ("controlplane.v1",)
# Project code that is not the product; an acceptance test's helpers may live there.
HELPERS = ("tests", "bench")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every import of ``path`` as (relative level, absolute or relative module name), nested ones too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
            # ``from tests.fakes import h2c`` imports the module tests.fakes.h2c.
            if node.level == 0 and node.module:
                found.extend((0, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _source(module: str) -> Path | None:
    """The file of a project module (``tests.fakes.h2c`` -> tests/fakes/h2c.py), None if not one."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _is(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_every_test_module_sits_in_a_tier() -> None:
    """Every test_*.py is under tests/unit, tests/integration or tests/e2e (its tier marker)."""
    misplaced = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        if p.relative_to(TESTS).parts[0] not in TIERS
    ]
    assert misplaced == []


def test_no_test_module_imports_another() -> None:
    """Tests and conftests import shared helpers from tests.fakes only, never from a test module."""
    offenders = []
    for path in _python_files(TESTS):
        in_fakes = path.is_relative_to(TESTS / "fakes")
        for level, name in _imports(path):
            if level and not in_fakes:
                offenders.append(f"{path.relative_to(ROOT)}: relative import {'.' * level}{name}")
            elif level == 0 and _is(name, "tests") and name != "tests" and not _is(name, "tests.fakes"):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_acceptance_tests_import_no_product_internals() -> None:
    """tests/e2e, and every tests/ or bench/ helper it reaches, imports no controlplane or dataplane
    module except the generated controlplane.v1 API (the black-box rule)."""
    offenders = []
    seen: set[Path] = set()
    todo = [(p, str(p.relative_to(ROOT))) for p in _python_files(ACCEPTANCE)]
    while todo:
        path, via = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for _, name in _imports(path):
            if any(_is(name, p) for p in PRODUCT) and not any(_is(name, ok) for ok in ACCEPTANCE_MAY_IMPORT):
                offenders.append(f"{via}: {name}")
            elif any(_is(name, h) for h in HELPERS) and (helper := _source(name)) is not None:
                todo.append((helper, f"{via} -> {helper.relative_to(ROOT)}"))
    assert offenders == []


def test_the_acceptance_rule_sees_what_it_checks() -> None:
    """The walk above reaches the fakes the acceptance tests use (a rule that reads nothing cannot fail)."""
    reached = {
        name
        for path in _python_files(ACCEPTANCE)
        for _, name in _imports(path)
        if _is(name, "tests.fakes") and _source(name) is not None
    }
    assert {"tests.fakes.control_plane", "tests.fakes.router", "tests.fakes.engine_sim"} <= reached
