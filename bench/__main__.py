"""``python -m bench [--smoke] [--only P1,P3] [--backend sqlite|postgresql] [--reps N]
[--out bench/results] [--profile] [--label NAME]``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench.common import PG_ENV, Backend, Config, Row, backends
from bench.report import write

MODULES = {
    "P1": "bench.p1_reservation",
    "P2": "bench.p2_turns",
    "P3": "bench.p3_fanout",
    "P4": "bench.p4_http",
    "P5": "bench.p5_memory",
    "P6": "bench.p6_scaling",
    "P7": "bench.p7_events",
    "P8": "bench.p8_watchers",
    "P9": "bench.p9_output_log",
    "P10": "bench.p10_scale",
}


async def run_backend(backend: Backend, ids: list[str], cfg: Config) -> list[Row]:
    rows: list[Row] = []
    for bench_id in ids:
        module = importlib.import_module(MODULES[bench_id])
        started = time.perf_counter()
        print(f"[{backend.name}] {bench_id} ...", file=sys.stderr, flush=True)
        rows.extend(await module.run(backend, cfg))
        took = time.perf_counter() - started
        print(f"[{backend.name}] {bench_id} done in {took:.1f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny counts, one repetition")
    parser.add_argument("--only", default="", help="comma-separated ids, e.g. P1,P3")
    parser.add_argument(
        "--backend",
        default="",
        help="run on this store only (sqlite or postgresql; default: sqlite, and PostgreSQL "
        "when TURNQUEUE_TEST_DATABASE_URL is set)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--profile", action="store_true", help="also profile P1 and P3 (pyinstrument)"
    )
    parser.add_argument(
        "--reps", type=int, default=0, help="repetitions (default: 3, or 1 with --smoke)"
    )
    parser.add_argument(
        "--label",
        default="",
        help="appended to the results file name, e.g. 'before' for a before/after comparison",
    )
    args = parser.parse_args(argv)
    ids = [i.strip().upper() for i in args.only.split(",") if i.strip()] or list(MODULES)
    unknown = [i for i in ids if i not in MODULES]
    if unknown:
        parser.error(f"unknown benchmark ids: {', '.join(unknown)}")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="tqbench-") as workdir:
        cfg = Config(
            smoke=args.smoke,
            reps=args.reps or (1 if args.smoke else 3),
            out=args.out,
            profile=args.profile,
            workdir=Path(workdir),
            label=f"-{args.label}" if args.label else "",
        )
        chosen = [b for b in backends(cfg.workdir) if args.backend in ("", b.name)]
        if not chosen:
            parser.error(f"--backend {args.backend}: not available (PostgreSQL needs {PG_ENV})")
        for backend in chosen:
            started = time.perf_counter()
            rows = asyncio.run(run_backend(backend, ids, cfg))
            write(backend.name, rows, cfg, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
