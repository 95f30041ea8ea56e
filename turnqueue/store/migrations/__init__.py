"""Alembic migrations of the turnqueue schema (M5). Run them with ``turnqueue.store.migrate``."""
