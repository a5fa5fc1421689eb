// The property test's judge (ctest grammar_property): every output grammar_prop wrote must
// parse as JSON and validate against its schema with npm's ajv (JSON Schema 2020-12, for
// prefixItems; ajv-formats for date, date-time, uuid, email).
//   node validate.mjs OUT.jsonl NODE_PACKAGES_DIR (tests/llm, where setup.sh installs ajv)
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

const require = createRequire(join(resolve(process.argv[3]), "package.json"));
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const lines = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l);
let bad = 0;
const byVocab = {};
for (const l of lines) {
  const c = JSON.parse(l);
  byVocab[c.vocab] = (byVocab[c.vocab] || 0) + 1;
  let doc;
  try {
    doc = JSON.parse(c.out);
  } catch (e) {
    bad++;
    console.error(`FAIL not JSON (${e.message}): ${c.out}\n  schema ${JSON.stringify(c.schema)}`);
    continue;
  }
  const validate = ajv.compile(c.schema);
  if (!validate(doc)) {
    bad++;
    console.error(`FAIL invalid: ${c.out}\n  schema ${JSON.stringify(c.schema)}\n  ${ajv.errorsText(validate.errors)}`);
  }
}
console.log(`validate.mjs: ${lines.length} outputs checked with ajv (${JSON.stringify(byVocab)}), ${bad} invalid`);
process.exit(bad || !lines.length ? 1 : 0);
