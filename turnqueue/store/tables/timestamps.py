"""``UtcDateTime``: the column type of every timestamp, aware UTC on both dialects."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator

#: SQLite: the last datetime written as text, and its text (a turn's start binds one timestamp
#: in two statements). By identity: the pair holds the datetime, so no other object can take
#: its id while it is here; one tuple, replaced whole, so a reader never sees half of a pair.
_last_text: tuple[datetime | None, str] = (None, "")


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always binds and returns aware UTC datetimes.

    PostgreSQL keeps the offset (timestamptz); SQLite stores naive UTC text (its own processors
    below), tagged UTC again when read back.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    # SQLite: the text written and read in one step each, in the format of SQLAlchemy's
    # DATETIME ("YYYY-MM-DD HH:MM:SS.ffffff") (timestamps are bound and read on the hot path).
    # Neither step calls ``datetime.replace``: it rebuilds the datetime from parsed keyword
    # arguments and costs several times a parse or a format.
    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def to_text(value: datetime | None) -> str | None:
            global _last_text
            if value is None:
                return None
            last = _last_text
            if last[0] is value:
                return last[1]
            given = value
            if value.tzinfo is not UTC:  # utcnow()'s are UTC already
                if value.tzinfo is None:
                    raise ValueError("naive datetime given to a UTC column")
                value = value.astimezone(UTC)
            naive = datetime.combine(value, value.time())  # its UTC wall time, without a zone
            text = naive.isoformat(" ", "microseconds")
            _last_text = (given, text)
            return text

        return to_text

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def from_text(value: str | None) -> datetime | None:
            if value is None:
                return None
            try:
                parsed = datetime.fromisoformat(value + "+00:00")  # to_text's naive UTC text
            except ValueError:  # a text with an offset of its own: read as UTC, as ever
                parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo is UTC else parsed.replace(tzinfo=UTC)

        return from_text
