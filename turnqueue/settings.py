"""Configuration: every ``TURNQUEUE_…`` environment variable, validated by pydantic-settings.

The names fixed by SPEC M2 are the first block; ``turnqueue serve`` has a flag for each field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


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
    model_config = SettingsConfigDict(env_prefix="TURNQUEUE_", extra="ignore")

    # --- fixed by SPEC M2 ---
    database_url: str = Field(
        default_factory=lambda: f"sqlite:///{Path.cwd() / 'turnqueue.db'}",
        description="plain postgresql://… or sqlite:///…; the async driver is chosen for you",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    tokens: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="comma-separated principal:token pairs; empty = no auth"
    )
    agent: Literal["scripted", "command"] = "scripted"
    agent_command: str = ""
    scripted_turn_seconds: float = Field(default=3.0, ge=0)
    queue_max: int = Field(default=10, ge=0, description="entries per session; 0 = unlimited")
    cancel_timeout: float = Field(default=10.0, gt=0)
    escalation_timeout: float = Field(default=2.0, gt=0)

    # --- ours ---
    cancel_operation_timeout: float = Field(default=30.0, gt=0)
    max_content_bytes: int = Field(default=100_000, gt=0)
    workflow_file: Path | None = None
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_query_depth: int = Field(default=12, gt=0)
    max_aliases: int = Field(default=30, gt=0)
    max_tokens: int = Field(default=2_000, gt=0)
    max_body_bytes: int = Field(default=256_000, gt=0)
    introspection: bool = True
    subscriber_buffer: int = Field(default=256, gt=0)
    #: identical snapshot subscriptions share one execution (turnqueue/fanout.py)
    subscription_fanout: bool = True
    db_pool_size: int = Field(default=10, gt=0)
    db_timeout: float = Field(default=30.0, gt=0)
    lease_seconds: float = Field(default=10.0, gt=0)
    log_json: bool = False
    log_level: str = "INFO"

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

    @property
    def async_database_url(self) -> str:
        return async_database_url(self.database_url)

    @property
    def is_sqlite(self) -> bool:
        return self.async_database_url.startswith("sqlite")

    @property
    def queue_limit(self) -> int | None:
        return self.queue_max or None

    def check_bind(self) -> None:
        """S1: with no tokens the server serves one local user and must stay on loopback."""
        if not self.tokens and self.host not in LOOPBACK_HOSTS:
            raise ValueError(
                f"refusing to listen on {self.host} without TURNQUEUE_TOKENS; "
                "configure tokens or bind to 127.0.0.1"
            )
