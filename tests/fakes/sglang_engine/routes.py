"""SGLang 0.5.23's route table, read from the wheel's ``http_server.py`` with ``ast``.

Every handler decorated ``@app.post/put/get/…(PATH)`` or ``@app.api_route(PATH, methods=[…])``
(and those of the routers it includes), its path as the wheel writes it (a path given as
``os.environ.get("VAR", "/default")`` is the default, ``path_env`` names the variable), the class
of its JSON body parameter or its ``Form`` fields, and which SPEC §2 fields a client can set
through that body. The class is read from the module the server imports it from, with its base
classes; ``sampling_params`` dicts reach ``SamplingParams``; two dicts reach it through the
route's own conversion (Ollama's ``options``, read from its mapping; Vertex's ``parameters``,
spread into ``GenerateReqInput`` by its handler). Routes whose model declares a §2 name that
never reaches token sampling are listed in :data:`NOT_SAMPLING` with the reason.

The coverage test (SPEC §5.1, tests/unit/sglang_oracle/test_route_coverage.py) is::

    for route in sampling_routes():
        assert router_table.covers(route.method, route.path), route
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from tests.fakes.sglang_engine import wheel
from tests.fakes.sglang_engine.reading import FIELDS

SERVER = "srt/entrypoints/http_server.py"
_METHODS = {"get", "post", "put", "delete", "patch", "head", "websocket"}
_PARAM_MARKERS = {"Query", "Form", "File", "Depends", "Header", "Cookie", "Path"}
_NOT_BODIES = {"Request", "WebSocket", "UploadFile", "str", "int", "float", "bool", "dict", "Any"}

NOT_SAMPLING: dict[str, str] = {
    "ScoringRequest": "temperature scales the scoring softmax over label logprobs; nothing is generated",
    "DecisionRequest": "temperature scales the scoring softmax of /v1/decisions; nothing is generated",
    "SystemOneRequest": "declares temperature only to refuse it (field_validator)",
}
"""Body models that declare a §2 name that is not a token-sampling parameter (SPEC §5.1)."""


@dataclass(frozen=True, slots=True)
class EngineRoute:
    """One (method, path) the engine serves."""

    method: str
    path: str | None  # None: only an environment variable sets it (no default)
    path_env: str | None
    handler: str
    body_model: str | None
    form_fields: tuple[str, ...]
    declared: tuple[str, ...]  # §2 names a client can put in the body, in §2 order
    sampling_fields: tuple[str, ...]  # those that reach token sampling

    @property
    def carries_sampling(self) -> bool:
        return bool(self.sampling_fields)


def engine_routes() -> list[EngineRoute]:
    """Every route of ``http_server.py`` (and its included routers), in source order."""
    return list(_routes())


def sampling_routes() -> list[EngineRoute]:
    """POST/PUT routes through which a client chooses how tokens are sampled."""
    return [r for r in _routes() if r.method in ("POST", "PUT") and r.carries_sampling]


@functools.cache
def _routes() -> tuple[EngineRoute, ...]:
    tree = wheel.parsed(SERVER)
    sources = [(SERVER, tree, {"app"})]
    for relative, name in _included_routers(tree):
        sources.append((relative, wheel.parsed(relative), {name}))
    out: list[EngineRoute] = []
    for relative, module, owners in sources:
        assigns = _module_assigns(module)
        for node in ast.walk(module):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for decorator in node.decorator_list:
                route = _decorator_route(decorator, owners, assigns)
                if route is None:
                    continue
                methods, path, env = route
                body, forms = _body_of(node)
                declared, sampling = _fields_of(relative, body, forms)
                for method in methods:
                    out.append(EngineRoute(method, path, env, node.name, body, forms, declared, sampling))
    return tuple(out)


def _included_routers(tree: ast.Module) -> list[tuple[str, str]]:
    """``app.include_router(x)`` where ``x`` is ``from MODULE import router as x``."""
    imported = {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "include_router"
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            module = imported[node.args[0].id]
            out.append((_module_file(module), "router"))
    return out


def _module_file(module: str) -> str:
    return module.removeprefix("sglang.").replace(".", "/") + ".py"


def _module_assigns(tree: ast.Module) -> dict[str, ast.expr]:
    return {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _decorator_route(
    decorator: ast.expr, owners: set[str], assigns: dict[str, ast.expr]
) -> tuple[list[str], str | None, str | None] | None:
    if not (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and isinstance(decorator.func.value, ast.Name)
        and decorator.func.value.id in owners
    ):
        return None
    kind = decorator.func.attr
    if kind == "api_route":
        methods_kw = next((k.value for k in decorator.keywords if k.arg == "methods"), None)
        methods = (
            [str(m).upper() for m in ast.literal_eval(methods_kw)] if methods_kw is not None else ["GET"]
        )
    elif kind in _METHODS:
        methods = ["WEBSOCKET" if kind == "websocket" else kind.upper()]
    else:
        return None
    path_node = (
        decorator.args[0] if decorator.args else next(k.value for k in decorator.keywords if k.arg == "path")
    )
    path, env = _path_of(path_node, assigns)
    return methods, path, env


def _path_of(node: ast.expr, assigns: dict[str, ast.expr]) -> tuple[str | None, str | None]:
    if isinstance(node, ast.Name) and node.id in assigns:
        node = assigns[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, None
    # os.environ.get("VAR", "/default") / os.getenv(...)
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        env = str(node.args[0].value)
        default = node.args[1] if len(node.args) > 1 else None
        if isinstance(default, ast.Constant) and isinstance(default.value, str):
            return default.value, env
        return None, env
    raise ValueError(f"route path not understood: {ast.unparse(node)}")


def _unwrap(annotation: ast.expr | None) -> ast.expr | None:
    """``Annotated[X, Body()]`` and ``Optional[X]`` -> ``X``."""
    while isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name):
        if annotation.value.id == "Annotated" and isinstance(annotation.slice, ast.Tuple):
            annotation = annotation.slice.elts[0]
        elif annotation.value.id == "Optional":
            annotation = annotation.slice
        else:
            break
    return annotation


def _body_of(handler: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str | None, tuple[str, ...]]:
    """(the class of the JSON body parameter, the Form fields' wire names)."""
    args = handler.args.args + handler.args.kwonlyargs
    defaults = [None] * (len(handler.args.args) - len(handler.args.defaults)) + list(handler.args.defaults)
    defaults += list(handler.args.kw_defaults)
    body: str | None = None
    forms: list[str] = []
    for arg, default in zip(args, defaults, strict=True):
        marker = (
            default.func.id if isinstance(default, ast.Call) and isinstance(default.func, ast.Name) else None
        )
        if marker == "Form":
            alias = next((k.value for k in default.keywords if k.arg == "alias"), None)  # type: ignore[union-attr]
            forms.append(alias.value if isinstance(alias, ast.Constant) else arg.arg)
            continue
        if marker in _PARAM_MARKERS:
            continue
        annotation = _unwrap(arg.annotation)
        if body is None and isinstance(annotation, ast.Name) and annotation.id not in _NOT_BODIES:
            body = annotation.id
    return body, tuple(forms)


# -- which §2 fields a body model carries --------------------------------------------------------
def _fields_of(
    relative: str, body: str | None, forms: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if body is None:
        declared = tuple(f for f in FIELDS if f in forms)
        return declared, declared
    found = _class_fields(relative, body, frozenset())
    declared = tuple(f for f in FIELDS if f in found)
    return declared, () if body in NOT_SAMPLING else declared


def _class_fields(relative: str, name: str, seen: frozenset[str]) -> set[str]:
    """The §2 names reachable through class ``name`` as seen from module ``relative``."""
    if name in seen:
        return set()
    located = _locate_class(relative, name)
    if located is None:
        return set()
    module, cls = located
    seen = seen | {name}
    out: set[str] = set()
    for base in cls.bases:
        if isinstance(base, ast.Name):
            out |= _class_fields(module, base.id, seen)
    if _forces_no_generation(cls):
        return set()
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        wire = _alias(node.value) or node.target.id
        out.add(wire)
        out |= _bridged(name, wire, module, seen)
    return out & set(FIELDS)


def _alias(value: ast.expr | None) -> str | None:
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Field":
        for keyword in value.keywords:
            if keyword.arg in ("alias", "validation_alias") and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return None


def _forces_no_generation(cls: ast.ClassDef) -> bool:
    """A request class that sets ``max_new_tokens`` to 0 in its own ``sampling_params``
    (EmbeddingReqInput: /encode, /classify) generates no token whatever the client sends."""
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value == 0:
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value == "max_new_tokens"
                    and "sampling_params" in ast.unparse(target.value)
                ):
                    return True
    return False


def _bridged(owner: str, wire: str, module: str, seen: frozenset[str]) -> set[str]:
    """Dict fields whose keys reach SamplingParams."""
    if wire == "sampling_params":
        return _sampling_params_fields()
    if owner in ("OllamaChatRequest", "OllamaGenerateRequest") and wire == "options":
        return _ollama_mapped()
    if owner == "VertexGenerateReqInput" and wire == "parameters" and _vertex_spreads_parameters():
        return _class_fields(module, "GenerateReqInput", seen)
    return set()


@functools.cache
def _sampling_params_fields() -> set[str]:
    cls = wheel.class_def("srt/sampling/sampling_params.py", "SamplingParams")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


@functools.cache
def _ollama_mapped() -> set[str]:
    """The sglang names of ``param_mapping`` in OllamaServing._convert_options_to_sampling_params."""
    function = wheel.function_def("srt/entrypoints/ollama/serving.py", "_convert_options_to_sampling_params")
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and node.value.keys:
            return {str(ast.literal_eval(v)) for v in node.value.values}
    raise LookupError("Ollama's option mapping moved")


@functools.cache
def _vertex_spreads_parameters() -> bool:
    """vertex_generate builds ``GenerateReqInput(..., **(vertex_req.parameters or {}))``."""
    function = wheel.function_def(SERVER, "vertex_generate")
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "GenerateReqInput"
        ):
            return any(k.arg is None and "parameters" in ast.unparse(k.value) for k in node.keywords)
    return False


def _locate_class(relative: str, name: str) -> tuple[str, ast.ClassDef] | None:
    """The module (wheel path) and class definition of ``name`` as ``relative`` sees it."""
    tree = wheel.parsed(relative)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return relative, node
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang."):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    target = _module_file(node.module)
                    if not (wheel.root() / target).is_file():
                        target = target.removesuffix(".py") + "/__init__.py"
                    return _locate_class(target, alias.name)
    return None
