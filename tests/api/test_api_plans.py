"""``turnqueue.api.plans``: a planned mutation answers exactly what Strawberry's execution answers
(P4), against real servers: the same script of every queue mutation, its refusals, bad
variables, aliases and fragments, a fault, with plans on and off, gives the same responses."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from api_helpers import Api, ApiFactory

from turnqueue.api.plans import Plans

QUEUE = "queue { revision autoRun pauseReason heldBy count entries { id content position } }"
ERRORS = "userErrors { code message field }"
CREATE = f"""mutation($agent: String) {{ createTask(input: {{title: "t", agent: $agent}}) {{
  task {{ id title workflowStep createdAt }} session {{ id state revision promptable }}
  {ERRORS} }} }}"""
SET_AUTO_RUN = f"""mutation($s: ID!, $on: Boolean!, $rev: Revision) {{
  setAutoRun(input: {{sessionId: $s, autoRun: $on, expectedRevision: $rev}}) {{
    dispatched turn {{ id prompt status }} {QUEUE} {ERRORS} }} }}"""
ENQUEUE = f"""mutation($s: ID!, $c: String!) {{
  enqueueMessage(input: {{sessionId: $s, content: $c}}) {{
  dispatched entry {{ id content source position queuedAt }} {QUEUE} {ERRORS} }} }}"""
UPDATE = f"""mutation($s: ID!, $e: ID!, $c: String!) {{
  updateQueueEntry(input: {{sessionId: $s, entryId: $e, content: $c}}) {{ {QUEUE} {ERRORS} }} }}"""
REORDER = f"""mutation($s: ID!, $ids: [ID!]!) {{
  reorderQueue(input: {{sessionId: $s, orderedIds: $ids}}) {{ {QUEUE} {ERRORS} }} }}"""
REMOVE = f"""mutation($s: ID!, $e: ID!) {{
  removeQueueEntry(input: {{sessionId: $s, entryId: $e}}) {{ {QUEUE} {ERRORS} }} }}"""
CLEAR = f"""mutation($s: ID!) {{ clearQueue(input: {{sessionId: $s}}) {{ {QUEUE} {ERRORS} }} }}"""
#: an alias, a named fragment, an inline one, ``__typename`` and a literal ``@skip``
SHAPED = """mutation Shaped($s: ID!) { renamed: setAutoRun(input: {sessionId: $s, autoRun: false}) {
  __typename ...P queue { ... on QueueStatus { count } revision @skip(if: true) } } }
  fragment P on SetAutoRunPayload { dispatched userErrors { code } }"""
SEND = f"""mutation($s: ID!, $c: String!) {{ sendMessage(input: {{sessionId: $s, content: $c}}) {{
  turn {{ id prompt status source }} queuedEntry {{ id }} session {{ id state }}
  {QUEUE} {ERRORS} }} }}"""
CANCEL = f"""mutation($s: ID!) {{ cancel(input: {{sessionId: $s}}) {{
  outcome session {{ id state cancellationPending }} cancellation {{ pending }} {ERRORS} }} }}"""

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


def normalised(body: Any, ids: dict[str, str]) -> Any:
    """The run's own ids (numbered in order of appearance) and times replaced."""
    if isinstance(body, dict):
        return {k: normalised(v, ids) for k, v in body.items()}
    if isinstance(body, list):
        return [normalised(v, ids) for v in body]
    if isinstance(body, str):
        body = UUID.sub(lambda m: ids.setdefault(m[0], f"ID{len(ids)}"), body)
        return STAMP.sub("STAMP", body)
    return body


