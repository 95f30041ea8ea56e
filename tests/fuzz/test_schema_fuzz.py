"""Schema fuzzing (S3, Q10, Q13, R1, R2): hypothesis-graphql generates valid and invalid
(``Mode.NEGATIVE``) queries and mutations from the committed ``schema.graphql`` and sends them
to a real turnqueue server (uvicorn in a background thread, ``[sqlite]`` and ``[postgresql]``),
authenticated as one principal that owns two seeded sessions. Ids are fed from what the server
really holds (sessions, tasks, queue entries, the clarification) mixed with junk.

Every answer must be GraphQL JSON (``data`` and/or ``errors``), never an HTTP 5xx, and no error
message may leak internals (a traceback, an exception class, SQL, a driver's or a module's name);
faults must be masked as "Unexpected error." (S3) — and none must happen at all.

After every operation the server is let go quiet (no turn running in the seeded tasks) and the
seeded tasks' sessions are read; between two reads:

- Q10: an entry that left a queue went into a new turn's prompt, or the operation removed it
  (``removeQueueEntry`` with its id, ``clearQueue`` of its session); an entry's content changed
  only by ``updateQueueEntry`` with its id; no entry id is in two places; a new entry or a new
  turn's prompt comes from the operation's own literals or from a queued entry — nothing is lost,
  duplicated or invented;
- Q13/R1/R2: the queue, session and cancellation revisions of every session never went back.

``TURNQUEUE_FUZZ_EXAMPLES`` (default 150) sets how many operations are tried per database.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import graphql
import httpx
import pytest
import uvicorn
from clients import TLS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import Mode, mutations, nodes, queries

from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.app import create_app
from turnqueue.settings import Settings

EXAMPLES = int(os.environ.get("TURNQUEUE_FUZZ_EXAMPLES", "150"))
SCHEMA = (Path(__file__).resolve().parents[2] / "schema.graphql").read_text(encoding="utf-8")
TOKEN = "tok-fuzz"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
MASKED = "Unexpected error."
QUIET_TIMEOUT = 20.0
NUL = True  # generate U+0000 in strings (see operations())

#: What an error message must never show a client (S3).
LEAK = re.compile(
    r"Traceback|File \"|line \d+, in |sqlalchemy|asyncpg|aiosqlite|sqlite3|psycopg|"
    r"\b(SELECT|INSERT|UPDATE|DELETE)\b .* \b(FROM|INTO|SET|WHERE)\b|"
    r"\b(KeyError|AttributeError|TypeError|IndexError|AssertionError|RuntimeError|NameError|"
    r"ZeroDivisionError|OverflowError|RecursionError|UnicodeError|UnicodeEncodeError|"
    r"IntegrityError|OperationalError|ProgrammingError|DataError|StoreError|NoneType)\b|"
    r"turnqueue\.|strawberry\.|site-packages|object has no attribute|is not subscriptable"
)

WORKFLOW = """
[[steps]]
name = "WORK"

[[steps]]
name = "HANDOFF"
new_session_on_enter = true

