"""Mutation testing of the engine's rule modules (issue 12), with a score per module.

    .venv/bin/python scripts/mutation.py                 # every module of [tool.mutmut]
    .venv/bin/python scripts/mutation.py --module queue  # one of them
    .venv/bin/python scripts/mutation.py --report-only   # summarise the last run

mutmut (configured in pyproject.toml) copies the project into ``mutants/``, changes one thing at a
time in the modules it may mutate and runs the tests that reach the changed function; a mutant no
test notices *survives*: a line no test guards. Each survivor is killed by a new test or listed,
with why it cannot be told apart, in ``tests/MUTANTS.md``. Long (about an hour per module on two
cores with the PostgreSQL half off): not part of CI. Its table goes in docs/reliability.md.

With ``TURNQUEUE_TEST_DATABASE_URL`` set the PostgreSQL half runs too (slower; the cluster paths
are reached only there).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = [sys.executable, "-m", "mutmut"]
#: mutmut's names: ``turnqueue.engine.queue.xǁQueueOpsǁenqueue__mutmut_3: survived``
LINE = re.compile(r"^\s*(?P<module>[\w.]+?)\.(?:x_|xǁ)(?P<name>\S+?)__mutmut_\d+: (?P<status>.+)$")


def modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["mutmut"]["only_mutate"])


def summarise(results: str) -> dict[str, Counter[str]]:
    """Outcomes per module from ``mutmut results --all true``."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for line in results.splitlines():
        match = LINE.match(line)
        if match:
            table[match["module"]][match["status"].strip()] += 1
    return table


def render(table: dict[str, Counter[str]]) -> str:
    rows = [
        "| module | mutants | killed | survived | no test reaches it | timeout | score |",
        "|---|---|---|---|---|---|---|",
    ]
    for module, counts in sorted(table.items()):
        # Mutants of a run limited to other modules (``--module``) stay "not checked": a module
        # with nothing checked has no score, and unchecked mutants count in no column.
        unchecked = counts["not checked"]
        total = sum(counts.values()) - unchecked
        if not total:
            rows.append(f"| `{module}` | not run ({unchecked}) | | | | | — |")
            continue
        killed = counts["killed"] + counts["timeout"]
        reached = total - counts["no tests"]
        score = f"{100 * killed / reached:.0f}%" if reached else "—"
        rows.append(
            f"| `{module}` | {total} | {counts['killed']} | {counts['survived']} | "
            f"{counts['no tests']} | {counts['timeout']} | {score} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", help="only this module of engine/ (e.g. queue)")
    parser.add_argument("--report-only", action="store_true", help="summarise the last run")
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args(argv)
    if not args.report_only:
        command = [*MUTMUT, "run", "--max-children", str(args.max_children)]
        if args.module:
            wanted = [m for m in modules() if Path(m).stem == args.module]
            if not wanted:
                parser.error(f"--module must be one of {[Path(m).stem for m in modules()]}")
            command.append(f"turnqueue.engine.{args.module}.*")
        subprocess.run(command, cwd=ROOT, check=False)
    results = subprocess.run(
        [*MUTMUT, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    table = summarise(results)
    if not table:
        print("no mutation results yet: run without --report-only first", file=sys.stderr)
        return 1
    print(render(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
