"""The engine's batch and page reads: what the GraphQL layer's loaders and connections read
(``Engine.reads``: the store's own, typed as :class:`Reads`).

Resolvers read through the engine, never the store: this module is the part of the engine's
public face they page and batch with. The page types are the store's (re-exported here, so a
resolver imports nothing from ``turnqueue.store``): a :class:`Window` says which part of a
listing to read, a :class:`Page` is what came back, and each listing's key type says where an
item sits in it (a cursor encodes that key).

Authorisation (S2) is the caller's: these take ids the caller already authorised (a task's
sessions, a session's turns) or the calling principal (its tasks).
"""

from turnqueue.store import Page, Reads, SessionKey, TaskKey, TurnKey, Window

__all__ = ["Page", "Reads", "SessionKey", "TaskKey", "TurnKey", "Window"]
