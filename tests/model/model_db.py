"""PostgreSQL plumbing shared by the model tests: a database's URL and admin statements."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url


def pg_url(base: str, database: str) -> str:
    """``base`` with its database replaced, in the plain ``postgresql://`` form."""
    url = make_url(base).set(drivername="postgresql", database=database)
    return url.render_as_string(hide_password=False)


async def admin(base: str, statement: str) -> None:
    """One statement outside a transaction on the admin database (CREATE/DROP DATABASE)."""
    conn = await asyncpg.connect(pg_url(base, make_url(base).database or "postgres"))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()
