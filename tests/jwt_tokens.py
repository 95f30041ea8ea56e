"""Signing keys and JWTs for the S5 tests (an HS256 secret, RSA and EC P-256 key pairs, a JWKS)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from turnqueue.auth import Authenticator
from turnqueue.errors import AuthenticationError

SECRET = "a-shared-secret-of-at-least-32-bytes!"
ISSUER = "https://issuer.test"
AUDIENCE = "turnqueue-tests"

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks() -> dict[str, Any]:
    """The public halves: ``rsa-1`` (RS256) and ``ec-1`` (ES256)."""
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key()))
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(EC_KEY.public_key()))
    return {"keys": [{**rsa_jwk, "kid": "rsa-1"}, {**ec_jwk, "kid": "ec-1"}]}


def write_jwks(path: Path) -> Path:
    path.write_text(json.dumps(jwks()), encoding="utf-8")
    return path


def claims(sub: str = "alice", ttl: float = 300, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": sub, "iat": now, "exp": now + int(ttl), **extra}


def hs256(payload: dict[str, Any], secret: str = SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256")


def rs256(payload: dict[str, Any], kid: str = "rsa-1", key: Any = RSA_KEY) -> str:
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})


def es256(payload: dict[str, Any], kid: str = "ec-1") -> str:
    return jwt.encode(payload, EC_KEY, algorithm="ES256", headers={"kid": kid})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(payload: dict[str, Any], **header: Any) -> str:
    """``alg: none``: a header, a payload and an empty signature."""
    head = {"alg": "none", "typ": "JWT", **header}
    return f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(payload).encode())}."


def hs256_with_public_key(payload: dict[str, Any], kid: str = "rsa-1") -> str:
    """The algorithm-confusion attack: HS256 keyed with the server's *public* RSA key."""
    import hashlib
    import hmac

    pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(payload).encode())
    signature = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def principal(auth: Authenticator, authorization: str) -> str | None:
    """The principal ``auth`` finds for an ``Authorization`` value, or None when it refuses it."""
    try:
        return auth.authenticate(authorization)
    except AuthenticationError:
        return None
