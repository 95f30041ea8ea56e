"""The cancellation-pending projection's own rules (C1, C2, C5, C7, R2), one edge each.

``CancellationRegistry`` is pure (no store, no loop): these tests drive it directly, as the
projection every instance keeps, and pin the edges the engine-level tests reach only in a
cluster (``own``, ``own_pending``, relays at equal revisions, the R2 floor at its limits).
Written against the survivors of a mutation run (``tests/MUTANTS.md``).
"""

from __future__ import annotations

import pytest

from turnqueue.domain import CancelKind, CancellationStatus
from turnqueue.engine.cancellation import MAX_REVISION, CancellationRegistry

EXPLICIT = CancelKind.EXPLICIT


def recording(epoch: int = 1) -> tuple[CancellationRegistry, list[CancellationStatus]]:
    """A registry and the transitions it publishes, in order."""
    seen: list[CancellationStatus] = []
    return CancellationRegistry(epoch, seen.append), seen


def pairs(seen: list[CancellationStatus]) -> list[tuple[bool, int]]:
    return [(s.pending, s.revision) for s in seen]


def test_r2_the_epoch_must_leave_room_for_the_counter() -> None:
    """R2: revisions are ``epoch << 32`` plus a counter and stay below 2**53 (JSON-safe), so the
    epoch is 1 ≤ epoch < 2**21."""
    for bad in (0, -1, 2**21):
        with pytest.raises(ValueError, match=rf"^epoch {bad} out of range$"):
            CancellationRegistry(bad, lambda _: None)
    for good in (1, 2, 2**21 - 1):
        registry = CancellationRegistry(good, lambda _: None)
        assert registry.epoch == good
        with registry.reference("s", EXPLICIT):
            assert registry.status("s").revision == (good << 32) + 1


def test_r2_revisions_stop_at_the_largest_safe_integer() -> None:
    """R2: the last revision a session may take is 2**53 - 1; one more is an error, not a
    revision a JavaScript client would round."""
    registry, seen = recording(2**21 - 1)
    registry.raise_floor("s", MAX_REVISION - 1)
    with pytest.raises(OverflowError, match=r"^cancellation revisions exhausted$"):
        with registry.reference("s", EXPLICIT):  # acquiring takes MAX_REVISION itself
            assert registry.status("s") == CancellationStatus("s", True, MAX_REVISION)
    assert pairs(seen) == [(True, MAX_REVISION)]


def test_c1_c2_nested_references_of_every_kind_count() -> None:
    """C1/C2: every kind counts; only the first acquire and the last release are transitions."""
    registry, seen = recording(4)
    base = 4 << 32
    with registry.reference("s", EXPLICIT):
        with registry.reference("s", CancelKind.REPLACEMENT):
            with registry.reference("s", CancelKind.INTERNAL):
                assert registry.status("s") == CancellationStatus("s", True, base + 1)
            assert registry.status("s") == CancellationStatus("s", True, base + 1)
        assert registry.status("s") == CancellationStatus("s", True, base + 1)
    assert registry.status("s") == CancellationStatus("s", False, base + 2)
    assert pairs(seen) == [(True, base + 1), (False, base + 2)]
    with registry.reference("s", EXPLICIT):  # the next cancel continues the count
        pass
    assert pairs(seen)[2:] == [(True, base + 3), (False, base + 4)]


def test_c7_own_answers_only_what_this_process_owns() -> None:
    """C7: what other instances ask (``own``, ``own_pending``) is this process's projection,
    never a relayed value; pending only while a reference is held."""
    registry, _ = recording(3)
    base = 3 << 32
    registry.relay(CancellationStatus("relayed", True, 10), origin=2)
    assert registry.own("relayed") is None
    assert registry.own("never") is None
    assert registry.own_pending() == []
    with registry.reference("s", EXPLICIT):
        assert registry.own("s") == CancellationStatus("s", True, base + 1)
        assert registry.own_pending() == [CancellationStatus("s", True, base + 1)]
    assert registry.own("s") == CancellationStatus("s", False, base + 2)
    assert registry.own_pending() == []


