"""``turnqueue serve | export-schema | migrate`` (SPEC M1, M2, U1).

Every flag of ``serve`` overrides the matching ``TURNQUEUE_…`` environment variable; a flag left
out keeps the environment's (or the default) value.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from turnqueue.settings import Settings

#: flag → Settings field, for the ``serve`` overrides.
SERVE_FLAGS: dict[str, tuple[str, type[Any], str]] = {
    "--database-url": ("database_url", str, "postgresql://… or sqlite:///…"),
    "--host": ("host", str, "address to bind (default 127.0.0.1)"),
    "--port": ("port", int, "port to bind (default 8000)"),
    "--tokens": ("tokens", str, "comma-separated principal:token pairs"),
    "--agent": ("agent", str, "default agent profile: scripted or command"),
    "--agent-command": ("agent_command", str, "command run per turn by the command agent"),
    "--scripted-turn-seconds": ("scripted_turn_seconds", float, "scripted reply duration"),
    "--queue-max": ("queue_max", int, "entries per session; 0 = unlimited"),
    "--cancel-timeout": ("cancel_timeout", float, "seconds before SIGTERM after SIGINT"),
    "--escalation-timeout": ("escalation_timeout", float, "seconds before SIGKILL"),
    "--workflow-file": ("workflow_file", str, "workflow definition file"),
    "--allowed-origins": ("allowed_origins", str, "comma-separated browser origins"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turnqueue", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the GraphQL server")
    for flag, (dest, kind, help_text) in SERVE_FLAGS.items():
        serve.add_argument(flag, dest=dest, type=kind, default=None, help=help_text)
    export = commands.add_parser("export-schema", help="write the sorted SDL")
    export.add_argument("path", nargs="?", default="schema.graphql")
    migrate = commands.add_parser("migrate", help="upgrade the database to the newest schema")
    migrate.add_argument("--database-url", dest="database_url", default=None)
    return parser


def load_settings(overrides: dict[str, Any]) -> Settings:
    """Environment first, flags on top (pydantic validates and parses both the same way)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    env = Settings()
    return Settings.model_validate({**env.model_dump(), **given})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "export-schema":
        from turnqueue.api import print_schema_sdl

        Path(args.path).write_text(print_schema_sdl(), encoding="utf-8")
        print(f"wrote {args.path}")
        return 0
    overrides = {k: v for k, v in vars(args).items() if k not in ("command", "path")}
    try:
        settings = load_settings(overrides)
    except ValidationError as e:
        print(f"turnqueue: invalid configuration:\n{e}", file=sys.stderr)
        return 2
    if args.command == "migrate":
        from turnqueue.store.migrate import migrate

        asyncio.run(migrate(settings.async_database_url))
        print("database is up to date")
        return 0
    try:
        settings.check_bind()
    except ValueError as e:
        print(f"turnqueue: {e}", file=sys.stderr)
        return 2
    import uvicorn

    from turnqueue.app import create_app
    from turnqueue.logs import configure_logging

    configure_logging(settings)  # TURNQUEUE_LOG_JSON, TURNQUEUE_LOG_LEVEL
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        ws="auto",
        lifespan="on",
        log_config=None,  # uvicorn's loggers propagate to ours (JSON when asked)
        log_level=settings.log_level.lower(),
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
