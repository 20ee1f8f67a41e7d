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


# The data plane's layers, lowest first (same reading as above). ``dataplane.engine`` (what an
# engine embeds, and engine-sim) and ``dataplane.router`` are siblings over the shared HTTP
# server: neither imports the other (test below).
DATAPLANE_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("form", ("dataplane.form",)),  # compiled or plain, chosen at the package's import (stdlib only)
    ("errors", ("dataplane.errors",)),  # the plane's error root and its one error -> answer mapping
    ("http", ("dataplane.http",)),  # the protocol-level HTTP/1.1 + h2c server
    ("engine", ("dataplane.engine",)),  # load publisher, endpoint resolver, engine-sim
    # Request-path leaves: header rules, request bodies, the balancer, admission, log set-up,
    # client API keys.
    (
        "router leaves",
        (
            "dataplane.router.headers",
            "dataplane.router.clients",
            "dataplane.router.body",
            "dataplane.router.balancer",
            "dataplane.router.admission",
            "dataplane.router.logs",
        ),
    ),
    ("contract", ("dataplane.router.contract",)),  # pure: judge a body (probe, dialects, enforce, routes)
    ("upstream", ("dataplane.router.upstream",)),  # pools and connections towards workers
    ("fleet", ("dataplane.router.fleet",)),  # the worker set, health, discovery
    ("state", ("dataplane.router.state",)),  # workers + contracts as swapped snapshots
    ("metrics", ("dataplane.router.metrics", "dataplane.router.access_log")),  # + its per-request line buffer
    ("process", ("dataplane.router.process",)),  # --processes N: supervisor, merged metrics, journal
    ("control", ("dataplane.router.control",)),  # the control-plane client (grpc stops here)
    ("path", ("dataplane.router.path",)),  # the request path: proxy, forwarder, exchange, relay
    ("settings", ("dataplane.router.settings",)),
    ("app", ("dataplane.router.app", "dataplane.router")),
    ("entry", ("dataplane.__main__",)),
)

# Modules docs/architecture.md calls pure: decisions without I/O, fed bytes, values and ``now``
# (ARCHITECTURE: "protocol logic without I/O"). They import none of these.
PURE_MODULES = (
    "controlplane/contracts",
    "controlplane/reports",
    "controlplane/load/wire.py",
    "controlplane/load/table.py",
    "controlplane/load/ingest/zmtp.py",
    "controlplane/store/changes.py",
    "controlplane/workers/registration.py",
    "controlplane/workers/url.py",
    "dataplane/errors.py",
    "dataplane/http/wire.py",
    "dataplane/http/h2_fields.py",
    "dataplane/http/h2_server_codec.py",
    "dataplane/router/contract",
    "dataplane/router/headers.py",
    "dataplane/router/clients.py",
    "dataplane/router/body.py",
    "dataplane/router/balancer.py",
    "dataplane/router/fleet/health.py",
    "dataplane/router/upstream/h2c/codec.py",
    "dataplane/router/upstream/h2c/output.py",
    "dataplane/http/h2_frames.py",
    "dataplane/router/control/convert.py",
    "dataplane/router/control/backoff.py",
    "dataplane/router/process/merge.py",
    "dataplane/engine/endpoints.py",
    "dataplane/engine/sim/scheduler.py",
    "dataplane/engine/sim/costs.py",
    "dataplane/engine/sim/prefix_cache.py",
    "dataplane/engine/sim/prompts.py",
    "dataplane/engine/sim/lengths.py",
    "dataplane/engine/sim/forms.py",
)
IO_MODULES = frozenset(
    {"asyncio", "socket", "selectors", "subprocess", "time", "logging", "structlog", "grpc", "zmq", "uvloop"}
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
    return _graph("controlplane")


def _graph(package: str) -> dict[str, set[str]]:
    """Every module of ``package`` (``__init__`` as its package) -> the modules of ``package`` it imports."""
    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in _sources(package)
    }
    del paths[package]  # the empty root package
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


def _layer(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = CONTROLPLANE_LAYERS) -> int:
    matches = [
        (len(prefix), rank)
        for rank, (_, prefixes) in enumerate(layers)
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


def test_every_dataplane_module_has_a_layer() -> None:
    """Each dataplane module is in one layer of DATAPLANE_LAYERS, and each entry names a module."""
    graph = _graph("dataplane")
    assert [m for m in sorted(graph) if _layer(m, DATAPLANE_LAYERS) < 0] == []
    named = [p for _, prefixes in DATAPLANE_LAYERS for p in prefixes]
    assert [p for p in named if not any(m == p or m.startswith(p + ".") for m in graph)] == []


def test_dataplane_imports_never_run_up_a_layer() -> None:
    """No dataplane module imports from a layer above its own (app -> path -> control -> ... -> http -> errors)."""
    names = [name for name, _ in DATAPLANE_LAYERS]
    offenders = [
        f"{module} ({names[_layer(module, DATAPLANE_LAYERS)]}) imports {target} "
        f"({names[_layer(target, DATAPLANE_LAYERS)]})"
        for module, targets in sorted(_graph("dataplane").items())
        for target in sorted(targets)
        if _layer(target, DATAPLANE_LAYERS) > _layer(module, DATAPLANE_LAYERS)
    ]
    assert offenders == []


def test_router_and_engine_never_import_each_other() -> None:
    """The router and the engine side share only the HTTP server and the errors, never each other's code."""
    offenders = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph("dataplane").items())
        for target in sorted(targets)
        if {module.split(".")[1], target.split(".")[1]} == {"router", "engine"}
    ]
    assert offenders == []


def test_dataplane_modules_import_each_other_without_cycles() -> None:
    """No chain of imports among dataplane modules leads back to where it started."""
    assert _cycle(_graph("dataplane")) == []


def test_pure_modules_do_no_io() -> None:
    """The modules called pure import nothing that does I/O, schedules, logs or reads the clock."""
    offenders = []
    for entry in PURE_MODULES:
        target = ROOT / entry
        assert target.exists(), entry
        for path in [target] if target.is_file() else sorted(target.rglob("*.py")):
            found = sorted({name.split(".")[0] for name in _imports(path)} & IO_MODULES)
            if found:
                offenders.append(f"{path.relative_to(ROOT)}: {', '.join(found)}")
    assert offenders == []
