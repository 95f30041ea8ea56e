"""Follow one turnqueue session from the terminal (SPEC U2), the right way round (R3):

1. open one graphql-transport-ws connection (token in ``connection_init``, keepalive pings);
2. subscribe to the session, its queue, its cancellation, its turn output and its turn items
   (tool calls, plans, thoughts: ``turnItems``, folded by :mod:`.items`);
3. read the snapshot query;
4. keep per kind the highest revision seen, print what is newer, drop what is older;
5. then act (``--auto-run``, ``--send``, ``--send-now``, ``--cancel``, ``--answer-approval``)
   and keep following.

Every line printed starts with the kind it is about, so the output is easy to read and to grep::

    session rev 7: RUNNING, turn 1f2e… RUNNING: 'hello'
    queue rev 4: auto-run off (paused: USER), held by BUSY, 1 queued: [3a9c…] 'next'
    cancellation rev 4294967298: pending
    output: 'You said: hello\\n'
    item 1 tool call [call-1] Read file (read): completed
    approval 5d1c…: 'Write notes.txt' options: allow=Allow (allow_once), reject=Reject (reject_once)
    stale: queue rev 3 < 4 dropped
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal, TextIO

from gql import Client, gql
from gql.client import AsyncClientSession
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport

from frontend_examples.python_client.items import TurnItems, describe_approval, describe_item

Kind = Literal["session", "queue", "cancellation"]

QUEUE = "id sessionId autoRun pauseReason heldBy count max revision entries { id content source }"
CANCELLATION = "id sessionId pending revision"
SESSION = f"""id state revision promptable clarification {{ question }}
  pendingApproval {{ id title toolCallId options {{ id name kind }} }}
  currentTurn {{ id prompt status error }} cancellation {{ {CANCELLATION} }}"""
ITEM = """index kind ... on MessageItem { text } ... on ThoughtItem { text }
  ... on ToolCallItem { toolCallId title toolKind status }
  ... on PlanItem { entries { content status } } ... on RawItem { json }"""

SNAPSHOT = f"query Snapshot($id: ID!) {{ session(id: $id) {{ {SESSION} queue {{ {QUEUE} }} }} }}"
SUBSCRIPTIONS = {
    "queueStatusChanged": f"{{ queueStatusChanged(sessionId: $id) {{ {QUEUE} }} }}",
    "cancellationChanged": f"{{ cancellationChanged(sessionId: $id) {{ {CANCELLATION} }} }}",
    "sessionChanged": f"{{ sessionChanged(sessionId: $id) {{ {SESSION} }} }}",
    "turnOutput": "{ turnOutput(sessionId: $id) { turnId offset text done status } }",
    "turnItems": "{ turnItems(sessionId: $id) { turnId offset nextOffset done status "
    f"items {{ {ITEM} }} }} }}",
}
ERRORS = "userErrors { code message }"
MUTATIONS = {
    "setAutoRun": f"setAutoRun(input: $input) {{ dispatched queue {{ {QUEUE} }} {ERRORS} }}",
    "sendMessage": f"sendMessage(input: $input) {{ turn {{ id }} queuedEntry {{ id }} "
    f"queue {{ {QUEUE} }} {ERRORS} }}",
    "sendNow": f"sendNow(input: $input) {{ sentCount queue {{ {QUEUE} }} {ERRORS} }}",
    "cancel": f"cancel(input: $input) {{ outcome cancellation {{ {CANCELLATION} }} {ERRORS} }}",
    "answerApproval": "answerApproval(input: $input) { approval { id outcome optionId } "
    f"{ERRORS} }}",
}
INPUT_TYPES = {
    "setAutoRun": "SetAutoRunInput",
    "sendMessage": "SendMessageInput",
    "sendNow": "SendNowInput",
    "cancel": "CancelInput",
    "answerApproval": "AnswerApprovalInput",
}


class Revisions:
    """The highest revision seen per (session, kind) (R3): larger is newer, equal is the same."""

    def __init__(self) -> None:
        self._highest: dict[tuple[str, Kind], int] = {}

    def highest(self, session_id: str, kind: Kind) -> int | None:
        return self._highest.get((session_id, kind))

    def accept(self, session_id: str, kind: Kind, revision: int) -> bool:
        """Whether a value at ``revision`` is newer than anything seen (and remember it if so)."""
        seen = self._highest.get((session_id, kind))
        if seen is not None and revision <= seen:
            return False
        self._highest[(session_id, kind)] = revision
        return True


def _short(entity_id: str) -> str:
    return entity_id[:8]


def describe_queue(queue: dict[str, Any]) -> str:
    policy = "on" if queue["autoRun"] else f"off (paused: {queue['pauseReason']})"
    held = f", held by {','.join(queue['heldBy'])}" if queue["heldBy"] else ""
    entries = " | ".join(f"[{_short(e['id'])}] {e['content']!r}" for e in queue["entries"])
    listed = f": {entries}" if entries else ""
    count = queue["count"]
    return f"queue rev {queue['revision']}: auto-run {policy}{held}, {count} queued{listed}"


def describe_session(session: dict[str, Any]) -> str:
    turn = session.get("currentTurn")
    line = f"session rev {session['revision']}: {session['state']}"
    if turn:
        line += f", turn {_short(turn['id'])} {turn['status']}: {turn['prompt']!r}"
        if turn.get("error"):
            line += f" ({turn['error']})"
    if session.get("clarification"):
        line += f", asks: {session['clarification']['question']!r}"
    return line


def describe_cancellation(status: dict[str, Any]) -> str:
    return f"cancellation rev {status['revision']}: {'pending' if status['pending'] else 'idle'}"


class Follower:
    """Prints what is newer for one session and drops what is older (R3)."""

    def __init__(self, session_id: str, out: TextIO = sys.stdout) -> None:
        self.session_id = session_id
        self.revisions = Revisions()
        self.turn_items = TurnItems()
        #: the session's pending approval (A6), as the newest session revision shows it
        self.approval: dict[str, Any] | None = None
        #: the first pending approval seen (what ``--answer-approval`` answers)
        self.first_approval: dict[str, Any] | None = None
        self.approval_seen = asyncio.Event()
        self._out = out

    def print(self, line: str) -> None:
        print(line, file=self._out, flush=True)

    def offer(self, kind: Kind, value: dict[str, Any] | None) -> bool:
        """Print ``value`` if its revision is newer; answer whether it was."""
        if value is None:
            return False
        revision = int(value["revision"])
        seen = self.revisions.highest(self.session_id, kind)
        if not self.revisions.accept(self.session_id, kind, revision):
            if seen is not None and revision < seen:
                self.print(f"stale: {kind} rev {revision} < {seen} dropped")
            return False
        describe = {
            "session": describe_session,
            "queue": describe_queue,
            "cancellation": describe_cancellation,
        }[kind]
        self.print(describe(value))
        return True

    def offer_session(self, session: dict[str, Any]) -> None:
        """A Session carries three kinds: its own, its cancellation (C6) and maybe its queue."""
        if self.offer("session", session):
            approval = session.get("pendingApproval")
            if approval is not None and approval != self.approval:
                self.print(describe_approval(approval))
            self.approval = approval
            if approval is not None and self.first_approval is None:
                self.first_approval = approval
                self.approval_seen.set()
        self.offer("cancellation", session.get("cancellation"))
        self.offer("queue", session.get("queue"))

    def offer_output(self, chunk: dict[str, Any]) -> None:
        if chunk["text"]:
            self.print(f"output: {chunk['text']!r}")
        if chunk["done"]:
            self.print(f"output done: turn {_short(chunk['turnId'])} {chunk['status']}")

    def offer_items(self, chunk: dict[str, Any]) -> None:
        """A turnItems chunk: print each item it changed, as it now is (A3)."""
        for item in self.turn_items.apply(chunk):
            line = describe_item(item)
            if line is not None:
                self.print(line)


def ws_url(url: str) -> str:
    """The WebSocket address of an ``http(s)://…/graphql`` endpoint (``ws(s)://`` kept as is)."""
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            return ws + url[len(http) :]
    return url


