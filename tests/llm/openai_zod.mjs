// The official openai npm SDK's zod helper, unchanged: a support-ticket type written in zod,
// sent as `response_format` by zodResponseFormat, answered by tierserve and read back by the
// SDK's own parse(), which JSON-parses the content and checks it with the zod schema (it throws
// on an answer that does not fit, or one cut short). Driven by tests/e2e/test_llm_structured.py.
//
// Usage: node tests/llm/openai_zod.mjs BASE_URL MODEL SEED...
// Prints one JSON list: per seed {finish, parsed} from parse(), and {streamed} from the stream
// helper's finalChatCompletion() for the first seed; or {error} when the SDK threw.
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const [baseURL, model, ...seeds] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });

const Ticket = z.object({
  intent: z.enum(["order_status", "refund", "handoff", "other"]),
  order_id: z.number().int().min(1).max(99999999).nullable(),
  reply: z.string().max(40),
  tags: z.array(z.string().max(12)).max(3),
  escalate: z.boolean(),
});

const req = (seed) => ({
  model,
  messages: [{ role: "user", content: "Where is my order 42? It is late." }],
  temperature: 1.5,
  seed: Number(seed),
  max_tokens: 300,
  response_format: zodResponseFormat(Ticket, "ticket"),
});

const out = [];
for (const seed of seeds) {
  try {
    const r = await client.chat.completions.parse(req(seed));
    const c = r.choices[0];
    out.push({ finish: c.finish_reason, parsed: c.message.parsed, content: c.message.content });
  } catch (e) {
    out.push({ error: `${e.constructor.name}: ${e.message}` });
  }
}
try {
  const s = client.chat.completions.stream(req(seeds[0]));
  const fin = await s.finalChatCompletion();
  out[0].streamed = fin.choices[0].message.parsed;
} catch (e) {
  out[0].streamed = { error: `${e.constructor.name}: ${e.message}` };
}
console.log(JSON.stringify(out));
