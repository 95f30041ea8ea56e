"""The results table: markdown to stdout and to ``<out>/<date>-<backend>.md``."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from bench.common import Config, Row

HEADER = "| id | figure | value | baseline | ratio | target | met? |\n|---|---|---|---|---|---|---|"


def _num(value: float | None, unit: str = "") -> str:
    if value is None or value != value:  # None or NaN
        return "—"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"
    return f"{text} {unit}".rstrip()


def _met(row: Row) -> str:
    met = row.met
    return "—" if met is None else ("yes" if met else "**no**")


def table(rows: Sequence[Row]) -> str:
    lines = [HEADER]
    for row in rows:
        ratio = row.ratio
        figure = row.figure + (f" ({row.note})" if row.note else "")
        lines.append(
            f"| {row.id} | {figure} | {_num(row.value, row.unit)} | "
            f"{_num(row.baseline, row.unit)} | {'—' if ratio is None else f'{ratio:.2f}×'} | "
            f"{row.target_text} | {_met(row)} |"
        )
    return "\n".join(lines)


def write(backend: str, rows: Sequence[Row], cfg: Config, elapsed: float) -> Path:
    if cfg.smoke:
        mode = "smoke (tiny counts, 1 repetition; the times mean nothing)"
    else:
        mode = f"full (medians of {cfg.reps} repetitions)"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = (
        f"# turnqueue benchmarks — {backend}, {date.today().isoformat()}\n\n"
        f"Mode: {mode}. Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; load average at the end {load}. "
        f"Took {elapsed:.0f} s.\n\n{table(rows)}\n"
    )
    cfg.out.mkdir(parents=True, exist_ok=True)
    suffix = ("-smoke" if cfg.smoke else "") + cfg.label
    path = cfg.out / f"{date.today().isoformat()}-{backend}{suffix}.md"
    path.write_text(text)
    print(text, flush=True)
    return path
