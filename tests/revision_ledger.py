"""R3's check: an equal revision is the same state, for every kind, on every instance.

A :class:`Ledger` is fed every snapshot and event a test sees — from queries, mutation payloads
and subscriptions, on one instance or several — keyed by (kind, session, revision), and fails
when one key was seen with two states. Kinds are the spec's three: the session's own, its
queue's (Q13) and its cancellation's (C2).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Hashable
from typing import Any


class Ledger:
    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, int], dict[Hashable, str]] = defaultdict(dict)
        self.count = 0

    def see(self, kind: str, session_id: str, revision: int, state: Any, where: str = "") -> None:
        """Record that ``where`` saw ``state`` as the session's ``kind`` at ``revision``; a
        mapping or list (a GraphQL answer) is compared by its JSON."""
        if isinstance(state, dict | list):
            state = json.dumps(state, sort_keys=True)
        self._seen[(kind, session_id, revision)].setdefault(state, where)
        self.count += 1

    def conflicts(self) -> list[str]:
        return [
            f"{kind} of {sid} at revision {revision}: "
            + " | ".join(f"{where or '?'}: {state}" for state, where in states.items())
            for (kind, sid, revision), states in sorted(self._seen.items())
            if len(states) > 1
        ]

    def check(self) -> None:
        """Fail on any revision seen with two states (R3)."""
        conflicts = self.conflicts()
        assert not conflicts, f"{len(conflicts)} revisions seen with two states:\n" + "\n".join(
            conflicts[:20]
        )
