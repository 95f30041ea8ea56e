// GraphiQL 5 bundled with everything it loads (React, Monaco and its workers, the explorer
// plugin), so that GET /graphql works without internet access (SPEC G2).
import "graphiql/setup-workers/vite";
import "graphiql/style.css";
import "@graphiql/plugin-explorer/style.css";

import { explorerPlugin } from "@graphiql/plugin-explorer";
import { GraphiQL } from "graphiql";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";

import { defaultHeaders, readConfig } from "./config";
// The first tab's operations: the current API (tasksConnection), checked by `turnqueue schema
// check --strict` in tests/test_contract.py.
import DEFAULT_QUERY from "./default-query.graphql?raw";
import { turnqueueFetcher } from "./fetcher";
import { RefetchSchemaOnAuthorization } from "./refetch";

const config = readConfig();
const url = new URL("/graphql", window.location.href).toString();
const headers = defaultHeaders(config);
const plugins = [explorerPlugin()];

const root = document.getElementById("graphiql");
if (root === null) throw new Error("#graphiql is missing from the page");
createRoot(root).render(
  <StrictMode>
    <GraphiQL
      fetcher={turnqueueFetcher(url)}
      plugins={plugins}
      defaultQuery={DEFAULT_QUERY}
      defaultHeaders={headers}
      initialHeaders={headers}
      defaultEditorToolsVisibility={config.authRequired ? "headers" : false}
      isHeadersEditorEnabled
      inputValueDeprecation
    >
      {config.authRequired ? <RefetchSchemaOnAuthorization /> : null}
    </GraphiQL>
  </StrictMode>,
);
