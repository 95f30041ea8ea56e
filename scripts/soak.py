"""A longer soak, outside the test suite: ``python scripts/soak.py --minutes N``.

Starts a real ``turnqueue serve`` (SQLite in a temporary directory unless ``--database-url``),
runs the soak of ``tests/ops/test_ops_soak.py`` for the given time with more subscribers
(standing subscribers of every field, turns streaming into their sessions, connection churn,
mutations, a slow and a fast reader), prints its figures as JSON (last line) and exits 1 when a
check failed.

RSS flatness (P7): the server's RSS is sampled every few seconds; its growth from the end of the
warm-up (``--warm-up-minutes``, at most half the run) to the end must stay within ``--flat-mb``.
E.g. ``python scripts/soak.py --minutes 30 --warm-up-minutes 5``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "ops"), str(REPO / "tests")]  # as pytest's rootdir conftest

from ops_helpers import ProcServer  # noqa: E402
from test_ops_soak import SoakFigures, problems, soak  # noqa: E402


def flatness(figures: SoakFigures, warm_up_s: float) -> dict[str, float | None]:
    """RSS at the end of the warm-up and at the end, its growth and slope in between."""
    after = [(t, mb) for t, mb in figures.rss_samples if t >= warm_up_s]
    if len(after) < 2:
        return {"rss_warm_mb": None, "rss_end_mb": None, "growth_mb": None, "mb_per_min": None}
    (t0, mb0), (t1, mb1) = after[0], after[-1]
    slope = (mb1 - mb0) / ((t1 - t0) / 60) if t1 > t0 else None
    return {
        "rss_warm_mb": mb0,
        "rss_end_mb": mb1,
        "growth_mb": round(mb1 - mb0, 1),
        "mb_per_min": None if slope is None else round(slope, 2),
    }


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="tq-soak-") as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'soak.db'}"
        server = ProcServer(
            url,
            Path(tmp) / "server.log",
            TURNQUEUE_SUBSCRIBER_BUFFER="16",
            TURNQUEUE_SCRIPTED_TURN_SECONDS="0.5",
            TURNQUEUE_LOG_LEVEL="WARNING",
        )
        await server.start()
        try:
            figures = await soak(
                server, args.minutes * 60, standing=args.standing, churners=args.churners
            )
        finally:
            server.stop()
    # Over minutes, the server's keepalive may drop the reader of nothing before it resyncs.
    found = problems(figures, min_connections=1, may_drop_slow=True)
    warm_up_s = min(args.warm_up_minutes * 60, args.minutes * 60 / 2)
    flat = flatness(figures, warm_up_s)
    growth = flat["growth_mb"]
    if growth is None:
        found.append("too few RSS samples to judge flatness")
    elif growth > args.flat_mb:
        found.append(f"RSS not flat after {warm_up_s:.0f} s: {flat}")
    for problem in found:
        print(f"FAILED: {problem}", file=sys.stderr)
    print(
        f"RSS after the {warm_up_s:.0f} s warm-up: {flat['rss_warm_mb']} -> {flat['rss_end_mb']} "
        f"MB ({flat['mb_per_min']} MB/min); {figures.turns} turns, "
        f"{figures.deliveries} deliveries, {figures.connections} connections",
        file=sys.stderr,
    )
    print(json.dumps({**vars(figures), "flatness": flat, "ok": not found}))
    return 1 if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--standing", type=int, default=300, help="subscribers kept connected")
    parser.add_argument("--churners", type=int, default=30, help="connect/drop loops")
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--warm-up-minutes", type=float, default=3.0, help="RSS may grow this long (P7)"
    )
    parser.add_argument(
        "--flat-mb", type=float, default=16.0, help="RSS growth allowed after the warm-up"
    )
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
