"""S5 signed tokens through the real (in-process) server, over HTTP and graphql-transport-ws.

HS256 with ``jwt_secret``; RS256 and ES256 with a JWKS file, the key chosen by ``kid``. ``exp``
is always required and checked, ``iss``/``aud`` when configured, the principal is ``sub``. Every
refusal is a top-level ``UNAUTHENTICATED`` error over HTTP (with its reason) and close 4403 on a
WebSocket, as for a bad static token (S1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jwt_tokens as t
import pytest
from gql.transport.exceptions import TransportConnectionFailed, TransportQueryError

from turnqueue.auth import AuthConfigError, Authenticator, load_jwks
from turnqueue.settings import Settings

JWT_SETTINGS: dict[str, Any] = {
    "jwt_secret": t.SECRET,
    "jwt_issuer": t.ISSUER,
    "jwt_audience": t.AUDIENCE,
}
SESSION_Q = "query($id: ID!) { session(id: $id) { id } }"


def good(sub: str = "alice", **extra: Any) -> dict[str, Any]:
    return t.claims(sub, iss=t.ISSUER, aud=t.AUDIENCE, **extra)


#: (name, token factory, the reason the server gives) for the HS256 configuration
REFUSED = [
    ("expired", lambda: t.hs256(good(ttl=-60)), "token has expired"),
    ("wrong-signature", lambda: t.hs256(good(), "another-secret-of-32-bytes-or-more"), "signature"),
    ("wrong-audience", lambda: t.hs256({**good(), "aud": "someone-else"}), "audience"),
    ("no-audience", lambda: t.hs256(t.claims(iss=t.ISSUER)), "'aud'"),
    ("wrong-issuer", lambda: t.hs256({**good(), "iss": "https://evil.test"}), "issuer"),
    ("alg-none", lambda: t.unsigned(good()), "'none' is not accepted"),
    ("missing-exp", lambda: t.hs256({k: v for k, v in good().items() if k != "exp"}), "'exp'"),
    ("missing-sub", lambda: t.hs256({k: v for k, v in good().items() if k != "sub"}), "'sub'"),
    ("not-a-jwt", lambda: "a.b.c", "not a valid JWT"),
    ("rs256-for-hs256", lambda: t.rs256(good()), "'RS256' is not accepted"),
]


async def _refused_over_websocket(api: Any, token: str) -> None:
    with pytest.raises(TransportConnectionFailed) as raised:
        async with api.ws(token=token) as ws:
            await ws.execute("{ tasks { id } }")
    assert "code=4403" in repr(raised.value.__cause__)


async def test_s5_hs256_token_authenticates_http_and_websocket(start_api: Any) -> None:
    api = await start_api(tokens={}, **JWT_SETTINGS)
    token = t.hs256(good())
    sid = await api.create_session(token)
    assert await api.data(SESSION_Q, token, id=sid) == {"session": {"id": sid}}
    async with api.ws(token=token) as ws:
        assert (await ws.execute(SESSION_Q, id=sid)) == {"session": {"id": sid}}


@pytest.mark.parametrize(("case", "make", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_s5_bad_jwts_are_refused_on_http_and_websocket(
    start_api: Any, case: str, make: Any, reason: str
) -> None:
    api = await start_api(tokens={}, **JWT_SETTINGS)
    token = make()
    response = await api.post("{ tasks { id } }", token=token)
    assert response.status_code == 401, (case, response.text)
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    assert reason in error["message"], (case, error)
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    await _refused_over_websocket(api, token)


async def test_s5_a_token_for_another_principal_sees_not_found(start_api: Any) -> None:
    """S2 holds for JWT principals: ``sub`` bob cannot see or change alice's session."""
    api = await start_api(tokens={}, **JWT_SETTINGS)
    alice, bob = t.hs256(good("alice")), t.hs256(good("bob"))
    sid = await api.create_session(alice)
    assert await api.data(SESSION_Q, bob, id=sid) == {"session": None}
    payload = await api.mutate("setAutoRun", "__typename", bob, sessionId=sid, autoRun=False)
    assert [e["code"] for e in payload["userErrors"]] == ["NOT_FOUND"]
    async with api.ws(token=bob) as ws:
        with pytest.raises(TransportQueryError) as raised:
            stream = ws.subscribe(
                "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { autoRun } }", s=sid
            )
            await stream.next()
        assert raised.value.errors is not None
        assert raised.value.errors[0]["extensions"]["code"] == "NOT_FOUND"
    queue = "query($id: ID!) { session(id: $id) { autoRun } }"
    assert await api.data(queue, alice, id=sid) == {"session": {"autoRun": True}}


