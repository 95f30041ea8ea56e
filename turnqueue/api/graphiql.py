"""GraphiQL from the server itself, so that it works without internet access (SPEC G2).

``graphiql/`` in the checkout bundles GraphiQL 5 (React, Monaco and its workers, the explorer
plugin, graphql-ws) with Vite (``npm ci && npm run build`` there; ``./tq serve`` does it once when
Node.js is installed). The view answers a browser's ``GET /graphql`` with :func:`page_html`
(``render_graphql_ide``); :func:`graphiql_routes` serves the rest of the build under
``/graphiql/assets/``. The location is ``TURNQUEUE_GRAPHIQL_DIST`` when set, else
``graphiql/dist`` in the checkout this package was imported from.

When it has not been built, the view keeps Strawberry's own GraphiQL page — which loads React and
GraphiQL from a CDN, so it needs internet access — and :func:`page_html` logs a warning saying so.

The page learns only whether the server wants a token (a JSON ``<script>`` injected before
``</head>``): with tokens on, its header editor starts with ``{"Authorization": "Bearer <token>"}``
to fill in. No token ever goes into the page.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from turnqueue.api.webui import checkout_dist

log = logging.getLogger(__name__)

#: Where a checkout keeps the built page, relative to the repository root.
DIST_IN_CHECKOUT = Path("graphiql", "dist")
ENV_VAR = "TURNQUEUE_GRAPHIQL_DIST"
#: The URL of the built assets (Vite's ``base`` in graphiql/vite.config.ts, plus ``assets``).
ASSETS_PATH = "/graphiql/assets"
#: The id of the injected config element (graphiql/src/config.ts reads it).
CONFIG_ELEMENT_ID = "turnqueue-graphiql-config"


def page_html(*, auth_required: bool, dist: Path | None = None) -> str | None:
    """The built GraphiQL page with its config injected, or None (and a warning) if unbuilt."""
    directory = dist if dist is not None else checkout_dist(ENV_VAR, DIST_IN_CHECKOUT)
    index = directory / "index.html"
    try:
        html = index.read_text(encoding="utf-8")
    except OSError:
        log.warning(
            "GraphiQL is not built (%s is missing): GET /graphql serves Strawberry's GraphiQL "
            "page, which loads React and GraphiQL from a CDN and so needs internet access. "
            "Build it with `npm ci && npm run build` in graphiql/ (`./tq serve` does when "
            "Node.js is installed).",
            index,
        )
        return None
    # "<" escaped: the JSON can never close the <script> element it sits in.
    config = json.dumps({"authRequired": auth_required}).replace("<", "\\u003c")
    element = f'<script type="application/json" id="{CONFIG_ELEMENT_ID}">{config}</script>'
    head_end = html.find("</head>")
    if head_end < 0:
        return element + html
    return html[:head_end] + element + html[head_end:]


def graphiql_routes(dist: Path | None = None) -> list[BaseRoute]:
    """The built assets under ``/graphiql/assets/``, or ``[]`` when GraphiQL has not been built.

    ``index.html`` is not among them: the view serves it at ``GET /graphql``, with its config.
    """
    directory = dist if dist is not None else checkout_dist(ENV_VAR, DIST_IN_CHECKOUT)
    if not (directory / "index.html").is_file() or not (directory / "assets").is_dir():
        return []
    assets = StaticFiles(directory=directory / "assets")
    return [Mount(ASSETS_PATH, app=assets, name="graphiql-assets")]