async def _script(api: Api) -> list[Any]:
    """Every mutation with a basic-field payload, its refusals and bad input, as answered."""
    answers: list[Any] = []

    async def run(query: str, **variables: Any) -> dict[str, Any]:
        response = await api.post(query, variables)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        body: dict[str, Any] = response.json()
        answers.append(body)
        return body

    created = await run(CREATE)
    sid = created["data"]["createTask"]["session"]["id"]
    off = await run(SET_AUTO_RUN, s=sid, on=False)
    revision = off["data"]["setAutoRun"]["queue"]["revision"]
    entries = [
        (await run(ENQUEUE, s=sid, c=c))["data"]["enqueueMessage"]["entry"]["id"]
        for c in ("a", "b", "c")
    ]
    await run(UPDATE, s=sid, e=entries[0], c="A")
    await run(UPDATE, s=sid, e=entries[0], c="")  # INVALID_INPUT
    await run(REORDER, s=sid, ids=entries[::-1])
    await run(REORDER, s=sid, ids=entries[:1])  # QUEUE_CHANGED
    await run(REMOVE, s=sid, e=entries[1])
    await run(REMOVE, s=sid, e="00000000-0000-4000-8000-000000000000")  # ENTRY_NOT_FOUND
    await run(SET_AUTO_RUN, s=sid, on=True, rev=revision)  # a stale revision: QUEUE_CHANGED
    await run(SET_AUTO_RUN, s="not-an-id", on=True)  # INVALID_INPUT
    await run(SET_AUTO_RUN, s=sid, on="yes")  # variables that do not coerce
    await run(SET_AUTO_RUN, s=sid)  # a required variable missing
    await run(SHAPED, s=sid)
    await run(CLEAR, s=sid)
    await run(SET_AUTO_RUN, s=sid, on=True)  # nothing queued: nothing starts
    slow = (await run(CREATE, agent="slow"))["data"]["createTask"]["session"]["id"]
    await run(SEND, s=slow, c="work")
    await run(SET_AUTO_RUN, s=slow, on=False)
    await run(ENQUEUE, s=slow, c="next")
    await run(SET_AUTO_RUN, s=slow, on=True)  # held: BUSY
    await run(CANCEL, s=slow)
    return answers


async def test_p4_planned_mutations_answer_what_the_executor_answers(
    start_api: ApiFactory,
) -> None:
    """P4, Q13, S3: the same script with plans on and off gets the same answers, and the
    planned server did plan every document but the one that selects a resolver field."""
    planned = await start_api()
    executed = await start_api(compiled_operations=False)
    plans: Plans = planned.app.state.plans
    assert executed.app.state.plans is None
    got = normalised(await _script(planned), {})
    assert got == normalised(await _script(executed), {})
    for document in (CREATE, SET_AUTO_RUN, ENQUEUE, UPDATE, REORDER, REMOVE, CLEAR, SEND):
        assert plans.get(document, None) is not None
    assert plans.get(SHAPED, "Shaped") is not None
    assert plans.get(CANCEL, None) is None  # Session.cancellationPending: a resolver
    codes = [b["data"] and next(iter(b["data"].values()))["userErrors"] for b in got]
    assert [c[0]["code"] for c in codes if c] == [
        *("INVALID_INPUT", "QUEUE_CHANGED", "ENTRY_NOT_FOUND"),
        *("QUEUE_CHANGED", "INVALID_INPUT"),
    ]
    refused = [b["errors"][0]["message"] for b in got if "errors" in b]
    assert len(refused) == 2 and all(m.startswith("Variable '$on'") for m in refused)


@pytest.mark.parametrize("compiled", [True, False])
async def test_s3_a_fault_in_a_planned_mutation_is_masked_located_and_logged(
    start_api: ApiFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    compiled: bool,
) -> None:
    """S3: an unexpected error is masked (located at the field) and logged, planned or not."""
    api = await start_api(compiled_operations=compiled)
    sid = await api.create_session()

    async def broken(*_: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(api.engine, "set_auto_run", broken)
    with caplog.at_level(logging.ERROR, logger="turnqueue.api.assembly"):
        body = (await api.post(SET_AUTO_RUN, {"s": sid, "on": False})).json()
    assert body == {
        "data": None,
        "errors": [
            {
                "message": "Unexpected error.",
                "locations": [{"line": 2, "column": 3}],
                "path": ["setAutoRun"],
            }
        ],
    }
    assert "secret internals" in caplog.text
