"""A11: what an agent's failure means, from the words real agents use (pure functions).

Every message below is one a real agent sent on a machine with no key or no route to its
provider (``docs/agents.md`` records when and how long it took)."""

from __future__ import annotations

import signal

import pytest
from acp import RequestError

from turnqueue.agents.acp_errors import (
    classify,
    describe_exit,
    failure_of,
    methods_hint,
    usable_method,
)
from turnqueue.domain import AgentErrorKind, AuthMethod

KIND = AgentErrorKind

REAL = [
    # Claude Code (claude-agent-acp 0.23.1), no key: the prompt is refused.
    (RequestError(-32000, "Authentication required"), KIND.AUTHENTICATION),
    # Gemini CLI 0.61.0, no key: session/new is refused.
    (RequestError(-32000, "Gemini API key is missing or not configured."), KIND.AUTHENTICATION),
    # codex-acp 0.16.0 with a key but no route: after its own retries.
    (
        RequestError(
            -32603,
            "Internal error",
            {
                "message": "stream disconnected before completion: error sending request for "
                "url (https://api.openai.com/v1/responses)",
                "codex_error_info": "other",
            },
        ),
        KIND.PROVIDER_UNREACHABLE,
    ),
    # OpenCode 1.18.33, no route.
    (
        RequestError(
            -32603,
            "Internal error: Cannot connect to API: Unable to connect. Is the computer able to "
            "access the url?",
            {"service": "session", "errorName": "APIError"},
        ),
        KIND.PROVIDER_UNREACHABLE,
    ),
    # Claude Code with a key but no route (after 187 s of its own retries).
    (
        RequestError(-32603, "Internal error: API Error: Unable to connect to API (ENOTFOUND)"),
        KIND.PROVIDER_UNREACHABLE,
    ),
    # Gemini CLI with a key but no route (after 300 s).
    (
        RequestError(500, "exception TypeError: fetch failed sending request"),
        KIND.PROVIDER_UNREACHABLE,
    ),
    (RequestError(-32603, "429 Too Many Requests: rate limit exceeded"), KIND.RATE_LIMIT),
    (RequestError(-32603, "Internal error", {"details": "quota exhausted"}), KIND.RATE_LIMIT),
    (RequestError(-32603, "Internal error", {"details": "no output"}), KIND.INTERNAL),
    (RequestError(-32602, "Invalid params"), KIND.INTERNAL),
]


@pytest.mark.parametrize(("error", "kind"), REAL)
def test_a11_error_answers_are_classified_from_their_code_and_words(
    error: RequestError, kind: AgentErrorKind
) -> None:
    assert failure_of(error).kind is kind


def test_a11_the_agents_own_message_and_code_with_its_detail() -> None:
    failure = failure_of(REAL[2][0])
    assert failure.code == -32603
    assert failure.text == (
        "agent error -32603 (provider unreachable): Internal error: stream disconnected before "
        "completion: error sending request for url (https://api.openai.com/v1/responses)"
    )
    assert failure_of(REAL[0][0]).text == (
        "agent error -32000 (authentication): Authentication required"
    )
    assert len(failure_of(RequestError(1, "x" * 10_000)).message) <= 2_000


def test_a11_minus_32000_alone_means_authentication() -> None:
    assert classify(-32000, "Something went wrong") is KIND.AUTHENTICATION
    assert classify(-32001, "Something went wrong") is KIND.INTERNAL


def test_a4_a11_an_exit_is_reported_with_its_real_status_and_whose_signal_it_was() -> None:
    assert describe_exit(3) == "agent process exited (status 3)"
    assert describe_exit(-9) == "agent process killed by SIGKILL (not sent by turnqueue)"
    assert describe_exit(-15, [signal.SIGTERM]) == "agent process ended by turnqueue's SIGTERM"
    assert describe_exit(None).startswith("agent closed its connection")


def test_a11_a_method_is_used_when_the_profile_provides_what_it_needs() -> None:
    methods = (
        AuthMethod("chatgpt", "Login with ChatGPT", "Use your ChatGPT login"),
        AuthMethod("codex-api-key", "Use CODEX_API_KEY", None, ("CODEX_API_KEY",)),
        AuthMethod("openai-api-key", "Use OPENAI_API_KEY", None, ("OPENAI_API_KEY",)),
    )
    assert usable_method(methods, {"OPENAI_API_KEY": "sk-x"}, None) == "openai-api-key"
    assert usable_method(methods, {"OPENAI_API_KEY": ""}, None) is None  # ${UNSET} expands to ""
    assert usable_method(methods, {}, None) is None
    assert usable_method(methods, {"OPENAI_API_KEY": "sk-x"}, "chatgpt") == "chatgpt"
    hint = methods_hint(methods)
    assert "chatgpt (Login with ChatGPT: Use your ChatGPT login)" in hint
    assert "openai-api-key (Use OPENAI_API_KEY; set OPENAI_API_KEY in the profile's env)" in hint
    assert "lists no authentication methods" in methods_hint(())
