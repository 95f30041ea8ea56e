"""The seam between the engine and the other instances sharing its database (M4).

Both directions are declared here: :class:`Peers`, what the engine needs of the others (``Core``
holds one as ``core.cluster``, ``None`` on SQLite), and :class:`ClusterHooks`, what the cluster
calls back into the engine. ``engine/cluster.py`` implements ``Peers`` and is built from explicit
parts (store, bus, ``Spawn``, hooks), so ``Core`` never imports the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from turnqueue.bus import EventKind

__all__ = ["ClusterHooks", "Handler", "OwnerGone", "OwnerUnreachable", "Peers", "Spawn"]

#: a forwarded operation served for another instance: its arguments in, its result out
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class OwnerUnreachable(Exception):
    """The owning instance did not answer in time."""


class OwnerGone(OwnerUnreachable):
    """The owning instance left the live instances before it took the request: the request
    never ran (it was withdrawn), and the session is no longer that instance's to act on."""


class Peers(Protocol):
    """The other server processes on the same PostgreSQL database."""

    def durable_payload(
        self, kind: EventKind, session_id: str, revision: int, pending: bool | None = None
    ) -> str:
        """The NOTIFY payload announcing a durable change (``pending``: a cancellation
        transition's flag, C2), sent inside its transaction."""

    async def live(self) -> set[int]:
        """The instances (epochs) whose lease is current."""

    async def call(
        self, owner: int, op: str, args: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Run ``op`` on the owning instance: :class:`OwnerGone` when it died before taking the
        request (which then never runs), :class:`OwnerUnreachable` when it did not answer in
        ``timeout``."""

    async def aclose(self) -> None: ...


T = TypeVar("T")


class Spawn(Protocol):
    """``Core.spawn``: start a named background task the engine owns (awaited at shutdown)."""

    def __call__(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]: ...


@dataclass(frozen=True, slots=True)
class ClusterHooks:
    """What the cluster calls back into the engine (wired once, by ``Engine.open``)."""

    #: the requests this instance serves as a turn's owner (``cancel``, ``send_now``, ...)
    handlers: Mapping[str, Handler]
    #: each heartbeat, with the live instances and those that died since the last (M6)
    on_orphans: Callable[[set[int], frozenset[int]], Awaitable[None]]
    #: this instance learns it was declared dead
    on_expelled: Callable[[], Awaitable[None]]