def test_c7_a_newer_relayed_value_outranks_a_finished_turn_of_ours() -> None:
    """C7: after a turn of ours ended here, the session may run elsewhere: a relayed value
    with a higher revision is the answer; one not higher is not (ours stands); while a
    reference of ours is held, ours is the answer whatever was relayed."""
    registry, _ = recording(1)
    with registry.reference("s", EXPLICIT):
        pass
    ours = registry.status("s")
    registry.relay(CancellationStatus("s", True, ours.revision))  # not higher: ours stands
    assert registry.status("s") == ours
    newer = CancellationStatus("s", True, 5 << 32)
    registry.relay(newer, origin=5)
    assert registry.status("s") == newer
    assert registry.pending("s") is True
    with registry.reference("s", EXPLICIT):  # a reference of ours wins while held
        assert registry.status("s") == CancellationStatus("s", True, (5 << 32) + 1)
    assert registry.status("s") == CancellationStatus("s", False, (5 << 32) + 2)


def test_c7_a_relayed_value_is_kept_only_when_newer() -> None:
    """C7: a relayed transition at a revision already heard (or lower) changes nothing; a
    newer one replaces it, whatever this process once ran for the session."""
    registry, _ = recording(1)
    with registry.reference("s", EXPLICIT):
        assert registry.pending("s") is True
    registry.relay(CancellationStatus("s", True, 7 << 32), origin=7)
    assert registry.pending("s") is True
    registry.relay(CancellationStatus("s", False, 7 << 32), origin=7)  # same revision
    assert registry.pending("s") is True
    registry.relay(CancellationStatus("s", False, (7 << 32) + 1), origin=7)
    assert registry.status("s") == CancellationStatus("s", False, (7 << 32) + 1)


def test_c7_relayed_from_names_only_pending_values_of_dead_publishers() -> None:
    """C5/C7: ``relayed_from`` names what dead publishers said was pending — recovery adopts
    those sessions (N2); live publishers' values, cleared values and unknown origins are not
    named, and nothing is changed by asking."""
    registry, _ = recording(1)
    registry.relay(CancellationStatus("dead", True, 10), origin=5)
    registry.relay(CancellationStatus("alive", True, 10), origin=6)
    registry.relay(CancellationStatus("unheld", True, 10), origin=5)
    registry.relay(CancellationStatus("cleared", False, 10), origin=5)
    registry.relay(CancellationStatus("unknown", True, 10))  # no origin: 0
    assert registry.relayed_pending() == {"dead": 5, "alive": 6, "unheld": 5, "unknown": 0}
    assert registry.pending("dead") and registry.pending("alive")
    assert registry.relayed_from({5, 7}) == ["dead", "unheld"]
    assert registry.relayed_from({6}) == ["alive"]
    assert registry.relayed_from(set()) == []
    assert registry.relayed_pending() == {"dead": 5, "alive": 6, "unheld": 5, "unknown": 0}
    registry.adopt("dead", 2)  # what recovery does with them: cleared above the floor (R2)
    assert registry.status("dead") == CancellationStatus("dead", False, 2 << 32)
    assert registry.relayed_from({5}) == ["unheld"]
    assert registry.status("cleared") == CancellationStatus("cleared", False, 10)
    registry.forget("never")
    registry.forget("alive")  # its owner no longer confirms it
    assert registry.status("alive") == CancellationStatus("alive", False, 0)
    assert registry.relayed_pending() == {"unheld": 5, "unknown": 0}


def test_r2_the_floor_hint_reserves_only_a_held_references_release() -> None:
    """R2: the hint is the highest revision known, plus one while a reference is held (the
    release's revision, reserved); after the release it is the release's own revision."""
    registry, _ = recording(2)
    base = 2 << 32
    assert registry.floor_hint("s") == 0
    with registry.reference("s", EXPLICIT):
        assert registry.floor_hint("s") == base + 2
    assert registry.floor_hint("s") == base + 2
    registry.relay(CancellationStatus("t", False, 40))
    assert registry.floor_hint("t") == 40


