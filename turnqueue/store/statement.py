"""SQL written in SQLAlchemy Core, compiled once per dialect, run on the driver connection.

Only the execution skips SQLAlchemy's (it costs more CPU than the statement on the hot path): a
:class:`CompiledSql` is the SQL string, its positional parameter order, the values bound in the
statement, and the dialect's own bind and result processors (``UtcDateTime``, SQLite's
datetime text and booleans).

* A :class:`Statement` is built once at import and compiled on first use per dialect, with its
  constants (the anonymous binds SQLAlchemy makes for a plain ``int`` or ``bool``: ``LIMIT 1``,
  ``revision + 1``, SQLite's ``OFFSET 0``) written into the SQL as literals: nobody can name
  them, and they never change. Any other statement is compiled on each call and keeps them as
  parameters (a page size changes between calls; a literal would make a new prepared
  statement for each).
* Rows are :class:`Record` tuples: ``row[0]`` and ``row.name``, as with SQLAlchemy's ``Row``; a
  name that appears twice resolves to its first column.
* A transaction reaches the database through a :class:`Conn` (``SqliteConn``, ``DriverConn``);
  every statement returns a :class:`Buffered` result, its rows already fetched.

Limits (the store's tests run every statement through here): Python-side column defaults are
not applied (the tables have server defaults only); a prebuilt :class:`Statement` must not
contain an expanding ``IN`` (it needs its values to compile); ``executemany`` only on SQLite
(``SqliteConn.execute_many``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from operator import itemgetter
from typing import Any, ClassVar, TypeVar, cast

from sqlalchemy import Executable, Select, TextualSelect
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import MultipleResultsFound
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter, ClauseElement, _anonymous_label

Processor = Callable[[Any], Any]


class Record(tuple[Any, ...]):
    """A result row; each :class:`CompiledSql` makes a subclass that knows its column names."""

    __slots__ = ()
    _keys: ClassVar[tuple[str, ...]] = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self[self._index[name]]
        except KeyError:
            raise AttributeError(name) from None


@cache
def _record_type(keys: tuple[str, ...]) -> type[Record]:
    """The row class of a column list: one per list, whichever statements return it (a
    statement compiled per call makes no new class, so per-class caches stay bounded)."""
    index: dict[str, int] = {}
    for i, key in enumerate(keys):
        index.setdefault(key, i)
    return type("Record", (Record,), {"__slots__": (), "_keys": keys, "_index": index})


def _result_columns(clause: Executable) -> Sequence[Any] | None:
    """The columns a statement returns, or None when it returns no rows we read."""
    if isinstance(clause, Select | TextualSelect):  # TextualSelect: ``text(…).columns(…)``
        return list(clause.selected_columns)
    if isinstance(clause, UpdateBase):
        return list(clause.exported_columns) or None  # RETURNING, if any
    raise TypeError(f"cannot run {type(clause).__name__} on the driver")


class CompiledSql:
    """One statement compiled for one dialect, ready to run with a parameter dict."""

    __slots__ = ("_bind", "_convert", "_take", "bound", "params", "record", "results", "sql")

    def __init__(
        self,
        sql: str,
        params: tuple[tuple[str, Processor | None], ...],
        bound: Mapping[str, Any],
        record: type[Record] | None,
        results: tuple[Processor | None, ...] | None,
    ) -> None:
        self.sql = sql
        #: Positional parameters: (name, bind processor or None), in placeholder order.
        self.params = params
        #: Values bound inside the statement itself (literals); a caller's parameters override.
        self.bound = bound
        #: The row class, or None when the statement's rows are not read (run for its status).
        self.record = record
        #: Result processors by column, or None when no column needs one.
        self.results = results
        # For the hot path: the parameters' values from a dict in one C call, then a processor
        # only where a parameter (a column) has one, by position.
        self._take = getter([name for name, _ in params])
        self._bind = _processors(process for _, process in params)
        self._convert = _processors(results or ())

    @classmethod
    def compile(
        cls,
        clause: Executable,
        dialect: Dialect,
        keys: Iterable[str] | None = None,
        *,
        constants: bool = False,
    ) -> CompiledSql:
        """Compile ``clause``; ``keys`` are the parameter names an INSERT/UPDATE without
        ``values()`` will be given (they choose its columns, as SQLAlchemy's execute does);
        ``constants``: render its constants as literals (a prebuilt statement, see above)."""
        compiler = _constants_compiler(dialect.statement_compiler) if constants else None
        compiled = (compiler or dialect.statement_compiler)(
            dialect,
            cast("ClauseElement", clause),
            column_keys=list(keys) if keys is not None else None,
            compile_kwargs={"render_postcompile": True},
        )
        binds = compiled.binds

        def processor(name: str) -> Processor | None:
            # An expanded IN parameter ``ids_1_2`` takes the type of its ``ids_1``.
            bind = binds.get(name)
            if bind is None:
                bind = binds.get(name.rpartition("_")[0])
            if bind is None:
                return None
            result: Processor | None = bind.type.dialect_impl(dialect).bind_processor(dialect)
            return result

        names = list(compiled.positiontup or ())
        columns = _result_columns(clause)
        record = results = None
        if columns is not None:
            record = _record_type(tuple(column.key for column in columns))
            found = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns]
            results = tuple(found) if any(found) else None
        return cls(
            sql=compiled.string,
            params=tuple((name, processor(name)) for name in names),
            bound={
                name: value
                for name, value in compiled.params.items()
                if name in names and ((bind := binds.get(name)) is None or not bind.required)
            },
            record=record,
            results=results,
        )

    def args(self, given: Mapping[str, Any] | None) -> list[Any]:
        """The positional arguments for ``given`` parameters."""
        values = ({**self.bound, **given} if given else self.bound) if self.bound else given or {}
        try:
            args = list(self._take(values))
        except KeyError as missing:
            raise ValueError(f"no value for parameter {missing} of: {self.sql}") from None
        for i, process in self._bind:
            value = args[i]
            if value is not None:
                args[i] = process(value)
        return args

    def rows(self, raw: Iterable[Iterable[Any]]) -> list[Record]:
        """Driver rows (tuples, asyncpg records) as :class:`Record` rows, values processed."""
        assert self.record is not None
        make = self.record
        if not self._convert:
            return [make(row) for row in raw]
        rows = []
        for row in raw:
            values = list(row)
            for i, process in self._convert:
                value = values[i]
                if value is not None:
                    values[i] = process(value)
            rows.append(make(values))
        return rows


def _is_constant(bind: BindParameter[Any]) -> bool:
    """An ``int`` or ``bool`` SQLAlchemy bound under a name of its own making (see above)."""
    return (
        isinstance(bind.key, _anonymous_label)
        and not bind.required
        and not bind.expanding
        and bind.callable is None
        and type(bind.value) in (int, bool)
    )


_CONSTANTS_COMPILERS: dict[type[SQLCompiler], type[SQLCompiler]] = {}


def _constants_compiler(base: type[SQLCompiler]) -> type[SQLCompiler]:
    """``base`` (a dialect's statement compiler), rendering constants as literals."""
    made = _CONSTANTS_COMPILERS.get(base)
    if made is None:

        def visit_bindparam(self: SQLCompiler, bindparam: BindParameter[Any], **kw: Any) -> str:
            if _is_constant(bindparam):
                kw["literal_binds"] = True
            result: str = base.visit_bindparam(self, bindparam, **kw)  # type: ignore[no-untyped-call]
            return result

        made = type(f"Constants{base.__name__}", (base,), {"visit_bindparam": visit_bindparam})
        _CONSTANTS_COMPILERS[base] = made
    return made


def getter(names: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """The values at ``names`` (keys of a mapping, positions of a row) as a tuple, in one C call
    (``itemgetter`` answers a bare value for one name and refuses none)."""
    if len(names) > 1:
        return itemgetter(*names)
    if names:
        only = names[0]
        return lambda values: (values[only],)
    return lambda values: ()


def _processors(found: Iterable[Processor | None]) -> tuple[tuple[int, Processor], ...]:
    return tuple((i, process) for i, process in enumerate(found) if process is not None)


class Statement:
    """A statement built once (at import); compiled once per dialect, on first use."""

    __slots__ = ("_plans", "clause")

    def __init__(self, clause: Executable) -> None:
        self.clause = clause
        self._plans: dict[str, CompiledSql] = {}

    def plan(self, dialect: Dialect) -> CompiledSql:
        plan = self._plans.get(dialect.name)
        if plan is None:
            plan = CompiledSql.compile(self.clause, dialect, constants=True)
            self._plans[dialect.name] = plan
        return plan


def plan_for(
    statement: Statement | Executable, dialect: Dialect, params: Mapping[str, Any] | None
) -> CompiledSql:
    if isinstance(statement, Statement):
        return statement.plan(dialect)
    return CompiledSql.compile(statement, dialect, params.keys() if params else None)


Params = Mapping[str, Any] | None
T = TypeVar("T")


class Buffered:
    """A statement's whole result, fetched where it ran: rows and ``rowcount``."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Record], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Record]:
        return iter(self._rows)

    def all(self) -> list[Record]:
        return self._rows

    def one_or_none(self) -> Record | None:
        return only(self._rows)

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._rows]


def only(rows: list[Record]) -> Record | None:
    """The one row of ``rows``, or None; more than one is an error."""
    if len(rows) > 1:
        raise MultipleResultsFound("more than one row where one was expected")
    return rows[0] if rows else None


class Conn:
    """A transaction's connection: ``execute`` is the backend's, the others come from it."""

    __slots__ = ()

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        raise NotImplementedError

    async def scalar(self, statement: Statement | Executable, params: Params = None) -> Any:
        return (await self.execute(statement, params)).scalar()

    async def scalars(self, statement: Statement | Executable, params: Params = None) -> list[Any]:
        return (await self.execute(statement, params)).scalars()

    async def one(self, statement: Statement | Executable, params: Params, key: str) -> Record:
        """The one row ``statement`` finds; ``KeyError(key)`` when there is none."""
        row = (await self.execute(statement, params)).one_or_none()
        if row is None:
            raise KeyError(key)
        return row

    async def maybe(
        self, statement: Statement | Executable, params: Params, build: Callable[[Record], T]
    ) -> T | None:
        """The one row ``statement`` finds, built; None when there is none."""
        row = (await self.execute(statement, params)).one_or_none()
        return build(row) if row is not None else None


class Statements:
    """The base of each aggregate's statements, a mixin of :class:`~turnqueue.store.tx.SqlTx`:
    the transaction's connection, and the sessions whose queue status it changed (``_touched``,
    see ``SqlTx.changed_queues``)."""

    _conn: Conn
    _touched: dict[str, None]
