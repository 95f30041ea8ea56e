"""The schema's building helpers: ``copied`` and ``null`` (schema/fields.py) and the ``mutation``
decorator (resolvers/mutations.py) that answers a ``UserFacingError`` with ``userErrors``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import strawberry

from turnqueue import domain
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.resolvers.mutations import mutation
from turnqueue.schema.fields import copied, field, null
from turnqueue.schema.payloads import UserError
from turnqueue.schema.turns import Turn


@strawberry.type(description="A test type.")
class Shown:
    name: str = strawberry.field(description="Copied.")
    size: int = strawberry.field(description="Copied.")
    label: str | None = null("Given, or null.")

    @field("A resolver's field: never copied.")
    def loud(self) -> str:
        return self.name.upper()


@dataclass
class Value:
    name: str
    size: int
    label: str
    extra: str = "not a field of Shown"


def test_copied_takes_each_constructor_field_from_the_same_named_attribute() -> None:
    shown = copied(Shown, Value("a", 3, "from the value"))
    assert (shown.name, shown.size, shown.label) == ("a", 3, "from the value")


def test_copied_prefers_what_is_given() -> None:
    shown = copied(Shown, Value("a", 3, "from the value"), label="given", size=4)
    assert (shown.name, shown.size, shown.label) == ("a", 4, "given")


def test_copied_requires_every_field_it_copies() -> None:
    @dataclass
    class Partial:
        name: str

    with pytest.raises(AttributeError):
        copied(Shown, Partial("a"))


def test_turn_from_domain_copies_every_field() -> None:
    at = datetime(2026, 1, 2, tzinfo=UTC)
    turn = domain.Turn(
        id="t",
        session_id="s",
        prompt="p",
        source=domain.MessageSource.USER,
        status=domain.TurnStatus.FAILED,
        output="o",
        error="e",
        started_at=at,
        ended_at=at,
        error_kind=domain.AgentErrorKind.INTERNAL,
        agent_stderr="stderr",
        client_message_id="c",
        entry_id="q",
    )
    shown = Turn.from_domain(turn)
    assert (shown.id, shown.session_id, shown.prompt, shown.output) == ("t", "s", "p", "o")
    assert (shown.source, shown.status) == (domain.MessageSource.USER, domain.TurnStatus.FAILED)
    assert (shown.error, shown.error_kind, shown.agent_stderr) == (
        "e",
        domain.AgentErrorKind.INTERNAL,
        "stderr",
    )
    assert (shown.client_message_id, shown.queue_entry_id) == ("c", "q")
    assert (shown.started_at, shown.ended_at) == (at, at)


@strawberry.type(description="A test payload.")
class Payload:
    value: str | None = null("The value.")
    user_errors: list[UserError] = strawberry.field(default_factory=list, description="Errors.")


@strawberry.type(description="Q.")
class Query:
    @field("One.")
    def shown(self) -> Shown:
        return Shown(name="a", size=1)

    @field("A payload.")
    def payload(self) -> Payload:
        return Payload()


def test_null_is_a_nullable_field_null_by_default_with_its_description() -> None:
    assert Shown(name="a", size=1).label is None
    sdl = str(strawberry.Schema(query=Query))
    assert '  """Given, or null."""\n  label: String\n' in sdl
    assert '  """The value."""\n  value: String\n' in sdl


@strawberry.type(description="M.")
class Mutations:
    @mutation("Answers, refuses or fails as `how` says.")
    async def act(self, how: str) -> Payload:
        if how == "refuse":
            raise UserFacingError(ErrorCode.INVALID_INPUT, "refused", ["how"])
        if how == "fail":
            raise RuntimeError("a fault")
        return Payload(value=how)


MUTATION_SCHEMA = strawberry.Schema(query=Query, mutation=Mutations)
ACT = "mutation($how: String!) { act(how: $how) { value userErrors { code message field } } }"


async def test_mutation_answers_its_resolvers_payload() -> None:
    result = await MUTATION_SCHEMA.execute(ACT, variable_values={"how": "ok"})
    assert result.errors is None
    assert result.data == {"act": {"value": "ok", "userErrors": []}}


async def test_mutation_answers_a_user_facing_error_with_user_errors_only() -> None:
    result = await MUTATION_SCHEMA.execute(ACT, variable_values={"how": "refuse"})
    assert result.errors is None
    assert result.data == {
        "act": {
            "value": None,
            "userErrors": [{"code": "INVALID_INPUT", "message": "refused", "field": ["how"]}],
        }
    }


async def test_mutation_lets_any_other_error_through() -> None:
    result = await MUTATION_SCHEMA.execute(ACT, variable_values={"how": "fail"})
    assert result.errors is not None and result.errors[0].message == "a fault"
    assert result.data is None
