"""The web page's sends (SPEC Q15, Q16) in Debian's Chromium against a REAL ``turnqueue serve``.

Every send the page makes carries a ``clientMessageId`` and shows at once as an optimistic row
(``#pending-turns`` / ``#pending-entries``) that the server's turn or entry with the same key
replaces; a send lost on the network is retried with the same key (one turn, never two) or
discarded; Steer shows only where the session's agent takes steering (``agents { steering }``).

Faults are injected through Playwright's routing (a held or aborted ``SendMessage`` request, a
WebSocket that goes silent) and its offline switch; every wait is on page state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from frontend_server import Server, run_server
from sqlalchemy.engine import make_url
from web_page import expect, expect_current, needs_browser, open_page, shot, wait_ready

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
TURNS = """query($id: ID!) { session(id: $id) {
  turnsConnection(last: 20) { edges { node { prompt clientMessageId } } }
  queue { entries { content clientMessageId } } } }"""


def _pg_admin(admin_url: str, statement: str) -> None:
    """One statement on the admin database, from sync code (Playwright's loop runs here)."""

    async def run() -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, run()).result()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of each store (``[postgresql]`` from the migrated template, skipped
    without TURNQUEUE_TEST_DATABASE_URL). A sync fixture: the async ``database_url`` cannot be
    set up beside Playwright's sync API."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'turnqueue.db'}"
        return
    base, template = request.getfixturevalue("pg_template")
    admin = make_url(base).set(drivername="postgresql")
    name = f"tq_web_{uuid.uuid4().hex[:12]}"
    admin_url = admin.render_as_string(hide_password=False)
    _pg_admin(admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        _pg_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def web_server(web_dist: Path, store_url: str, tmp_path: Path) -> Iterator[Server]:
    """The served page over each store (Q15's keys are kept in the database)."""
    with run_server(
        tmp_path,
        TURNQUEUE_DATABASE_URL=store_url,
        TURNQUEUE_SCRIPTED_TURN_SECONDS="2",
        TURNQUEUE_CANCEL_TIMEOUT="3",
        TURNQUEUE_AGENT_COMMAND="echo hello",  # a `command` profile: it takes no steering
        TURNQUEUE_WEB_DIST=str(web_dist),
    ) as server:
        yield server


def server_rows(server: Server, session_id: str) -> tuple[list[Any], list[Any]]:
    """The session's turns and queue entries as the server has them."""
    session = server.gql(TURNS, id=session_id)["session"]
    turns = [edge["node"] for edge in session["turnsConnection"]["edges"]]
    return turns, session["queue"]["entries"]


def operation(request: Any) -> tuple[str | None, dict[str, Any]]:
    """A GraphQL POST's operation name and its ``input`` variable."""
    body = request.post_data_json if request.method == "POST" else None
    if not isinstance(body, dict):
        return None, {}
    return body.get("operationName"), (body.get("variables") or {}).get("input") or {}


def pump_until(page: Any, condition: Callable[[], bool], what: str) -> None:
    """Let Playwright dispatch events (route handlers run then) until ``condition`` holds."""
    deadline = time.monotonic() + 10.0
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        page.wait_for_timeout(20)


def pending(page: Any) -> Any:
    return page.locator("#pending-turns li")


def row_of(page: Any, key: str) -> Any:
    return page.locator(f'#turns li[data-client-message-id="{key}"]')


@needs_browser
def test_q15_the_optimistic_row_is_replaced_by_the_servers_row_with_its_key(
    context: Any, web_server: Server
) -> None:
    """Q15: a send shows at once as a pending row carrying its ``clientMessageId`` (a UUID);
    another client's turn with the same text does not replace it (matched by key, not by text
    or order); the server's row with the same key does — here a queue entry, the session being
    busy — and the answer's outcome is shown."""
    session_id = web_server.create_session("optimistic")
    page = open_page(context, web_server, session_id)
    held: list[Any] = []

    def hold_send(route: Any) -> None:
        if operation(route.request)[0] == "SendMessage" and not held:
            held.append(route)
        else:
            route.continue_()

    page.route("**/graphql", hold_send)
    page.locator("#message").fill("hello")
    page.locator("#message").press("Enter")
    row = pending(page)
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-send-state", "sending")
    expect(row.locator(".bubble")).to_have_text("hello")
    expect(page.locator("#message")).to_have_value("")  # the next one can be typed
    key = row.get_attribute("data-client-message-id")
    assert key is not None and UUID.match(key), key
    pump_until(page, lambda: bool(held), "the send to be routed")
    assert operation(held[0].request)[1]["clientMessageId"] == key

    web_server.send(session_id, "hello")  # another client's "hello", without our key
    expect_current(page, "hello", "RUNNING")
    expect(row).to_have_count(1)  # still ours, still pending
    shot(page, "send-pending-row")

    held[0].continue_()  # the session is busy: our "hello" is queued
    expect(page.locator(f'#queue li[data-client-message-id="{key}"]')).to_have_count(1)
    expect(pending(page)).to_have_count(0)
    expect(page.locator("#send-outcome")).to_have_attribute("data-outcome", "QUEUED")
    turns, entries = server_rows(web_server, session_id)
    assert [t["clientMessageId"] for t in turns] == [None]
    assert entries == [{"content": "hello", "clientMessageId": key}]
    # The queued entry becomes a turn carrying the same key.
    expect(row_of(page, key)).to_have_count(1, timeout=20_000)
    expect(page.locator("#queue li")).to_have_count(0)


@needs_browser
def test_q15_a_send_whose_answer_was_lost_is_retried_with_the_same_key_into_one_turn(
    context: Any, web_server: Server
) -> None:
    """Q15: the server processes a send but its answer is lost (the request aborted after the
    server answered, the socket silent so no event tells the page either): the row says it was
    not sent and offers Retry and Discard. Retry sends the SAME key; the server answers the
    first outcome (STARTED, the same turn) and the page shows exactly one turn for it."""
    session_id = web_server.create_session("lost answer")
    silent = {"on": False}
    keys: list[str] = []

    def relay(ws: Any) -> None:
        server = ws.connect_to_server()
        ws.on_message(lambda m: None if silent["on"] else server.send(m))
        server.on_message(lambda m: None if silent["on"] else ws.send(m))

    def lose_first_answer(route: Any) -> None:
        name, variables = operation(route.request)
        if name != "SendMessage":
            route.continue_()
            return
        keys.append(variables["clientMessageId"])
        if len(keys) == 1:
            answer = route.fetch()  # the server processed it ...
            assert json.loads(answer.text())["data"]["sendMessage"]["outcome"] == "STARTED"
            route.abort("connectionreset")  # ... and the page never hears of it
        else:
            route.continue_()

    page = context.new_page()
    page.route_web_socket(re.compile(r"/graphql$"), relay)
    page.route("**/graphql", lose_first_answer)
    page.goto(f"{web_server.base_url}/?session={session_id}")
    wait_ready(page)
    silent["on"] = True  # no event reaches the page from now on

    page.locator("#message").fill("only once")
    page.locator("#send").click()
    row = pending(page)
    expect(row).to_have_attribute("data-send-state", "failed")
    expect(row.get_by_role("button", name="Discard")).to_be_visible()
    shot(page, "send-lost-retry")
    turns, _ = server_rows(web_server, session_id)
    assert [t["clientMessageId"] for t in turns] == keys  # the server has it once

    row.get_by_role("button", name="Retry").click()
    expect(row_of(page, keys[0])).to_have_count(1)  # read by the retry's snapshot
    expect(pending(page)).to_have_count(0)
    expect(page.locator("#send-outcome")).to_have_attribute("data-outcome", "STARTED")
    assert len(keys) == 2 and keys[0] == keys[1]  # Retry sent the same key
    silent["on"] = False
    turns, entries = server_rows(web_server, session_id)
    assert turns == [{"prompt": "only once", "clientMessageId": keys[0]}] and entries == []
    expect(page.locator("#turns > li")).to_have_count(1)


@needs_browser
def test_q15_offline_sends_are_discarded_or_retried_once_back_online(
    context: Any, web_server: Server
) -> None:
    """Q15: sends made offline fail at once and stay as rows (Add to queue's under the queue);
    Discard drops one (the server never hears of it), Retry once online sends the other: one
    turn, with its key."""
    session_id = web_server.create_session("offline sends")
    page = open_page(context, web_server, session_id)
    context.set_offline(True)
    expect(page.locator("#conn")).to_have_text("offline")
    for text in ("drop me", "keep me"):
        page.locator("#message").fill(text)
        page.locator("#message").press("Enter")
    page.locator("#message").fill("queue me")
    page.locator("#enqueue").click()
    expect(page.locator('#pending-turns li[data-send-state="failed"]')).to_have_count(2)
    queued = page.locator('#pending-entries li[data-send-state="failed"]')
    expect(queued.locator(".content")).to_have_text("queue me")
    shot(page, "sends-offline")
    queued.get_by_role("button", name="Discard").click()
    expect(page.locator("#pending-entries li")).to_have_count(0)
    dropped, kept = pending(page).nth(0), pending(page).nth(1)
    expect(dropped.locator(".bubble")).to_have_text("drop me")
    key = kept.get_attribute("data-client-message-id")
    dropped.get_by_role("button", name="Discard").click()
    expect(pending(page)).to_have_count(1)

    context.set_offline(False)
    expect(page.locator("#conn")).to_have_text("live", timeout=20_000)
    pending(page).get_by_role("button", name="Retry").click()
    expect(row_of(page, str(key))).to_have_count(1)
    expect(pending(page)).to_have_count(0)
    turns, _ = server_rows(web_server, session_id)
    assert turns == [{"prompt": "keep me", "clientMessageId": key}]


@needs_browser
def test_q16_steer_shows_only_for_agents_that_take_it_and_shows_steered(
    context: Any, web_server: Server
) -> None:
    """Q16: Steer is offered where the session's agent takes steering (the scripted agent; not a
    ``command`` agent); on a running turn it answers STEERED, the message is a STEER item of
    that turn, and nothing is queued."""
    created = web_server.mutate(
        "createTask", "CreateTaskInput", "session { id }", title="command", agent="command"
    )
    other = open_page(context, web_server, created["session"]["id"])
    expect(other.locator("#session-agent")).to_have_text("agent: command")
    expect(other.locator("#steer")).to_be_hidden()
    other.close()

    session_id = web_server.create_session("steer")
    page = open_page(context, web_server, session_id)
    steer = page.locator("#steer")
    expect(steer).to_be_visible()
    expect(steer).to_be_disabled()  # nothing to steer into yet
    web_server.send(session_id, "/stubborn")  # a 20 s turn
    expect_current(page, "/stubborn", "RUNNING")
    expect(steer).to_be_enabled()

    page.locator("#message").fill("look here")
    steer.click()
    expect(page.locator("#send-outcome")).to_have_attribute("data-outcome", "STEERED")
    expect(page.locator("#send-outcome")).to_have_text("Steered into the running turn.")
    expect(page.locator("#items li.SteerItem")).to_have_text("look here")
    expect(pending(page)).to_have_count(0)
    expect(page.locator("#queue li")).to_have_count(0)
    expect(page.locator("#turns > li")).to_have_count(1)
    shot(page, "steered")
    web_server.mutate("cancel", "CancelInput", "outcome", sessionId=session_id)
