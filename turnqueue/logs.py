"""Structured logs: JSON lines on request, with the session and turn a record is about.

``turnqueue serve`` calls :func:`configure_logging`; uvicorn's loggers propagate to its handler
(``serve`` passes ``log_config=None``). Ids travel in :mod:`contextvars`: :func:`bind` sets them
for the current task and the tasks it spawns afterwards (the engine binds the session when a
request is authorised, the turn in the turn runner's task); a record's ``extra`` wins.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from turnqueue.settings import Settings

SESSION_ID: ContextVar[str | None] = ContextVar("turnqueue_session_id", default=None)
TURN_ID: ContextVar[str | None] = ContextVar("turnqueue_turn_id", default=None)

#: LogRecord attributes that are not "extra" fields.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def bind(*, session_id: str | None = None, turn_id: str | None = None) -> None:
    """Carry these ids on every record logged from this task (and tasks it spawns later)."""
    if session_id is not None:
        SESSION_ID.set(session_id)
    if turn_id is not None:
        TURN_ID.set(turn_id)


class ContextIds(logging.Filter):
    """Copies the context's ids onto each record, unless ``extra`` already set them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "session_id", None) is None:
            record.session_id = SESSION_ID.get()
        if getattr(record, "turn_id", None) is None:
            record.turn_id = TURN_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, ids, any extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                scalar = isinstance(value, str | int | float | bool)
                entry[key] = value if scalar else repr(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ids)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = [
            f"{key}={value}"
            for key in ("session_id", "turn_id")
            if (value := getattr(record, key, None)) is not None
        ]
        record.ids = f" [{' '.join(ids)}]" if ids else ""
        return super().format(record)


class StartChatter(logging.Filter):
    """Drops uvicorn's start-up lines: turnqueue's own banner (``turnqueue.startup``) says where
    it listens, once it does."""

    DROPPED = (
        "Started server process",
        "Waiting for application startup",
        "Application startup complete",
        "Uvicorn running on",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.DROPPED))


def configure_logging(settings: Settings) -> None:
    """Replace the root logger's handlers with one structured handler (idempotent).

    Alembic's INFO lines (its plugins, each migration run) show only at DEBUG: a start says
    what a user needs in turnqueue's banner instead.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_json else PlainFormatter())
    handler.addFilter(ContextIds())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    debug = root.getEffectiveLevel() <= logging.DEBUG
    logging.getLogger("alembic").setLevel(logging.NOTSET if debug else logging.WARNING)
    uvicorn_log = logging.getLogger("uvicorn.error")
    for old_filter in [f for f in uvicorn_log.filters if isinstance(f, StartChatter)]:
        uvicorn_log.removeFilter(old_filter)
    if not debug:
        uvicorn_log.addFilter(StartChatter())
