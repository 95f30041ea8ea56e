"""``turnqueue serve`` configuration (M2) and the S1 loopback rule."""

from __future__ import annotations

import pytest

from turnqueue.cli import load_settings, main


def test_s1_serve_refuses_non_loopback_without_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TURNQUEUE_TOKENS", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "TURNQUEUE_TOKENS" in capsys.readouterr().err


def test_m2_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNQUEUE_QUEUE_MAX", "3")
    monkeypatch.setenv("TURNQUEUE_PORT", "9000")
    monkeypatch.setenv("TURNQUEUE_TOKENS", "alice:env-token")
    settings = load_settings(
        {"queue_max": 5, "tokens": "bob:flag-token", "allowed_origins": "https://a.example"}
    )
    assert settings.queue_max == 5 and settings.port == 9000
    assert settings.tokens == {"bob": "flag-token"}
    assert settings.allowed_origins == ["https://a.example"]


def test_m2_invalid_flag_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--queue-max", "-1"]) == 2
    assert "queue_max" in capsys.readouterr().err