async def test_s5_static_tokens_and_jwts_name_the_same_principals(start_api: Any) -> None:
    api = await start_api(**JWT_SETTINGS)  # TOKENS: alice is tok-a
    sid = await api.create_session("tok-a")
    assert await api.data(SESSION_Q, t.hs256(good("alice")), id=sid) == {"session": {"id": sid}}
    assert (await api.post("{ tasks { id } }", token="tok-wrong")).json()["errors"][0][
        "message"
    ] == "invalid token"


async def test_s5_jwks_rs256_and_es256_by_kid(start_api: Any, tmp_path: Path) -> None:
    api = await start_api(tokens={}, jwt_jwks_file=t.write_jwks(tmp_path / "jwks.json"))
    for token in (t.rs256(t.claims("alice")), t.es256(t.claims("alice"))):
        assert await api.data("{ tasks { id } }", token) == {"tasks": []}
        async with api.ws(token=token) as ws:
            assert await ws.execute("{ tasks { id } }") == {"tasks": []}
    refused = {
        "unknown kid": t.rs256(t.claims(), kid="rsa-2"),
        "kid of the other key type": t.rs256(t.claims(), kid="ec-1"),
        "signed by another RSA key": t.rs256(t.claims(), key=t.OTHER_RSA_KEY),
        "HS256 keyed with the public key": t.hs256_with_public_key(t.claims()),
        "alg none": t.unsigned(t.claims(), kid="rsa-1"),
        "expired": t.es256(t.claims(ttl=-5)),
    }
    for case, token in refused.items():
        response = await api.post("{ tasks { id } }", token=token)
        assert response.status_code == 401, case
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED", case
        await _refused_over_websocket(api, token)


def test_s5_leeway_allows_a_little_clock_skew() -> None:
    strict = Authenticator.from_settings(Settings(jwt_secret=t.SECRET))
    lenient = Authenticator.from_settings(Settings(jwt_secret=t.SECRET, jwt_leeway=60))
    token = f"Bearer {t.hs256(t.claims(ttl=-5))}"
    assert t.principal(strict, token) is None
    assert t.principal(lenient, token) == "alice"


def test_s5_configuration_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        Settings(jwt_secret=t.SECRET, jwt_jwks_file=tmp_path / "x.json")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Settings(jwt_secret="short")
    with pytest.raises(AuthConfigError, match="cannot read"):
        load_jwks(tmp_path / "missing.json")
    oct_key = tmp_path / "oct.json"
    oct_key.write_text('{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}')
    with pytest.raises(AuthConfigError, match="only RSA"):
        load_jwks(oct_key)
    no_kid = tmp_path / "nokid.json"
    jwks = t.jwks()
    del jwks["keys"][0]["kid"]
    no_kid.write_text(__import__("json").dumps(jwks))
    with pytest.raises(AuthConfigError, match="no kid"):
        load_jwks(no_kid)


def test_s1_s5_any_authentication_allows_a_non_loopback_bind(tmp_path: Path) -> None:
    Settings(host="0.0.0.0", jwt_secret=t.SECRET).check_bind()
    Settings(host="0.0.0.0", jwt_jwks_file=t.write_jwks(tmp_path / "k.json")).check_bind()
    Settings(host="0.0.0.0", tokens={"a": "b"}).check_bind()
    with pytest.raises(ValueError, match="TURNQUEUE_TOKENS"):
        Settings(host="0.0.0.0").check_bind()
