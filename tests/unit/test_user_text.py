"""No text the product shows a user (help, startup errors, answers, metric HELP) cites the SPEC:
users do not have it. Checked on the source: every string literal that is not a docstring."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controlplane", "dataplane")


def _shown_strings(path: Path) -> list[tuple[int, str]]:
    """String literals of ``path`` other than docstrings (a string standing alone as a statement)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    standalone = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in standalone
    ]


def test_no_string_a_user_sees_cites_the_spec() -> None:
    """Help texts, error messages and metric HELP strings name flags, values and RFCs, never "SPEC §"."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text[:80]!r}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "v1" not in path.relative_to(ROOT).parts  # generated protobuf code
        for line, text in _shown_strings(path)
        if "SPEC" in text
    ]
    assert found == []
