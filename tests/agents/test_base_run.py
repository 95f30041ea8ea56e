"""The shared run plumbing (SPEC §2 Agents): a bug inside an agent fails its turn, clearly."""

from __future__ import annotations

import pytest

from turnqueue.agents import Signal
from turnqueue.agents.base import AgentResult, BaseRun


class Broken(BaseRun):
    def __init__(self, exc: Exception) -> None:
        super().__init__("agent-broken")
        self._exc = exc

    async def _run(self) -> AgentResult:
        self._emit("partial\n")
        raise self._exc

    async def signal(self, signal: Signal) -> None:
        return None


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (OSError("pipe gone"), "agent error: pipe gone"),
        # Issue 12: a bare AssertionError under uvloop left every turn with "agent error: ".
        (AssertionError(), "agent error: AssertionError"),
    ],
)
async def test_s2_a_failing_run_fails_the_turn_and_names_the_error(
    exc: Exception, error: str
) -> None:
    run = Broken(exc)
    run.launch()
    chunks = [chunk async for chunk in run.stream()]  # the stream still ends
    assert chunks == ["partial\n"]
    assert await run.wait() == AgentResult(ok=False, error=error)
    assert run.done
