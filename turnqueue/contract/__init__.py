"""The contract kit (G4): ``turnqueue schema diff`` compares two schemas, ``turnqueue schema
check`` checks client documents against a schema. A file that cannot be read, or parsed as SDL
or Python, is a :class:`ContractError`: the command exits with 2.

``diff``: graphql-core's own comparison (``find_breaking_changes``, ``find_dangerous_changes``),
the same one the committed-schema test uses (U1).

``check``: every operation found in the given files (:mod:`turnqueue.contract.documents`, which
also says where, so problems are reported at their files' lines) is validated with graphql-core's
``specified_rules`` together with the fragments it uses (fragments are shared by all the files
given, as GraphQL Code Generator does); deprecated fields, arguments, input fields and enum
values (``NoDeprecatedCustomRule``) are warnings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    GraphQLSyntaxError,
    Node,
    OperationDefinitionNode,
    build_schema,
    find_breaking_changes,
    find_dangerous_changes,
    parse,
    print_ast,
    specified_rules,
    validate,
    visit,
)
from graphql.language import Visitor
from graphql.validation import ASTValidationRule, NoDeprecatedCustomRule, NoUnusedFragmentsRule

from turnqueue.contract.documents import (
    SCRIPT_SUFFIXES,
    ContractError,
    Embedded,
    documents_in,
    expand_paths,
    read_text,
)

__all__ = [
    "ContractError",
    "check_documents",
    "documents_in",
    "expand_paths",
    "load_schema",
    "read_text",
    "run_check",
    "run_diff",
]

Severity = Literal["error", "warning"]
_RULES = [rule for rule in specified_rules if rule is not NoUnusedFragmentsRule]


def load_schema(sdl: str, name: str = "schema") -> GraphQLSchema:
    try:
        return build_schema(sdl)
    except (GraphQLError, TypeError) as error:
        raise ContractError(f"{name} is not a valid GraphQL schema: {error}") from error


def run_diff(old: Path, new: Path, *, strict: bool = False) -> int:
    schemas = [load_schema(read_text(path), str(path)) for path in (old, new)]
    breaking, dangerous = find_breaking_changes(*schemas), find_dangerous_changes(*schemas)
    for level, changes in (("BREAKING", breaking), ("DANGEROUS", dangerous)):
        for change in changes:
            print(f"{level:9} {change.type.name}: {change.description}")
    print(f"{len(breaking)} breaking, {len(dangerous)} dangerous change(s) from {old} to {new}")
    return 1 if breaking or (strict and dangerous) else 0


@dataclass(frozen=True)
class Finding:
    severity: Severity
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.severity}: {self.message}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    operations: int = 0
    fragments: int = 0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def _where(error: GraphQLError, fallback: str, origins: dict[int, Embedded]) -> str:
    source, locations = error.source, error.locations
    origin = origins.get(id(source))
    if origin is None or not locations:
        return fallback
    # graphql-core's locations count from the document's start; its origin places it.
    return origin.where(locations[0].line, locations[0].column)


def _spreads(node: Node) -> set[str]:
    names: set[str] = set()

    class Spreads(Visitor):
        def enter_fragment_spread(self, spread: FragmentSpreadNode, *_: object) -> None:
            names.add(spread.name.value)

    visit(node, Spreads())
    return names


def _with_fragments(
    definition: OperationDefinitionNode | FragmentDefinitionNode,
    fragments: dict[str, FragmentDefinitionNode],
) -> DocumentNode:
    """The definition and every fragment it needs (transitively) that is known."""
    needed: dict[str, FragmentDefinitionNode] = {}
    pending = sorted(_spreads(definition))
    while pending:
        name = pending.pop()
        if name in needed or name not in fragments:
            continue  # an unknown one is reported by KnownFragmentNamesRule
        needed[name] = fragments[name]
        pending.extend(sorted(_spreads(fragments[name])))
    own = [] if isinstance(definition, FragmentDefinitionNode) else [definition]
    if isinstance(definition, FragmentDefinitionNode):
        needed[definition.name.value] = definition
    return DocumentNode(definitions=(*own, *needed.values()))


def check_documents(schema: GraphQLSchema, embedded: Sequence[Embedded]) -> Report:
    report = Report()
    operations: list[tuple[OperationDefinitionNode, str]] = []
    fragments: dict[str, FragmentDefinitionNode] = {}
    printed: dict[str, str] = {}
    origins: dict[int, Embedded] = {}  # id(Source) → where its text came from
    for doc in embedded:
        where = doc.where(1, 1)
        source = doc.source()
        origins[id(source)] = doc
        try:
            parsed = parse(source)
        except GraphQLSyntaxError as error:
            report.findings.append(Finding("error", _where(error, where, origins), error.message))
            continue
        for definition in parsed.definitions:
            if isinstance(definition, OperationDefinitionNode):
                operations.append((definition, where))
            elif isinstance(definition, FragmentDefinitionNode):
                name, text = definition.name.value, print_ast(definition)
                if name in fragments and printed[name] != text:
                    report.findings.append(
                        Finding("error", where, f'fragment "{name}" is defined twice, differently')
                    )
                    continue
                fragments.setdefault(name, definition)
                printed[name] = text
            else:
                report.findings.append(
                    Finding("error", where, f"not an operation or fragment: {definition.kind}")
                )
    used = set().union(*(_spreads(op) for op, _ in operations)) if operations else set()
    units: list[tuple[OperationDefinitionNode | FragmentDefinitionNode, str]] = list(operations)
    # A fragment no operation uses is still checked against the schema, on its own.
    units += [(f, "") for name, f in fragments.items() if name not in used]
    passes: list[tuple[Severity, list[type[ASTValidationRule]]]] = [
        ("error", _RULES),
        ("warning", [NoDeprecatedCustomRule]),
    ]
    seen: set[Finding] = set()
    for definition, where in units:
        document = _with_fragments(definition, fragments)
        for severity, rules in passes:
            for problem in validate(schema, document, rules):
                finding = Finding(severity, _where(problem, where, origins), problem.message)
                if finding not in seen:  # a shared fragment's problem is reported once
                    seen.add(finding)
                    report.findings.append(finding)
    report.operations = len(operations)
    report.fragments = len(fragments)
    return report


def run_check(sdl: str, paths: Sequence[Path], *, strict: bool = False) -> int:
    schema = load_schema(sdl)
    files = expand_paths(paths)
    embedded: list[Embedded] = []
    notes: list[str] = []
    for path in files:
        found, skipped = documents_in(path)
        if not found and not skipped and path.suffix not in (".py", *SCRIPT_SUFFIXES):
            notes.append(f"{path}: no GraphQL document")
        embedded.extend(found)
        notes.extend(skipped)
    report = check_documents(schema, embedded)
    for note in notes:
        print(f"note: {note}")
    for finding in report.findings:
        print(finding)
    print(
        f"{report.operations} operation(s), {report.fragments} fragment(s) in "
        f"{len(files)} file(s): {len(report.errors)} error(s), "
        f"{len(report.warnings)} warning(s)"
    )
    if not report.operations and not report.fragments:
        print("turnqueue schema check: no GraphQL documents found")
        return 1
    return 1 if report.errors or (strict and report.warnings) else 0
