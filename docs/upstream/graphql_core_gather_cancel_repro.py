"""graphql-core 3.3: a field error that cancels its siblings cancels a DataLoader future that
fields elsewhere in the operation share; they get CancelledError and the whole execution fails."""

import asyncio

from graphql import build_schema, graphql
from strawberry.dataloader import DataLoader

schema = build_schema("type Query { a: S b: S } type S { shared: Int fails: Int! }")


async def main() -> None:
    async def load(keys: list[int]) -> list[int]:
        await asyncio.sleep(0.01)  # a database read
        return keys

    loader = DataLoader(load_fn=load)

    class S:
        async def shared(self, info: object) -> int:
            return await loader.load(1)

        async def fails(self, info: object) -> int:
            raise ValueError("bad argument")  # non-null: the error reaches S

    root = {"a": S(), "b": S()}
    result = await graphql(schema, "{ a { shared } b { shared fails } }", root)
    print(result)  # expected: data {"a": {"shared": 1}, "b": null} and one error


asyncio.run(main())
