"""Which form of the router's hot modules this process runs: all compiled (mypyc) or all plain.

``scripts/build_mypyc.sh`` puts a ``.so`` next to each module of ``scripts/mypyc_modules.txt``
(one shared runtime, ``dataplane/hot__mypyc*.so``) and a manifest of the sources it compiled,
with their SHA-256 (``dataplane/hot__mypyc.sources.json``). Python imports an extension module
before the source of the same name, so without a check an edited or checked-out source would run
as its stale compiled copy. At the package's import (``dataplane/__init__.py``):

- ``FLEETPLANE_FORM=compiled`` requires the compiled form, current: anything else is an
  ``ImportError`` naming why (CI's compiled step, ``scripts/test_compiled.sh``);
- ``FLEETPLANE_FORM=plain`` runs the sources even where a build is present (the reference form:
  ``scripts/test.sh``);
- unset (``auto``): the compiled form when the build is present and every source is the one it
  compiled, else the sources.

The choice is all or nothing: the compiled modules call each other natively inside the shared
runtime, so one plain module among compiled ones would run beside a second, compiled copy of
itself. Falling back is therefore a path finder placed first on ``sys.meta_path`` that imports
each listed module from its source. ``FORM`` and ``WHY`` say what was chosen (``fleetplane_build_info``,
the router's start log). Costs one hash of the listed sources (about 0.4 MB) per process start.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parent
RUNTIME = "hot__mypyc"
MANIFEST = PACKAGE / f"{RUNTIME}.sources.json"
ENV = "FLEETPLANE_FORM"


class SourcesFirst:
    """A meta path finder that imports the named modules from their ``.py``, not their ``.so``."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self.sources = sources

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        source = self.sources.get(name)
        return None if source is None else importlib.util.spec_from_file_location(name, source)


@dataclass(frozen=True)
class Form:
    """The decision: ``name`` is "compiled" or "plain", ``why`` says why, ``shadowed`` maps each
    compiled module to the source that must be imported instead (empty unless plain over a build)."""

    name: str
    why: str
    shadowed: dict[str, Path] = field(default_factory=dict)


def _compiled_modules(package: Path) -> dict[str, Path]:
    """Module name -> source, for every extension module this interpreter can load beside a source."""
    found: dict[str, Path] = {}
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for directory, _, names in os.walk(package):
        for name in names:
            suffix = next((s for s in suffixes if name.endswith(s)), None)
            source = Path(directory, name.removesuffix(suffix) + ".py") if suffix else None
            if source is not None and source.is_file():
                found[".".join(source.relative_to(package.parent).with_suffix("").parts)] = source
    return found


def _not_current(package: Path, compiled: dict[str, Path]) -> str | None:
    """Why the build cannot run as it is (None: every module is the one compiled from its source)."""
    if not any(
        (package / f"{RUNTIME}{suffix}").exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
    ):
        return f"the build's shared runtime {package.name}/{RUNTIME} is missing"
    manifest = package / MANIFEST.name
    try:
        listed: dict[str, str] = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        return f"the build's manifest {manifest.name} is unreadable ({exc})"
    root = package.parent
    if {source.relative_to(root).as_posix() for source in compiled.values()} != set(listed):
        return f"the modules built are not the ones {manifest.name} lists"
    for relative, digest in listed.items():
        if hashlib.sha256((root / relative).read_bytes()).hexdigest() != digest:
            return f"{relative} changed since scripts/build_mypyc.sh compiled it"
    return None


def decide(env: Mapping[str, str], package: Path = PACKAGE) -> Form:
    """This process's form, from ``FLEETPLANE_FORM`` and the build beside ``package``'s sources."""
    wanted = env.get(ENV, "auto")
    if wanted not in ("auto", "compiled", "plain"):
        raise ImportError(f"{ENV}={wanted!r}: use auto, compiled or plain")
    compiled = _compiled_modules(package)
    why: str | None
    if not compiled:
        why = "no compiled build (scripts/build_mypyc.sh makes one)"
    else:
        why = f"{ENV}=plain" if wanted == "plain" else _not_current(package, compiled)
        if why is None:
            return Form("compiled", "the build is current")
    if wanted == "compiled":
        raise ImportError(f"{ENV}=compiled, but {why}")
    return Form("plain", why, compiled)


def choose(env: Mapping[str, str] = os.environ) -> Form:
    """Decide, and import every compiled module from its source if the form is plain."""
    form = decide(env)
    if form.shadowed:
        sys.meta_path.insert(0, SourcesFirst(form.shadowed))
    return form
