"""What the engine needs of the other instances sharing its database (M4): :class:`Peers`.

``Core`` holds a ``Peers`` (``core.cluster``, ``None`` on SQLite) and knows nothing else of the
cluster; ``engine/cluster.py`` implements it, built from explicit parts. So the cluster imports the
core's parts, never the other way round.
"""

from __future__ import annotations

from typing import Any, Protocol

from turnqueue.bus import EventKind

__all__ = ["OwnerUnreachable", "Peers"]


class OwnerUnreachable(Exception):
    """The owning instance did not answer in time."""


class Peers(Protocol):
    """The other server processes on the same PostgreSQL database."""

    def durable_payload(self, kind: EventKind, session_id: str, revision: int) -> str:
        """The NOTIFY payload announcing a durable change, sent inside its transaction."""
        ...

    async def live(self) -> set[int]:
        """The instances (epochs) whose lease is current."""
        ...

    async def call(
        self, owner: int, op: str, args: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Run ``op`` on the owning instance (:class:`OwnerUnreachable` when it is silent)."""
        ...

    async def aclose(self) -> None: ...
