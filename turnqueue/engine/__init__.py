"""The engine: every rule of the spec (queue Q, cancellation C, workflow W, replay R, output O,
agents A, cluster M) behind one entry point, :class:`Engine` (``engine/engine.py``).

What is public is what this module exports; the rest of the package is the engine's inside.
``Engine.open`` builds it from a store and a bus; ``Engine.stats`` / ``queue_depth`` and the
:class:`Metrics` observer are the operators' view (U3). See docs/architecture.md.
"""

from turnqueue.engine.admission import Admission
from turnqueue.engine.core import NULL_METRICS, Metrics
from turnqueue.engine.engine import CancelResult, Engine, EngineStats, QueueDepth
from turnqueue.engine.queue import Applied, Enqueued, SendNowResult

__all__ = [
    "NULL_METRICS",
    "Admission",
    "Applied",
    "CancelResult",
    "Engine",
    "EngineStats",
    "Enqueued",
    "Metrics",
    "QueueDepth",
    "SendNowResult",
]
