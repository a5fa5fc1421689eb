// The official openai npm SDK, unchanged, against a tierserve worker's /v1 API
// (driven by tests/e2e/test_llm_api.py, which starts the worker).
//
// Usage: node tests/llm/openai_sdk.mjs BASE_URL MODEL
//   BASE_URL: http://127.0.0.1:PORT/v1
// Prints one JSON object with what each call returned; exits non-zero on any surprise.
import OpenAI, { APIError } from "openai";

const [baseURL, model] = process.argv.slice(2);
// maxRetries 0: a failed request must fail the test, never be re-sent behind its back
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const out = {};

const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello" }],
  max_tokens: 8,
  temperature: 0,
});
out.chat = {
  object: chat.object,
  role: chat.choices[0].message.role,
  content: chat.choices[0].message.content,
  finish_reason: chat.choices[0].finish_reason,
  usage: chat.usage,
};

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello" }],
  max_tokens: 8,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
let content = "";
let role = null;
let finish = null;
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) role = c.delta.role;
  if (c.delta.content) content += c.delta.content;
  if (c.finish_reason) finish = c.finish_reason;
}
out.chat_stream = { role, content, finish_reason: finish, usage, chunks };

const cmpl = await client.completions.create({ model, prompt: "Hello world", max_tokens: 8, temperature: 0 });
out.completion = { object: cmpl.object, text: cmpl.choices[0].text, finish_reason: cmpl.choices[0].finish_reason, usage: cmpl.usage };

const cstream = await client.completions.create({ model, prompt: "Hello world", max_tokens: 8, temperature: 0, stream: true });
let text = "";
for await (const chunk of cstream) text += chunk.choices[0]?.text ?? "";
out.completion_stream = { text };

try {
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 2 });
  out.error = null;
} catch (e) {
  out.error = { is_api_error: e instanceof APIError, status: e.status, code: e.code ?? null, type: e.type ?? null };
}
try {
  await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], n: 9 });
  out.error_n = null;
} catch (e) {
  out.error_n = { is_api_error: e instanceof APIError, status: e.status, param: e.param ?? null };
}

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

console.log(JSON.stringify(out));
