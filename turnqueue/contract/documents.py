"""Finding the GraphQL documents client code holds (G4), for :mod:`turnqueue.contract`.

The documents a file holds:

* ``.graphql`` / ``.gql`` files: the whole file;
* ``.ts`` / ``.tsx`` / ``.js`` / ``.jsx``: template literals that begin with ``query``,
  ``mutation``, ``subscription`` or ``fragment`` (``${…}`` interpolations, typically fragment
  texts, are blanked: the fragments come from their own literals);
* ``.py``: string arguments of ``gql(…)`` / ``graphql(…)`` calls built from literals and
  module-level constants; ``TABLE[key]`` with a free ``key`` is expanded over the table's keys
  (the same key for every table it indexes), so ``gql(f"… {OPS[name]}")`` checks every entry.

Each document keeps where it starts in its file (:class:`Embedded`), so problems are reported at
the file's lines.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from graphql import Source, SourceLocation

SCRIPT_SUFFIXES = {".ts", ".tsx", ".js", ".jsx", ".mts", ".cts"}
GRAPHQL_SUFFIXES = {".graphql", ".gql"}
SUFFIXES = SCRIPT_SUFFIXES | GRAPHQL_SUFFIXES | {".py"}
SKIPPED_DIRS = {"node_modules", "dist", "build", "__pycache__"}

#: what a GraphQL document embedded in code starts with (prose such as "query failed" does not)
_DOCUMENT_START = re.compile(
    r"\s*(?:#[^\n]*\n\s*)*"
    r"(?:(?:query|mutation|subscription)\s*(?:[_A-Za-z]\w*\s*)?[({@]|fragment\s+\w+\s+on\s)"
)


class ContractError(Exception):
    """A file that cannot be read, or parsed as SDL or Python: ``turnqueue schema`` exits with 2."""


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ContractError(f"cannot read {path}: {error}") from error


@dataclass(frozen=True)
class Embedded:
    """One document's text and where it starts in its file (1-based line and column)."""

    path: Path
    text: str
    line: int = 1
    column: int = 1
    #: False when the text was built (Python): positions are then within the document
    exact: bool = True
    label: str = ""  # which expansion of a Python expression, when there are several

    def source(self) -> Source:
        return Source(self.text, str(self.path), SourceLocation(self.line, self.column))

    def where(self, line: int, column: int) -> str:
        """A position in the document, as a place in its file."""
        if not self.exact:
            label = f" [{self.label}]" if self.label else ""
            return f"{self.path}:{self.line}: document{label} line {line}, column {column}"
        if line == 1:
            column += self.column - 1  # only the first line is shifted by the starting column
        return f"{self.path}:{line + self.line - 1}:{column}"


def _blank(text: str) -> str:
    """Spaces for every character but newlines, so positions after it stay true."""
    return re.sub(r"[^\n]", " ", text)


def script_documents(path: Path, code: str) -> Iterator[Embedded]:
    """Template literals of a JS/TS file that hold GraphQL documents."""
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            i = code.find("\n", i)
            i = n if i < 0 else i
        elif code.startswith("/*", i):
            end = code.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "'\"":
            i += 1
            while i < n and code[i] not in (c, "\n"):
                i += 2 if code[i] == "\\" else 1
            i += 1
        elif c == "`":
            start = i + 1
            text, i = _template(code, start)
            if _DOCUMENT_START.match(text):
                line = code.count("\n", 0, start) + 1
                column = start - (code.rfind("\n", 0, start) + 1) + 1
                yield Embedded(path, text, line, column)
        else:
            i += 1


def _template(code: str, start: int) -> tuple[str, int]:
    """The literal's text from ``start`` with ``${…}`` blanked, and the index after it."""
    out: list[str] = []
    i, n = start, len(code)
    while i < n and code[i] != "`":
        if code[i] == "\\" and i + 1 < n:
            out.append(code[i : i + 2])
            i += 2
        elif code.startswith("${", i):
            depth, j = 1, i + 2
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            out.append(_blank(code[i:j]))
            i = j
        else:
            out.append(code[i])
            i += 1
    return "".join(out), i + 1


class _Unresolved(Exception):
    pass


