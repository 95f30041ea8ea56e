"""Strawberry types of the GraphQL contract (SPEC §7): types only, no root resolvers, no engine."""
