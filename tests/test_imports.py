"""LAYOUT.md's import direction, read from the source with ``ast`` (``TYPE_CHECKING`` imports
included): no cycle between turnqueue modules, no import up the layers, no SQL outside the store
and no GraphQL in the engine or below. The layers are explained in docs/architecture.md."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "turnqueue"
#: Top to bottom: a module imports its own layer or lower ones (LAYOUT.md's chain, with the
#: modules it does not list placed as docs/architecture.md says). "" is ``turnqueue/__init__``.
LAYERS = (
    {"__main__", "cli", "startup"},
    {"app"},
    {"prometheus"},
    {"api"},  # the GraphQL edge: the view, the schema, its executions
    {"resolvers"},
    {"engine"},
    {"store"},
    {"bus", "schema", "agents", "auth", "contract", "graphql_internals"},
    {"domain", "errors", "settings", "logs", "timeouts", "fastinit", ""},
)
#: A layer skipped on purpose: the resolvers read through the engine, never the store.
BYPASSES = {("resolvers", "store")}
#: Third-party packages kept to some layers: SQL in the store, GraphQL above the engine.
FOREIGN = {p: {"store"} for p in ("sqlalchemy", "sqlmodel", "alembic", "asyncpg", "aiosqlite")}
NO_GRAPHQL = {"engine", "store", "bus", "agents", "domain", "errors", "settings"}


@cache
def imports() -> dict[str, set[str]]:
    """Every module's imports: turnqueue modules by name, other packages by their top name."""
    paths = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    found: dict[str, set[str]] = {}
    for name, path in paths.items():
        found[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert not node.level, f"{name}: use absolute imports"
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if not target.startswith("turnqueue"):
                    found[name].add(target.partition(".")[0])
                while target not in paths and "." in target:
                    target = target.rpartition(".")[0]  # a name defined in a module
                if target in paths and target != name:
                    found[name].add(target)
    return found


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def edges() -> dict[str, set[str]]:
    return {a: {b for b in bs if b.startswith("turnqueue")} for a, bs in imports().items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for target in sorted(graph[module]):
            if target in path:
                return [*path[path.index(target) :], target]
            if target not in done and (cycle := visit(target)):
                return cycle
        done.add(path.pop())
        return None

    return next((c for m in sorted(graph) if m not in done and (c := visit(m))), None)


def test_layout_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(edges())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_layout_imports_never_go_up_the_layers() -> None:
    rank = {top: i for i, tops in enumerate(LAYERS) for top in tops}
    wrong = []
    for a, targets in edges().items():
        assert layer(a) in rank, f"{a}: place it in LAYERS (and in docs/architecture.md)"
        for b in targets:
            if rank[layer(b)] < rank[layer(a)] or (layer(a), layer(b)) in BYPASSES:
                wrong.append(f"{a} -> {b}")
    assert not wrong, "imports against LAYOUT.md's direction:\n" + "\n".join(sorted(wrong))


def test_layout_sql_stays_in_the_store_and_graphql_above_the_engine() -> None:
    wrong = []
    for a, targets in imports().items():
        for b in targets:
            if layer(a) not in FOREIGN.get(b, {layer(a)}):
                wrong.append(f"{a} -> {b}")
            if b in {"strawberry", "graphql", "starlette"} and layer(a) in NO_GRAPHQL:
                wrong.append(f"{a} -> {b}")
    assert not wrong, "\n".join(sorted(wrong))


#: Strawberry's and graphql-core's public modules: the packages' own faces and the modules their
#: documentation imports from (graphql-core documents each subpackage of ``graphql``).
PUBLIC_GRAPHQL = {
    "strawberry",
    "strawberry.asgi",
    "strawberry.dataloader",
    "strawberry.exceptions",
    "strawberry.extensions",
    "strawberry.http",
    "strawberry.permission",
    "strawberry.relay",
    "strawberry.scalars",
    "strawberry.schema",
    "strawberry.schema.config",
    "strawberry.schema.name_converter",
    "strawberry.subscriptions",
    "strawberry.types",
    "graphql",
    "graphql.error",
    "graphql.execution",
    "graphql.language",
    "graphql.pyutils",
    "graphql.type",
    "graphql.utilities",
    "graphql.validation",
}
#: The one module that takes names from their other modules, and says why for each.
GRAPHQL_DOOR = "turnqueue.graphql_internals"


def test_g_only_one_module_reaches_into_strawberry_and_graphql_core_internals() -> None:
    """issue 24: an upgrade of Strawberry or graphql-core starts in one module; every other
    module imports only their public modules (TYPE_CHECKING imports included)."""
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                foreign = target.partition(".")[0] in {"strawberry", "graphql"}
                if foreign and target not in PUBLIC_GRAPHQL and module != GRAPHQL_DOOR:
                    wrong.append(f"{module} -> {target}")
    assert not wrong, f"import these through {GRAPHQL_DOOR}:\n" + "\n".join(sorted(wrong))
