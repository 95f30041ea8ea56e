"""Serve the built example page (``frontend_examples/web``, SPEC U2) at ``/`` when it exists.

``web_ui_routes()`` answers a Starlette static mount of the built page, or no routes at all when
it has not been built (``npm ci && npm run build`` in ``frontend_examples/web``). The location is
``TURNQUEUE_WEB_DIST`` when set, else ``frontend_examples/web/dist`` in the checkout this package
was imported from. Add the routes after ``/graphql`` and ``/healthz``: a mount at ``/`` matches
every path, so it must come last.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

#: Where a checkout keeps the built page, relative to the repository root.
DIST_IN_CHECKOUT = Path("frontend_examples", "web", "dist")
ENV_VAR = "TURNQUEUE_WEB_DIST"


def checkout_dist(env_var: str, in_checkout: Path) -> Path:
    """``env_var``'s directory when set, else ``in_checkout`` in this package's checkout."""
    configured = os.environ.get(env_var, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path(__file__).resolve().parents[2] / in_checkout


def default_dist() -> Path:
    """``TURNQUEUE_WEB_DIST``, else the checkout's ``frontend_examples/web/dist``."""
    return checkout_dist(ENV_VAR, DIST_IN_CHECKOUT)


def web_ui_routes(dist: Path | None = None) -> list[BaseRoute]:
    """A mount of the built page at ``/`` (with ``index.html`` for ``/``), or ``[]`` if unbuilt."""
    directory = dist if dist is not None else default_dist()
    if not (directory / "index.html").is_file():
        return []
    return [Mount("/", app=StaticFiles(directory=directory, html=True), name="web-ui")]
