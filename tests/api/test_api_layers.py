"""The GraphQL layer reads through the engine (LAYOUT.md): nothing under ``turnqueue/resolvers``
or ``turnqueue/schema`` imports ``turnqueue.store`` or reaches for ``engine.store``."""

from __future__ import annotations

import ast
from pathlib import Path

import turnqueue

PACKAGE = Path(turnqueue.__file__).parent
GRAPHQL_LAYER = ("resolvers", "schema")


def _offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module]
        found += [f"imports {n}" for n in names if n.split(".")[:2] == ["turnqueue", "store"]]
        if isinstance(node, ast.Attribute) and node.attr == "store":
            found.append(f"reads .store (line {node.lineno})")
    return found


def test_layout_resolvers_and_schema_read_through_the_engine_not_the_store() -> None:
    offences = {
        str(path.relative_to(PACKAGE)): found
        for layer in GRAPHQL_LAYER
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        if (found := _offences(path))
    }
    assert offences == {}
