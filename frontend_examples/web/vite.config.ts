import { defineConfig } from "vitest/config";

// `npm run dev` serves the page on :5173 and forwards /graphql to a local `turnqueue serve`.
// Start that with `--allowed-origins http://localhost:5173` so it accepts the dev page's WebSocket.
export default defineConfig({
  server: {
    proxy: { "/graphql": { target: "http://127.0.0.1:8000", ws: true } },
  },
  build: { outDir: "dist", emptyOutDir: true },
  test: { include: ["src/**/*.test.ts"] },
});
