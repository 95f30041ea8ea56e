"""Every ``TURNQUEUE_…`` environment variable, validated by pydantic-settings. ``turnqueue serve``
has a flag for each field, its docstring (the field's description) the flag's help text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Seconds = Annotated[float, Field(gt=0)]
Positive = Annotated[int, Field(gt=0)]


def async_database_url(url: str) -> str:
    """Pick the async driver for a plain ``postgresql://`` or ``sqlite:///`` URL (M2)."""
    for plain, driver in (
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
        ("sqlite://", "sqlite+aiosqlite://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TURNQUEUE_", extra="ignore", use_attribute_docstrings=True
    )

    # --- fixed by SPEC M2 ---
    database_url: str = Field(default_factory=lambda: f"sqlite:///{Path.cwd() / 'turnqueue.db'}")
    """plain postgresql://… or sqlite:///…; the async driver is chosen for you"""
    host: str = "127.0.0.1"
    """address to listen on; beyond loopback only with tokens or JWT configured"""
    port: int = Field(default=8000, ge=0, le=65535)
    """port to listen on"""
    tokens: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """comma-separated principal:token pairs (static bearer tokens)"""
    agent: Literal["scripted", "command"] = "scripted"
    """default agent profile: scripted or command"""
    agent_command: str = ""
    """the command agent's command line, run once per turn"""
    scripted_turn_seconds: float = Field(default=3.0, ge=0)
    """how long a scripted reply streams, in seconds"""
    queue_max: int = Field(default=10, ge=0)
    """entries per session; 0 = unlimited"""
    cancel_timeout: Seconds = 10.0
    """seconds after SIGINT before SIGTERM"""
    escalation_timeout: Seconds = 2.0
    """seconds after SIGTERM before SIGKILL"""

    # --- ours ---
    stall_timeout: Seconds = Field(
        default=600.0,
        description="seconds a turn may go without agent activity before it fails STALLED (A9); "
        "a profile's stall_timeout overrides it",
    )
    cancel_operation_timeout: Seconds = 30.0
    """upper bound of one cancellation, in seconds"""
    max_content_bytes: Positive = 100_000
    """largest message content, in bytes"""
    workflow_file: Path | None = None
    """a TOML or JSON workflow definition file"""
    agents_file: Path | None = None
    """agent profiles file (TOML, SPEC A1): acp, command, scripted"""
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """comma-separated browser origins allowed for HTTP (CORS) and WebSocket"""
    max_query_depth: Positive = 12
    """deepest GraphQL operation"""
    max_aliases: Positive = 30
    """most aliases in one operation"""
    max_tokens: Positive = 2_000
    """most tokens in one document"""
    max_body_bytes: Positive = 256_000
    """largest HTTP request body or WebSocket message, in bytes"""
    introspection: bool = True
    """allow GraphQL introspection"""
    subscriber_buffer: Positive = 256
    """events buffered per subscriber before it is told to resync"""
    subscription_fanout: bool = True
    """identical snapshot subscriptions share one execution"""
    compiled_operations: bool = Field(
        default=True,
        description="mutations and snapshot subscriptions that select only plain fields are "
        "answered without GraphQL execution (same responses)",
    )
    db_pool_size: Positive = 10
    """PostgreSQL connections per instance (plus the lease's)"""
    db_timeout: Seconds = 30.0
    """seconds a connect, statement or SQLite write lock may wait"""
    lease_seconds: Seconds = 10.0
    """how soon another instance takes over a dead one"""
    log_json: bool = False
    """write JSON log lines"""
    log_level: str = "INFO"
    """log level (DEBUG, INFO, WARNING, …)"""

    # --- signed tokens (S5) ---
    jwt_secret: str = ""
    """accept HS256 JWTs signed with this shared secret (32 bytes or more)"""
    jwt_jwks_file: Path | None = None
    """accept RS256/ES256 JWTs signed by the public keys of this JWKS file (by kid)"""
    jwt_issuer: str = ""
    """when set, a JWT's iss must equal it"""
    jwt_audience: str = ""
    """when set, a JWT's aud must contain it"""
    jwt_leeway: float = Field(default=0.0, ge=0)
    """seconds of clock skew allowed when checking exp and nbf"""

    @field_validator("tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            principal, sep, token = item.partition(":")
            if not sep or not principal or not token:
                raise ValueError(f"TURNQUEUE_TOKENS item {item!r} is not principal:token")
            if token in pairs.values():
                raise ValueError("TURNQUEUE_TOKENS repeats a token")
            pairs[principal] = token
        return pairs

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _parse_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [o.strip() for o in value.split(",") if o.strip()]
        return value

    @model_validator(mode="after")
    def _one_jwt_key_source(self) -> Settings:
        if self.jwt_secret and self.jwt_jwks_file is not None:
            raise ValueError("set TURNQUEUE_JWT_SECRET or TURNQUEUE_JWT_JWKS_FILE, not both")
        if self.jwt_secret and len(self.jwt_secret.encode()) < 32:
            # RFC 7518 §3.2: an HS256 key is at least as long as the hash (256 bits).
            raise ValueError("TURNQUEUE_JWT_SECRET must be at least 32 bytes long for HS256")
        return self

    @property
    def async_database_url(self) -> str:
        return async_database_url(self.database_url)

    @property
    def queue_limit(self) -> int | None:
        return self.queue_max or None

    def check_bind(self) -> None:
        """S1: with no authentication (static tokens or JWTs, S5) the server serves one local
        user and stays on loopback."""
        authenticated = self.tokens or self.jwt_secret or self.jwt_jwks_file is not None
        if not authenticated and self.host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(
                f"refusing to listen on {self.host} without authentication; configure "
                "TURNQUEUE_TOKENS, TURNQUEUE_JWT_SECRET or TURNQUEUE_JWT_JWKS_FILE, "
                "or bind to 127.0.0.1"
            )
