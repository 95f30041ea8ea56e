"""``turnqueue serve | migrate | export-schema | schema diff | schema check`` (SPEC M1, M2, U1, G4).

Every setting is a flag of ``serve``, generated from :class:`~turnqueue.settings.Settings`; a flag
overrides its ``TURNQUEUE_…`` environment variable, a flag left out keeps the environment's value.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from turnqueue.settings import Settings


def env_name(field: str) -> str:
    return f"TURNQUEUE_{field.upper()}"


def _choices(info: FieldInfo) -> list[str] | None:
    if typing.get_origin(info.annotation) is typing.Literal:
        return [str(c) for c in typing.get_args(info.annotation)]
    return None


def _help(name: str, info: FieldInfo) -> str:
    extra = [f"env {env_name(name)}"]
    if info.default not in (PydanticUndefined, None, "") and not name.endswith("secret"):
        extra.append(f"default {info.default}")
    text = info.description or name.replace("_", " ")
    return f"{text} ({'; '.join(extra)})".replace("%", "%%")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turnqueue", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the GraphQL server",
        description="Run the GraphQL server. Every flag overrides its environment variable.",
    )
    # One flag per setting (M2); values stay strings (or booleans) for pydantic to parse.
    for name, info in Settings.model_fields.items():
        flag: dict[str, Any] = {"dest": name, "default": None, "help": _help(name, info)}
        if info.annotation is bool:
            flag["action"] = argparse.BooleanOptionalAction
        else:
            flag.update(choices=_choices(info), metavar=name.upper())
        serve.add_argument("--" + name.replace("_", "-"), **flag)
    export = commands.add_parser("export-schema", help="write the sorted SDL")
    export.add_argument("path", nargs="?", default="schema.graphql")
    migrate = commands.add_parser("migrate", help="upgrade the database to the newest schema")
    migrate.add_argument("--database-url", dest="database_url", default=None)
    schema = commands.add_parser("schema", help="the contract kit: compare schemas, check clients")
    verbs = schema.add_subparsers(dest="verb", required=True)
    diff = verbs.add_parser(
        "diff",
        help="breaking and dangerous changes from OLD to NEW (exit 1 on breaking)",
        description="Print the breaking and dangerous changes between two SDL files; exit 1 "
        "when there is a breaking change (with --strict, a dangerous one too), else 0.",
    )
    diff.add_argument("old", type=Path, metavar="OLD.graphql")
    diff.add_argument("new", type=Path, metavar="NEW.graphql")
    diff.add_argument("--strict", action="store_true", help="dangerous changes fail too")
    check = verbs.add_parser(
        "check",
        help="validate client documents against the schema (exit 1 on errors)",
        description="Validate the GraphQL operations in .graphql/.gql files and the documents "
        "embedded in .ts/.tsx/.js/.jsx (template literals) and .py (gql(...) calls) files, or "
        "in directories of them, against the schema. Deprecated fields, arguments and enum "
        "values are warnings; exit 1 on any error, else 0.",
    )
    check.add_argument("documents", nargs="+", type=Path, metavar="DOCUMENT")
    check.add_argument(
        "--schema",
        type=Path,
        default=None,
        help="SDL file to check against (default: this turnqueue's own schema)",
    )
    check.add_argument("--strict", action="store_true", help="warnings fail too")
    return parser


def load_settings(overrides: dict[str, Any]) -> Settings:
    """Environment first, flags on top (pydantic validates and parses both the same way)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return Settings.model_validate({**Settings().model_dump(), **given})


def _schema(args: argparse.Namespace) -> int:
    from turnqueue import contract

    try:
        if args.verb == "diff":
            return contract.run_diff(args.old, args.new, strict=args.strict)
        if args.schema is not None:
            sdl = contract.read_text(args.schema)
        else:
            from turnqueue.api import print_schema_sdl

            sdl = print_schema_sdl()
        return contract.run_check(sdl, args.documents, strict=args.strict)
    except contract.ContractError as e:
        print(f"turnqueue schema: {e}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "export-schema":
        from turnqueue.api import print_schema_sdl

        Path(args.path).write_text(print_schema_sdl(), encoding="utf-8")
        print(f"wrote {args.path}")
        return 0
    if args.command == "schema":
        return _schema(args)
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
    from turnqueue.agents import agent_profile, build_agents
    from turnqueue.auth import Authenticator

    try:
        settings.check_bind()
        Authenticator.from_settings(settings)  # an unusable JWKS file stops here, not per request
        # A1: a bad agents file, or a default that cannot run, stops the server here.
        agents, default = build_agents(settings)
    except ValueError as e:  # AuthConfigError and ProfileError are ValueErrors
        print(f"turnqueue: {e}", file=sys.stderr)
        return 2
    import uvicorn

    from turnqueue.app import create_app
    from turnqueue.logs import configure_logging
    from turnqueue.startup import AnnouncingServer

    configure_logging(settings)  # TURNQUEUE_LOG_JSON, TURNQUEUE_LOG_LEVEL
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        ws="auto",
        lifespan="on",
        log_config=None,  # uvicorn's loggers propagate to ours (JSON when asked)
        log_level=settings.log_level.lower(),
    )
    profiles = [agent_profile(name, agent) for name, agent in agents.items()]
    server = AnnouncingServer(config, settings, profiles, default)  # the banner once it listens
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else 3  # 3: uvicorn's start-up failure


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