async def _stream(
    session: AsyncClientSession, field: str, session_id: str
) -> AsyncIterator[dict[str, Any]]:
    request = gql(f"subscription S($id: ID!) {SUBSCRIPTIONS[field]}")
    request.variable_values = {"id": session_id}
    async for result in session.subscribe(request):
        yield result[field]


async def _mutate(session: AsyncClientSession, name: str, **fields: Any) -> dict[str, Any]:
    request = gql(f"mutation M($input: {INPUT_TYPES[name]}!) {{ {MUTATIONS[name]} }}")
    request.variable_values = {"input": fields}
    payload: dict[str, Any] = (await session.execute(request))[name]
    return payload


class Options(argparse.Namespace):
    url: str
    session: str
    token: str | None
    send: str | None
    auto_run: str | None
    send_now: str | None
    cancel: bool
    answer_approval: str | None
    follow_seconds: float | None


async def run(options: Options, out: TextIO = sys.stdout) -> int:
    follower = Follower(options.session, out)
    init = {"authorization": f"Bearer {options.token}"} if options.token else None
    transport = WebsocketsTransport(
        url=ws_url(options.url),
        init_payload=init,
        ping_interval=10,  # the server answers pings but never sends them (NOTES)
        subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
    )
    async with Client(transport=transport) as session, asyncio.TaskGroup() as tasks:
        followers: list[tuple[str, Callable[[dict[str, Any]], object]]] = [
            ("sessionChanged", follower.offer_session),
            ("queueStatusChanged", lambda q: follower.offer("queue", q)),
            ("cancellationChanged", lambda c: follower.offer("cancellation", c)),
            ("turnOutput", follower.offer_output),
            ("turnItems", follower.offer_items),
        ]

        async def pump(field: str, handle: Callable[[dict[str, Any]], object]) -> None:
            while True:
                try:
                    async for value in _stream(session, field, options.session):
                        handle(value)
                    return
                except TransportQueryError as e:
                    # The server ends a stream it cannot keep up to date (R3): resubscribe, and
                    # the new stream starts with a fresh snapshot.
                    if not _is_resync(e):
                        raise
                    follower.print(f"{field}: resubscribing ({e})")
                    if field == "turnItems":
                        # The new stream sends the current turn's items again from offset 0.
                        follower.turn_items = TurnItems()

        running = [tasks.create_task(pump(field, handle)) for field, handle in followers]
        try:
            if not await _snapshot_then_act(session, follower, options, tasks):
                return 1
            if options.follow_seconds is not None:
                await asyncio.sleep(options.follow_seconds)  # the user asked to follow this long
            else:
                await asyncio.gather(*running)
        finally:
            for task in running:
                task.cancel()
    return 0


