"""Loading SGLang 0.5.23's own request-handling modules from its wheel, without torch.

The wheel is installed with ``pip install --no-deps sglang==0.5.23`` (``scripts/test.sh``).
Its ``sglang/__init__.py`` imports the whole runtime (torch, FlashInfer, transformers), so it
is never run: ``sglang`` is registered as an empty package whose ``__path__`` is the wheel's
directory, and the submodules we need (request models, conversions, the ``/generate`` gate,
``SamplingParams``) are imported from there as the wheel ships them. The other ``sglang.srt``
packages are namespace packages or have trivial ``__init__`` files, which run as they are.

**The guards, and why they cannot change what is tested.** A few imports at the top of those
modules name heavy packages the request path never calls: ``torch`` (the watermark module),
``numpy``, ``requests``, ``tqdm``, ``IPython``, ``pybase64`` (``sglang/utils.py``), and two
sglang modules that pull the scheduler in: ``managers.io_struct`` (imported by
``ollama/serving.py`` for the dataclass it builds after the conversion we call) and
``observability.req_time_stats`` (a timer, imported by ``anthropic/serving.py``). Each is replaced,
while the wheel's modules are imported, by a :class:`Guard` module: importing it works, but any
use of it or of any name taken from it (attribute, call, ``isinstance``, truth value, iteration,
comparison, hashing) raises :class:`GuardedUse`. The request models, their validators, the
conversions to sampling parameters, the gate and ``SamplingParams`` never touch these on the
paths we call; if a wheel version did, the guard raises and the test fails loudly instead of
passing on a made-up value. The guard modules are taken out of ``sys.modules`` again once the
wheel's modules are loaded, so nothing else in the test process (e.g. Hypothesis, which looks
for ``numpy`` in ``sys.modules``) ever sees them; a third-party package that is really installed
is not guarded at all (it is real code, and the paths we call do not use it either).
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

VERSION = "0.5.23"
# Imported at the top of the modules we load, never used on the request paths we call.
_THIRD_PARTY_GUARDS = ("torch", "numpy", "requests", "tqdm", "IPython", "pybase64")
# sglang modules that would import the scheduler (and torch with it): always guarded.
_SGLANG_GUARDS = (
    "sglang.srt.managers.io_struct",
    "sglang.srt.observability.req_time_stats",
)
MODULES = (
    "sglang.srt.entrypoints.openai.protocol",
    "sglang.srt.entrypoints.anthropic.protocol",
    "sglang.srt.entrypoints.anthropic.serving",
    "sglang.srt.entrypoints.ollama.protocol",
    "sglang.srt.entrypoints.ollama.serving",
    "sglang.srt.entrypoints.api_contract",
    "sglang.srt.sampling.sampling_params",
)


class WheelMissing(RuntimeError):
    """The sglang 0.5.23 wheel is not installed (``scripts/test.sh`` installs it)."""


class GuardedUse(RuntimeError):
    """A guarded heavy module (or a name imported from it) was used: the oracle cannot stand in."""


class _Poison:
    """A name imported from a guarded module: any use raises."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _refuse(self, *_args: Any, **_kwargs: Any) -> Any:
        raise GuardedUse(f"the request path used {object.__getattribute__(self, '_name')}")

    def __getattr__(self, _name: str) -> Any:
        return self._refuse()

    __call__ = __bool__ = __iter__ = __len__ = __getitem__ = __contains__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _refuse  # type: ignore[assignment]
    __instancecheck__ = __subclasscheck__ = __mro_entries__ = __or__ = __ror__ = _refuse
    __setattr__ = __index__ = __int__ = __float__ = _refuse  # type: ignore[assignment]


class Guard(types.ModuleType):
    """A guarded module: importable, every name taken from it is a :class:`_Poison`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Poison(f"{self.__name__}.{name}")


class _GuardFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if any(fullname == n or fullname.startswith(n + ".") for n in self._names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return Guard(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def root() -> Path:
    """The wheel's ``sglang`` directory (never imported as a package)."""
    version = installed_version()
    if version != VERSION:
        raise WheelMissing(f"sglang=={VERSION} is not installed (found {version}); run scripts/test.sh")
    located = Path(str(importlib.metadata.distribution("sglang").locate_file("sglang")))
    if not (located / "srt" / "entrypoints" / "http_server.py").is_file():
        raise WheelMissing(f"sglang wheel files not found under {located}")
    return located


def source(relative: str) -> str:
    """The text of one file of the wheel, e.g. ``srt/entrypoints/http_server.py``."""
    return (root() / relative).read_text(encoding="utf-8")


@functools.cache
def parsed(relative: str) -> ast.Module:
    return ast.parse(source(relative), filename=relative)


@functools.cache
def modules() -> dict[str, types.ModuleType]:
    """The wheel's request-handling modules, imported once (see the module docstring)."""
    package_dir = root()
    existing = sys.modules.get("sglang")
    if existing is not None and getattr(existing, "__path__", None) != [str(package_dir)]:
        raise WheelMissing("another 'sglang' package is already imported in this process")
    stand_in = types.ModuleType("sglang")
    stand_in.__path__ = [str(package_dir)]
    stand_in.__file__ = None
    sys.modules.setdefault("sglang", stand_in)
    absent = tuple(
        n for n in _THIRD_PARTY_GUARDS if n not in sys.modules and importlib.util.find_spec(n) is None
    )
    guarded = (*absent, *_SGLANG_GUARDS)
    finder = _GuardFinder(guarded)
    sys.meta_path.insert(0, finder)
    try:
        loaded = {name: importlib.import_module(name) for name in MODULES}
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n, m in sys.modules.items() if isinstance(m, Guard)]:
            del sys.modules[name]
    return loaded


def module(name: str) -> types.ModuleType:
    return modules()[name]


def class_def(relative: str, name: str) -> ast.ClassDef:
    for node in parsed(relative).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"class {name} not in sglang/{relative}")


def function_def(relative: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for node in ast.walk(parsed(relative)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise LookupError(f"function {name} not in sglang/{relative}")


def compile_defs(relative: str, nodes: list[ast.stmt], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run the wheel's own source of ``nodes`` (class or function definitions) in ``namespace``.

    Used where the module that holds them cannot be imported without the scheduler: the code
    that runs is the wheel's text, compiled as its module compiles it (postponed annotations,
    the wheel's file name in tracebacks), in a module of its own (``tests.fakes.sglang_engine.
    compiled.<path>``) so that pydantic and msgspec resolve its annotations in ``namespace``.
    """
    name = __package__ + ".compiled." + relative.removesuffix(".py").replace("/", ".")
    target = sys.modules.get(name)
    if target is None:
        target = types.ModuleType(name)
        sys.modules[name] = target
    target.__dict__.update(namespace)
    tree = ast.Module(body=[_undecorated(n) for n in nodes], type_ignores=[])
    code = compile(tree, str(root() / relative), "exec", flags=_FUTURE_ANNOTATIONS, dont_inherit=True)
    exec(code, target.__dict__)
    return target.__dict__


def _undecorated(node: ast.stmt) -> ast.stmt:
    """Handlers lose their route decorators (``@app.post``): we call them, FastAPI does not."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
        bare = copy.deepcopy(node)
        bare.decorator_list = []
        return bare
    return node


_FUTURE_ANNOTATIONS = __import__("__future__").annotations.compiler_flag
