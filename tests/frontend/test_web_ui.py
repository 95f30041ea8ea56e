"""The example web page (SPEC U2) in a real headless browser against a REAL ``turnqueue serve``.

Playwright's Python package drives Debian's ``/usr/bin/chromium`` (never a downloaded browser).
The page is built with ``npm ci && npm run build`` when ``dist/`` is missing or older than its
sources. Every wait is on page state (``expect``, ``wait_for_function``); screenshots of the main
states go to ``tests/frontend/artifacts/``.

The server runs scripted turns of 2 s and ``TURNQUEUE_CANCEL_TIMEOUT=3``: a ``/stubborn`` turn
ignores SIGINT, so its cancellation stays pending for ~3 s, until SIGTERM stops it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import TLS
from frontend_server import Server, run_server
from web_page import (
    WEB,
    ensure_node_modules,
    expect,
    expect_current,
    expect_turns,
    needs_browser,
    needs_node,
    open_page,
    shot,
    wait_ready,
)

from turnqueue.api.webui import ENV_VAR, web_ui_routes

TURN_SECONDS = "2"
LONG = 20_000  # ms: a few 2 s turns in a row


# ---- the server's static mount (no browser needed) ----


def test_u2_web_ui_routes_mount_only_a_built_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """U2: ``turnqueue serve`` serves the page at ``/`` only when ``index.html`` was built."""
    from starlette.routing import Mount

    assert web_ui_routes(tmp_path) == []
    (tmp_path / "index.html").write_text("<!doctype html><title>t</title>")
    routes = web_ui_routes(tmp_path)
    assert len(routes) == 1 and isinstance(routes[0], Mount) and routes[0].path == ""
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert len(web_ui_routes()) == 1
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    assert web_ui_routes() == []


@needs_node
def test_r3_vitest_merge_by_revision() -> None:
    """R3 (and C1's optimistic pending, O2's offsets in code points, A3's item folding): the
    page's pure modules (``src/revisions.ts``, ``transcript.ts``, ``items.ts``) pass their Vitest
    suites (``npm test``)."""
    ensure_node_modules()
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
    result = subprocess.run(
        ["npm", "test", "--silent"], cwd=WEB, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Tests\s+\d+ passed", result.stdout), result.stdout


# ---- browser fixtures ----


@pytest.fixture(scope="module")
def web_server(web_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_server(
        tmp_path_factory.mktemp("web"),
        TURNQUEUE_SCRIPTED_TURN_SECONDS=TURN_SECONDS,
        TURNQUEUE_CANCEL_TIMEOUT="3",
        TURNQUEUE_WEB_DIST=str(web_dist),
    ) as server:
        yield server


def queue_contents(page: Any) -> Any:
    return page.locator("#queue li .content")


def cancel_pending(page: Any) -> Any:
    return page.locator("#cancel-state")


def number(page: Any, selector: str) -> int:
    return int(page.locator(selector).inner_text())


# ---- the rules, in the browser ----


@needs_node
def test_u2_turnqueue_serve_serves_the_built_page_at_root(web_server: Server) -> None:
    """U2: the real ``turnqueue serve`` answers ``/`` with the built page, beside ``/graphql``."""
    page = httpx.get(f"{web_server.base_url}/", verify=TLS)
    assert page.status_code == 200 and 'id="queue"' in page.text
    assert httpx.get(f"{web_server.base_url}/healthz", verify=TLS).json() == {"status": "ok"}


@needs_browser
def test_u2_the_page_at_root_goes_live_and_lists_the_tasks(
    context: Any, web_server: Server
) -> None:
    """U2 (issue 26): ``/`` with no ``?session=`` (the first page a user opens) connects, shows
    it is live and lists the tasks that exist; picking one opens its session."""
    web_server.create_session("first task")
    web_server.create_session("second task")
    page = context.new_page()
    page.goto(f"{web_server.base_url}/")
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#tasks li")).to_contain_text(["second task", "first task"])
    page.locator("#tasks li", has_text="first task").locator("a").click()
    wait_ready(page)
    expect(page.locator("#session-title")).to_have_text("first task")
    shot(page, "root-page")


@needs_browser
def test_q2_q3_u2_auto_run_off_in_one_page_shows_in_the_other_and_holds_the_queue(
    context: Any, web_server: Server
) -> None:
    """Q2/Q3/Q14 (U2): Auto-run OFF clicked in one page shows (paused: USER) in the other; the
    running turn finishes and the next entry does not start; ON resumes the queue in FIFO."""
    session_id = web_server.create_session("auto-run")
    one = open_page(context, web_server, session_id)
    two = open_page(context, web_server, session_id)
    web_server.send(session_id, "A")
    web_server.enqueue(session_id, "B")
    web_server.enqueue(session_id, "C")
    expect(queue_contents(two)).to_have_text(["B", "C"])
    expect(one.locator("#auto-run")).to_be_checked()

    one.locator(".switch").click()
    expect(two.locator("#auto-run")).not_to_be_checked()
    expect(two.locator("#pause-reason")).to_have_attribute("data-reason", "USER")
    expect_turns(two, ["A · RUNNING"])  # OFF never touches the active turn
    shot(two, "auto-run-off-other-page")

    expect_turns(two, ["A · COMPLETED"])
    # Barrier: a mutation answered after A's end decision (turn end and drain share the
    # session lock) still finds B and C queued, so nothing started from that end.
    barrier = web_server.set_auto_run(session_id, False)
    assert [e["content"] for e in barrier["queue"]["entries"]] == ["B", "C"], barrier
    expect(two.locator("#session-state")).to_have_attribute("data-state", "WAITING_FOR_INPUT")
    expect(queue_contents(two)).to_have_text(["B", "C"])
    expect_turns(two, ["A · COMPLETED"])
    shot(two, "auto-run-off-queue-held")

    one.locator(".switch").click()
    expect(two.locator("#auto-run")).to_be_checked()
    expect(two.locator("#pause-reason")).to_have_attribute("data-reason", "")
    expect_turns(two, ["A · COMPLETED", "B · COMPLETED", "C · COMPLETED"], timeout=LONG)
    expect(queue_contents(one)).to_have_count(0)


@needs_browser
def test_c1_c4_cancel_pending_shows_in_both_pages_survives_reloads_and_clears(
    context: Any, web_server: Server
) -> None:
    """C1/C4/C5: Cancel shows pending at once in the clicking page and, from the backend, in the
    other; a reload of either while pending still shows it (backend state, not the page's);
    it clears in both when the stubborn turn is finally stopped (CANCELLED)."""
    session_id = web_server.create_session("cancel")
    one = open_page(context, web_server, session_id)
    two = open_page(context, web_server, session_id)
    web_server.send(session_id, "/stubborn")
    expect_current(one, "/stubborn", "RUNNING")
    before = number(one, "#cancellation-revision")

    one.locator("#cancel").click()
    for page in (one, two):
        expect(cancel_pending(page)).to_have_attribute("data-pending", "true")
        expect(page.locator("#cancel")).to_be_disabled()
    shot(two, "cancel-pending-other-page")

    for page in (two, one):  # reload each while the cancellation is still pending
        page.reload()
        wait_ready(page)
        expect(cancel_pending(page)).to_have_attribute("data-pending", "true")
        expect(cancel_pending(page)).to_have_text("cancelling…")  # the backend's, not optimistic
    shot(one, "cancel-pending-after-reload")

    for page in (one, two):
        expect(cancel_pending(page)).to_have_attribute("data-pending", "false", timeout=LONG)
        expect(cancel_pending(page)).to_have_text("")
        expect_current(page, "/stubborn", "CANCELLED")
        expect(page.locator("#cancel")).to_be_disabled()  # nothing left to cancel
        assert number(page, "#cancellation-revision") > before
    shot(one, "cancel-cleared")


@needs_browser
def test_q5_send_now_on_the_second_row_runs_it_first_then_the_rest_in_order(
    context: Any, web_server: Server
) -> None:
    """Q5 (U2): every row, the head included, has Send Now, Edit and Remove (and no "run next",
    bulk Send Now or skip); Send Now on the second row replaces the running turn with it, and
    the others follow in FIFO order."""
    session_id = web_server.create_session("send now")
    page = open_page(context, web_server, session_id)
    web_server.send(session_id, "A")
    for content in ("B", "C", "D"):
        web_server.enqueue(session_id, content)
    expect(queue_contents(page)).to_have_text(["B", "C", "D"])
    for row in page.locator("#queue li").all():
        for name in ("Send Now", "Edit", "Remove", "Move up", "Move down"):
            expect(row.get_by_role("button", name=name)).to_be_visible()
    for forbidden in ("Run next", "Send all", "Skip"):
        expect(page.get_by_role("button", name=re.compile(forbidden, re.I))).to_have_count(0)

    second = page.locator("#queue li").nth(1)
    expect(second.locator(".content")).to_have_text("C")
    second.get_by_role("button", name="Send Now").click()
    expect_current(page, "C", "RUNNING")
    expect(queue_contents(page)).to_have_text(["B", "D"])
    shot(page, "send-now-second-row")

    expect_turns(
        page, ["A · CANCELLED", "C · COMPLETED", "B · COMPLETED", "D · COMPLETED"], timeout=LONG
    )
    expect(page.locator("#auto-run")).to_be_checked()  # Send Now leaves auto-run ON


@needs_browser
def test_q12_edit_remove_and_reorder_rows_including_the_head(
    context: Any, web_server: Server
) -> None:
    """Q12: edit and remove work on the head row too; up/down reorder the queue."""
    session_id = web_server.create_session("manage")
    web_server.set_auto_run(session_id, False)
    for content in ("X", "Y", "Z"):
        web_server.enqueue(session_id, content)
    page = open_page(context, web_server, session_id)
    expect(queue_contents(page)).to_have_text(["X", "Y", "Z"])

    head = page.locator("#queue li").first
    head.get_by_role("button", name="Edit").click()
    head.locator("input.content").fill("X2")
    head.get_by_role("button", name="Save").click()
    expect(queue_contents(page)).to_have_text(["X2", "Y", "Z"])

    page.locator("#queue li").nth(2).get_by_role("button", name="Move up").click()
    expect(queue_contents(page)).to_have_text(["X2", "Z", "Y"])
    page.locator("#queue li").first.get_by_role("button", name="Move down").click()
    expect(queue_contents(page)).to_have_text(["Z", "X2", "Y"])

    page.locator("#queue li").first.get_by_role("button", name="Remove").click()
    expect(queue_contents(page)).to_have_text(["X2", "Y"])
    expect(page.locator("#errors")).to_have_text("")
    shot(page, "queue-managed")


@needs_browser
def test_r3_a_delayed_snapshot_does_not_overwrite_newer_live_state(
    context: Any, web_server: Server
) -> None:
    """R3: the snapshot query's response is held (Playwright routing) while live events bring
    newer session and queue revisions; when the old response is finally delivered, the page
    keeps the higher revisions (auto-run stays OFF, the session stays past the old state)."""
    session_id = web_server.create_session("delayed snapshot")
    held: list[tuple[Any, Any]] = []

    def hold_first_snapshot(route: Any) -> None:
        request = route.request
        body = request.post_data_json if request.method == "POST" else None
        if not held and isinstance(body, dict) and body.get("operationName") == "SessionSnapshot":
            held.append((route, route.fetch()))  # the state as it is now, delivered later
        else:
            route.continue_()

    page = context.new_page()
    page.route("**/graphql", hold_first_snapshot)
    page.goto(f"{web_server.base_url}/?session={session_id}")
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#auto-run")).to_be_checked()  # from the subscriptions' own snapshots
    _pump_until(page, lambda: bool(held))
    route, stale_response = held[0]
    stale = json.loads(stale_response.text())["data"]["session"]
    assert stale["queue"]["autoRun"] is True and stale["state"] == "WAITING_FOR_INPUT"

    web_server.send(session_id, "/stubborn")  # a 20 s turn: no other change comes meanwhile
    web_server.set_auto_run(session_id, False)
    expect(page.locator("#auto-run")).not_to_be_checked()
    expect(page.locator("#pause-reason")).to_have_attribute("data-reason", "USER")
    expect(page.locator("#session-state")).to_have_attribute("data-state", "RUNNING")
    session_revision = number(page, "#session-revision")
    queue_revision = number(page, "#queue-revision")
    assert session_revision > stale["revision"] and queue_revision > stale["queue"]["revision"]

    route.fulfill(response=stale_response)
    page.wait_for_function("document.body.dataset.snapshots === '1'")
    # Read at once (no retrying expect): nothing else changes while the stubborn turn runs.
    assert not page.locator("#auto-run").is_checked()
    assert page.locator("#pause-reason").get_attribute("data-reason") == "USER"
    state = page.locator("#session-state").get_attribute("data-state")
    assert state == "RUNNING"  # the stale snapshot said WAITING_FOR_INPUT
    assert number(page, "#queue-revision") == queue_revision
    assert number(page, "#session-revision") == session_revision
    shot(page, "delayed-snapshot-kept-newer")


@needs_browser
def test_r3_every_reconnect_refetches_the_snapshot(context: Any, web_server: Server) -> None:
    """R3 (NOTES: graphql-ws has no resume cursor): when the socket drops, the page reconnects,
    re-subscribes and reads the snapshot again, and shows what changed meanwhile."""
    session_id = web_server.create_session("reconnect")
    sockets: list[Any] = []

    def relay(ws: Any) -> None:
        ws.connect_to_server()
        sockets.append(ws)

    page = context.new_page()
    page.route_web_socket(re.compile(r"/graphql$"), relay)
    page.goto(f"{web_server.base_url}/?session={session_id}")
    wait_ready(page)
    expect(page.locator("#auto-run")).to_be_checked()
    assert len(sockets) == 1

    sockets[0].close(code=1012, reason="service restart")
    web_server.set_auto_run(session_id, False)  # a change the page may miss while away
    wait_ready(page, snapshots=2)
    assert len(sockets) == 2
    expect(page.locator("#auto-run")).not_to_be_checked()
    expect(page.locator("#pause-reason")).to_have_attribute("data-reason", "USER")
    shot(page, "reconnected")


@needs_browser
def test_s1_token_from_the_address_authenticates_http_and_websocket(
    context: Any, web_dist: Path, tmp_path: Path
) -> None:
    """S1: with ``?token=`` the page sends ``Authorization: Bearer`` on HTTP and the token in
    ``connection_init``; a refused token (4403) is shown and not retried as if it could pass."""
    with run_server(
        tmp_path, TURNQUEUE_TOKENS="alice:tok-a", TURNQUEUE_WEB_DIST=str(web_dist)
    ) as server:
        server.token = "tok-a"
        session_id = server.create_session("with a token")
        page = context.new_page()
        page.goto(f"{server.base_url}/?token=tok-a&session={session_id}")
        wait_ready(page)
        expect(page.locator("#session-title")).to_have_text("with a token")
        expect(page.locator("#tasks li")).to_have_count(1)

        refused = context.new_page()
        refused.goto(f"{server.base_url}/?token=wrong&session={session_id}")
        expect(refused.locator("#conn")).to_have_text("not authorised")
        expect(refused.locator("#conn")).to_have_attribute("data-state", "refused")


def _pump_until(page: Any, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let Playwright dispatch events (route handlers run then) until ``condition`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("the snapshot query was never routed")
        page.wait_for_timeout(20)


# ---- the first hour: the page as a product (issue 26) ----


@needs_browser
def test_u2_create_a_task_talk_and_answer_the_agents_question_from_the_page(
    context: Any, web_server: Server
) -> None:
    """U2: from ``/``, create a task with a chosen agent, send a message with Enter and watch it
    complete; a clarification (``/ask``) shows above the composer, whose Send becomes Answer
    (``answerClarification``) and runs the answer as the next turn."""
    page = context.new_page()
    page.goto(f"{web_server.base_url}/")
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#new-task-agent option[value=scripted]")).to_have_count(1)
    page.locator("#new-task-title").fill("Made on the page")
    page.locator("#new-task-agent").select_option("scripted")
    page.get_by_role("button", name="Create").click()
    wait_ready(page)
    expect(page.locator("#session-title")).to_have_text("Made on the page")
    assert "?session=" in page.url
    expect(page.locator("#tasks li[aria-current=true]")).to_contain_text("Made on the page")

    page.locator("#message").fill("hello")
    page.locator("#message").press("Enter")
    expect_current(page, "hello", "COMPLETED", timeout=LONG)
    expect(page.locator("#output")).to_contain_text("hello")
    expect(page.locator("#message")).to_have_value("")

    page.locator("#message").fill("/ask which colour?")
    page.locator("#message").press("Enter")
    expect(page.locator("#clarification")).to_contain_text("which colour?", timeout=LONG)
    expect(page.locator("#send")).to_have_text("Answer")
    expect(page.locator("#held-by [data-hold=CLARIFICATION]")).to_be_visible()
    shot(page, "clarification-asked")
    page.locator("#message").fill("blue")
    page.locator("#send").click()
    expect(page.locator("#clarification")).to_be_hidden()
    expect_current(page, "blue", "COMPLETED", timeout=LONG)
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#errors")).to_have_text("")
    shot(page, "conversation-desktop")
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "conversation-narrow")


@needs_browser
def test_u2_sessions_switch_in_the_page_and_back(context: Any, web_server: Server) -> None:
    """U2: picking another task opens its session in place (no reload) and stops following
    the first: its later turns do not leak into the second; Back opens the first again, with
    what happened meanwhile."""
    first = web_server.create_session("first of two")
    second = web_server.create_session("second of two")
    web_server.set_auto_run(second, False)
    web_server.enqueue(second, "held in second")
    page = context.new_page()
    page.goto(f"{web_server.base_url}/?session={first}")
    wait_ready(page)
    web_server.send(first, "a1")
    expect_current(page, "a1", "COMPLETED", timeout=LONG)
    page.evaluate("window.notReloaded = true")

    page.locator("#tasks li", has_text="second of two").locator("a").click()
    expect(page.locator("#session-title")).to_have_text("second of two")
    expect(queue_contents(page)).to_have_text(["held in second"])
    expect_turns(page, [])
    assert page.evaluate("window.notReloaded") is True
    assert page.url.endswith(f"?session={second}")

    web_server.send(first, "a2")  # the first session moves on, unwatched
    page.go_back()
    expect(page.locator("#session-title")).to_have_text("first of two")
    expect_turns(page, ["a1 · COMPLETED", "a2 · COMPLETED"], timeout=LONG)
    expect(queue_contents(page)).to_have_count(0)
    assert page.evaluate("window.notReloaded") is True


@needs_browser
def test_q12_u2_drag_a_row_to_reorder_the_queue(context: Any, web_server: Server) -> None:
    """Q12 (U2): dragging a row onto another moves it there (reorderQueue with the revision it
    was drawn from); every tab shows the new order."""
    session_id = web_server.create_session("drag")
    web_server.set_auto_run(session_id, False)
    for content in ("X", "Y", "Z"):
        web_server.enqueue(session_id, content)
    page = open_page(context, web_server, session_id)
    other = open_page(context, web_server, session_id)
    expect(queue_contents(page)).to_have_text(["X", "Y", "Z"])
    rows = page.locator("#queue li")
    rows.nth(2).drag_to(rows.nth(0))
    expect(queue_contents(page)).to_have_text(["Z", "X", "Y"])
    expect(queue_contents(other)).to_have_text(["Z", "X", "Y"])
    rows.nth(0).drag_to(rows.nth(2))
    expect(queue_contents(other)).to_have_text(["X", "Y", "Z"])
    expect(page.locator("#errors")).to_have_text("")
    shot(page, "queue-dragged")


@needs_browser
def test_u2_offline_shows_and_the_page_recovers_when_the_network_is_back(
    context: Any, web_server: Server
) -> None:
    """U2: with the network gone the header says offline; when it is back the page is live
    again and shows what changed meanwhile (the snapshot is read again, R3)."""
    session_id = web_server.create_session("offline")
    page = open_page(context, web_server, session_id)
    expect(page.locator("#auto-run")).to_be_checked()
    context.set_offline(True)
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
    expect(page.locator("#conn")).to_have_text("offline")
    web_server.set_auto_run(session_id, False)  # while the page cannot hear it
    shot(page, "offline")
    context.set_offline(False)
    expect(page.locator("#conn")).to_have_text("live", timeout=LONG)
    expect(page.locator("#auto-run")).not_to_be_checked()
    expect(page.locator("#pause-reason")).to_have_attribute("data-reason", "USER")


@needs_browser
def test_u2_a_socket_gone_silent_as_after_sleep_is_replaced(
    context: Any, web_server: Server
) -> None:
    """U2: a socket that stays open but carries nothing (a laptop back from sleep, a network
    that dropped without a close) is found by its unanswered ping and replaced; the page goes
    live again and reads the snapshot again. Bounded by the 10 s ping and its 5 s timeout."""
    session_id = web_server.create_session("silent")
    routes: list[Any] = []
    silent = {"on": False}

    def relay(ws: Any) -> None:
        server = ws.connect_to_server()
        ws.on_message(lambda m: None if silent["on"] else server.send(m))
        server.on_message(lambda m: None if silent["on"] else ws.send(m))
        routes.append(ws)

    page = context.new_page()
    page.route_web_socket(re.compile(r"/graphql$"), relay)
    page.goto(f"{web_server.base_url}/?session={session_id}")
    wait_ready(page)
    silent["on"] = True  # from now on nothing passes either way, and nothing closes
    web_server.set_auto_run(session_id, False)
    expect(page.locator("#conn")).not_to_have_text("live", timeout=LONG)
    silent["on"] = False
    # The attempt under way when the silence ends may itself be a silent one (its init or ack
    # was dropped): it is closed when its ack has not come in 10 s (the page's ACK_TIMEOUT),
    # then the page waits its retry delay (at most 10 s, grown by the attempts made during the
    # silence).
    wait_ready(page, snapshots=2, timeout=30_000)
    assert len(routes) >= 2
    expect(page.locator("#auto-run")).not_to_be_checked()
