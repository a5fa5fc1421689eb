// The official openai npm SDK, unchanged, calling embeddings.create against a tierserve
// worker or the router (driven by tests/e2e/test_llm_embeddings.py).
//
// Usage: node tests/llm/openai_embed.mjs BASE_URL MODEL TEXTS_JSON [API_KEY]
// Prints one JSON object: each call's vectors (the SDK asks for base64 by default and decodes
// it itself; "float" is asked for once too), usage, and the error a chat model's name gets.
import OpenAI, { APIError } from "openai";

const [baseURL, model, textsJson, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: apiKey ?? "unused", maxRetries: 0, timeout: 60_000 });
const texts = JSON.parse(textsJson);
const out = {};

const one = await client.embeddings.create({ model, input: texts[0] });
out.one = { object: one.object, model: one.model, usage: one.usage, data: one.data };
const many = await client.embeddings.create({ model, input: texts });
out.many = { usage: many.usage, data: many.data };
const floats = await client.embeddings.create({ model, input: texts, encoding_format: "float" });
out.floats = { data: floats.data };
try {
  await client.embeddings.create({ model, input: "" });
  out.empty = "accepted";
} catch (e) {
  out.empty = e instanceof APIError ? { status: e.status, param: e.param, type: e.type } : String(e);
}
console.log(JSON.stringify(out));
