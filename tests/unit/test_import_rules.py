"""The import rules of ARCHITECTURE.md, checked on the source tree."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the data plane may take from the control plane: the generated API and the shared leaves.
# controlplane.contracts is pure (no I/O) and is the one definition of what a valid contract is:
# the standalone router parses --override-sampling-params with it, so both planes refuse exactly
# the same contracts (a second copy of those rules could drift, the very thing fleetplane prevents).
# controlplane.workers.url is the one spelling of a worker URL: the router names a worker as the
# control plane's registry and WatchLoads do.
DATAPLANE_MAY_IMPORT = (
    "controlplane.v1",
    "controlplane.load.wire",
    "controlplane.envflags",
    "controlplane.contracts",
    "controlplane.workers.url",
)
SHARED_LEAVES = ("controlplane/load/wire.py", "controlplane/envflags.py", "controlplane/workers/url.py")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_controlplane_never_imports_dataplane() -> None:
    """No module under controlplane/ imports dataplane."""
    offenders = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in _sources("controlplane")
        for name in _imports(p)
        if name == "dataplane" or name.startswith("dataplane.")
    ]
    assert offenders == []


def test_dataplane_imports_only_the_api_and_shared_leaves() -> None:
    """dataplane imports from controlplane only the generated API and the shared pure leaves."""
    offenders = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in _sources("dataplane")
        for name in _imports(p)
        if (name == "controlplane" or name.startswith("controlplane."))
        and not any(name == ok or name.startswith(ok + ".") for ok in DATAPLANE_MAY_IMPORT)
    ]
    assert offenders == []


def test_shared_leaves_use_only_stdlib_and_msgspec() -> None:
    """The shared leaves import nothing but the standard library and msgspec."""
    import sys

    allowed = set(sys.stdlib_module_names) | {"msgspec", "__future__"}
    for rel in SHARED_LEAVES:
        roots = {name.split(".")[0] for name in _imports(ROOT / rel)}
        assert roots <= allowed, f"{rel} imports {sorted(roots - allowed)}"
