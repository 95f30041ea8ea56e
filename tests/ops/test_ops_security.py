"""Security checks that complement ``tests/api/test_api_security.py`` (S1, S3, S4).

Here: constant-time token comparison against *every* configured token on HTTP and WebSocket,
faults in mutations and subscriptions masked to the client but logged (with their detail) on
the server, cross-origin WebSockets accepted only from a configured origin, and a real
``turnqueue serve`` process refusing a non-loopback bind without tokens.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import subprocess
import sys
from typing import Any

import pytest
from ops_helpers import REPO, inproc_server
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from turnqueue.transport import Authenticator

TOKENS = {"alice": "tok-a", "bob": "tok-b", "carol": "tok-c"}
SECRET = "secret-internal-detail"


class CompareSpy:
    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self._real = hmac.compare_digest

    def __call__(self, a: Any, b: Any) -> bool:
        self.calls.append(bytes(b))
        return bool(self._real(a, b))


def test_s1_authenticator_compares_every_token_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = CompareSpy()
    monkeypatch.setattr(hmac, "compare_digest", spy)
    auth = Authenticator(TOKENS)
    expected = sorted(t.encode() for t in TOKENS.values())
    for presented, principal in [
        ("Bearer tok-a", "alice"),  # the first token matches: no early exit
        ("Bearer tok-c", "carol"),
        ("Bearer nope", None),
        ("Bearer tok-a-but-longer", None),
        ("Basic tok-b", None),  # the scheme is checked after the comparisons
    ]:
        spy.calls.clear()
        assert auth.principal(presented) == principal
        assert sorted(spy.calls) == expected, presented


async def test_s1_server_compares_every_token_over_http_and_websocket(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = CompareSpy()
    monkeypatch.setattr(hmac, "compare_digest", spy)
    async with inproc_server(database_url, tokens=TOKENS) as server:
        spy.calls.clear()
        body = await server.client.gql("{ tasks { id } }")  # tok-a, the first token
        assert body == {"data": {"tasks": []}}
        assert sorted(spy.calls) == sorted(t.encode() for t in TOKENS.values())
        spy.calls.clear()
        async with connect(server.client.ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            init = {"type": "connection_init", "payload": {"authorization": "Bearer tok-b"}}
            await ws.send(json.dumps(init))
            ack = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert ack["type"] == "connection_ack"
        assert sorted(spy.calls) == sorted(t.encode() for t in TOKENS.values())


async def test_s3_a_fault_in_a_mutation_leaks_nothing_and_is_logged(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        sid = await server.client.create_session()

        async def broken(*_args: object, **_kwargs: object) -> object:
            raise RuntimeError(SECRET)

        monkeypatch.setattr(server.engine.queue, "enqueue", broken)
        with caplog.at_level(logging.ERROR, logger="turnqueue"):
            body = await server.client.gql(
                'mutation($s: ID!) { enqueueMessage(input: {sessionId: $s, content: "x"}) '
                "{ entry { id } userErrors { code } } }",
                s=sid,
            )
        assert "secret" not in json.dumps(body).lower()
        assert "RuntimeError" not in json.dumps(body) and "Traceback" not in json.dumps(body)
        assert body["errors"][0]["message"] == "Unexpected error."
        assert SECRET in caplog.text
        queue = await server.client.data(
            "query($s: ID!) { session(id: $s) { queue { count } } }", s=sid
        )
        assert queue["session"]["queue"]["count"] == 0  # S3: nothing changed


async def test_s3_a_fault_in_a_subscription_leaks_nothing_and_is_logged(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        sid = await server.client.create_session()

        async def broken(*_args: object, **_kwargs: object) -> object:
            raise RuntimeError(SECRET)

        monkeypatch.setattr(server.engine, "queue_status", broken)
        frames: list[dict[str, Any]] = []
        with caplog.at_level(logging.ERROR, logger="turnqueue"):
            async with connect(server.client.ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
                init = {"type": "connection_init", "payload": {"authorization": "Bearer tok-a"}}
                await ws.send(json.dumps(init))
                await asyncio.wait_for(ws.recv(), 10)
                query = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }"
                sub = {"query": query, "variables": {"s": sid}}
                await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": sub}))
                while not frames or frames[-1]["type"] == "next":
                    frames.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
                    if frames[-1]["type"] == "next" and frames[-1]["payload"].get("errors"):
                        break
        text = json.dumps(frames)
        assert "secret" not in text.lower() and "RuntimeError" not in text, frames
        assert "Unexpected error." in text, frames
        assert SECRET in caplog.text


async def test_s4_cross_origin_websocket_accepted_only_from_a_configured_origin(
    database_url: str,
) -> None:
    async with inproc_server(
        database_url, tokens=TOKENS, allowed_origins=["https://app.example"]
    ) as server:
        url = server.client.ws_url
        protocols: Any = ["graphql-transport-ws"]
        async with connect(url, subprotocols=protocols, origin="https://app.example") as ws:  # type: ignore[arg-type]
            init = {"type": "connection_init", "payload": {"authorization": "Bearer tok-a"}}
            await ws.send(json.dumps(init))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
        for origin in ("https://evil.example", "https://app.example.evil.example", "null"):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, subprotocols=protocols, origin=origin):  # type: ignore[arg-type]
                    pass
            assert refused.value.response.status_code == 403, origin


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_s1_serve_process_refuses_a_non_loopback_bind_without_tokens(host: str) -> None:
    """The real command, as an operator runs it: exit code 2 and nothing listens."""
    env = {"PATH": "/usr/bin:/bin", "TURNQUEUE_TOKENS": "", "HOME": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "turnqueue", "serve", "--host", host, "--port", "1"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "TURNQUEUE_TOKENS" in done.stderr and "Uvicorn running" not in done.stderr
