"""G4 contract kit: ``turnqueue schema diff`` and ``turnqueue schema check``, on real documents.

The documents are the examples' own: the web page's operations (template literals in
``frontend_examples/web/src``) and the Python client's (``gql(…)`` calls built from constants).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    REMOVE,
    FieldDefinitionNode,
    GraphQLObjectType,
    ObjectTypeDefinitionNode,
    Visitor,
    build_schema,
    parse,
    print_ast,
    print_schema,
    visit,
)

from turnqueue.cli import main
from turnqueue.contract import check_documents, documents_in, expand_paths, load_schema
from turnqueue.contract.documents import script_documents

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "schema.graphql"
WEB = REPO / "frontend_examples" / "web" / "src"
PYTHON_CLIENT = REPO / "frontend_examples" / "python_client"
GRAPHIQL_DEFAULT = REPO / "graphiql" / "src" / "default-query.graphql"


def sdl() -> str:
    return COMMITTED.read_text(encoding="utf-8")


def without_field(text: str, type_name: str, field: str) -> str:
    """The SDL with one field of one type removed (its description with it)."""

    class Remove(Visitor):
        within: str | None = None

        def enter_object_type_definition(self, node: ObjectTypeDefinitionNode, *_: Any) -> None:
            self.within = node.name.value

        def enter_field_definition(self, node: FieldDefinitionNode, *_: Any) -> Any:
            return REMOVE if (self.within, node.name.value) == (type_name, field) else None

    return print_ast(visit(parse(text), Remove()))


def with_deprecated(text: str, type_name: str, field: str, reason: str) -> str:
    """The SDL with one field marked ``@deprecated(reason:)``."""
    schema = build_schema(text)
    target = schema.get_type(type_name)
    assert isinstance(target, GraphQLObjectType)
    target.fields[field].deprecation_reason = reason
    return print_schema(schema)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def operation_names(paths: list[Path]) -> set[str]:
    report_docs = [doc for p in expand_paths(paths) for doc in documents_in(p)[0]]
    names = set()
    for doc in report_docs:
        for line in doc.text.splitlines():
            words = line.split()
            if len(words) > 1 and words[0] in ("query", "mutation", "subscription"):
                names.add(words[1].split("(")[0])
    return names


# -- diff -----------------------------------------------------------------------------------------
def test_g4_diff_of_identical_schemas_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "diff", str(COMMITTED), str(COMMITTED)]) == 0
    assert "0 breaking, 0 dangerous" in capsys.readouterr().out


def test_g4_diff_reports_a_breaking_change_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = write(tmp_path / "new.graphql", without_field(sdl(), "Session", "cancellationPending"))
    assert main(["schema", "diff", str(COMMITTED), str(new)]) == 1
    out = capsys.readouterr().out
    assert "BREAKING  FIELD_REMOVED: Field Session.cancellationPending was removed." in out
    assert "1 breaking, 0 dangerous" in out


def test_g4_diff_reports_dangerous_changes_and_exits_0_unless_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "  NOT_FOUND\n" in sdl()
    new = write(tmp_path / "new.graphql", sdl().replace("  NOT_FOUND\n", "  NOT_FOUND\n  GONE\n"))
    assert main(["schema", "diff", str(COMMITTED), str(new)]) == 0
    out = capsys.readouterr().out
    assert "DANGEROUS VALUE_ADDED_TO_ENUM: Enum value ErrorCode.GONE was added." in out
    assert main(["schema", "diff", "--strict", str(COMMITTED), str(new)]) == 1


def test_g4_diff_of_an_invalid_sdl_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = write(tmp_path / "broken.graphql", "type Query { x: Nope }")
    assert main(["schema", "diff", str(COMMITTED), str(broken)]) == 2
    assert "not a valid GraphQL schema" in capsys.readouterr().err
    assert main(["schema", "diff", str(COMMITTED), str(tmp_path / "missing.graphql")]) == 2


# -- check on the examples ------------------------------------------------------------------------
def test_g4_check_finds_the_web_examples_operations() -> None:
    names = operation_names([WEB])
    assert {"SessionSnapshot", "Tasks", "QueueStatusChanged", "TurnOutput", "CreateTask"} <= names
    assert {"SendMessage", "SetAutoRun", "SendNow", "Cancel", "ReorderQueue"} <= names


def test_g4_check_expands_the_python_clients_tables() -> None:
    docs, notes = documents_in(PYTHON_CLIENT / "client.py")
    assert notes == []
    labels = {doc.label for doc in docs}
    for field in ("queueStatusChanged", "cancellationChanged", "sessionChanged", "turnOutput"):
        assert f"field={field}" in labels
    for name in ("setAutoRun", "sendMessage", "sendNow", "cancel"):
        assert f"name={name}" in labels
        (doc,) = [d for d in docs if d.label == f"name={name}"]
        assert f"{name}(input: $input)" in doc.text  # the input type and mutation of one key
    assert any("query Snapshot" in d.text for d in docs)


@pytest.mark.parametrize("target", [WEB, PYTHON_CLIENT], ids=["web", "python_client"])
def test_g4_the_examples_documents_are_valid_against_the_code_schema(
    target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", "check", "--strict", str(target)]) == 0
    out = capsys.readouterr().out
    # Issue 26: the examples teach the current API (connections): no deprecated field either.
    assert " 0 error(s), 0 warning(s)" in out, out


def test_g4_graphiql_first_tab_uses_no_deprecated_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 26: GraphiQL's default operations teach the current API (``tasksConnection``, not
    the deprecated ``tasks``): no warning even with ``--strict``."""
    assert main(["schema", "check", "--strict", str(GRAPHIQL_DEFAULT)]) == 0
    out = capsys.readouterr().out
    assert "tasksConnection" in GRAPHIQL_DEFAULT.read_text()
    assert " 0 error(s), 0 warning(s)" in out, out


