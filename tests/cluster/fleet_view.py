"""What one fleet client knows of one session, built only from what the API sent it (R3, O2).

A :class:`View` keeps, per kind (session, queue, cancellation), the snapshot with the highest
revision it has seen and ignores lower ones, as the spec tells a client to (R3); every snapshot
also goes into the shared :class:`~revision_ledger.Ledger`, which fails on a revision seen with
two states. Turn output is merged per turn by offset: an :class:`OutputStream` checks that one
subscription's chunks follow each other with no gap and no repeat (O2), and the view checks that
what two streams both carry is the same text, never a gap between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from revision_ledger import Ledger

QUEUE = "revision autoRun pauseReason heldBy count max entries { id content source }"
SESSION = "revision state clarification { id question } currentTurn { id status }"
CANCELLATION = "pending revision"
#: kind → (root field, subscription document)
SNAPSHOTS = {
    "queue": (
        "queueStatusChanged",
        f"subscription($s: ID!) {{ queueStatusChanged(sessionId: $s) {{ {QUEUE} }} }}",
    ),
    "session": (
        "sessionChanged",
        f"subscription($s: ID!) {{ sessionChanged(sessionId: $s) {{ {SESSION} "
        "cancellationPending cancellationRevision } }",
    ),
    "cancellation": (
        "cancellationChanged",
        f"subscription($s: ID!) {{ cancellationChanged(sessionId: $s) {{ {CANCELLATION} }} }}",
    ),
}
OUTPUT = """subscription($s: ID!, $t: ID, $a: Int) {
  turnOutput(sessionId: $s, turnId: $t, afterOffset: $a) { turnId offset text done status } }"""
READ = f"""query($s: ID!) {{ session(id: $s) {{ {SESSION}
  cancellationPending cancellationRevision queue {{ {QUEUE} }} }} }}"""
TURNS = """query($s: ID!, $after: String) { session(id: $s) {
  turnsConnection(first: 200, after: $after) {
    edges { cursor node { id prompt status output } } pageInfo { endCursor hasNextPage } } } }"""


class OutputBroken(AssertionError):
    """Output arrived with a gap, a repeat or a change (O2): a product bug, never retried."""


def record(ledger: Ledger, kind: str, sid: str, value: dict[str, Any], where: str) -> None:
    """One snapshot of ``kind`` into the ledger, keyed by its revision."""
    if kind == "session":
        state = {k: value[k] for k in ("state", "clarification", "currentTurn")}
        ledger.see("session", sid, int(value["revision"]), state, where)
        if "cancellationPending" in value:
            pending = {"pending": value["cancellationPending"]}
            ledger.see("cancellation", sid, int(value["cancellationRevision"]), pending, where)
        return
    state = {k: v for k, v in value.items() if k != "revision"}
    ledger.see(kind, sid, int(value["revision"]), state, where)


def record_read(ledger: Ledger, sid: str, session: dict[str, Any], where: str) -> None:
    """A ``READ`` answer: the session's three kinds."""
    record(ledger, "session", sid, session, where)
    record(ledger, "queue", sid, session["queue"], where)


@dataclass
class TurnView:
    text: str = ""
    status: str | None = None  # set by the turn's ``done``


@dataclass
class View:
    """One client's knowledge of one session."""

    name: str
    sid: str
    ledger: Ledger
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind → newest snapshot
    turns: dict[str, TurnView] = field(default_factory=dict)
    cursor: str | None = None  # turnsConnection: every turn up to here is known and done

    def snapshot(self, kind: str, value: dict[str, Any], where: str) -> None:
        record(self.ledger, kind, self.sid, value, f"{self.name} {where}")
        if kind == "session" and "cancellationPending" in value:
            cancellation = {
                "pending": value["cancellationPending"],
                "revision": value["cancellationRevision"],
            }
            self._keep("cancellation", cancellation)
            value = {k: v for k, v in value.items() if not k.startswith("cancellation")}
        self._keep(kind, value)

    def _keep(self, kind: str, value: dict[str, Any]) -> None:
        held = self.latest.get(kind)
        if held is None or int(value["revision"]) >= int(held["revision"]):
            self.latest[kind] = value  # an equal revision is the same state (the ledger says)

    def merge(self, chunk: dict[str, Any]) -> None:
        """A turnOutput chunk, after its stream's own checks: what is new is appended; what the
        view already has must be the same text; a gap is a bug."""
        turn = self.turns.setdefault(chunk["turnId"], TurnView())
        offset, text = int(chunk["offset"]), chunk["text"]
        have = len(turn.text)
        if offset > have:
            raise OutputBroken(f"{self.name}: gap in {chunk['turnId']}: {offset} > {have}")
        overlap = turn.text[offset : offset + len(text)]
        if not text.startswith(overlap):
            raise OutputBroken(f"{self.name}: {chunk['turnId']} changed at {offset}")
        new = text[len(overlap) :]
        if new and turn.status is not None:
            raise OutputBroken(f"{self.name}: text after the done of {chunk['turnId']}")
        turn.text += new
        if chunk["done"]:
            if offset + len(text) != len(turn.text):
                raise OutputBroken(f"{self.name}: done of {chunk['turnId']} before its end")
            if turn.status is not None and turn.status != chunk["status"]:
                raise OutputBroken(f"{self.name}: {chunk['turnId']} ended twice, differently")
            turn.status = chunk["status"]

    def unfinished(self) -> list[tuple[str, int]]:
        """Turns known but not done, with the offset to resume each at (O2)."""
        return [(tid, len(t.text)) for tid, t in self.turns.items() if t.status is None]

    def summary(self) -> dict[str, Any]:
        """What the comparisons read: the newest of each kind and every turn's output."""
        return {
            "session": self.latest.get("session"),
            "queue": self.latest.get("queue"),
            "pending": (self.latest.get("cancellation") or {}).get("pending"),
            "turns": {tid: (t.status, t.text) for tid, t in self.turns.items()},
        }


class OutputStream:
    """One turnOutput subscription's checks: per turn, each chunk starts where the last one of
    this stream ended — at ``after`` for the turn it resumed (``turnId``/``afterOffset`` or
    ``Last-Event-ID``), at 0 for every other — and nothing follows a turn's ``done``."""

    def __init__(self, view: View, where: str, start: tuple[str, int] | None = None) -> None:
        self._view = view
        self._where = where
        self._start = start
        self._ends: dict[str, int] = {}
        self._done: set[str] = set()
        self.count = 0

    def ended(self, turn: str) -> None:
        """``turn``'s ``done`` came before this stream began (a resume right after it)."""
        self._done.add(turn)

    def take(self, chunk: dict[str, Any]) -> None:
        turn = chunk["turnId"]
        expected = self._ends.get(turn)
        if expected is None:
            expected = self._start[1] if self._start and self._start[0] == turn else 0
        if turn in self._done or int(chunk["offset"]) != expected:
            raise OutputBroken(
                f"{self._view.name} {self._where}: {turn} chunk at {chunk['offset']}, "
                f"expected {expected}{' (after done)' if turn in self._done else ''}"
            )
        self._ends[turn] = expected + len(chunk["text"])
        if chunk["done"]:
            self._done.add(turn)
        self.count += 1
        self._view.merge(chunk)
