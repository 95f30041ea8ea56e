"""Operations metrics (SPEC U3): Prometheus text at ``/metrics``.

:class:`PrometheusMetrics` is the engine's observer (``turnqueue.engine.Metrics``) on a
``CollectorRegistry`` of its own per app, so apps in one process (tests) never clash.

Hazards:
- The engine calls its observer in hot paths, sometimes under the session lock: each call must
  be synchronous, cheap and never raise (prometheus-client counters are all three).
- Delivery latency runs from an event's making (``Event.at``: when it is published) to a
  subscriber receiving it (the bus's ``on_deliver`` hook, :meth:`~PrometheusMetrics.delivered`).
- Queue depth is a database fact (other instances write entries too): one ``COUNT`` per scrape
  (:meth:`~PrometheusMetrics.refresh`), never a running sum.
- The errors counter counts ``ERROR`` records of the ``turnqueue`` loggers through a
  process-global handler: :meth:`~PrometheusMetrics.unbind` when the app stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.process_collector import ProcessCollector

from turnqueue.engine import Metrics

if TYPE_CHECKING:
    from turnqueue.api.fanout import FanOut
    from turnqueue.bus import Event
    from turnqueue.engine import Engine

__all__ = ["CONTENT_TYPE_LATEST", "PrometheusMetrics"]

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_CANCEL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)


class _ErrorCounter(logging.Handler):
    def __init__(self, counter: Counter) -> None:
        super().__init__(level=logging.ERROR)
        self._counter = counter

    def emit(self, record: logging.LogRecord) -> None:
        self._counter.labels(logger=record.name).inc()


class PrometheusMetrics(Metrics):
    """The engine's observer (``turnqueue.engine.Metrics``) and the bus's, as Prometheus text."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, open fds, CPU seconds
        counter = partial(Counter, registry=r)
        gauge = partial(Gauge, registry=r)
        histogram = partial(Histogram, registry=r)
        self.turns_started = counter("turnqueue_turns_started", "Turns started in this process")
        self.turns_ended = counter(
            "turnqueue_turns_ended", "Turns ended in this process, by final status", ["status"]
        )
        self.reservations = counter(
            "turnqueue_reservations",
            "Reservations of a queue head (Q3), by kind (automatic/targeted) and outcome",
            ["kind", "outcome"],
        )
        self.cancellations = counter(
            "turnqueue_cancellations", "Explicit cancel operations, by outcome", ["outcome"]
        )
        self.cancel_seconds = histogram(
            "turnqueue_cancellation_duration_seconds",
            "Duration of explicit cancel operations, from acceptance to outcome",
            ["outcome"],
            buckets=_CANCEL_BUCKETS,
        )
        self.errors = counter(
            "turnqueue_errors",
            "Errors logged by the server (masked faults are logger turnqueue.api.assembly)",
            ["logger"],
        )
        self.events = counter(
            "turnqueue_events_published", "Bus events published, by kind", ["kind"]
        )
        self.delivery = histogram(
            "turnqueue_event_delivery_seconds",
            "Time from an event's publication to a subscriber receiving it",
            buckets=_LATENCY_BUCKETS,
        )
        self.subscriptions = gauge(
            "turnqueue_subscriptions", "Open event subscriptions (bus subscribers)"
        )
        self.fanout_groups = gauge(
            "turnqueue_subscription_groups",
            "Shared subscription groups (one execution each, fanned out to their members)",
        )
        self.fanout_members = gauge(
            "turnqueue_subscription_members", "WebSocket subscriptions served by a shared group"
        )
        self.queue_depth = gauge(
            "turnqueue_queue_depth", "Queued entries over all sessions (visible)"
        )
        self.in_flight = gauge(
            "turnqueue_queue_in_flight", "Entries reserved and not yet started (Q10)"
        )
        self.running_turns = gauge("turnqueue_running_turns", "Turns running in this process")
        self.tasks = gauge("turnqueue_asyncio_tasks", "asyncio tasks alive in the server's loop")
        self.tasks.set_function(_task_count)
        self.ready = gauge("turnqueue_database_up", "1 when the last database read succeeded")
        self._engine: Engine | None = None
        self._error_handler = _ErrorCounter(self.errors)

    def turn_started(self) -> None:
        self.turns_started.inc()

    def turn_ended(self, status: str) -> None:
        self.turns_ended.labels(status=status).inc()

    def reservation(self, kind: str, outcome: str) -> None:
        self.reservations.labels(kind=kind, outcome=outcome.lower()).inc()

    def cancel_done(self, outcome: str, seconds: float) -> None:
        self.cancellations.labels(outcome=outcome).inc()
        self.cancel_seconds.labels(outcome=outcome).observe(seconds)

    def bind(self, engine: Engine) -> None:
        """Observe this engine and its bus (call once, after ``Engine.open``; the bus must have
        been built with ``on_deliver=self.delivered``)."""
        self._engine = engine
        engine.observe(self)
        self.subscriptions.set_function(lambda: engine.stats().subscriptions)
        self.running_turns.set_function(lambda: engine.stats().running_turns)
        engine.bus.add_listener(self._published)
        logging.getLogger("turnqueue").addHandler(self._error_handler)

    def observe_fanout(self, fanout: FanOut) -> None:
        self.fanout_groups.set_function(lambda: fanout.stats().groups)
        self.fanout_members.set_function(lambda: fanout.stats().members)

    def unbind(self) -> None:
        logging.getLogger("turnqueue").removeHandler(self._error_handler)
        self._engine = None

    def _published(self, event: Event) -> None:
        self.events.labels(kind=event.kind.value).inc()

    def delivered(self, event: Event) -> None:
        """The bus's ``on_deliver`` hook: a subscriber received ``event``."""
        self.delivery.observe(time.perf_counter() - event.at)

    async def refresh(self) -> None:
        """Read the database-backed gauges (queue depth) before a scrape."""
        if self._engine is None:
            return
        try:
            async with asyncio.timeout(5):
                depth = await self._engine.queue_depth()
        except Exception as exc:
            log.warning("metrics: could not read the queue depth: %s", exc)
            self.ready.set(0)
            return
        self.queue_depth.set(depth.visible)
        self.in_flight.set(depth.in_flight)
        self.ready.set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped outside the loop (not by /metrics)
        return float("nan")