def test_r2_a_durable_floor_equal_to_our_reservation_does_not_move_the_release() -> None:
    """R2: reading back the floor this process wrote itself (its reserved release) must not
    push the release one further: the release takes exactly the reserved revision."""
    registry, seen = recording(2)
    base = 2 << 32
    with registry.reference("s", EXPLICIT):
        registry.raise_floor("s", registry.floor_hint("s"))
        registry.raise_floor("s", base)  # lower: ignored
    assert pairs(seen) == [(True, base + 1), (False, base + 2)]
    registry.raise_floor("s", base + 10)  # higher: another instance reserved it
    with registry.reference("s", EXPLICIT):
        pass
    assert pairs(seen)[2:] == [(True, base + 11), (False, base + 12)]


def test_c7_adopting_leaves_a_live_cancellation_of_ours_alone() -> None:
    """M6/C7: recovery adopts the sessions it recovers, but a cancellation this process is
    running on one clears itself: no transition, still pending, the release comes next."""
    registry, seen = recording(1)
    base = 1 << 32
    with registry.reference("s", EXPLICIT):
        assert registry.adopt("s", 8) is None
        assert registry.status("s") == CancellationStatus("s", True, base + 1)
    assert pairs(seen) == [(True, base + 1), (False, base + 2)]
    adopted = registry.adopt("s", 8)  # no reference now: adopted with the fresh epoch
    assert adopted is not None and pairs(seen)[2:] == []  # told once recovery commits
    registry.announce(adopted)
    assert pairs(seen)[2:] == [(False, 8 << 32)]


def test_c7_adopting_starts_above_the_floor_and_forgets_the_relayed_value() -> None:
    """M6/R2/C7: an adopted session continues above everything published for it (the floor,
    when that is above the fresh epoch's base); a value relayed before the adoption is
    settled by it."""
    registry, seen = recording(1)
    registry.raise_floor("s", (8 << 32) + 5)
    registry.announce(registry.adopt("s", 8))  # type: ignore[arg-type]
    [(pending, adopted)] = pairs(seen)
    assert pending is False and adopted >= (8 << 32) + 5
    with registry.reference("s", EXPLICIT):
        pass
    assert pairs(seen)[1:] == [(True, adopted + 1), (False, adopted + 2)]
    registry.relay(CancellationStatus("t", True, 3 << 32), origin=3)
    assert registry.pending("t") is True
    registry.adopt("t", 9)
    assert registry.status("t") == CancellationStatus("t", False, 9 << 32)
    assert registry.relayed_pending() == {}  # nothing left to ask the dead owner about


def test_r2_a_lower_relayed_revision_never_lowers_the_floor() -> None:
    """R2: the floor only rises: a relayed transition below it (late, or from an older owner)
    and a stale read of the durable mark leave it, so the next transition still continues
    above the floor."""
    registry, seen = recording(1)
    base = 1 << 32
    registry.raise_floor("s", base + 100)
    registry.relay(CancellationStatus("s", False, base + 50), origin=2)
    registry.raise_floor("s", base + 60)  # a stale read of the durable mark
    assert registry.floor_hint("s") == base + 100
    with registry.reference("s", EXPLICIT):
        pass
    assert pairs(seen) == [(True, base + 101), (False, base + 102)]


def test_c7_a_reference_of_ours_outranks_a_relayed_clear() -> None:
    """C7: while a cancellation of ours runs on the session, ours is its status, whatever is
    relayed meanwhile; once ours is released, ours (the newest) stands."""
    registry, _ = recording(1)
    registry.relay(CancellationStatus("s", True, 5 << 32), origin=5)
    assert registry.pending("s") is True
    with registry.reference("s", EXPLICIT):
        registry.relay(CancellationStatus("s", False, (5 << 32) + 2), origin=5)
        assert registry.status("s") == CancellationStatus("s", True, (5 << 32) + 1)  # ours
        registry.forget("s")
        assert registry.pending("s") is True  # still ours
    assert registry.pending("s") is False
