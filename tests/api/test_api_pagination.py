"""G3 over the API (real uvicorn server, ``[sqlite]`` and ``[postgresql]``): Relay connections
of tasks, a task's sessions and a session's turns.

Whole listings are walked forwards and backwards page by page (no gap, no duplicate), with rows
inserted between the page reads; another principal's items never appear (S2); bad paging
arguments are a clear error that changes nothing; pages are capped at 200; the old list fields
still answer, deprecated, naming their replacement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from api_helpers import CREATE, Api, ApiFactory

TASKS = """query($first: Int, $after: String, $last: Int, $before: String) {
  tasksConnection(first: $first, after: $after, last: $last, before: $before) {
    edges { cursor node { id title } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""

TURNS = """query($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  session(id: $id) {
    turnsConnection(first: $first, after: $after, last: $last, before: $before) {
      edges { cursor node { id prompt status } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }"""

SESSIONS = """query($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  task(id: $id) {
    sessionsConnection(first: $first, after: $after, last: $last, before: $before) {
      edges { cursor node { id } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }"""

WAITING = "subscription($s: ID!) { sessionChanged(sessionId: $s) { state } }"


async def create_tasks(api: Api, n: int, token: str = "tok-a") -> list[str]:
    ids = []
    for i in range(n):
        data = await api.data(CREATE, token, title=f"task {i}")
        ids.append(data["createTask"]["task"]["id"])
    return ids


async def tasks_page(api: Api, token: str = "tok-a", **args: Any) -> dict[str, Any]:
    page: dict[str, Any] = (await api.data(TASKS, token, **args))["tasksConnection"]
    return page


def node_ids(page: dict[str, Any]) -> list[str]:
    return [edge["node"]["id"] for edge in page["edges"]]


def check_cursors(page: dict[str, Any]) -> None:
    cursors = [edge["cursor"] for edge in page["edges"]]
    info = page["pageInfo"]
    assert info["startCursor"] == (cursors[0] if cursors else None)
    assert info["endCursor"] == (cursors[-1] if cursors else None)


async def walk(read: Any, size: int, *, backward: bool = False) -> list[str]:
    """Every node id of a connection, by pages of ``size``, in the connection's order."""
    seen: list[str] = []
    cursor = None
    while True:
        if backward:
            page = await read(last=size, before=cursor)
            assert page["pageInfo"]["hasNextPage"] == (cursor is not None)
            seen[:0] = node_ids(page)
            more, cursor = page["pageInfo"]["hasPreviousPage"], page["pageInfo"]["startCursor"]
        else:
            page = await read(first=size, after=cursor)
            assert page["pageInfo"]["hasPreviousPage"] == (cursor is not None)
            seen.extend(node_ids(page))
            more, cursor = page["pageInfo"]["hasNextPage"], page["pageInfo"]["endCursor"]
        check_cursors(page)
        assert len(page["edges"]) <= size
        if not more:
            return seen


async def run_turns(api: Api, session_id: str, prompts: list[str]) -> None:
    """Each prompt as one completed turn, in order (waits on sessionChanged, never sleeps)."""
    async with api.ws() as ws:
        stream = ws.subscribe(WAITING, s=session_id)
        await stream.next()
        for prompt in prompts:
            payload = await api.mutate(
                "sendMessage", "turn { id }", sessionId=session_id, content=prompt
            )
            assert payload["turn"] is not None, payload
            await stream.until(lambda m: m["sessionChanged"]["state"] == "WAITING_FOR_INPUT")


async def test_g3_tasks_connection_pages_every_task_both_ways(api: Api) -> None:
    created = await create_tasks(api, 7)
    await create_tasks(api, 2, token="tok-b")
    newest_first = list(reversed(created))

    async def read(**args: Any) -> dict[str, Any]:
        return await tasks_page(api, **args)

    for size in (1, 3, 7, 50):
        assert await walk(read, size) == newest_first, size
        assert await walk(read, size, backward=True) == newest_first, size
    # Without first or last: the first 50.
    assert node_ids(await tasks_page(api)) == newest_first


async def test_g3_cursors_stay_stable_while_tasks_and_turns_are_added(api: Api) -> None:
    """New tasks land before the first page (newest first), new turns after the last: a walk
    that goes on from the cursors it holds sees every older item exactly once."""
    created = await create_tasks(api, 5)
    page = await tasks_page(api, first=2)
    seen = node_ids(page)
    while page["pageInfo"]["hasNextPage"]:
        await create_tasks(api, 1)  # inserted between two page reads
        page = await tasks_page(api, first=2, after=page["pageInfo"]["endCursor"])
        seen += node_ids(page)
    assert seen == list(reversed(created))

    session_id = await api.create_session()
    await run_turns(api, session_id, ["t0", "t1", "t2"])

    async def turns(**args: Any) -> dict[str, Any]:
        data = await api.data(TURNS, id=session_id, **args)
        result: dict[str, Any] = data["session"]["turnsConnection"]
        return result

    newest = await turns(last=2)
    assert [e["node"]["prompt"] for e in newest["edges"]] == ["t1", "t2"]
    assert newest["pageInfo"]["hasPreviousPage"] is True
    await run_turns(api, session_id, ["t3"])  # appended after the page already read
    older = await turns(last=2, before=newest["pageInfo"]["startCursor"])
    assert [e["node"]["prompt"] for e in older["edges"]] == ["t0"]
    assert (older["pageInfo"]["hasPreviousPage"], older["pageInfo"]["hasNextPage"]) == (False, True)
    later = await turns(first=5, after=newest["pageInfo"]["endCursor"])
    assert [e["node"]["prompt"] for e in later["edges"]] == ["t3"]
    # The same turn keeps its cursor across reads.
    again = await turns(last=2, before=later["pageInfo"]["startCursor"])
    assert again["edges"] == newest["edges"]


async def test_g3_sessions_connection_of_a_task(start_api: ApiFactory, tmp_path: Path) -> None:
    workflow = tmp_path / "workflow.toml"
    workflow.write_text(
        '[[steps]]\nname = "WORK"\n\n[[steps]]\nname = "HANDOFF"\nnew_session_on_enter = true\n'
    )
    api = await start_api(workflow_file=workflow)
    data = await api.data(CREATE, title="moving")
    task_id = data["createTask"]["task"]["id"]
    sessions = [data["createTask"]["session"]["id"]]
    for _ in range(3):  # each entry into HANDOFF hands the task to a new session (W3)
        moved = await api.mutate("moveTask", "session { id }", taskId=task_id, step="HANDOFF")
        sessions.append(moved["session"]["id"])
        await api.mutate("moveTask", "session { id }", taskId=task_id, step="WORK")
    assert len(set(sessions)) == 4

    async def read(**args: Any) -> dict[str, Any]:
        result: dict[str, Any] = (await api.data(SESSIONS, id=task_id, **args))["task"][
            "sessionsConnection"
        ]
        return result

    for size in (1, 3, 4):
        assert await walk(read, size) == sessions  # oldest first
        assert await walk(read, size, backward=True) == sessions
    # Another principal cannot reach the task, so not its sessions either (S2).
    assert (await api.data(SESSIONS, "tok-b", id=task_id, first=10))["task"] is None


async def test_g3_s2_another_principals_items_never_appear(api: Api) -> None:
    alice = await create_tasks(api, 3)
    bob = await create_tasks(api, 2, token="tok-b")
    assert await walk(lambda **a: tasks_page(api, "tok-b", **a), 1) == list(reversed(bob))
    assert await walk(lambda **a: tasks_page(api, **a), 2) == list(reversed(alice))
    # A cursor of alice's only bounds bob's listing: it never lets her tasks in.
    alice_cursor = (await tasks_page(api, first=1))["edges"][0]["cursor"]
    for args in ({"first": 50, "after": alice_cursor}, {"last": 50, "before": alice_cursor}):
        assert set(node_ids(await tasks_page(api, "tok-b", **args))) <= set(bob)
    session_id = await api.create_session()
    await run_turns(api, session_id, ["mine"])
    assert (await api.data(TURNS, "tok-b", id=session_id, first=10))["session"] is None


async def test_g3_bad_paging_arguments_are_clear_errors_and_change_nothing(api: Api) -> None:
    created = await create_tasks(api, 3)
    session_id = await api.create_session()
    task_cursor = (await tasks_page(api, first=1))["edges"][0]["cursor"]
    bad: list[tuple[dict[str, Any], str]] = [
        ({"first": -1}, "first must not be negative, not -1"),
        ({"last": -5}, "last must not be negative, not -5"),
        ({"first": 1, "last": 1}, "pass first or last, not both"),
        ({"after": "not a cursor!"}, "after is not a cursor of this connection"),
        ({"before": "bm9wZQ"}, "before is not a cursor of this connection"),  # base64 "nope"
        ({"after": task_cursor[:-3]}, "after is not a cursor of this connection"),
    ]
    for args, message in bad:
        body = await api.gql(TASKS, **args)
        assert body["data"] is None, (args, body)
        assert [(e["message"], e["extensions"]["code"]) for e in body["errors"]] == [
            (message, "INVALID_INPUT")
        ], args
    # A cursor of another connection (a task's, given to turns) is refused the same way.
    body = await api.gql(TURNS, id=session_id, first=1, after=task_cursor)
    assert body["data"] == {"session": None}
    assert body["errors"][0]["message"] == "after is not a cursor of this connection"
    assert body["errors"][0]["extensions"]["code"] == "INVALID_INPUT"
    listing = node_ids(await tasks_page(api))  # the session's task, then the three
    assert len(listing) == 4 and listing[1:] == list(reversed(created))


async def test_g3_pages_are_capped_at_200(api: Api) -> None:
    async with api.engine.store.transaction() as tx:
        for i in range(203):
            await tx.create_task(title=f"bulk {i}", owner="alice", workflow_step="IN_PROGRESS")
    page = await tasks_page(api, first=1000)
    assert len(page["edges"]) == 200 and page["pageInfo"]["hasNextPage"] is True
    rest = await tasks_page(api, first=1000, after=page["pageInfo"]["endCursor"])
    assert len(rest["edges"]) == 3 and rest["pageInfo"]["hasNextPage"] is False
    assert len(set(node_ids(page) + node_ids(rest))) == 203
    assert len((await tasks_page(api, last=1000))["edges"]) == 200


async def test_g3_old_list_fields_answer_and_are_deprecated(api: Api) -> None:
    await create_tasks(api, 2)
    assert (
        len((await api.data("{ tasks(first: 10) { id sessions { id turns { id } } } }"))["tasks"])
        == 2
    )
    data = await api.data(
        """{ q: __type(name: "Query") { fields(includeDeprecated: true) {
               name isDeprecated deprecationReason } }
             t: __type(name: "Task") { fields(includeDeprecated: true) {
               name isDeprecated deprecationReason } }
             s: __type(name: "Session") { fields(includeDeprecated: true) {
               name isDeprecated deprecationReason } } }"""
    )
    reasons = {
        (owner, f["name"]): f["deprecationReason"]
        for owner in ("q", "t", "s")
        for f in data[owner]["fields"]
        if f["isDeprecated"]
    }
    assert reasons == {
        ("q", "tasks"): "Use `tasksConnection`, which pages with cursors.",
        ("t", "sessions"): "Use `sessionsConnection`, which pages with cursors.",
        ("s", "turns"): "Use `turnsConnection(last: n)`, which pages with cursors.",
    }