async def _snapshot_then_act(
    session: AsyncClientSession, follower: Follower, options: Options, tasks: asyncio.TaskGroup
) -> bool:
    """Read the snapshot (after subscribing), then do what the flags ask."""
    snapshot = gql(SNAPSHOT)
    snapshot.variable_values = {"id": options.session}
    found = (await session.execute(snapshot))["session"]
    if found is None:
        follower.print(f"session {options.session} not found")
        return False
    follower.offer_session(found)

    def report(name: str, payload: dict[str, Any]) -> None:
        errors = ", ".join(f"{e['code']}: {e['message']}" for e in payload["userErrors"])
        facts = {k: v for k, v in payload.items() if k in ("dispatched", "sentCount", "outcome")}
        if payload.get("turn"):
            facts["turn"] = _short(payload["turn"]["id"])
        if payload.get("queuedEntry"):
            facts["queued"] = _short(payload["queuedEntry"]["id"])
        if payload.get("approval"):
            facts["approval"] = payload["approval"]["outcome"]
            facts["option"] = payload["approval"]["optionId"]
        follower.print(f"{name}: {errors or 'ok'} {facts}".rstrip())
        follower.offer("queue", payload.get("queue"))
        follower.offer("cancellation", payload.get("cancellation"))

    sid = options.session
    if options.auto_run is not None:
        on = options.auto_run == "on"
        report("setAutoRun", await _mutate(session, "setAutoRun", sessionId=sid, autoRun=on))
    if options.send is not None:
        payload = await _mutate(session, "sendMessage", sessionId=sid, content=options.send)
        report("sendMessage", payload)
    if options.send_now is not None:
        payload = await _mutate(session, "sendNow", sessionId=sid, entryId=options.send_now)
        report("sendNow", payload)
    if options.cancel:
        # `cancel` answers when the cancellation has finished; progress arrives meanwhile.
        async def cancel() -> None:
            report("cancel", await _mutate(session, "cancel", sessionId=sid))

        tasks.create_task(cancel())
    if options.answer_approval is not None:
        option = options.answer_approval

        # A6: the session's pending approval (now, or the next one the session shows).
        async def answer() -> None:
            await follower.approval_seen.wait()
            assert follower.first_approval is not None
            approval = follower.first_approval["id"]
            payload = await _mutate(session, "answerApproval", approvalId=approval, optionId=option)
            report("answerApproval", payload)

        tasks.create_task(answer())
    return True


def _is_resync(error: TransportQueryError) -> bool:
    return any((e.get("extensions") or {}).get("code") == "RESYNC" for e in error.errors or [])


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m frontend_examples.python_client",
        description="Follow one turnqueue session: turns, their items and approvals, queue, "
        "auto-run and cancellation.",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    parser.add_argument("--session", required=True, help="the session id to follow")
    parser.add_argument("--token", help="bearer token, when the server has TURNQUEUE_TOKENS")
    parser.add_argument("--send", metavar="TEXT", help="send a message (sendMessage)")
    parser.add_argument("--auto-run", choices=["on", "off"], help="set the queue's auto-run")
    parser.add_argument("--send-now", metavar="ENTRY_ID", help="run this queue entry now")
    parser.add_argument("--cancel", action="store_true", help="cancel the active turn")
    parser.add_argument(
        "--answer-approval",
        metavar="OPTION_ID",
        help="answer the session's pending approval (or the next one) with this option",
    )
    parser.add_argument(
        "--follow-seconds", type=float, help="stop following after N seconds (default: never)"
    )
    return parser.parse_args(argv, namespace=Options())


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(options))
    return 130