class _PythonStrings:
    """Module-level string (and ``{str: str}``) constants, and the strings an expression makes."""

    def __init__(self, module: ast.Module) -> None:
        self.constants: dict[str, str | dict[str, str]] = {}
        for statement in module.body:
            target, value = None, None
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                target, value = statement.target, statement.value
            if not isinstance(target, ast.Name) or value is None:
                continue
            try:
                if isinstance(value, ast.Dict):
                    table: dict[str, str] = {}
                    for k, v in zip(value.keys, value.values, strict=True):
                        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                            raise _Unresolved
                        table[k.value] = self.string(v, {})
                    self.constants[target.id] = table
                else:
                    self.constants[target.id] = self.string(value, {})
            except _Unresolved:
                self.constants.pop(target.id, None)

    def _free_keys(self, node: ast.expr) -> dict[str, set[str]]:
        """Names used as keys of constant tables, with the keys every such table has."""
        keys: dict[str, set[str]] = {}
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Subscript)
                and isinstance(sub.value, ast.Name)
                and isinstance(self.constants.get(sub.value.id), dict)
                and isinstance(sub.slice, ast.Name)
                and sub.slice.id not in self.constants
            ):
                table = self.constants[sub.value.id]
                assert isinstance(table, dict)
                keys.setdefault(sub.slice.id, set(table)).intersection_update(table)
        return keys

    def expansions(self, node: ast.expr) -> list[tuple[str, str]]:
        """(label, text) for each binding of the expression's free keys."""
        free = self._free_keys(node)
        names = sorted(free)
        out = []
        for values in itertools.product(*(sorted(free[k]) for k in names)):
            env = dict(zip(names, values, strict=True))
            label = ", ".join(f"{k}={v}" for k, v in env.items())
            out.append((label, self.string(node, env)))
        return out

    def string(self, node: ast.expr, env: dict[str, str]) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and isinstance(self.constants.get(node.id), str):
            return str(self.constants[node.id])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.string(node.left, env) + self.string(node.right, env)
        if isinstance(node, ast.JoinedStr):
            return "".join(self.string(part, env) for part in node.values)
        if isinstance(node, ast.FormattedValue) and node.format_spec is None:
            return self.string(node.value, env)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            table = self.constants.get(node.value.id)
            key: str | None = None
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                key = node.slice.value
            elif isinstance(node.slice, ast.Name):
                key = env.get(node.slice.id)
            if isinstance(table, dict) and key in table:
                return table[key]
        raise _Unresolved


_GQL_CALLS = {"gql", "graphql"}


def python_documents(path: Path, code: str) -> tuple[list[Embedded], list[str]]:
    """Documents of ``gql(…)`` calls, and a note for each call whose text cannot be worked out."""
    try:
        module = ast.parse(code, str(path))
    except SyntaxError as error:
        raise ContractError(f"{path} is not valid Python: {error}") from error
    strings = _PythonStrings(module)
    found: list[Embedded] = []
    notes: list[str] = []
    for node in ast.walk(module):
        if not isinstance(node, ast.Call) or len(node.args) != 1:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name not in _GQL_CALLS:
            continue
        try:
            expanded = strings.expansions(node.args[0])
        except _Unresolved:
            notes.append(f"{path}:{node.lineno}: cannot work out the document of this {name}()")
            continue
        for label, text in expanded:
            found.append(Embedded(path, text, node.lineno, 1, exact=False, label=label))
    return found, notes


def documents_in(path: Path) -> tuple[list[Embedded], list[str]]:
    text = read_text(path)
    if path.suffix in GRAPHQL_SUFFIXES:
        return [Embedded(path, text)], []
    if path.suffix == ".py":
        return python_documents(path, text)
    return list(script_documents(path, text)), []


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files as given; directories walked for the suffixes this module reads."""
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise ContractError(f"no such file or directory: {path}")
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if _wanted(p, path)))
        else:
            files.append(path)
    return files


def _wanted(path: Path, root: Path) -> bool:
    """A file of a suffix this module reads, in no skipped or hidden directory under ``root``."""
    if not path.is_file() or path.suffix not in SUFFIXES:
        return False
    return not any(p in SKIPPED_DIRS or p.startswith(".") for p in path.relative_to(root).parts)
