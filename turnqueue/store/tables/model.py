"""How a table is declared: turnqueue's own metadata and the base of its table models, and the
helpers every field and index goes through (an exact column, no Python-side default)."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Column, ForeignKey, Index, MetaData, String, Table
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TableModel(SQLModel, registry=registry(metadata=metadata)):
    """The base of every table model: turnqueue's own registry and metadata."""


def column(*args: Any, **kwargs: Any) -> Any:
    """A field of a table model: exactly this column, and no default."""
    return Field(sa_column=Column(*args, **kwargs))


def partial(name: str, *columns: str, where: str) -> Index:
    """An index of the rows that match ``where``, spelled alike on both dialects."""
    return Index(name, *columns, postgresql_where=where, sqlite_where=where)


def owned_by(parent: str, **kwargs: Any) -> Any:
    """A field holding the id of its ``parent`` row (``"sessions.id"``), deleted with it."""
    return column(String(36), ForeignKey(parent, ondelete="CASCADE"), **kwargs)


def table(model: type[TableModel]) -> Table:
    return cast(Table, model.__table__)  # type: ignore[attr-defined]
