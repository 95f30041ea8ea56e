"""Security through the real server: S1 authentication, S2 authorisation, S3 bad input, S4 origins.

Every refusal is GraphQL JSON (``errors``), never an HTML or plain-text error page (§7).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import httpx
import pytest
from gql.transport.exceptions import TransportConnectionFailed, TransportQueryError

SESSION_Q = "query($id: ID!) { session(id: $id) { id queue { count revision } turns { id } } }"
SUBSCRIPTIONS = {
    "cancellationChanged": "{ pending }",
    "queueStatusChanged": "{ revision }",
    "sessionChanged": "{ revision }",
    "turnOutput": "{ text }",
}


def graphql_errors(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert set(body) <= {"errors", "data"} and body["errors"], body
    errors: list[dict[str, Any]] = body["errors"]
    assert all(isinstance(e["message"], str) and e["message"] for e in errors)
    return errors


# -- S1 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "wrong", "tok-a-but-longer"])
async def test_s1_http_without_valid_token_is_refused_with_graphql_json(
    api: Any, token: str | None
) -> None:
    response = await api.post("{ tasks { id } }", token=token)
    assert response.status_code == 401
    assert graphql_errors(response)[0]["extensions"]["code"] == "UNAUTHENTICATED"
    other_scheme = await api.http.post(
        api.url, json={"query": "{ tasks { id } }"}, headers={"Authorization": "Basic tok-a"}
    )
    assert other_scheme.status_code == 401


async def test_s1_graphiql_healthz_readyz_need_no_token(api: Any) -> None:
    page = await api.http.get(api.url, headers={"Accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()
    health = await api.http.get(f"{api.base}/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    ready = await api.http.get(f"{api.base}/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"
    query_by_get = await api.http.get(api.url, params={"query": "{ tasks { id } }"})
    assert query_by_get.status_code == 401  # a GET with a query is a GraphQL request


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_s1_websocket_without_valid_token_is_rejected(api: Any, token: str | None) -> None:
    with pytest.raises(TransportConnectionFailed) as raised:
        async with api.ws(token=token) as ws:
            await ws.execute("{ tasks { id } }")
    assert "code=4403" in repr(raised.value.__cause__)  # Strawberry's ConnectionRejectionError


async def test_s1_principals_are_told_apart(api: Any) -> None:
    await api.create_session("tok-a")
    await api.create_session("tok-b")
    await api.create_session("tok-b")
    alice = await api.data("{ tasks { id } }", "tok-a")
    bob = await api.data("{ tasks { id } }", "tok-b")
    assert len(alice["tasks"]) == 1 and len(bob["tasks"]) == 2


# -- S2 -------------------------------------------------------------------------------------------
async def test_s2_queries_answer_null_for_another_principals_ids(api: Any) -> None:
    sid = await api.create_session("tok-a")
    task = await api.data("query($id: ID!) { session(id: $id) { task { id } } }", id=sid)
    task_id = task["session"]["task"]["id"]
    assert (await api.data(SESSION_Q, "tok-b", id=sid)) == {"session": None}
    assert (await api.data("query($id: ID!) { task(id: $id) { id } }", "tok-b", id=task_id)) == {
        "task": None
    }
    assert (await api.data("{ tasks { id } }", "tok-b")) == {"tasks": []}
    assert (await api.data(SESSION_Q, "tok-a", id="not-an-id")) == {"session": None}


async def test_s2_every_mutation_answers_not_found_for_another_principals_session(
    api: Any,
) -> None:
    sid = await api.create_session("tok-a", agent="slow")
    await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="busy")
    entry = await api.mutate("enqueueMessage", "entry { id }", sessionId=sid, content="mine")
    eid = entry["entry"]["id"]
    task = await api.data("query($id: ID!) { session(id: $id) { task { id } } }", id=sid)
    before = await api.data(SESSION_Q, id=sid)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("sendMessage", {"sessionId": sid, "content": "x"}),
        ("enqueueMessage", {"sessionId": sid, "content": "x"}),
        ("updateQueueEntry", {"sessionId": sid, "entryId": eid, "content": "x"}),
        ("removeQueueEntry", {"sessionId": sid, "entryId": eid}),
        ("clearQueue", {"sessionId": sid}),
        ("reorderQueue", {"sessionId": sid, "orderedIds": [eid]}),
        ("cancel", {"sessionId": sid}),
        ("setAutoRun", {"sessionId": sid, "autoRun": False}),
        ("sendNow", {"sessionId": sid, "entryId": eid}),
        ("drain", {"sessionId": sid}),
        ("answerClarification", {"sessionId": sid, "answer": "x"}),
        ("moveTask", {"taskId": task["session"]["task"]["id"], "step": "DONE"}),
    ]
    for name, input in calls:
        payload = await api.mutate(name, "__typename", "tok-b", **input)
        assert [e["code"] for e in payload["userErrors"]] == ["NOT_FOUND"], (name, payload)
    assert await api.data(SESSION_Q, id=sid) == before  # nothing changed for alice


@pytest.mark.parametrize("field", sorted(SUBSCRIPTIONS))
async def test_s2_subscriptions_answer_not_found_for_foreign_or_unknown_sessions(
    api: Any, field: str
) -> None:
    sid = await api.create_session("tok-a")
    query = f"subscription($s: ID!) {{ {field}(sessionId: $s) {SUBSCRIPTIONS[field]} }}"
    async with api.ws("tok-b") as ws:
        for target in (sid, str(uuid.uuid4())):
            with pytest.raises(TransportQueryError) as raised:
                await ws.subscribe(query, s=target).next()
            assert raised.value.errors is not None
            assert raised.value.errors[0]["extensions"]["code"] == "NOT_FOUND"
            assert sid not in str(raised.value.errors)  # nothing to tell the ids apart


# -- S3 -------------------------------------------------------------------------------------------
async def test_s3_depth_bomb(api: Any) -> None:
    deep = "id " + "task { sessions { " * 8 + "id" + " } }" * 8
    body = await api.gql(f"{{ tasks {{ sessions {{ {deep} }} }} }}")
    assert "maximum operation depth" in body["errors"][0]["message"]
    assert not body.get("data")


async def test_s3_alias_bomb_and_token_limit(api: Any) -> None:
    aliases = " ".join(
        f"a{i}: tasks(first: 1) {{ id }}" for i in range(api.settings.max_aliases + 5)
    )
    body = await api.gql(f"{{ {aliases} }}")
    assert "aliases" in body["errors"][0]["message"].lower()
    tokens = " ".join("id" for _ in range(api.settings.max_tokens + 10))
    body = await api.gql(f"{{ tasks {{ {tokens} }} }}")
    assert "token" in body["errors"][0]["message"].lower()


async def test_s3_oversized_body_is_413_graphql_json(api: Any) -> None:
    sid = await api.create_session()
    padding = "x" * (api.settings.max_body_bytes + 1)
    response = await api.post(
        "mutation($i: EnqueueMessageInput!) { enqueueMessage(input: $i) { entry { id } } }",
        {"i": {"sessionId": sid, "content": padding}},
    )
    assert response.status_code == 413
    assert "larger than" in graphql_errors(response)[0]["message"]
    assert (await api.data(SESSION_Q, id=sid))["session"]["queue"]["count"] == 0


async def test_s3_malformed_json_and_bad_shapes_are_graphql_json(api: Any) -> None:
    headers = {"Authorization": "Bearer tok-a", "Content-Type": "application/json"}
    malformed = await api.http.post(api.url, content=b'{"query": "{ tasks', headers=headers)
    assert malformed.status_code == 400 and graphql_errors(malformed)
    not_a_string = await api.http.post(api.url, json={"query": 42}, headers=headers)
    assert not_a_string.status_code == 400 and graphql_errors(not_a_string)
    no_query = await api.http.post(api.url, json={}, headers=headers)
    assert graphql_errors(no_query)[0]["message"] != "Unexpected error."


async def test_s3_unknown_field_and_wrong_variable_types_change_nothing(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    before = await api.data(SESSION_Q, id=sid)
    unknown = await api.gql("{ tasks { id secretOwner } }")
    assert "secretOwner" in unknown["errors"][0]["message"]
    enqueue = "mutation($i: EnqueueMessageInput!) { enqueueMessage(input: $i) { entry { id } } }"
    for bad in ("three", 1.5, 2**53, -1, True):
        body = await api.gql(enqueue, i={"sessionId": sid, "content": "x", "expectedRevision": bad})
        assert body.get("data") is None and "Revision" in json.dumps(body["errors"]), body
    unknown_input = await api.gql(enqueue, i={"sessionId": sid, "content": "x", "priority": 1})
    assert unknown_input["errors"] and unknown_input.get("data") is None
    wrong_enum = await api.gql(
        "mutation($s: ID!) { sendNow(input: {sessionId: $s, scope: FIRST}) { sentCount } }", s=sid
    )
    assert wrong_enum["errors"]
    assert await api.data(SESSION_Q, id=sid) == before


async def test_s3_unexpected_errors_are_masked_and_logged(
    api: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_args: object) -> object:
        raise RuntimeError("db password is hunter2")

    monkeypatch.setattr(api.engine, "tasks", broken)
    with caplog.at_level(logging.ERROR, logger="turnqueue.api.assembly"):
        response = await api.post("{ tasks { id } }")
    assert "hunter2" not in response.text
    assert response.json()["errors"][0]["message"] == "Unexpected error."
    assert "hunter2" in caplog.text


async def test_s3_introspection_can_be_disabled(start_api: Any) -> None:
    api = await start_api(introspection=False)
    body = await api.gql("{ __schema { types { name } } }")
    assert body["errors"] and not body.get("data")


# -- S4 -------------------------------------------------------------------------------------------
async def test_s4_cross_origin_http_refused_unless_configured(start_api: Any) -> None:
    closed = await start_api()
    evil = await closed.http.post(
        closed.url,
        json={"query": "{ tasks { id } }"},
        headers={"Authorization": "Bearer tok-a", "Origin": "https://evil.example"},
    )
    assert evil.status_code == 403 and graphql_errors(evil)
    assert "access-control-allow-origin" not in evil.headers

    opened = await start_api(allowed_origins=["https://app.example"])
    good = await opened.http.post(
        opened.url,
        json={"query": "{ tasks { id } }"},
        headers={"Authorization": "Bearer tok-a", "Origin": "https://app.example"},
    )
    assert good.status_code == 200
    assert good.headers["access-control-allow-origin"] == "https://app.example"
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    ok = await opened.http.options(
        opened.url, headers={**preflight, "Origin": "https://app.example"}
    )
    assert ok.status_code == 200
    refused = await opened.http.options(
        opened.url, headers={**preflight, "Origin": "https://evil.example"}
    )
    assert refused.status_code >= 400 and "access-control-allow-origin" not in refused.headers


async def test_s4_cross_origin_websocket_refused(api: Any) -> None:
    with pytest.raises(TransportConnectionFailed) as raised:
        async with api.ws(headers={"Origin": "https://evil.example"}) as ws:
            await ws.execute("{ tasks { id } }")
    assert "status_code=403" in repr(raised.value.__cause__)  # refused at the handshake
