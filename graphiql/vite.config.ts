import { defineConfig } from "vite";

// The page is served by `turnqueue serve`: index.html at GET /graphql (turnqueue/graphiql.py
// injects its config), every other built file under /graphiql/ (hence `base`).
export default defineConfig({
  base: "/graphiql/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // Monaco is large, and it is all served from loopback or the same origin: no need to split.
    chunkSizeWarningLimit: 8000,
    rollupOptions: {
      onwarn(warning, warn) {
        // React libraries' "use client" markers mean nothing in a client-only bundle.
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return;
        warn(warning);
      },
    },
  },
});
