"""A longer soak, outside the test suite: ``python scripts/soak.py --minutes N``.

Starts a real ``turnqueue serve`` (SQLite in a temporary directory unless ``--database-url``),
runs the soak of ``tests/ops/test_ops_soak.py`` for the given time with more subscribers, prints
its figures as JSON (last line) and exits 1 when a check failed.
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
from test_ops_soak import problems, soak  # noqa: E402


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
    for problem in found:
        print(f"FAILED: {problem}", file=sys.stderr)
    print(json.dumps({**vars(figures), "ok": not found}))
    return 1 if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--standing", type=int, default=300, help="subscribers kept connected")
    parser.add_argument("--churners", type=int, default=30, help="connect/drop loops")
    parser.add_argument("--database-url", default=None)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
