"""The web example's operations are typed from ``schema.graphql`` by GraphQL Code Generator (client
preset, SPEC G5): ``npm run codegen`` in ``frontend_examples/web`` writes ``src/gql/``, which is
committed. These tests regenerate it into a temporary directory and compare, so a schema change
(``./tq export-schema``) or a changed document without a re-run fails here. Skipped, saying why,
without node/npm.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from frontend_server import REPO
from web_page import NO_NODE, WEB, ensure_node_modules

GENERATED = WEB / "src" / "gql"
pytestmark = pytest.mark.skipif(NO_NODE, reason="node/npm not installed (CI installs them)")


def _codegen(out: Path, schema: Path | None = None) -> None:
    """``npm run codegen`` into ``out`` (from ``schema`` instead of the repository's)."""
    ensure_node_modules()
    env = {**os.environ, "CODEGEN_OUT": f"{out}/", "NO_COLOR": "1"}
    if schema is not None:
        env["CODEGEN_SCHEMA"] = str(schema)
    result = subprocess.run(
        ["npm", "run", "codegen", "--silent"],
        cwd=WEB,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _stale_files(fresh: Path) -> list[str]:
    """The files that differ between a fresh run and the committed ``src/gql/`` (or exist in
    only one of them)."""
    names = {p.name for p in fresh.iterdir()} | {p.name for p in GENERATED.iterdir()}
    return sorted(
        name
        for name in names
        if not (fresh / name).is_file()
        or not (GENERATED / name).is_file()
        or (fresh / name).read_bytes() != (GENERATED / name).read_bytes()
    )


def test_g5_generated_web_client_types_are_up_to_date(tmp_path: Path) -> None:
    """G5: the committed ``src/gql/`` is exactly what ``npm run codegen`` makes from today's
    ``schema.graphql`` and the page's documents."""
    _codegen(tmp_path / "gql")
    stale = _stale_files(tmp_path / "gql")
    assert stale == [], (
        f"frontend_examples/web/src/gql is stale ({', '.join(stale)}): run "
        "`npm run codegen` in frontend_examples/web and commit the result"
    )


def test_g5_a_schema_change_makes_the_generated_types_stale(tmp_path: Path) -> None:
    """G5: the staleness check can fail: a schema with one more enum value (a new ``ErrorCode``)
    generates different types."""
    schema = (REPO / "schema.graphql").read_text()
    changed = schema.replace("enum ErrorCode {", "enum ErrorCode {\n  SOMETHING_NEW", 1)
    assert changed != schema
    (tmp_path / "schema.graphql").write_text(changed)
    _codegen(tmp_path / "gql", schema=tmp_path / "schema.graphql")
    assert "graphql.ts" in _stale_files(tmp_path / "gql")


def test_g5_the_page_typechecks_against_the_generated_types() -> None:
    """G5: ``tsc`` (strict) accepts the page with the generated types: every field it reads and
    every mutation input it sends exists in the schema with that type."""
    ensure_node_modules()
    result = subprocess.run(
        ["npm", "run", "typecheck", "--silent"],
        cwd=WEB,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
