"""turnqueue: a GraphQL backend for AI-agent work UIs (sessions, turns, a durable auto-run queue
and backend-owned cancellation progress). The composition root is :func:`turnqueue.app.create_app`.
"""

__version__ = "0.1.0"
