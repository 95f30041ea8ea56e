"""The seam tests inject store faults through (M3), as httpx's ``MockTransport`` is for HTTP.

:class:`FaultyStore` wraps a real store and hands the engine the same store, except that its
transactions run a test's hook before chosen :class:`~turnqueue.store.Tx` methods — in
the transaction that calls them, with the method's arguments — or once after the commit of a
transaction that called one (:meth:`FaultyStore.after_commit`). A hook may raise (the database
away: the transaction rolls back as it would), or act at that exact point (let an agent end while
a cancel is being accepted). A hook must not open a transaction of its own (the store has one
writer at a time). Notifications can be gated too (:meth:`FaultyStore.gate`): a LISTEN
connection cut, as far as the engine can tell.

Nothing here replaces a method of the engine or the store: the engine is opened on this store
(``Engine.open(settings, FaultyStore(store), ...)``) as it is on any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from turnqueue.errors import StoreError
from turnqueue.store import Listener, Store

Hook = Callable[..., Awaitable[None]]


class FaultyStore:
    """``store`` with hooks before chosen Tx methods (see the module's docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._hooks: dict[str, Hook] = {}
        self._after: dict[str, Callable[[], Awaitable[None]]] = {}
        self._gated = False
        #: the Tx methods each write transaction opened so far called, in order of opening:
        #: how many units of work a rule takes, and what each did
        self.writes: list[set[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    # -- the test's side ---------------------------------------------------------------------
    @contextlib.contextmanager
    def before(self, method: str, hook: Hook) -> Iterator[None]:
        """Run ``hook(*args, **kwargs)`` before each call of the Tx ``method`` in the block."""
        assert method not in self._hooks, f"a hook before {method} is set already"
        self._hooks[method] = hook
        try:
            yield
        finally:
            self._hooks.pop(method, None)

    @contextlib.contextmanager
    def after_commit(self, method: str, hook: Callable[[], Awaitable[None]]) -> Iterator[None]:
        """Run ``hook()`` once, right after the next transaction that calls the Tx ``method``
        has committed, in the task that committed it and before that task goes on. The hook
        runs outside every transaction: it may act through the engine (another client's
        mutation landing between two units of work of one rule)."""
        assert method not in self._after, f"a hook after {method} is set already"
        self._after[method] = hook
        try:
            yield
        finally:
            self._after.pop(method, None)

    @contextlib.contextmanager
    def failing(self, method: str, times: int = 1) -> Iterator[Callable[[], int]]:
        """The next ``times`` calls of ``method`` fail as a lost database would; yields how
        many failures are still to come."""
        left = times

        async def fail(*args: Any, **kwargs: Any) -> None:
            nonlocal left
            if left:
                left -= 1
                raise StoreError("the database is away")

        with self.before(method, fail):
            yield lambda: left

    def gate(self, open_: bool) -> None:
        """Deliver (True) or drop (False) every notification the engine's listener hears."""
        self._gated = not open_

    # -- the engine's side (the Store protocol) ----------------------------------------------
    def transaction(self) -> contextlib.AbstractAsyncContextManager[Any]:
        called: set[str] = set()
        self.writes.append(called)
        return self._wrap(self.store.transaction(), called)

    def read(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._wrap(self.store.read(), set())

    def lease(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._wrap(self.store.lease(), set())

    def listen(self, on_payload: Callable[[str], None], on_resync: Callable[[], None]) -> Listener:
        def gated(payload: str) -> None:
            if not self._gated:
                on_payload(payload)

        return self.store.listen(gated, on_resync)

    @contextlib.asynccontextmanager
    async def _wrap(
        self, opened: contextlib.AbstractAsyncContextManager[Any], called: set[str]
    ) -> AsyncIterator[Any]:
        async with opened as tx:
            yield _FaultyTx(tx, self._hooks, called)
        for method in called & self._after.keys():  # committed: the after-commit hooks, once
            await self._after.pop(method)()


class _FaultyTx:
    def __init__(self, tx: Any, hooks: dict[str, Hook], called: set[str]) -> None:
        self._tx = tx
        self._hooks = hooks
        self._called = called

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tx, name)
        self._called.add(name)
        hook = self._hooks.get(name)
        if hook is None:
            return attr

        async def hooked(*args: Any, **kwargs: Any) -> Any:
            await hook(*args, **kwargs)
            return await attr(*args, **kwargs)

        return hooked


def faults_of(engine: Any) -> FaultyStore:
    """The seam of an engine opened on a :class:`FaultyStore`."""
    store = engine.core.store
    assert isinstance(store, FaultyStore), "open the engine on a FaultyStore"
    return store