[[steps]]
name = "FINISH"
"""

#: figures for the README, summed over the databases
TALLY: Counter[str] = Counter()


# -- a real server in a background thread --------------------------------------------------------
class Server:
    def __init__(self, settings: Settings) -> None:
        agents: Any = {"scripted": ScriptedAgent(settings.scripted_turn_seconds)}
        self.app = create_app(settings, agents=agents)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, lifespan="on", log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="fuzz-server", daemon=True)
        self.failure: BaseException | None = None

    def _serve(self) -> None:
        try:
            asyncio.run(self.server.serve())
        except BaseException as exc:  # reported by start()
            self.failure = exc

    def start(self) -> str:
        self.thread.start()
        while not self.server.started:  # wait for the start-up to finish, or fail
            if not self.thread.is_alive():
                raise RuntimeError(f"server did not start: {self.failure!r}")
            self.thread.join(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/graphql"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


@pytest.fixture
def server_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    workflow = tmp_path / "workflow.toml"
    workflow.write_text(WORKFLOW)
    settings_ = Settings(
        database_url=database_url,
        tokens={"fuzzer": TOKEN, "other": "tok-other"},
        scripted_turn_seconds=0.02,
        cancel_timeout=0.5,
        escalation_timeout=0.3,
        queue_max=10,
        workflow_file=workflow,
    )
    server = Server(settings_)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


# -- the client side --------------------------------------------------------------------------
SNAPSHOT = """
query($id: ID!) {
  task(id: $id) {
    id
    sessions {
      id state revision cancellationPending cancellationRevision
      clarification { id }
      queue { revision entries { id content } }
      turns(last: 200) { prompt status }
    }
  }
}"""


@dataclass
class SessionSnap:
    state: str
    revision: int
    cancellation_revision: int
    cancellation_pending: bool
    queue_revision: int
    entries: dict[str, str]  # id -> content, in order
    prompts: list[str]
    clarification: str | None


@dataclass
class World:
    """What the fuzzer knows: the seeded tasks and every id worth feeding back."""

    client: httpx.Client
    url: str
    task_ids: list[str]
    ids: list[str] = field(default_factory=list)
    #: real ids by input field name (sessionId, taskId, entryId, clarificationId)
    kinds: dict[str, list[str]] = field(default_factory=dict)
    revisions: list[int] = field(default_factory=lambda: [0, 1])

    def post(self, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
        return self.client.post(self.url, json={"query": query, "variables": variables or {}})

    def data(self, query: str, **variables: Any) -> dict[str, Any]:
        body = self.post(query, variables).json()
        assert "errors" not in body, body
        result: dict[str, Any] = body["data"]
        return result

    def snapshot(self) -> dict[str, SessionSnap]:
        snaps: dict[str, SessionSnap] = {}
        for task_id in self.task_ids:
            task = self.data(SNAPSHOT, id=task_id)["task"]
            for s in task["sessions"]:
                snaps[s["id"]] = SessionSnap(
                    state=s["state"],
                    revision=s["revision"],
                    cancellation_revision=s["cancellationRevision"],
                    cancellation_pending=s["cancellationPending"],
                    queue_revision=s["queue"]["revision"],
                    entries={e["id"]: e["content"] for e in s["queue"]["entries"]},
                    prompts=[t["prompt"] for t in s["turns"]],
                    clarification=(s["clarification"] or {}).get("id"),
                )
        return snaps

    def quiet_snapshot(self) -> dict[str, SessionSnap]:
        """A snapshot taken when no turn runs in the seeded tasks, so no background drain can
        change the queues between its reads (the scripted turns last 20 ms)."""
        deadline = QUIET_TIMEOUT
        waited = 0.0
        while True:
            snaps = self.snapshot()
            busy = [sid for sid, s in snaps.items() if s.state in ("RUNNING", "STARTING")]
            if not busy:
                self.remember(snaps)
                return snaps
            assert waited < deadline, f"sessions stayed busy: {busy}"
            threading.Event().wait(0.02)  # poll the condition (not a fixed wait for an event)
            waited += 0.02

    def remember(self, snaps: dict[str, SessionSnap]) -> None:
        self.kinds = {
            "taskId": list(self.task_ids),
            "sessionId": list(snaps),
            "entryId": [e for s in snaps.values() for e in s.entries],
            "clarificationId": [s.clarification for s in snaps.values() if s.clarification],
        }
        known = set(self.ids)
        for sid, snap in snaps.items():
            for new in [sid, *snap.entries, snap.clarification]:
                if new is not None and new not in known:
                    self.ids.append(new)
                    known.add(new)
            self.revisions.extend([snap.queue_revision, snap.revision])
        del self.revisions[:-40]


def id_values(world: World) -> st.SearchStrategy[graphql.ValueNode]:
    """Real ids (read at draw time, so new entries are used as they appear) and junk."""
    real = st.integers(0, 10**6).map(lambda i: nodes.String(world.ids[i % len(world.ids)]))
    junk = st.one_of(
        st.uuids().map(lambda u: nodes.String(str(u))),
        st.sampled_from(["", "0", "not-an-id", "' OR 1=1 --", "x" * 300]).map(nodes.String),
        st.text(max_size=40).map(nodes.String),
    )
    return st.one_of(real, real, real, junk)


def revision_values(world: World) -> st.SearchStrategy[graphql.ValueNode]:
    real = st.integers(0, 10**6).map(lambda i: world.revisions[i % len(world.revisions)])
    return st.one_of(
        real.map(nodes.Int),
        st.integers(-(2**63), 2**63).map(nodes.Int),
        st.sampled_from([2**53 - 1, 2**53, -1, 0]).map(nodes.Int),
        st.floats(allow_nan=False, allow_infinity=False).map(nodes.Float),
        st.text(max_size=10).map(nodes.String),
    )


def operations(world: World) -> st.SearchStrategy[str]:
    scalars = {
        "ID": id_values(world),
        "Revision": revision_values(world),
        "DateTime": st.datetimes().map(lambda d: nodes.String(d.isoformat())),
    }
    # U+0000 in strings is off while the PostgreSQL bug it found is open: it is pinned by
    # test_s3_m3_a_nul_character_is_stored_or_refused_never_a_fault (xfail, strict); set
    # NUL back to True once that passes.
    options: dict[str, Any] = {"custom_scalars": scalars, "allow_x00": NUL}
    return st.one_of(
        mutations(SCHEMA, **options),
        mutations(SCHEMA, **options),
        mutations(SCHEMA, **options, mode=Mode.NEGATIVE),
        queries(SCHEMA, **options),
        queries(SCHEMA, **options, mode=Mode.NEGATIVE),
    )


STEPS = ["WORK", "HANDOFF", "FINISH"]
USER_ERRORS = graphql.FieldNode(
    name=graphql.NameNode(value="userErrors"),
    arguments=(),
    directives=(),
    selection_set=graphql.SelectionSetNode(
        selections=(
            graphql.FieldNode(name=graphql.NameNode(value="code"), arguments=(), directives=()),
        )
    ),
)


def steer(document: str, data: st.DataObject, world: World) -> str:
    """Make generated mutations more productive without making them less random: every root
    mutation field also selects ``userErrors { code }`` (so refusals are counted), ids are
    mostly real ones of the right kind, a moveTask sometimes names a real step, and a prompt
    sometimes asks a clarification or fails."""
    try:
        ast = graphql.parse(document)
    except graphql.GraphQLError:
        return document
    definitions = []
    for definition in ast.definitions:
        if (
            isinstance(definition, graphql.OperationDefinitionNode)
            and definition.operation is graphql.OperationType.MUTATION
        ):
            roots = tuple(
                _steer_field(node, data, world) for node in definition.selection_set.selections
            )
            selection_set = replace(definition.selection_set, selections=roots)
            definition = replace(definition, selection_set=selection_set)
        definitions.append(definition)
    return graphql.print_ast(replace(ast, definitions=tuple(definitions)))


def _steer_field(
    node: graphql.SelectionNode, data: st.DataObject, world: World
) -> graphql.SelectionNode:
    if not isinstance(node, graphql.FieldNode) or node.selection_set is None:
        return node
    selections = node.selection_set.selections
    if not any(
        isinstance(s, graphql.FieldNode) and s.name.value == "userErrors" for s in selections
    ):
        selections = (*selections, USER_ERRORS)
    arguments = tuple(
        replace(a, value=_steer_input(node.name.value, a.value, data, world))
        if isinstance(a.value, graphql.ObjectValueNode)
        else a
        for a in node.arguments or ()
    )
    return replace(
        node,
        arguments=arguments,
        selection_set=replace(node.selection_set, selections=selections),
    )


def _steer_input(
    name: str, value: graphql.ObjectValueNode, data: st.DataObject, world: World
) -> graphql.ObjectValueNode:
    """What is drawn depends on the document only (never on the server's state), so Hypothesis
    sees the same draws when it replays an example."""
    fields = []
    for f in value.fields:
        kind = f.name.value
        if kind == "expectedRevision":
            if data.draw(st.booleans()):
                continue  # optional: often absent, as most clients send it
        elif isinstance(f.value, graphql.StringValueNode):
            choice = data.draw(st.integers(0, 7))
            index = data.draw(st.integers(0, 10**6))
            real = world.kinds.get(kind)
            if real and choice < 6:
                f = replace(f, value=nodes.String(real[index % len(real)]))
            elif name == "moveTask" and kind == "step" and choice < 6:
                f = replace(f, value=nodes.String(STEPS[index % len(STEPS)]))
            elif kind == "content" and choice == 7:
                prefix = ("/ask ", "/fail ")[index % 2]
                f = replace(f, value=nodes.String(prefix + f.value.value))
        fields.append(f)
    return replace(value, fields=tuple(fields))


def seed(client: httpx.Client, url: str) -> World:
    create = (
        "mutation($t: String!) { createTask(input: {title: $t}) { task { id } session { id } "
        "userErrors { code } } }"
    )
    world = World(client, url, [])
    sessions = []
    for title in ("fuzz one", "fuzz two"):
        payload = world.data(create, t=title)["createTask"]
        assert payload["userErrors"] == []
        world.task_ids.append(payload["task"]["id"])
        sessions.append(payload["session"]["id"])
        world.ids.append(payload["task"]["id"])
    first, second = sessions
    world.data(
        "mutation($s: ID!) { setAutoRun(input: {sessionId: $s, autoRun: false}) "
        "{ userErrors { code } } }",
        s=first,
    )
    for content in ("seed a", "seed b", "seed c"):
        world.data(
            "mutation($s: ID!, $c: String!) { enqueueMessage(input: {sessionId: $s, content: $c})"
            " { userErrors { code } } }",
            s=first,
            c=content,
        )
    world.data(
        'mutation($s: ID!) { sendMessage(input: {sessionId: $s, content: "/ask which one?"}) '
        "{ userErrors { code } } }",
        s=second,
    )
    world.quiet_snapshot()
    return world


# -- what one operation may have done ------------------------------------------------------------
@dataclass
class Intent:
    """The literals of one generated operation that can explain changes (hypothesis-graphql
    writes every argument inline)."""

    fields: set[str] = field(default_factory=set)
    removed_ids: set[str] = field(default_factory=set)
    cleared_sessions: set[str] = field(default_factory=set)
    updated_ids: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, document: str) -> Intent:
        intent = cls()
        try:
            ast = graphql.parse(document)
        except graphql.GraphQLError:
            return intent
        for definition in ast.definitions:
            if not isinstance(definition, graphql.OperationDefinitionNode):
                continue
            for selection in definition.selection_set.selections:
                if isinstance(selection, graphql.FieldNode):
                    intent._add(selection)
        return intent

    def _add(self, node: graphql.FieldNode) -> None:
        name = node.name.value
        self.fields.add(name)
        values: dict[str, str] = {}
        for argument in node.arguments or ():
            self._collect(argument.value, values, argument.name.value)
        if name == "removeQueueEntry" and "entryId" in values:
            self.removed_ids.add(values["entryId"])
        if name == "clearQueue" and "sessionId" in values:
            self.cleared_sessions.add(values["sessionId"])
        if name == "updateQueueEntry" and "entryId" in values:
            self.updated_ids.add(values["entryId"])

    def _collect(self, value: graphql.ValueNode, into: dict[str, str], key: str) -> None:
        if isinstance(value, graphql.StringValueNode):
            into[key] = value.value
            self.strings.add(value.value)
        elif isinstance(value, graphql.ObjectValueNode):
            for f in value.fields:
                self._collect(f.value, into, f.name.value)
        elif isinstance(value, graphql.ListValueNode):
            for item in value.values:
                self._collect(item, into, key)


def check_transition(
    before: dict[str, SessionSnap], after: dict[str, SessionSnap], intent: Intent, document: str
) -> None:
    """Q10, Q13, R1/R2 between two quiet snapshots of the seeded tasks."""
    where = f"after {document!r}"
    for sid, old in before.items():
        new = after.get(sid)
        assert new is not None, f"session {sid} vanished {where}"
        assert new.queue_revision >= old.queue_revision, f"queue revision went back {where}"
        assert new.revision >= old.revision, f"session revision went back {where}"
        assert new.cancellation_revision >= old.cancellation_revision or (
            new.cancellation_revision == 0 and old.cancellation_revision == 0
        ), f"cancellation revision went back {where}"
        assert new.prompts[: len(old.prompts)] == old.prompts, f"turn history rewritten {where}"
        changed = list(new.entries.items()) != list(old.entries.items())
        if changed or new.clarification != old.clarification:
            assert new.queue_revision > old.queue_revision, (
                f"queue changed, revision did not {where}"
            )
    for snap in after.values():
        assert snap.cancellation_pending is False, f"cancellationPending stuck {where}"

    # Q10: no entry id in two places.
    places = Counter(eid for snap in after.values() for eid in snap.entries)
    assert all(n == 1 for n in places.values()), f"an entry is in two queues {where}"

    old_entries = {eid: c for snap in before.values() for eid, c in snap.entries.items()}
    new_entries = {eid: c for snap in after.values() for eid, c in snap.entries.items()}
    entry_session = {eid: sid for sid, snap in before.items() for eid in snap.entries}
    new_prompts: list[str] = []
    for sid, snap in after.items():
        old_count = len(before[sid].prompts) if sid in before else 0
        new_prompts.extend(snap.prompts[old_count:])
    parts = Counter(part for prompt in new_prompts for part in prompt.split("\n\n"))
    whole = Counter(new_prompts)

    for eid, content in old_entries.items():
        if eid in new_entries:
            if new_entries[eid] != content:
                assert eid in intent.updated_ids, f"entry {eid} changed content {where}"
            continue
        if eid in intent.removed_ids or entry_session[eid] in intent.cleared_sessions:
            continue
        if whole[content] > 0:
            whole[content] -= 1
        elif all(parts[p] > 0 for p in content.split("\n\n")):
            parts.subtract(content.split("\n\n"))
        else:
            raise AssertionError(f"entry {eid} ({content!r}) was lost {where}")

    for eid, content in new_entries.items():
        if eid not in old_entries:
            assert content in intent.strings, f"entry {eid} ({content!r}) came from nowhere {where}"
    for prompt in new_prompts:
        explained = prompt in intent.strings or all(
            p in intent.strings or p in old_entries.values() for p in prompt.split("\n\n")
        )
        assert explained, f"turn prompt {prompt!r} came from nowhere {where}"


def user_error_codes(data: object) -> Iterator[str]:
    """Every ``userErrors[].code`` anywhere in an answer."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "userErrors" and isinstance(value, list):
                yield from (str(e.get("code")) for e in value if isinstance(e, dict))
            else:
                yield from user_error_codes(value)
    elif isinstance(data, list):
        for item in data:
            yield from user_error_codes(item)


def check_answer(response: httpx.Response, document: str) -> list[str]:
    """S3: GraphQL JSON, never a 5xx, no internals in any message. Returns the error messages."""
    where = f"for {document!r}"
    assert response.status_code < 500, f"HTTP {response.status_code} {where}: {response.text}"
    assert response.headers.get("content-type", "").startswith("application/json"), where
    body = response.json()
    assert isinstance(body, dict) and ("data" in body or "errors" in body), f"{body} {where}"
    messages = []
    for error in body.get("errors") or []:
        message = str(error.get("message"))
        assert not LEAK.search(message), f"internal detail leaked {where}: {message}"
        messages.append(message)
    return messages


@pytest.mark.timeout(600)
def test_s3_q10_q13_fuzzed_operations_never_fail_leak_or_lose_entries(server_url: str) -> None:
    """S3, Q10, Q13, R1, R2: generated valid and invalid operations against a real server."""
    with httpx.Client(headers=HEADERS, timeout=30, verify=TLS) as client:
        world = seed(client, server_url)
        state = {"snap": world.quiet_snapshot()}
        tally: Counter[str] = Counter()

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(data=st.data())
        def fuzz(data: st.DataObject) -> None:
            document = steer(data.draw(operations(world), label="operation"), data, world)
            response = world.post(document)
            messages = check_answer(response, document)
            tally["operations"] += 1
            tally["with errors" if messages else "answered"] += 1
            tally["masked faults"] += messages.count(MASKED)
            answer = response.json().get("data")
            for code in user_error_codes(answer):
                tally[f"userError:{code}"] += 1
            for name, payload in (answer or {}).items():
                if isinstance(payload, dict) and payload.get("userErrors") == []:
                    tally[f"done:{name}"] += 1
            after = world.quiet_snapshot()
            check_transition(state["snap"], after, Intent.of(document), document)
            state["snap"] = after
            assert MASKED not in messages, f"a fault (masked) {document!r}"

        try:
            fuzz()
        finally:
            TALLY.update(tally)
            snap = state["snap"]
            print(
                f"\nfuzz: {tally['operations']} operations ({tally['with errors']} answered "
                f"with errors), {tally['masked faults']} masked faults; seeded sessions now hold "
                f"{sum(len(s.entries) for s in snap.values())} entries and "
                f"{sum(len(s.prompts) for s in snap.values())} turns across {len(snap)} sessions"
            )
            print("  " + ", ".join(f"{k}={v}" for k, v in sorted(tally.items()) if ":" in k))


def test_fuzz_leak_detector_catches_internals() -> None:
    """The detector itself can fail: internal texts are caught, the masked message is not."""
    for text in (
        "Traceback (most recent call last):",
        "'NoneType' object has no attribute 'id'",
        "(sqlalchemy.exc.IntegrityError) UNIQUE constraint failed",
        "KeyError: 'abc'",
    ):
        assert LEAK.search(text), text
    for text in (MASKED, "Cannot query field 'x' on type 'Query'.", "session not found"):
        assert not LEAK.search(text), text


NUL_CASES = {
    "createTask.title": (
        "mutation($v: String!) { createTask(input: {title: $v}) "
        "{ task { title } userErrors { code } } }",
        "createTask",
    ),
    "enqueueMessage.content": (
        "mutation($s: ID!, $v: String!) { enqueueMessage(input: {sessionId: $s, content: $v}) "
        "{ entry { content } userErrors { code } } }",
        "enqueueMessage",
    ),
    "sendMessage.content": (
        "mutation($s: ID!, $v: String!) { sendMessage(input: {sessionId: $s, content: $v}) "
        "{ turn { prompt } userErrors { code } } }",
        "sendMessage",
    ),
}


@pytest.mark.parametrize("case", sorted(NUL_CASES))
def test_s3_m3_a_nul_character_is_stored_or_refused_never_a_fault(
    server_url: str, case: str, database_url: str, request: pytest.FixtureRequest
) -> None:
    """Found by the fuzzer on PostgreSQL (then fixed): a string holding U+0000 (valid JSON,
    valid GraphQL) must be stored as sent or refused with INVALID_INPUT, the same on both
    stores (M3, S3) — never an unexpected (masked) error."""
    query, field_name = NUL_CASES[case]
    value = "a\u0000b"
    with httpx.Client(headers=HEADERS, timeout=30, verify=TLS) as client:
        world = World(client, server_url, [])
        create = 'mutation { createTask(input: {title: "t"}) { session { id } } }'
        session_id = world.data(create)["createTask"]["session"]["id"]
        variables = {"v": value} if case.startswith("createTask") else {"s": session_id, "v": value}
        body = world.post(query, variables).json()
        assert "errors" not in body, body  # never a fault
        payload = body["data"][field_name]
        codes = [e["code"] for e in payload["userErrors"]]
        echoed = [
            text
            for key, item in payload.items()
            if key != "userErrors" and isinstance(item, dict)
            for text in item.values()
        ]
        assert codes == ["INVALID_INPUT"] or (codes == [] and echoed == [value]), payload
