// The official openai npm SDK, unchanged, against each error a tierserve worker's /v1 API
// answers: which exception class the SDK raises (it picks the class from the status alone) and
// the type, code and param it reads from the error object. Driven by tests/e2e/test_llm_api.py.
//
// Usage: node tests/llm/openai_sdk_errors.mjs BASE_URL AUTH_BASE_URL TOKEN MODEL
//   BASE_URL: a worker without a token; AUTH_BASE_URL: one that needs TOKEN (both .../v1)
// Prints one JSON object, case -> {class, status, type, code, param} (or "ok").
import OpenAI, { APIError } from "openai";

const [baseURL, authURL, token, model] = process.argv.slice(2);
// maxRetries 0: each error must reach the test as it was answered, never be retried
const opts = { maxRetries: 0, timeout: 60_000 };
const client = new OpenAI({ baseURL, apiKey: "unused", ...opts });
const out = {};

async function expectError(name, call) {
  try {
    await call();
    out[name] = "ok";
  } catch (e) {
    if (!(e instanceof APIError)) throw e;
    out[name] = { class: e.constructor.name, status: e.status ?? null, type: e.type ?? null,
                  code: e.code ?? null, param: e.param ?? null };
  }
}

await expectError("bad_request", () =>
  client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], n: 9 }));
await expectError("context", () =>
  client.completions.create({ model, prompt: "hello ".repeat(2100), max_tokens: 2 }));
await expectError("auth", () =>
  new OpenAI({ baseURL: authURL, apiKey: "wrong-" + token, ...opts }).models.list());
await expectError("auth_ok", () => new OpenAI({ baseURL: authURL, apiKey: token, ...opts }).models.list());
await expectError("not_found", () =>
  client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 2 }));
await expectError("method", () => client.get("/completions"));
await expectError("timeout", () =>
  client.completions.create({ model, prompt: "Hello world", max_tokens: 2000 },
                            { headers: { "X-Request-Timeout-Ms": "1" } }));
// a deadline after the stream started: the error event, which the SDK raises while iterating
await expectError("stream_timeout", async () => {
  const s = await client.completions.create({ model, prompt: "Hello world", max_tokens: 2000, stream: true },
                                            { headers: { "X-Request-Timeout-Ms": "500" } });
  for await (const chunk of s) void chunk;
});

console.log(JSON.stringify(out));