@pytest.mark.parametrize("target", [WEB, PYTHON_CLIENT], ids=["web", "python_client"])
def test_g4_check_fails_when_the_schema_loses_a_field_the_examples_use(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both examples read CancellationStatus.pending; a schema without it breaks them."""
    shrunk = without_field(sdl(), "CancellationStatus", "pending")
    schema = write(tmp_path / "shrunk.graphql", shrunk)
    assert main(["schema", "check", "--schema", str(schema), str(target)]) == 1
    out = capsys.readouterr().out
    assert "error: Cannot query field 'pending' on type 'CancellationStatus'." in out
    # The place is reported in the client's own file.
    expected = "api.ts:" if target == WEB else "client.py:"
    assert any(expected in line and "'pending'" in line for line in out.splitlines()), out


def test_g4_check_reports_deprecated_use_as_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deprecated = with_deprecated(sdl(), "Session", "promptable", "Use state.")
    schema = write(tmp_path / "deprecated.graphql", deprecated)
    assert main(["schema", "check", "--schema", str(schema), str(WEB)]) == 0
    out = capsys.readouterr().out
    assert "warning: The field Session.promptable is deprecated. Use state." in out
    assert main(["schema", "check", "--strict", "--schema", str(schema), str(WEB)]) == 1


# -- check on small documents ---------------------------------------------------------------------
def test_g4_check_positions_point_into_the_ts_file(tmp_path: Path) -> None:
    source = write(
        tmp_path / "ops.ts",
        "const F = `fragment Q on QueueStatus { id nope }`;\n"
        '// `query Commented { x }`\nconst s = "query failed: `x`";\n'
        "export const A = `query A($id: ID!) {\n  session(id: $id) { id ...Missing }\n}\n${F}`;\n"
        "const prose = `query failed: ${s}`;\n",
    )
    docs = list(script_documents(source, source.read_text()))
    assert [d.line for d in docs] == [1, 4]  # neither the comment nor the prose
    report = check_documents(load_schema(sdl()), docs)
    assert sorted(str(f) for f in report.errors) == [
        f"{source}:1:43: error: Cannot query field 'nope' on type 'QueueStatus'.",
        f"{source}:5:28: error: Unknown fragment 'Missing'.",
    ]


def test_g4_check_graphql_files_and_syntax_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "good.graphql", "query Tasks { tasks { id title } }\n")
    assert main(["schema", "check", str(good)]) == 0
    bad = write(tmp_path / "bad.graphql", "query Tasks { tasks { id \n")
    assert main(["schema", "check", str(good), str(bad)]) == 1
    assert f"{bad}:2:1: error: Syntax Error" in capsys.readouterr().out
    empty = write(tmp_path / "empty.ts", "export const x = 1;\n")
    assert main(["schema", "check", str(empty)]) == 1  # nothing was checked
    assert main(["schema", "check", str(tmp_path / "missing.graphql")]) == 2


def test_g4_check_runs_as_the_real_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "turnqueue", "schema", "check", str(WEB), str(PYTHON_CLIENT)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 error(s)" in done.stdout
