// The official openai npm SDK, unchanged, reading tierserve's log probabilities
// (driven by tests/e2e/test_llm_logprobs.py, which starts the worker).
//
// Usage: node tests/llm/openai_logprobs.mjs BASE_URL MODEL
// Prints one JSON object with the logprobs each call returned, as the SDK typed them.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
// maxRetries 0: a failed request must fail the test, never be re-sent behind its back
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const out = {};
const messages = [{ role: "user", content: "Hello" }];

const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0,
                                                     logprobs: true, top_logprobs: 5 });
out.chat = chat.choices[0].logprobs.content.map((e) => ({
  token: e.token, logprob: e.logprob, bytes: e.bytes,
  top: e.top_logprobs.map((t) => [t.token, t.logprob, t.bytes]),
}));

const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0,
                                                       logprobs: true, top_logprobs: 5, stream: true });
out.chat_stream = [];
for await (const chunk of stream) {
  const c = chunk.choices[0];
  if (c?.logprobs?.content) for (const e of c.logprobs.content) out.chat_stream.push([e.token, e.logprob]);
}

const cmpl = await client.completions.create({ model, prompt: "Hello world", max_tokens: 8, temperature: 0,
                                               logprobs: 3 });
const lp = cmpl.choices[0].logprobs;
out.completion = { tokens: lp.tokens, token_logprobs: lp.token_logprobs, top_logprobs: lp.top_logprobs,
                   text_offset: lp.text_offset };
console.log(JSON.stringify(out));
