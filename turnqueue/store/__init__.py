"""Persistence: the narrow async store interface, its SQL implementation and migrations.

This package is the only place SQL lives. The engine sees :class:`Store` and :class:`Tx` only.
"""

from turnqueue.store.protocol import Listener, SessionView, Store, Tx

__all__ = ["Listener", "SessionView", "Store", "Tx"]
