"""Security checks that complement ``tests/api/test_api_security.py`` (S1, S3, S4).

Here: constant-time token comparison against *every* configured token on HTTP and WebSocket,
faults in mutations and subscriptions masked to the client but logged (with their detail) on
the server, cross-origin WebSockets accepted only from a configured origin, a real
``turnqueue serve`` process refusing a non-loopback bind without tokens, and the same process
verifying signed tokens (S5) from a JWKS file over HTTP and WebSocket.
"""

from __future__ import annotations

import hmac
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt_tokens
import pytest
from clients import Client
from ops_helpers import REPO, ProcServer, inproc_server
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from turnqueue.api.view import Authenticator
from turnqueue.timeouts import within

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
        assert jwt_tokens.principal(auth, presented) == principal
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
            ack = json.loads(await within(ws.recv(), 10))
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
                await within(ws.recv(), 10)
                query = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }"
                sub = {"query": query, "variables": {"s": sid}}
                await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": sub}))
                while not frames or frames[-1]["type"] == "next":
                    frames.append(json.loads(await within(ws.recv(), 10)))
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
            assert json.loads(await within(ws.recv(), 10))["type"] == "connection_ack"
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


async def _ws_init(url: str, token: str) -> tuple[ClientConnection, dict[str, Any] | None]:
    """A graphql-transport-ws socket after ``connection_init``; the ack, or None when closed."""
    ws = await connect(url, subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
    await ws.send(json.dumps(init))
    try:
        ack: dict[str, Any] = json.loads(await within(ws.recv(), 10))
    except ConnectionClosed:
        return ws, None
    return ws, ack


async def test_s5_serve_process_verifies_jwks_tokens_over_http_and_websocket(
    database_url: str, tmp_path: Path
) -> None:
    """``turnqueue serve`` with TURNQUEUE_JWT_JWKS_FILE (and issuer): RS256 and ES256 by kid."""
    jwks = jwt_tokens.write_jwks(tmp_path / "jwks.json")
    server = ProcServer(
        database_url,
        tmp_path / "server.log",
        TURNQUEUE_JWT_JWKS_FILE=str(jwks),
        TURNQUEUE_JWT_ISSUER=jwt_tokens.ISSUER,
    )
    await server.start()
    alice = jwt_tokens.rs256(jwt_tokens.claims("alice", iss=jwt_tokens.ISSUER))
    bob = jwt_tokens.es256(jwt_tokens.claims("bob", iss=jwt_tokens.ISSUER))
    expired = jwt_tokens.rs256(jwt_tokens.claims("alice", ttl=-60, iss=jwt_tokens.ISSUER))
    try:
        async with Client(server.base, alice) as client:
            sid = await client.create_session()
        query = "query($s: ID!) { session(id: $s) { id } }"
        async with Client(server.base, bob) as client:
            assert await client.data(query, s=sid) == {"session": None}  # S2
        for token, reason in [
            (expired, "token has expired"),
            (jwt_tokens.unsigned(jwt_tokens.claims(), kid="rsa-1"), "not accepted"),
            (jwt_tokens.hs256_with_public_key(jwt_tokens.claims()), "not accepted"),
        ]:
            async with Client(server.base, token) as client:
                body = await client.gql("{ tasks { id } }")
            assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED", body
            assert reason in body["errors"][0]["message"], body
            ws, ack = await _ws_init(server.base.replace("http", "ws") + "/graphql", token)
            assert ack is None and ws.close_code == 4403, ack
        ws, ack = await _ws_init(server.base.replace("http", "ws") + "/graphql", alice)
        try:
            assert ack is not None and ack["type"] == "connection_ack"
            subscribe = {
                "id": "1",
                "type": "subscribe",
                "payload": {"query": query, "variables": {"s": sid}},
            }
            await ws.send(json.dumps(subscribe))
            frame = json.loads(await within(ws.recv(), 10))
            assert frame["payload"] == {"data": {"session": {"id": sid}}}, frame
        finally:
            await ws.close()
    finally:
        server.stop()


def test_s5_serve_process_refuses_an_unusable_jwks_file(tmp_path: Path) -> None:
    """A bad key file stops the server at start (exit 2, the reason), not at the first request."""
    bad = tmp_path / "jwks.json"
    bad.write_text('{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(REPO), "TURNQUEUE_JWT_JWKS_FILE": str(bad)}
    done = subprocess.run(
        [sys.executable, "-m", "turnqueue", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "only RSA" in done.stderr and "Uvicorn running" not in done.stderr
