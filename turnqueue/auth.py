"""Who is calling: static bearer tokens (S1) and signed JWTs (S5).

One :class:`Authenticator` serves HTTP (``Authorization`` header) and WebSocket
(``connection_init`` payload) alike, so both transports accept and refuse the same tokens with the
same reasons.

* **Static tokens** (``TURNQUEUE_TOKENS``) are compared in constant time against *every*
  configured token: no early exit, so the time taken says nothing about which prefix matched.
* **JWTs** (PyJWT): HS256 with ``TURNQUEUE_JWT_SECRET``, or RS256/ES256 with the public keys of a
  JWKS file (``TURNQUEUE_JWT_JWKS_FILE``), the key chosen by the token's ``kid``. The accepted
  algorithm comes from the *configuration* (the secret, or the chosen key's type), never from the
  token's header (RFC 8725 §2.1): ``alg: none`` and HS256 signed with a public key are refused.
  ``exp`` is required and checked; ``iss`` and ``aud`` when configured; the principal is ``sub``.

A JWT's ``sub`` and a static token's principal name the same principal: ``alice`` by either kind
of token sees the same tasks (S2).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from turnqueue.errors import AuthenticationError
from turnqueue.settings import Settings

LOCAL_PRINCIPAL = "local"

#: the algorithm accepted for each kind of JWKS key (the kty, and the curve for EC keys)
_KEY_ALGORITHMS: dict[tuple[object, object], str] = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
}

_REQUIRED = "authentication required: send Authorization: Bearer <token>"
#: PyJWT's refusals of a token, as a caller is told them (anything else: "token is invalid: …")
_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "token has expired"),
    (jwt.InvalidSignatureError, "token signature is invalid"),
    (jwt.InvalidAudienceError, "token audience is not accepted"),
    (jwt.InvalidIssuerError, "token issuer is not accepted"),
    (jwt.ImmatureSignatureError, "token is not valid yet"),
)


class AuthConfigError(ValueError):
    """The JWT configuration cannot be used (unreadable JWKS file, unsupported key, …)."""


@dataclass(frozen=True)
class _Key:
    key: Any  # what PyJWT verifies with: the HMAC secret or a public key object
    algorithm: str


def load_jwks(path: Path) -> dict[str, _Key]:
    """The usable keys of a JWKS file by ``kid``: RSA keys for RS256, P-256 keys for ES256."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AuthConfigError(f"cannot read the JWKS file {path}: {error}") from error
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not keys:
        raise AuthConfigError(f'the JWKS file {path} has no "keys" list')
    found: dict[str, _Key] = {}
    for index, data in enumerate(keys):
        if not isinstance(data, dict):
            raise AuthConfigError(f"JWKS key #{index} in {path} is not an object")
        kid = data.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthConfigError(f"JWKS key #{index} in {path} has no kid")
        kty, crv = data.get("kty"), data.get("crv")
        algorithm = _KEY_ALGORITHMS.get((kty, crv if kty == "EC" else None))
        if algorithm is None:
            raise AuthConfigError(
                f"JWKS key {kid!r} in {path}: only RSA (RS256) and EC P-256 (ES256) public keys "
                f"are accepted, not kty={kty!r} crv={crv!r}"
            )
        declared = data.get("alg")
        if declared is not None and declared != algorithm:
            raise AuthConfigError(f"JWKS key {kid!r} in {path}: alg {declared!r} ≠ {algorithm}")
        if "d" in data:
            raise AuthConfigError(f"JWKS key {kid!r} in {path} is a private key; give the public")
        if kid in found:
            raise AuthConfigError(f"JWKS file {path} repeats kid {kid!r}")
        try:
            found[kid] = _Key(jwt.PyJWK(data, algorithm).key, algorithm)
        except jwt.PyJWTError as error:
            raise AuthConfigError(f"JWKS key {kid!r} in {path}: {error}") from error
    return found


class JwtVerifier:
    """S5: verify a JWT against the configured secret or keys; the principal is ``sub``."""

    def __init__(self, settings: Settings) -> None:
        secret, jwks_file = settings.jwt_secret, settings.jwt_jwks_file
        self._secret = _Key(secret.encode(), "HS256") if secret else None
        self._jwks = load_jwks(jwks_file) if jwks_file is not None else {}
        self._issuer = settings.jwt_issuer or None
        self._audience = settings.jwt_audience or None
        self._leeway = settings.jwt_leeway

    def _key_for(self, header: Mapping[str, Any]) -> _Key:
        if self._secret is not None:
            return self._secret
        kid = header.get("kid")
        if not isinstance(kid, str) or kid not in self._jwks:
            raise AuthenticationError("token names no known signing key (kid)")
        return self._jwks[kid]

    def principal(self, token: str) -> str:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise AuthenticationError("token is not a valid JWT") from error
        key = self._key_for(header)
        if header.get("alg") != key.algorithm:
            # PyJWT would refuse it too; saying which algorithm is expected is clearer.
            raise AuthenticationError(
                f"token algorithm {header.get('alg')!r} is not accepted (expected {key.algorithm})"
            )
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm],  # from the configuration, never from the token
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                options={"require": ["exp", "sub"]},
            )
        except jwt.MissingRequiredClaimError as error:
            raise AuthenticationError(f"token has no {error.claim!r} claim") from error
        except jwt.PyJWTError as error:
            reason = next((m for t, m in _REFUSALS if isinstance(error, t)), None)
            raise AuthenticationError(reason or f"token is invalid: {error}") from error
        except (TypeError, ValueError) as error:  # a malformed part PyJWT does not wrap
            raise AuthenticationError("token is invalid") from error
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise AuthenticationError("token has no 'sub' claim")
        return subject


class Authenticator:
    """S1 + S5: the principal for an ``Authorization`` value (``Bearer <token>``)."""

    def __init__(self, tokens: Mapping[str, str], verifier: JwtVerifier | None = None) -> None:
        self._tokens = [(p, t.encode()) for p, t in tokens.items()]
        self._verifier = verifier

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        """Raises :class:`AuthConfigError` for an unusable JWT configuration."""
        signed = settings.jwt_secret or settings.jwt_jwks_file is not None  # S5: one or the other
        return cls(settings.tokens, JwtVerifier(settings) if signed else None)

    @property
    def enabled(self) -> bool:
        return bool(self._tokens) or self._verifier is not None

    def authenticate(self, authorization: object) -> str:
        """The principal, or :class:`AuthenticationError` with the reason."""
        if not self.enabled:
            return LOCAL_PRINCIPAL
        if not isinstance(authorization, str) or not authorization.strip():
            raise AuthenticationError(_REQUIRED)
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        presented = token.encode()
        found: str | None = None
        for principal, expected in self._tokens:  # no early exit: same work for every token
            if hmac.compare_digest(presented, expected) and scheme.lower() == "bearer":
                found = principal
        if found is not None:
            return found
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError(_REQUIRED)
        if self._verifier is not None and token.count(".") == 2:
            return self._verifier.principal(token)
        raise AuthenticationError("invalid token")
