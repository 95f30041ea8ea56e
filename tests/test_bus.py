"""The in-process event bus: ordered, bounded, and never silent about a lagging subscriber (R3)."""

from __future__ import annotations

import pytest

from turnqueue.bus import Event, EventBus, EventKind, SubscriberLagged
from turnqueue.timeouts import within


def ev(revision: int, session: str = "s", kind: EventKind = EventKind.QUEUE) -> Event:
    return Event(kind, session, revision)


async def test_r3_events_arrive_in_publication_order_filtered_by_session_and_kind() -> None:
    bus = EventBus(16)
    with bus.subscribe("s", [EventKind.QUEUE]) as sub:
        bus.publish(ev(1))
        bus.publish(ev(9, session="other"))
        bus.publish(ev(2, kind=EventKind.SESSION))
        bus.publish(ev(3))
        assert [(await sub.get()).revision for _ in range(2)] == [1, 3]


async def test_r3_a_lagging_subscriber_is_told_to_resync_and_does_not_stall_others() -> None:
    bus = EventBus(4)
    slow = bus.subscribe("s", [EventKind.QUEUE])
    fast = bus.subscribe("s", [EventKind.QUEUE])
    for revision in range(1, 11):
        bus.publish(ev(revision))
        assert (await fast.get()).revision == revision  # the fast one keeps up
    with pytest.raises(SubscriberLagged):
        await slow.get()
    assert slow.pending() <= 4  # memory stays bounded
    slow.close()
    fast.close()
    assert bus.subscriber_count() == 0


async def test_closing_a_subscription_unregisters_it() -> None:
    bus = EventBus(4)
    with bus.subscribe("s", [EventKind.QUEUE]):
        assert bus.subscriber_count() == 1
    assert bus.subscriber_count() == 0
    bus.publish(ev(1))  # no subscriber: nothing to do, nothing raised


async def test_a_failing_listener_does_not_stop_delivery() -> None:
    bus = EventBus(4)

    def broken(_: Event) -> None:
        raise RuntimeError("listener bug")

    bus.add_listener(broken)
    with bus.subscribe("s", [EventKind.QUEUE]) as sub:
        bus.publish(ev(1))
        assert (await within(sub.get(), 1)).revision == 1


async def test_u3_the_delivery_hook_sees_each_event_a_reader_receives() -> None:
    """U3's delivery latency is timed from ``publish`` to this hook (no patching of the bus)."""
    seen: list[Event] = []
    bus = EventBus(2, on_deliver=seen.append)
    with bus.subscribe("s", [EventKind.QUEUE]) as sub:
        first = ev(1)
        bus.publish(first)
        bus.publish(ev(2, kind=EventKind.SESSION))  # filtered out: never delivered
        assert await sub.get() is first
        assert seen == [first]
        for revision in range(2, 6):  # overflow the buffer of 2
            bus.publish(ev(revision))
        with pytest.raises(SubscriberLagged):
            await sub.get()
        assert seen == [first]  # a lagged read delivers nothing


async def test_a_failing_delivery_hook_does_not_break_the_reader() -> None:
    def broken(_: Event) -> None:
        raise RuntimeError("hook bug")

    bus = EventBus(4, on_deliver=broken)
    with bus.subscribe("s", [EventKind.QUEUE]) as sub:
        bus.publish(ev(1))
        assert (await within(sub.get(), 1)).revision == 1
