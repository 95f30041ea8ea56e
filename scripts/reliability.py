"""One command for the reliability figures: ``python scripts/reliability.py``.

Runs, with larger counts than the default test suite:

- the crash torture (``tests/ops/test_ops_crash_torture.py``: SIGKILL under client load, restart,
  check every acknowledged entry and policy) on SQLite, and on PostgreSQL when
  ``TURNQUEUE_TEST_DATABASE_URL`` is set;
- the soak (``scripts/soak.py``: subscribers churning while mutations run);
- the model-based test (``tests/model/test_model_stateful.py``) when it is present;

and prints a markdown table of what was run and found (operations, faults injected, inputs tried,
entries lost). Exit code 1 when any part failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The suite's per-test timeout (pyproject) is meant for default counts, not for these.
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "--timeout=7200"]
TORTURE = "tests/ops/test_ops_crash_torture.py::test_q10_m6_r2_sigkill_torture_loses_nothing"
MODEL = REPO / "tests" / "model" / "test_model_stateful.py"


@dataclass
class Row:
    check: str
    store: str
    operations: str
    faults: str
    inputs: str
    lost: str
    result: str
    seconds: float


def run(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out + "\nTIMED OUT", time.monotonic() - started
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def figures(output: str, tag: str) -> list[dict[str, object]]:
    return [json.loads(line.split(tag, 1)[1]) for line in output.splitlines() if tag in line]


def torture(rounds: int, env: dict[str, str]) -> list[Row]:
    code, out, took = run(
        [*PYTEST, TORTURE], {**env, "TURNQUEUE_TORTURE_ROUNDS": str(rounds)}, 3600
    )
    rows = []
    for f in figures(out, "TORTURE-FIGURES "):
        rows.append(
            Row(
                "Crash torture (SIGKILL under load)",
                str(f["store"]),
                f"{f['attempted']} run, {f['acknowledged']} acknowledged",
                f"{f['kills']} SIGKILLs ({f['cut_off']} requests cut off)",
                f"{f['entries_acknowledged']} entries acknowledged",
                f"{f['entries_lost']} ({f['entries_duplicated']} duplicated; "
                f"{f['stalled_queues']} eligible queues left idle after a restart)",
                "passed" if code == 0 else "FAILED",
                took,
            )
        )
    if code != 0 or not rows:
        print(out[-4000:], file=sys.stderr)
        if not rows:
            rows.append(Row("Crash torture", "-", "-", "-", "-", "-", "FAILED", took))
    return rows


def soak(minutes: float, env: dict[str, str]) -> Row:
    cmd = [sys.executable, "scripts/soak.py", "--minutes", str(minutes)]
    code, out, took = run(cmd, env, minutes * 60 + 300)
    found = [line for line in out.splitlines() if line.startswith("{")]
    if not found:
        print(out[-4000:], file=sys.stderr)
        return Row("Soak", "sqlite", "-", "-", "-", "-", "FAILED", took)
    f = json.loads(found[-1])
    return Row(
        f"Soak ({minutes:g} min, subscribers connect/drop)",
        "sqlite",
        f"{f['mutations']} mutations, {f['deliveries']} deliveries read",
        f"{f['aborted']} abrupt disconnects, 1 reader of nothing "
        f"({'resynced' if f['slow_resynced'] else 'dropped by keepalive'})",
        f"{f['connections']} connections, {f['subscriptions']} subscriptions "
        f"(peak {f['peak_open']} open); tasks {f['tasks_before']:g}->{f['tasks_after']:g}, "
        f"RSS {f['rss_before_mb']:.0f}->{f['rss_after_mb']:.0f} MB",
        "n/a",
        "passed" if code == 0 and f["ok"] else "FAILED",
        took,
    )


def model(examples: int, steps: int, env: dict[str, str]) -> Row | None:
    if not MODEL.exists():
        return None
    cmd = [*PYTEST, str(MODEL.relative_to(REPO))]
    extra = {"TURNQUEUE_MODEL_EXAMPLES": str(examples), "TURNQUEUE_MODEL_STEPS": str(steps)}
    code, out, took = run(cmd, {**env, **extra}, 7200)
    stores = "sqlite + postgresql" if env.get("TURNQUEUE_TEST_DATABASE_URL") else "sqlite"
    if code != 0:
        print(out[-4000:], file=sys.stderr)
    return Row(
        "Model-based (Hypothesis stateful)",
        stores,
        f"up to {examples * steps} random operations per store",
        "restarts (crash and graceful) among the operations",
        f"{examples} examples x up to {steps} steps",
        "0 (Q10 checked after every step)" if code == 0 else "see failure",
        "passed" if code == 0 else "FAILED",
        took,
    )


def table(rows: list[Row]) -> str:
    columns = ["Check", "Store", "Operations", "Faults injected", "Inputs tried"]
    head = "| " + " | ".join([*columns, "Entries lost", "Result", "Time"]) + " |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.check} | {r.store} | {r.operations} | {r.faults} | {r.inputs} | {r.lost} "
            f"| {r.result} | {r.seconds:.0f} s |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="SIGKILLs per store")
    parser.add_argument("--soak-minutes", type=float, default=2.0)
    parser.add_argument("--model-examples", type=int, default=100)
    parser.add_argument("--model-steps", type=int, default=40)
    parser.add_argument("--skip", action="append", default=[], help="torture, soak or model")
    args = parser.parse_args()
    env = dict(os.environ)
    rows: list[Row] = []
    if "torture" not in args.skip:
        rows.extend(torture(args.rounds, env))
    if "soak" not in args.skip:
        rows.append(soak(args.soak_minutes, env))
    if "model" not in args.skip and (row := model(args.model_examples, args.model_steps, env)):
        rows.append(row)
    print(table(rows))
    return 0 if rows and all(r.result == "passed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
