"""Which form of the hot modules runs: all compiled (mypyc) or all plain (dataplane/form.py).

scripts/build_mypyc.sh puts a .so next to each module of scripts/mypyc_modules.txt and Python then
imports the .so, not the .py. ``FLEETPLANE_FORM=compiled`` (CI's compiled step) requires the
current build, ``plain`` (scripts/test.sh, the reference) the sources; unset, the build runs
while every source is the one it compiled. The decision's rules are tested on a package made
here, with files standing in for extension modules: an import that reached one would fail.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dataplane
from dataplane.form import MANIFEST, RUNTIME, SourcesFirst, decide

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _hot_modules() -> list[str]:
    lines = (ROOT / "scripts" / "mypyc_modules.txt").read_text().splitlines()
    return [line.removesuffix(".py").replace("/", ".") for line in lines if line and not line.startswith("#")]


def test_hot_modules_are_in_the_form_the_run_asked_for() -> None:
    """Every hot module is a .so when the form is compiled and its .py when plain, all alike."""
    wanted = os.environ.get("FLEETPLANE_FORM")
    if wanted in ("compiled", "plain"):
        assert dataplane.FORM.name == wanted
    compiled = dataplane.FORM.name == "compiled"
    wrong = [
        f"{name}: {module.__file__}"
        for name in _hot_modules()
        if (module := importlib.import_module(name)).__file__ is not None
        and module.__file__.endswith(".so") != compiled
    ]
    assert wrong == []


def test_the_list_names_existing_sources() -> None:
    """scripts/mypyc_modules.txt lists only modules that exist (a renamed module must be renamed there)."""
    missing = [name for name in _hot_modules() if not (ROOT / (name.replace(".", "/") + ".py")).is_file()]
    assert missing == []


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """``formpkg`` with two modules "built": a stand-in .so beside each, the runtime and a manifest."""
    pkg = tmp_path / "formpkg"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    sources = {"formpkg/hot.py": "VALUE = 'plain hot'\n", "formpkg/inner/deep.py": "VALUE = 'plain deep'\n"}
    for relative, text in sources.items():
        source = tmp_path / relative
        source.write_text(text)
        source.with_name(source.stem + SUFFIX).write_bytes(b"not an extension module")
    (pkg / f"{RUNTIME}{SUFFIX}").write_bytes(b"not an extension module")
    digests = {relative: hashlib.sha256(text.encode()).hexdigest() for relative, text in sources.items()}
    (pkg / MANIFEST.name).write_text(json.dumps(digests))
    return pkg


def test_a_current_build_is_the_compiled_form(package: Path) -> None:
    """Every built module's source is the one compiled: compiled, unless plain is asked for."""
    assert decide({}, package).name == "compiled"
    assert decide({"FLEETPLANE_FORM": "compiled"}, package).name == "compiled"
    plain = decide({"FLEETPLANE_FORM": "plain"}, package)
    assert (plain.name, plain.why) == ("plain", "FLEETPLANE_FORM=plain")
    assert set(plain.shadowed) == {"formpkg.hot", "formpkg.inner.deep"}


def test_an_edited_source_makes_the_whole_build_plain(package: Path) -> None:
    """One source changed since the build: every built module runs from its source, and why says which."""
    (package / "inner" / "deep.py").write_text("VALUE = 'edited'\n")
    form = decide({}, package)
    assert form.name == "plain"
    assert form.why == "formpkg/inner/deep.py changed since scripts/build_mypyc.sh compiled it"
    assert set(form.shadowed) == {"formpkg.hot", "formpkg.inner.deep"}
    with pytest.raises(
        ImportError, match=re.escape("FLEETPLANE_FORM=compiled, but formpkg/inner/deep.py changed")
    ):
        decide({"FLEETPLANE_FORM": "compiled"}, package)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (
            lambda p: (p / f"{RUNTIME}{SUFFIX}").unlink(),
            "the build's shared runtime formpkg/hot__mypyc is missing",
        ),
        (
            lambda p: (p / MANIFEST.name).unlink(),
            "the build's manifest hot__mypyc.sources.json is unreadable",
        ),
        (
            lambda p: (p / MANIFEST.name).write_text("{"),
            "the build's manifest hot__mypyc.sources.json is unreadable",
        ),
        (
            lambda p: (p / f"extra{SUFFIX}").write_bytes(b"") or (p / "extra.py").write_text(""),
            "not the ones",
        ),
    ],
)
def test_a_build_that_does_not_match_its_manifest_is_plain(package: Path, damage: object, why: str) -> None:
    """A half-removed build, a lost or broken manifest, or a module built outside it: plain, saying so."""
    damage(package)  # type: ignore[operator]
    form = decide({}, package)
    assert form.name == "plain"
    assert why in form.why


def test_no_build_is_plain_and_compiled_cannot_be_asked_for(tmp_path: Path) -> None:
    """Without a build the sources run; asking for the compiled form then is an error naming why."""
    (tmp_path / "formpkg").mkdir()
    assert decide({}, tmp_path / "formpkg").shadowed == {}
    with pytest.raises(ImportError, match="no compiled build"):
        decide({"FLEETPLANE_FORM": "compiled"}, tmp_path / "formpkg")
    with pytest.raises(ImportError, match="use auto, compiled or plain"):
        decide({"FLEETPLANE_FORM": "fast"}, tmp_path / "formpkg")


@pytest.fixture
def importable(package: Path) -> Iterator[Path]:
    sys.path.insert(0, str(package.parent))
    yield package
    sys.path.remove(str(package.parent))
    for name in [n for n in sys.modules if n == "formpkg" or n.startswith("formpkg.")]:
        del sys.modules[name]


def test_the_plain_form_imports_sources_where_extension_modules_sit(importable: Path) -> None:
    """Shadowed, a module imports from its .py; without the finder Python picks the (broken) .so."""
    with pytest.raises(ImportError):
        importlib.import_module("formpkg.hot")
    finder = SourcesFirst(decide({"FLEETPLANE_FORM": "plain"}, importable).shadowed)
    sys.meta_path.insert(0, finder)
    try:
        assert importlib.import_module("formpkg.hot").VALUE == "plain hot"
        assert importlib.import_module("formpkg.inner.deep").VALUE == "plain deep"
    finally:
        sys.meta_path.remove(finder)
