"""The fleet test's seeded workload: what a busy UI sends, every mutation through the balancer.

Every message has unique content, so the end of the run can count where each one went (Q10):
a message the API acknowledged (a turn started, an entry queued) is found exactly once among
the sessions' turns and queue entries; one refused is found nowhere; one whose request was cut
in transit (its instance killed: a 502) is found at most once. No content is found in two turns.
Every queue status a mutation answers with goes into the ledger too (R3).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from fleet_clients import Api, Unknown
from fleet_view import QUEUE, READ, record, record_read
from revision_ledger import Ledger

ACKED = "acked"
UNKNOWN = "unknown"


@dataclass
class Message:
    content: str
    sid: str
    outcome: str = UNKNOWN  # ACKED, UNKNOWN or "refused <code>"


class Workload:
    def __init__(self, api: Api, ledger: Ledger) -> None:
        self.api = api
        self.ledger = ledger
        self.messages: dict[str, Message] = {}
        self.outcomes: Counter[str] = Counter()  # "<mutation> <outcome>"
        self.cancels: dict[str, list[float]] = {}  # per session: when each cancel was sent
        self._count = 0

    def content(self, sid: str, prefix: str = "") -> str:
        self._count += 1
        return f"{prefix}m{self._count} for {sid[-6:]}"

    async def _mutate(self, name: str, selection: str, **input: Any) -> dict[str, Any] | None:
        """The payload, or None when cut in transit; counted; its queue into the ledger."""
        try:
            payload = await self.api.mutate(name, selection, **input)
        except Unknown:
            self.outcomes[f"{name} {UNKNOWN}"] += 1
            return None
        errors = payload["userErrors"]
        self.outcomes[f"{name} {errors[0]['code'] if errors else 'ok'}"] += 1
        if payload.get("queue"):
            record(self.ledger, "queue", input["sessionId"], payload["queue"], f"{name} payload")
        return payload

    async def create_session(self, title: str) -> str:
        payload = await self.api.mutate("createTask", "session { id }", title=title)
        assert payload["userErrors"] == [], payload
        sid: str = payload["session"]["id"]
        return sid

    async def send(self, sid: str, content: str, *, queue_only: bool = False) -> Message:
        """sendMessage (starts a turn, or queues on a busy session) or enqueueMessage."""
        message = self.messages[content] = Message(content, sid)
        if queue_only:
            selection = f"entry {{ id }} queue {{ {QUEUE} }}"
            payload = await self._mutate(
                "enqueueMessage", selection, sessionId=sid, content=content
            )
        else:
            selection = f"turn {{ id }} queuedEntry {{ id }} queue {{ {QUEUE} }}"
            payload = await self._mutate("sendMessage", selection, sessionId=sid, content=content)
        if payload is not None:
            errors = payload["userErrors"]
            message.outcome = f"refused {errors[0]['code']}" if errors else ACKED
        return message

    async def cancel(self, sid: str) -> str:
        """The cancel's outcome, a refusal's code, or ``unknown``."""
        self.cancels.setdefault(sid, []).append(asyncio.get_running_loop().time())
        payload = await self._mutate(
            "cancel", "outcome cancellation { pending revision }", sessionId=sid
        )
        if payload is None:
            return UNKNOWN
        if payload["userErrors"]:
            return str(payload["userErrors"][0]["code"])
        cancellation = payload["cancellation"]
        state = {"pending": cancellation["pending"]}
        self.ledger.see("cancellation", sid, int(cancellation["revision"]), state, "cancel payload")
        return str(payload["outcome"])

    async def set_auto_run(self, sid: str, on: bool) -> None:
        selection = f"dispatched queue {{ {QUEUE} }}"
        await self._mutate("setAutoRun", selection, sessionId=sid, autoRun=on)

    async def read(self, sid: str) -> dict[str, Any]:
        session: dict[str, Any] = (await self.api.data(READ, s=sid))["session"]
        record_read(self.ledger, sid, session, "workload read")
        return session

    async def act(self, sid: str, rng: random.Random) -> None:
        """One random thing a UI could send now; refusals are answers too."""
        session = await self.read(sid)
        entries = session["queue"]["entries"]
        choice = rng.choices(
            ["send", "enqueue", "fail", "stubborn", "cancel", "autorun", "sendnow"],
            weights=[30, 20, 5, 2, 10, 12, 12],
        )[0]
        if choice == "send":
            await self.send(sid, self.content(sid))
        elif choice == "enqueue":
            await self.send(sid, self.content(sid), queue_only=True)
        elif choice == "fail":
            await self.send(sid, self.content(sid, "/fail "))
        elif choice == "stubborn":
            await self.send(sid, self.content(sid, "/stubborn "))
        elif choice == "cancel":
            await self.cancel(sid)
        elif choice == "autorun":
            await self.set_auto_run(sid, rng.random() < 0.7)
        elif choice == "sendnow" and entries:
            await self._mutate(
                "sendNow",
                f"sentCount turn {{ id }} queue {{ {QUEUE} }}",
                sessionId=sid,
                scope="ENTRY",
                entryId=rng.choice(entries)["id"],
                expectedRevision=session["queue"]["revision"],
            )

    async def drive(self, sid: str, seed: int, seconds: float) -> None:
        rng = random.Random(seed)
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            await self.act(sid, rng)
            await asyncio.sleep(rng.uniform(0, 0.25))  # a user's pace, not synchronisation

    def whereabouts(self, turns: list[dict[str, Any]], entries: list[dict[str, Any]]) -> list[str]:
        """Q10 over the truth's turns (every session's) and queue entries: what was lost, run
        twice, found where it was refused, or came from nowhere; empty when all is well."""
        found = Counter([t["prompt"] for t in turns] + [e["content"] for e in entries])
        problems = [f"{c!r} found {n} times" for c, n in found.items() if n > 1]
        problems += [f"{c!r} was never sent" for c in found if c not in self.messages]
        for m in self.messages.values():
            if m.outcome == ACKED and found[m.content] != 1:
                problems.append(f"{m.content!r} acknowledged, found {found[m.content]} times")
            if m.outcome.startswith("refused") and found[m.content]:
                problems.append(f"{m.content!r} {m.outcome}, found {found[m.content]} times")
        return problems
