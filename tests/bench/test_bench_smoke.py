"""The benchmarks run (issue 6): ``python -m bench --smoke`` exits 0 and writes a table with a
row for each of P1–P7 and P9 for every backend. No assertion on any time or ratio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The bench extra (pip install -e '.[dev,bench]'); without it there is nothing to run.
for module in ("psutil", "procrastinate", "pyinstrument", "websockets"):
    pytest.importorskip(module, reason="the bench extra is not installed")
IDS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P9")


@pytest.mark.timeout(640)
def test_bench_smoke_writes_a_row_for_each_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # P1–P9 on both stores on a loaded 2-core machine
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    tables = sorted(out.glob("*-smoke.md"))
    assert tables, f"no table written in {out}: {done.stdout[-2000:]}"
    for table in tables:
        rows = [line for line in table.read_text().splitlines() if line.startswith("| P")]
        assert {row.split("|")[1].strip() for row in rows} == set(IDS), table.read_text()
    assert "| P1 |" in done.stdout
