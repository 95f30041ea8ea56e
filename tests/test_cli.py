"""M2: every setting is a flag of ``turnqueue serve``, generated from the settings model.

The flags are compared with ``Settings.model_fields`` (the source of truth): one flag per field,
its help text the field's description and its environment variable. The flag names that existed
before the flags were generated keep working.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from turnqueue.cli import _parser, env_name, load_settings, main
from turnqueue.settings import Settings

REPO = Path(__file__).resolve().parents[1]
#: the hand-written flags of earlier versions (scripts and docs use them)
LEGACY_FLAGS = {
    "--database-url": "database_url",
    "--host": "host",
    "--port": "port",
    "--tokens": "tokens",
    "--agent": "agent",
    "--agent-command": "agent_command",
    "--scripted-turn-seconds": "scripted_turn_seconds",
    "--queue-max": "queue_max",
    "--cancel-timeout": "cancel_timeout",
    "--escalation-timeout": "escalation_timeout",
    "--workflow-file": "workflow_file",
    "--allowed-origins": "allowed_origins",
}


def serve_actions() -> dict[str, argparse.Action]:
    """The ``serve`` subcommand's options by destination."""
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = subparsers.choices["serve"]
    return {a.dest: a for a in serve._actions if a.option_strings and a.dest != "help"}


def test_m2_every_setting_has_a_flag_and_every_flag_a_setting() -> None:
    actions = serve_actions()
    assert set(actions) == set(Settings.model_fields)


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_m2_flag_help_is_the_field_description_and_names_the_env_variable(field: str) -> None:
    info = Settings.model_fields[field]
    action = serve_actions()[field]
    assert info.description, f"Settings.{field} has no description (it is the flag's help)"
    assert action.help is not None and info.description in action.help.replace("%%", "%")
    assert env_name(field) in action.help
    assert env_name(field) == f"TURNQUEUE_{field.upper()}"
    assert f"--{field.replace('_', '-')}" in action.option_strings


def test_m2_legacy_flag_names_still_work() -> None:
    actions = serve_actions()
    for flag, dest in LEGACY_FLAGS.items():
        assert flag in actions[dest].option_strings


def test_m2_flags_parse_into_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TURNQUEUE_INTROSPECTION", "true")
    monkeypatch.setenv("TURNQUEUE_LEASE_SECONDS", "4")
    args = _parser().parse_args(
        [
            "serve",
            "--no-introspection",
            "--log-json",
            "--db-pool-size",
            "3",
            "--jwt-audience",
            "aud",
            "--jwt-jwks-file",
            str(tmp_path / "k.json"),
            "--agent",
            "command",
        ]
    )
    settings = load_settings({k: v for k, v in vars(args).items() if k != "command"})
    assert settings.introspection is False and settings.log_json is True
    assert settings.db_pool_size == 3 and settings.lease_seconds == 4  # flag, env
    assert settings.jwt_audience == "aud" and settings.jwt_jwks_file == tmp_path / "k.json"
    assert settings.agent == "command"


def test_m2_choices_come_from_the_settings_type(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--agent", "nope"])
    assert "scripted" in capsys.readouterr().err


def test_m2_invalid_values_exit_2_naming_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--db-timeout", "soon"]) == 2
    assert "db_timeout" in capsys.readouterr().err
    assert main(["serve", "--jwt-secret", "s" * 32, "--jwt-jwks-file", "k.json"]) == 2
    assert "not both" in capsys.readouterr().err


def test_m2_serve_help_of_the_real_command_lists_every_env_variable() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "turnqueue", "serve", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps lines
    for field in Settings.model_fields:
        assert env_name(field) in text, field
