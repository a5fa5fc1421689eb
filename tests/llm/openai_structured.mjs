// The official openai npm SDK, unchanged, asking tierserve for structured output (driven by
// tests/e2e/test_llm_structured.py, which starts the worker and the router).
//
// Usage: node tests/llm/openai_structured.mjs BASE_URL < CASES.json
// CASES: [{"req": {...}, "stream": bool, "schema": {...} | null}]. For each case the SDK's
// create(req) (and, with stream, the same request streamed: its deltas joined per choice);
// every choice's content is parsed and, with a schema, validated by ajv (JSON Schema 2020-12
// with ajv-formats, as tests/grammar/validate.mjs). Prints one JSON list: per case
// {choices: [{content, finish, valid, errors, calls}], streamed: [content...], usage} or, for a
// refusal, {status, param, message}. calls: each tool call's {name, arguments, valid, errors},
// its arguments validated against the parameters of the request's tool of that name.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const require = createRequire(import.meta.url);
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

const [baseURL] = process.argv.slice(2);
// maxRetries 0: a failed request must fail the test, never be re-sent behind its back
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const cases = JSON.parse(readFileSync(0, "utf8"));

function check(content, schema) {
  let doc;
  try {
    doc = JSON.parse(content);
  } catch (e) {
    return { valid: false, errors: `not JSON: ${e.message}` };
  }
  if (schema === false) return { valid: false, errors: "no such tool" };
  if (!schema) return { valid: doc !== null && typeof doc === "object" && !Array.isArray(doc), errors: "" };
  const validate = ajv.compile(schema);
  const ok = validate(doc);
  return { valid: ok, errors: ok ? "" : ajv.errorsText(validate.errors) };
}

const out = [];
for (const c of cases) {
  try {
    const r = await client.chat.completions.create(c.req);
    const res = {
      choices: r.choices.map((ch) => ({ index: ch.index, content: ch.message.content, finish: ch.finish_reason,
                                        calls: (ch.message.tool_calls || []).map((tc) => ({
                                          name: tc.function.name, arguments: tc.function.arguments,
                                          ...check(tc.function.arguments, (c.req.tools || []).find(
                                            (t) => t.function.name === tc.function.name)?.function.parameters ?? false),
                                        })),
                                        ...(c.check === false ? {} : check(ch.message.content, c.schema)) })),
      usage: r.usage,
    };
    if (c.stream) {
      const s = await client.chat.completions.create({ ...c.req, stream: true });
      const text = [];
      for await (const chunk of s)
        for (const ch of chunk.choices) text[ch.index] = (text[ch.index] || "") + (ch.delta?.content || "");
      res.streamed = text;
    }
    out.push(res);
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    out.push({ status: e.status, param: e.param ?? null, message: e.message });
  }
}
console.log(JSON.stringify(out));
