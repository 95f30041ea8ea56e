"""The cluster's wire format (``engine/wire.py``) as pure functions: what one instance sends is
what another publishes, and nothing sent can exceed NOTIFY's limit (M4)."""

from __future__ import annotations

import json

import pytest

from turnqueue.bus import Event, EventKind
from turnqueue.domain import OutputChunk, OutputMark, OwnerRequest, RequestState, TurnStatus
from turnqueue.engine.wire import (
    MAX_REASON,
    NotificationTooLarge,
    message,
    origin_prefix,
    outcome,
    refusal,
    relayed_event,
    runtime_fields,
)
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.store.notify import MAX_PAYLOAD_BYTES


def test_m4_a_message_begins_with_its_origin_and_refuses_what_exceeds_the_limit() -> None:
    sent = message(7, "cmd", {"to": 3, "id": "r1"})
    assert sent.startswith(origin_prefix(7)) and not sent.startswith(origin_prefix(70))
    assert json.loads(sent) == {"o": 7, "t": "cmd", "to": 3, "id": "r1"}
    with pytest.raises(NotificationTooLarge):
        message(7, "ev", {"s": "x" * MAX_PAYLOAD_BYTES})


def test_m4_o1_output_travels_as_a_pointer_and_arrives_as_a_mark() -> None:
    chunk = OutputChunk("s1", "t1", 10, "😀" * 5_000, True, TurnStatus.COMPLETED)
    fields = runtime_fields(Event(EventKind.OUTPUT, "s1", chunk=chunk))
    assert fields is not None
    sent = message(1, "ev", fields)
    assert "😀" not in sent and len(sent) < 200
    event = relayed_event(json.loads(sent))
    assert event.relayed and event.kind is EventKind.OUTPUT
    assert event.mark == OutputMark("s1", "t1", 5_010, True, TurnStatus.COMPLETED)


def test_m4_only_runtime_events_have_fields_of_their_own() -> None:
    assert runtime_fields(Event(EventKind.QUEUE, "s1", 4)) is None


def test_m4_a_refusal_comes_back_as_the_owner_raised_it_and_a_result_as_it_was() -> None:
    def done(result: dict[str, object]) -> OwnerRequest:
        return OwnerRequest("r1", 1, 2, "cancel", "{}", RequestState.DONE, json.dumps(result))

    refused = refusal(ErrorCode.SESSION_BUSY, "x" * (MAX_REASON + 10), ["sessionId"])
    with pytest.raises(Conflict) as raised:
        outcome(done(refused))
    assert raised.value.code is ErrorCode.SESSION_BUSY
    assert raised.value.message == "x" * MAX_REASON and raised.value.field == ["sessionId"]
    assert outcome(done({"r": {"turn": "t1"}})) == {"turn": "t1"}
