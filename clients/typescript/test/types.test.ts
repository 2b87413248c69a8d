// The checked-in types (src/generated/openapi.ts) match the broker's OpenAPI
// document (host/src/openapi.json): regenerated into a temporary file and compared.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

test("the generated API types are not stale", async () => {
  const scratch = await mkdtemp(join(tmpdir(), "lockbroker-types-"));
  try {
    const fresh = join(scratch, "openapi.ts");
    await promisify(execFile)(process.execPath, [join(root, "scripts/generate.mjs"), fresh], { cwd: root });
    const [expected, actual] = await Promise.all([readFile(fresh, "utf8"), readFile(join(root, "src/generated/openapi.ts"), "utf8")]);
    assert.ok(
      expected === actual,
      "src/generated/openapi.ts differs from what host/src/openapi.json generates: run `npm run generate` in clients/typescript",
    );
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
});
