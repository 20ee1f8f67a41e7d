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

# The control plane's layers, lowest first. A module may import from its own layer and the ones
# below it, never from one above; a module is in the entry with the longest prefix naming it.
CONTROLPLANE_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Used by every layer above: the generated API, the two error families, flags and settings,
    # the metric definitions, the watch fan-out slot, the contract model, the router-report
    # aggregation (pure), the load frame codec.
    (
        "leaves",
        (
            "controlplane.v1",
            "controlplane.errors",
            "controlplane.envflags",
            "controlplane.settings",
            "controlplane.metrics",
            "controlplane.broadcast",
            "controlplane.contracts",
            "controlplane.reports",
            "controlplane.load.wire",
        ),
    ),
    ("store", ("controlplane.store",)),  # durable state and its records: SQLite | etcd
    ("workers", ("controlplane.workers",)),  # registration rules, URL spelling, discovery client
    ("load table", ("controlplane.load.table",)),  # per-rank accounting and freshness (pure)
    ("load ingest", ("controlplane.load.ingest",)),  # ZMTP SUB connections feeding the table
    ("load", ("controlplane.load",)),  # the load plane: registry in step, WatchLoads fan-out
    ("server", ("controlplane.server",)),  # servicers, interceptor, error -> status, HTTP page
    ("app", ("controlplane.app",)),  # the composition root
    ("cli", ("controlplane.cli", "controlplane.__main__")),  # the fleetplane commands
)


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


def _controlplane_graph() -> dict[str, set[str]]:
    """Every controlplane module (``__init__`` as its package) -> the controlplane modules it imports."""
    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in _sources("controlplane")
    }
    del paths["controlplane"]  # the empty root package
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from controlplane.store import changes`` imports the module store.changes.
                targets.update(
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in paths else node.module
                    for alias in node.names
                )
        graph[module] = {t for t in targets if t in paths and t != module}
    return graph


def _layer(module: str) -> int:
    matches = [
        (len(prefix), rank)
        for rank, (_, prefixes) in enumerate(CONTROLPLANE_LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1] if matches else -1


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path (first node repeated at the end), or []."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = "done"
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_every_controlplane_module_has_a_layer() -> None:
    """Each controlplane module is in one layer of CONTROLPLANE_LAYERS, and each entry names a module."""
    graph = _controlplane_graph()
    assert [m for m in sorted(graph) if _layer(m) < 0] == []
    named = [p for _, prefixes in CONTROLPLANE_LAYERS for p in prefixes]
    assert [p for p in named if not any(m == p or m.startswith(p + ".") for m in graph)] == []


def test_controlplane_imports_never_run_up_a_layer() -> None:
    """No controlplane module imports from a layer above its own (cli -> app -> server -> load -> ...)."""
    names = [name for name, _ in CONTROLPLANE_LAYERS]
    offenders = [
        f"{module} ({names[_layer(module)]}) imports {target} ({names[_layer(target)]})"
        for module, targets in sorted(_controlplane_graph().items())
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]
    assert offenders == []


def test_controlplane_packages_import_each_other_without_cycles() -> None:
    """The packages under controlplane/ (store, workers, load, server, ...) import each other in one direction."""
    packages: dict[str, set[str]] = {}
    for module, targets in _controlplane_graph().items():
        package = ".".join(module.split(".")[:2])
        packages.setdefault(package, set()).update(
            ".".join(t.split(".")[:2]) for t in targets if ".".join(t.split(".")[:2]) != package
        )
    assert _cycle(packages) == []


def test_controlplane_modules_import_each_other_without_cycles() -> None:
    """No chain of imports among controlplane modules leads back to where it started."""
    assert _cycle(_controlplane_graph()) == []
