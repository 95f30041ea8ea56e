"""The benchmarks run (issue 6): ``python -m bench --smoke`` exits 0 and writes a table with a
row for each of P1–P10 (P5b included) for every backend (one test per backend). No
assertion on any time or ratio."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The bench extra (pip install -e '.[dev,bench]'); without it there is nothing to run.
for module in ("psutil", "procrastinate", "pyinstrument", "websockets"):
    pytest.importorskip(module, reason="the bench extra is not installed")
PG_ENV = "TURNQUEUE_TEST_DATABASE_URL"
IDS = ("P1", "P2", "P3", "P4", "P5", "P5b", "P6", "P7", "P8", "P9", "P10")


@pytest.mark.timeout(640)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_bench_smoke_writes_a_row_for_each_benchmark(tmp_path: Path, backend: str) -> None:
    """One store per test (``--backend``), so that two workers run them side by side."""
    if backend == "postgresql" and not os.environ.get(PG_ENV):
        pytest.skip(f"{PG_ENV} not set: PostgreSQL half skipped")
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--backend", backend, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # P1–P10 on a loaded 2-core machine
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    tables = sorted(out.glob("*-smoke.md"))
    assert [t.name.split("-")[-2] for t in tables] == [backend], f"{tables}: {done.stdout[-2000:]}"
    rows = [line for line in tables[0].read_text().splitlines() if line.startswith("| P")]
    assert {row.split("|")[1].strip() for row in rows} == set(IDS), tables[0].read_text()
    assert "| P1 |" in done.stdout
