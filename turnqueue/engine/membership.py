"""This instance's membership of the cluster (M4, M6): the :class:`Cluster` built from explicit
parts and wired to the engine, the adoption of what dead instances left, and letting go of its own
turns when the others declared it dead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from turnqueue.engine.cluster import Cluster
from turnqueue.engine.core import Core
from turnqueue.engine.peers import ClusterHooks, Handler
from turnqueue.engine.recovery import recover
from turnqueue.engine.turns import Turns


async def join_cluster(
    core: Core,
    turns: Turns,
    served: Mapping[str, Handler],
    on_beat: Callable[[], None],
) -> None:
    """Hear the other instances, answer their forwarded requests (``served``), adopt the dead's;
    ``on_beat``: run after each heartbeat (the rows other instances wrote for this one, in case
    a NOTIFY was lost). The cluster becomes ``core.cluster`` before it starts."""

    async def adopt_orphans(live: set[int], dead: frozenset[int]) -> None:
        # Each heartbeat: recover what dead instances left; when one has just died, also sweep
        # for queues it left eligible without running (a crash after a turn's end).
        if not core.closing:
            await recover(core, turns, sweep=bool(dead), live=live)
            on_beat()

    async def expelled() -> None:
        # The others declared this instance dead and recovered its turns: let them go.
        for runner in list(core.runners.values()):
            runner.abandon()

    hooks = ClusterHooks(handlers=served, on_orphans=adopt_orphans, on_expelled=expelled)
    core.cluster = cluster = Cluster(
        instance=core.instance,
        lease=core.settings.lease_seconds,
        store=core.store,
        bus=core.bus,
        spawn=core.spawn,
        hooks=hooks,
    )
    await cluster.start()
