"""graphql-core 3.3.2 (Python 3.11): a field error that nulls an object cancels the tasks of its
sub-fields before they have started, and the resolver coroutines they were handed are dropped:
"RuntimeWarning: coroutine '…' was never awaited" (one per dropped coroutine)."""

import asyncio
import gc
import warnings

from graphql import build_schema, graphql

schema = build_schema("type Query { node: Node } type Node { value: Int node: Node fails: Int! }")


class Node:
    async def value(self, info: object) -> int:
        return 1

    async def node(self, info: object) -> "Node":
        return Node()

    async def fails(self, info: object) -> int:
        raise ValueError("refused")  # non-null: the error nulls the top `node`


async def main() -> None:
    query = "{ node { fails node { value node { value node { value } } } } }"
    result = await graphql(schema, query, {"node": lambda info: Node()})
    print(result)  # data {"node": None}, one error at ["node", "fails"]: as expected


warnings.simplefilter("always")
asyncio.run(main())
gc.collect()  # expected: no warning; got: "coroutine 'Node.value' was never awaited", …
