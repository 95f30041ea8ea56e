"""A terminal client that follows one turnqueue session.

Run it with ``python -m frontend_examples.python_client --session ID``.
"""

from frontend_examples.python_client.client import Follower, Revisions, main, run

__all__ = ["Follower", "Revisions", "main", "run"]
