"""``scripts/mutation.py`` (issue 12): it reads mutmut's results into a score per module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutation.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


RESULTS = """
    turnqueue.engine.queue.xǁQueueOpsǁenqueue__mutmut_1: killed
    turnqueue.engine.queue.xǁQueueOpsǁenqueue__mutmut_2: survived
    turnqueue.engine.queue.xǁQueueOpsǁ_forward__mutmut_1: no tests
    turnqueue.engine.queue.x__visible__mutmut_1: timeout
    turnqueue.engine.cancel.xǁCancelsǁstop__mutmut_7: killed
    turnqueue.engine.cancel.xǁCancelsǁstop__mutmut_8: not checked
    turnqueue.engine.turns.x_launch__mutmut_1: not checked
"""


def test_scores_count_killed_and_timeouts_among_the_mutants_a_test_reaches() -> None:
    script = load()
    table = script.summarise(RESULTS)
    assert dict(table["turnqueue.engine.queue"]) == {
        "killed": 1,
        "survived": 1,
        "no tests": 1,
        "timeout": 1,
    }
    rendered = script.render(table)
    assert "| `turnqueue.engine.queue` | 4 | 1 | 1 | 1 | 1 | 67% |" in rendered
    assert "| `turnqueue.engine.cancel` | 1 | 1 | 0 | 0 | 0 | 100% |" in rendered
    # a module the run did not reach (``--module`` chose another) has no score, not 0%
    assert "| `turnqueue.engine.turns` | not run (1) | | | | | — |" in rendered


def test_the_modules_are_the_engine_rule_modules_of_pyproject() -> None:
    modules = load().modules()
    assert {Path(m).stem for m in modules} == {
        "queue",
        "cancel",
        "turns",
        "turn_end",
        "admission",
        "workflow",
        "core",
        "unit_of_work",
        "recovery",
    }
    root = Path(__file__).resolve().parents[1]
    assert [m for m in modules if not (root / m).is_file()] == []  # none removed since
