"""Thin adapters from the GraphQL roots to the engine (queries, mutations, subscriptions)."""
