import type { CodegenConfig } from "@graphql-codegen/cli";

// `npm run codegen`: types and typed documents for every graphql(`…`) call in src/, from the
// repository's schema.graphql (`./tq export-schema` writes it). The output, src/gql/, is
// committed; tests/frontend/test_web_codegen.py fails when it is stale. CODEGEN_OUT (a directory,
// ending in /) writes it elsewhere and CODEGEN_SCHEMA reads another schema: that test compares a
// fresh run with the committed files.
const out = process.env.CODEGEN_OUT ?? "src/gql/";

const config: CodegenConfig = {
  schema: process.env.CODEGEN_SCHEMA ?? "../../schema.graphql",
  documents: ["src/**/*.ts", "!src/gql/**"],
  ignoreNoDocuments: false,
  generates: {
    [out]: {
      preset: "client",
      presetConfig: {
        // The page reads fragment fields directly (no useFragment() unmasking).
        fragmentMasking: false,
      },
      config: {
        // TypedDocumentString: the document text with its types; no graphql AST in the bundle.
        documentMode: "string",
        enumsAsTypes: true,
        // Nullable fields as `T | null` (never left out): what the server sends.
        avoidOptionals: { field: true },
        // Only the types the documents use, without the optional __typename on each.
        onlyOperationTypes: true,
        skipTypename: true,
        useTypeImports: true,
        scalars: {
          ID: { input: "string", output: "string" },
          Revision: { input: "number", output: "number" },
          DateTime: { input: "string", output: "string" },
        },
      },
    },
  },
};

export default config;
