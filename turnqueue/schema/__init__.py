"""Strawberry types of the GraphQL contract (SPEC §7): types only, no root resolvers, no engine."""

from turnqueue.schema import enums as enums  # registers the domain enums before any type uses one
