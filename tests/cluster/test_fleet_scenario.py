"""The fleet scenario's own promise (M6 as the fleet test checks it): a mid-turn kill counts
only when the dead owner's log is short of the reply. A fleet of fakes (no processes) stands in
for the real one; the real fleet test runs the same code against three instances."""

from __future__ import annotations

from typing import Any

from fleet_scenario import Scenario

from turnqueue.agents.scripted import reply_for


class _Fleet:
    """Two killable instances (1, 2) beside the reference (0); each turn's log as the database
    would show it after its owner died."""

    def __init__(self, turns: list[dict[str, Any]], logs: dict[str, str]) -> None:
        self.servers = [object(), object(), object()]
        self.turns, self.logs = turns, logs
        self.killed: list[int] = []
        self.story: list[str] = []

    async def running(self, sids: list[str]) -> list[dict[str, Any]]:
        return [t for t in self.turns if t["index"] not in self.killed]

    async def logged(self, turn_id: str) -> str:
        return self.logs[turn_id]

    def kill(self, index: int, why: str) -> None:
        self.killed.append(index)

    async def restart(self, index: int) -> None:
        return None

    def note(self, what: str) -> None:
        self.story.append(what)


def _turn(turn_id: str, index: int) -> dict[str, Any]:
    return {"id": turn_id, "index": index, "prompt": f"hello {turn_id}", "chunks": 2}


async def test_m6_a_kill_after_the_last_chunk_is_passed_over_for_a_turn_cut_mid_stream() -> None:
    late, cut = _turn("late", 1), _turn("cut", 2)
    fleet = _Fleet([late, cut], {"late": reply_for("hello late"), "cut": "You said"})
    scenario = Scenario(fleet, workload=None, cancel_sids=[])  # type: ignore[arg-type]
    await scenario.kill_mid_turn(["s"])
    await scenario._restarted()
    assert fleet.killed == [1, 2]
    assert [k["id"] for k in scenario.killed_turns] == ["cut"]
    assert any("after the last chunk" in line for line in fleet.story)


async def test_m6_a_kill_that_cut_the_stream_counts_at_once() -> None:
    fleet = _Fleet([_turn("cut", 1), _turn("other", 2)], {"cut": "You", "other": "You"})
    scenario = Scenario(fleet, workload=None, cancel_sids=[])  # type: ignore[arg-type]
    await scenario.kill_mid_turn(["s"])
    await scenario._restarted()
    assert fleet.killed == [1]
    assert [k["id"] for k in scenario.killed_turns] == ["cut"]
