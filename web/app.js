// tierserve dashboard: one page for both programs. On tierrouter it polls /admin/status (pools,
// one Inference card per backend, the failover timeline); on a tierserve worker it polls
// /v2/status and /metrics (its own Inference card, and an LLM card per LLM it serves). Polls
// once a second, never reloads.
// Everything from the servers is put into the page as text (textContent), never as markup.
'use strict';

const POLL_MS = 1000;
const TOKEN_KEY = 'tierserve.dashboard.token';
// The chip names (src/common/tier.c tier_chip_name); a worker's /v2/status also says tier_label.
const CHIP = { tensorrt: 'TensorRT', cuda: 'CUDA', cpu: 'CPU', 'cpu-fallback': 'CPU (fallback)' };
const CHIP_CLASS = { tensorrt: 'chip-trt', cuda: 'chip-cuda', cpu: 'chip-cpu', 'cpu-fallback': 'chip-fallback' };

let program = null;
let token = sessionStorage.getItem(TOKEN_KEY) || '';
let timer = null;

function $(id) { return document.getElementById(id); }

// el('div', {class: 'x', 'data-testid': 'y'}, child, 'text', ...)
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    e.appendChild(typeof k === 'string' || typeof k === 'number' ? document.createTextNode(String(k)) : k);
  }
  return e;
}

function fmt(v, digits = 1, unit = '') {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  return (Math.round(v * 10 ** digits) / 10 ** digits).toString() + unit;
}
function pct(v) { return v === null || v === undefined ? '—' : fmt(v * 100, 1, '%'); }

class AuthError extends Error {}

async function fetchOk(path, accept) {
  const headers = { Accept: accept };
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(path, { headers, cache: 'no-store', credentials: 'omit', redirect: 'error' });
  if (r.status === 401) {
    let msg = 'this server needs a bearer token';
    try { msg = (await r.json()).error || msg; } catch (_) { /* keep the default */ }
    throw new AuthError(msg);
  }
  if (!r.ok) {
    let msg = 'HTTP ' + r.status;
    try { msg += ': ' + ((await r.json()).error || ''); } catch (_) { /* not JSON */ }
    throw new Error(path + ' answered ' + msg);
  }
  return r;
}
async function getJSON(path) { return (await fetchOk(path, 'application/json')).json(); }
async function getText(path) { return (await fetchOk(path, 'text/plain')).text(); }

function setConn(ok, text) {
  const c = $('conn');
  c.textContent = text;
  c.className = 'conn ' + (ok ? 'conn-ok' : 'conn-bad');
  if (ok) $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
}

function showLogin(why) {
  $('login-why').textContent = why + (token ? ' (the token given was refused)' : '');
  $('login').hidden = false;
  $('main').hidden = true;
  setConn(false, 'needs a token');
  $('token').focus();
}

function onLogin(ev) {
  ev.preventDefault();
  token = $('token').value.trim();
  $('token').value = '';
  sessionStorage.setItem(TOKEN_KEY, token);
  $('login').hidden = true;
  $('main').hidden = false;
  schedule(0);
}

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(tick, ms);
}

async function tick() {
  try {
    if (program === 'tierrouter') {
      renderRouter(await getJSON('/admin/status'));
    } else {
      const st = await getJSON('/v2/status');
      let metrics = null;
      try { metrics = await getText('/metrics'); } catch (e) { if (e instanceof AuthError) throw e; }
      renderWorker(st, metrics);
    }
    setConn(true, 'live');
  } catch (e) {
    if (e instanceof AuthError) { showLogin(e.message); return; } // polling resumes after the form
    setConn(false, 'no answer: ' + e.message);
  }
  schedule(POLL_MS);
}

// ---- latency and rates from a worker's Prometheus text ---------------------------------------

// The labels of one series, `model="a",le="0.5"` -> {model: 'a', le: '0.5'} (escapes undone).
function parseLabels(text) {
  const out = {};
  const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(text)) !== null) out[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
  return out;
}

// Every sample of one metric family: [{labels, value}].
function samples(text, name) {
  const out = [];
  if (!text) return out;
  const re = new RegExp('^' + name + '(?:\\{(.*)\\})? ([0-9.eE+-]+|NaN)$', 'gm');
  let m;
  while ((m = re.exec(text)) !== null) out.push({ labels: parseLabels(m[1] || ''), value: Number(m[2]) });
  return out;
}

// p50/p95/p99 (ms) of a histogram over the series keep(labels) accepts, since the worker started
// (linear inside a bucket, as Prometheus' histogram_quantile does). null when nothing was seen.
function histQuantiles(text, name, keep) {
  const buckets = new Map();
  for (const { labels, value } of samples(text, name + '_bucket')) {
    if (!keep(labels) || labels.le === undefined) continue;
    const le = labels.le === '+Inf' ? Infinity : Number(labels.le);
    buckets.set(le, (buckets.get(le) || 0) + value);
  }
  const bs = [...buckets.entries()].sort((a, b) => a[0] - b[0]);
  const total = bs.length ? bs[bs.length - 1][1] : 0;
  if (!total) return null;
  const q = (p) => {
    const rank = p * total;
    let prevLe = 0, prevC = 0;
    for (const [le, c] of bs) {
      if (c >= rank) {
        if (le === Infinity) return prevLe * 1e3;
        return (prevLe + (le - prevLe) * (c === prevC ? 0 : (rank - prevC) / (c - prevC))) * 1e3;
      }
      prevLe = le; prevC = c;
    }
    return null;
  };
  return { p50: q(0.5), p95: q(0.95), p99: q(0.99), n: total };
}

// The Inference card's latency: tierserve_request_duration_seconds over every model but the
// LLMs (a generation lasts seconds and would drown the inference requests' latency).
function workerQuantiles(text, llmKeys) {
  if (!text) return null;
  return histQuantiles(text, 'tierserve_request_duration_seconds', (l) => !llmKeys.has(l.model + '\n' + l.version));
}

// A rate per second from a counter the page reads at each poll: over the polls of the last
// RATE_WINDOW_S (its own clock), null until two polls lie a second apart. A counter that went
// down (the server restarted) starts over.
const RATE_WINDOW_S = 10;
const rateSeen = new Map();
function rate(key, value) {
  const now = performance.now() / 1e3;
  let s = rateSeen.get(key) || [];
  if (s.length && value < s[s.length - 1][1]) s = [];
  s.push([now, value]);
  while (s.length > 2 && now - s[1][0] >= RATE_WINDOW_S) s.shift();
  rateSeen.set(key, s);
  const dt = now - s[0][0];
  return dt >= 1 ? (value - s[0][1]) / dt : null;
}
// The change of a counter over the same window (with rate(), for a ratio of two counters).
function delta(key, value) {
  rate(key, value);
  const s = rateSeen.get(key);
  return s.length >= 2 && s[s.length - 1][0] - s[0][0] >= 1 ? s[s.length - 1][1] - s[0][1] : null;
}

function bytes(v) {
  if (v === null || v === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return fmt(v, i ? 1 : 0, ' ' + units[i]);
}

// ---- the Inference card (a worker's own, or one backend as the router sees it) ---------------

function chipFor(tier, label) {
  const text = label || CHIP[tier] || 'unknown';
  return el('span', { class: 'chip ' + (CHIP_CLASS[tier] || 'chip-unknown'), 'data-testid': 'chip', title: 'tier: ' + tier }, text);
}

// rows: [label, value] or [label, value, data-testid of the value]
function kv(rows) {
  return el('dl', { class: 'kv' }, rows.filter(Boolean).map(([k, v, id]) => [el('dt', {}, k), el('dd', { 'data-testid': id }, v)]));
}

function alerts(list) {
  return list.map(([level, text]) => el('div', { class: 'alert alert-' + level, 'data-testid': 'alert', role: 'alert' }, text));
}

function placementBar(np) {
  const entries = Object.entries(np || {});
  const total = entries.reduce((s, [, n]) => s + n, 0);
  if (!total) return el('span', { class: 'muted' }, 'no placement reported');
  const bar = el('div', { class: 'bar' });
  const legend = [];
  for (const [prov, n] of entries) {
    const seg = el('span', { class: 'seg seg-' + prov.replace(/ExecutionProvider$/, '').toLowerCase(), title: prov + ': ' + n });
    seg.style.width = (100 * n / total).toFixed(1) + '%'; // CSSOM: allowed under the CSP
    bar.appendChild(seg);
    legend.push(prov.replace(/ExecutionProvider$/, '') + ' ' + n + ' (' + Math.round(100 * n / total) + '%)');
  }
  return el('div', {}, bar, el('div', { class: 'muted small' }, legend.join(' · ')));
}

// A model's execution layout (/v2/status models[].layout): what runs (instances of their own, or
// runners sharing one session: layout.shared), where it came from, and
// the figures the load-time measurement chose it from (an LLM's: decode steps at batch 1 and
// at its slots' batch, tokens/s at that batch).
function layoutText(lay) {
  if (!lay) return '—';
  return lay.threads + ' intra-op thread' + (lay.threads === 1 ? '' : 's') +
    (lay.instances > 1 ? ' × ' + lay.instances + (lay.shared ? ' runners sharing one session' : ' instances') : '') +
    ', spinning ' + (lay.spinning ? 'on' : 'off') +
    (lay.pinned ? ', pinned' : '') + ' (' + lay.source + ')';
}
function layoutFigures(lay) {
  if (!lay || !lay.measured || !lay.measured.length) return lay ? 'not measured: ' + lay.note : '';
  return lay.measured.map((c) => (c.chosen ? '▶ ' : '') + c.threads + 't' + (c.instances > 1 ? '×' + c.instances : '') +
    (c.shared ? ' shared' : '') + (c.spinning ? '' : ' nospin') + ': ' + (c.batch
    ? 'step ' + fmt(c.run_us / 1e3, 2, ' ms') + ' at batch 1, ' + fmt(c.batch_us / 1e3, 2, ' ms') + ' at ' + c.batch +
      ' = ' + fmt(c.runs_per_s, 0) + ' tokens/s'
    : 'Run() ' + fmt(c.run_us, 0, ' µs') + ', ' + fmt(c.runs_per_s, 0) + '/s')).join(' · ') +
    ' (' + fmt(lay.search_ms, 0, ' ms') + ')';
}
function layoutCell(lay) {
  return el('td', { class: 'layout small', 'data-testid': 'model-layout', title: lay ? lay.note : 'no layout reported' },
    layoutText(lay), lay ? el('div', { class: 'muted', 'data-testid': 'model-layout-figures' }, layoutFigures(lay)) : null);
}

function workerCard(st, q, addr) {
  const warn = [];
  if (st.gpu_fault) warn.push(['bad', 'GPU FAULT, not live: ' + st.gpu_fault]);
  else if (!st.live) warn.push(['bad', 'NOT LIVE']);
  if (st.degraded) {
    warn.push(['bad', 'DEGRADED: requested ' + st.requested + ', running on ' + st.active_provider +
      ' (tier ' + st.tier + ')']);
    for (const a of st.attempts || []) if (!a.ok) warn.push(['bad', a.provider + ' unavailable: ' + a.reason]);
  }
  if (st.draining) warn.push(['warn', 'draining for shutdown']);
  else if (!st.ready && st.live) warn.push(['warn', 'not ready']);
  const models = (st.models || []).map((m) =>
    el('tr', {},
      el('td', {}, m.name + ' v' + m.version),
      el('td', {}, m.state || (m.ready ? 'READY' : 'UNAVAILABLE')),
      el('td', { class: m.warmed_up ? 'ok' : 'warn' }, m.warmed_up ? 'warmed up (' + fmt(m.warmup_ms, 0, ' ms') + ')'
        : m.warmup_error ? 'warm-up failed: ' + m.warmup_error : 'not warmed up'),
      el('td', {}, String(m.queue_depth ?? '—')),
      el('td', { class: 'placement' }, placementBar(m.node_placement)),
      layoutCell(m.layout)));
  const bad = warn.some(([l]) => l === 'bad');
  return el('article', { class: 'card' + (bad ? ' card-bad' : ''), 'data-testid': 'inference-card', 'data-backend': addr || 'self' },
    el('header', {}, el('h3', {}, 'Inference', addr ? el('span', { class: 'muted' }, ' ' + addr) : null), chipFor(st.tier, st.tier_label)),
    alerts(warn),
    kv([
      ['Requested', st.requested + (st.strict ? ' (strict)' : '')],
      ['Active provider', st.active_provider],
      ['Tier', st.tier + (st.degraded ? ' (degraded)' : '')],
      ['Live / ready', (st.live ? 'live' : 'NOT live') + ' / ' + (st.ready ? 'ready' : 'not ready')],
      ['Queue depth', String(st.queue_depth)],
      ['In flight', String(st.in_flight)],
      ['GPU memory', st.gpu_memory_used_fraction === null ? 'no GPU telemetry' : pct(st.gpu_memory_used_fraction)],
      ['Latency p50/p95/p99', q ? fmt(q.p50) + ' / ' + fmt(q.p95) + ' / ' + fmt(q.p99) + ' ms (' + q.n + ' requests since start)' : '—'],
    ]),
    models.length ? el('table', { class: 'models' },
      el('thead', {}, el('tr', {}, ['Model', 'State', 'Warm-up', 'Queue', 'Node placement', 'Layout'].map((h) => el('th', {}, h)))),
      el('tbody', {}, models)) : el('p', { class: 'muted' }, 'no models'));
}

// Where an LLM's KV cache lives between steps (docs/llm.md "The KV cache"); red when the
// worker says it fell back to the host path. The note is the tooltip.
const KV_LABEL = { device: 'device', 'host-bound': 'host-bound', host: 'host' };
function kvChip(where, note, fallback) {
  const bad = fallback || /fallback/.test(note || '');
  return el('span', { class: 'chip chip-kv ' + (bad ? 'chip-fallback' : 'chip-kv-' + (KV_LABEL[where] ? where : 'unknown')),
    'data-testid': 'kv-chip', title: note || 'no note', 'data-fallback': bad ? 'true' : 'false' },
  'KV ' + (KV_LABEL[where] || 'unknown') + (bad ? ' (fallback)' : ''));
}

function seqMeter(running, limit) {
  const meter = el('div', { class: 'meter' + (limit && running >= limit ? ' hot' : '') });
  const fill = el('span', {});
  fill.style.width = (100 * Math.min(1, limit ? running / limit : 0)).toFixed(1) + '%';
  meter.appendChild(fill);
  return meter;
}

// One LLM a worker serves: sequences against the batch limit, the KV cache's place and size,
// TTFT and inter-token p95 since start, generated tokens per second (from /metrics).
function llmCard(m, metrics) {
  const l = m.llm;
  const mine = (x) => x.model === m.name && x.version === m.version;
  const ttft = metrics ? histQuantiles(metrics, 'tierserve_time_to_first_token_seconds', mine) : null;
  const itl = metrics ? histQuantiles(metrics, 'tierserve_inter_token_latency_seconds', mine) : null;
  const gen = samples(metrics, 'tierserve_generation_tokens_total').find((x) => mine(x.labels));
  const genRate = gen ? rate('gen\n' + m.name + '\n' + m.version, gen.value) : null;
  const fallback = /fallback/.test(l.kv_cache_note || '');
  return el('article', { class: 'card llm' + (fallback ? ' card-warn' : ''), 'data-testid': 'llm-card', 'data-model': m.name },
    el('header', {}, el('h3', {}, 'LLM ', el('span', {}, m.name + ' v' + m.version)), kvChip(l.kv_cache, l.kv_cache_note, fallback)),
    kv([
      ['Sequences', el('span', {}, 'running ' + l.running + ' / waiting ' + l.waiting + ' · batch limit ' + l.batch_limit,
        seqMeter(l.running, l.batch_limit)), 'llm-seq'],
      ['KV cache', bytes(l.kv_cache_bytes) + ' (' + l.kv_dtype + ', ' + l.kv_bytes_per_token + ' B/token)', 'llm-kv-bytes'],
      ['TTFT p95', ttft ? fmt(ttft.p95, 1, ' ms') + ' (' + ttft.n + ' since start)' : '—', 'llm-ttft'],
      ['Inter-token p95', itl ? fmt(itl.p95, 1, ' ms') + ' (' + itl.n + ' gaps since start)' : '—', 'llm-itl'],
      ['Generated tokens/s', (genRate === null ? '—' : fmt(genRate, 1)) + ' (last ' + RATE_WINDOW_S + ' s) · ' +
        (gen ? gen.value : '—') + ' tokens since start', 'llm-tps'],
      ['Largest batch', String(l.max_batch) + (l.batch_note ? ' (' + l.batch_note + ')' : '')],
      ['Layout', layoutText(m.layout), 'llm-layout'],
    ]),
    el('p', { class: 'muted small', 'data-testid': 'llm-layout-figures', title: m.layout ? m.layout.note : '' }, layoutFigures(m.layout)),
    el('p', { class: 'muted small kv-note' + (fallback ? ' bad' : ''), 'data-testid': 'kv-note' }, l.kv_cache_note || ''));
}

// A backend's LLMs, as the router's probe of its /v2/status saw them.
function backendLlmTable(b) {
  if (!b.llm || !b.llm.length) return null;
  return el('table', { class: 'models' },
    el('thead', {}, el('tr', {}, ['LLM', 'Running', 'Waiting', 'Batch limit', 'KV cache', ''].map((h) => el('th', {}, h)))),
    el('tbody', {}, b.llm.map((l) => el('tr', { 'data-testid': 'backend-llm', 'data-model': l.model },
      el('td', {}, l.model + ' v' + l.version),
      el('td', { 'data-testid': 'backend-llm-running' }, fmt(l.running, 0)),
      el('td', { 'data-testid': 'backend-llm-waiting' }, fmt(l.waiting, 0)),
      el('td', {}, fmt(l.batch_limit, 0)),
      el('td', {}, kvChip(l.kv_cache, l.kv_cache_note, l.kv_cache_fallback)),
      el('td', { class: 'nowrap', 'data-testid': 'backend-llm-kv-bytes' }, bytes(l.kv_cache_bytes))))),
    b.llm_omitted ? el('caption', { class: 'muted small' }, '+' + b.llm_omitted + ' more LLMs not shown') : null);
}

// A backend as /admin/status shows it: the browser never reaches workers, only the router.
function backendCard(pool, b) {
  const warn = [];
  if (!b.live) warn.push(['bad', 'NOT LIVE (GPU fault or down): no traffic']);
  if (b.tier === 'cpu-fallback') warn.push(['bad', 'DEGRADED: a GPU tier was wanted, CPU is what runs']);
  if (!b.tier_ok && b.tier !== 'unknown') warn.push(['bad', 'tier ' + b.tier + ' is below pool ' + pool.name + "'s min_tier " + pool.min_tier]);
  if (b.ejected_for_ms > 0) warn.push(['bad', 'ejected for ' + fmt(b.ejected_for_ms / 1000, 1, ' s') + ' more']);
  if (b.live && !b.ready) warn.push(['warn', 'not ready']);
  const bad = warn.some(([l]) => l === 'bad');
  return el('article', { class: 'card' + (bad ? ' card-bad' : ''), 'data-testid': 'inference-card', 'data-backend': b.address },
    el('header', {}, el('h3', {}, 'Inference ', el('span', { class: 'muted' }, b.address)), chipFor(b.tier)),
    alerts(warn),
    kv([
      ['Pool', pool.name + ' (' + pool.kind + ')'],
      ['Health', b.healthy ? 'healthy' : 'not taking traffic'],
      ['Live / ready', (b.live ? 'live' : 'NOT live') + ' / ' + (b.ready ? 'ready' : 'not ready')],
      ['In flight (router)', String(b.in_flight)],
      ['Worker queue', fmt(b.worker_queue, 0)],
      ['GPU memory', b.gpu_memory_used_fraction === null ? 'no GPU telemetry' : pct(b.gpu_memory_used_fraction)],
      ['Requests / failures', b.requests + ' / ' + b.failures],
      ['Ejections', String(b.ejections)],
    ]),
    backendLlmTable(b));
}

// ---- the router's page -----------------------------------------------------------------------

function signalRow(name, s) {
  const unit = name === 'p95_ms' ? ' ms' : '';
  const shown = (v) => (name === 'gpu_memory_fraction' && v !== null ? pct(v) : fmt(v, 1, unit));
  const meter = el('div', { class: 'meter' + (s.hot ? ' hot' : '') });
  const fill = el('span', {});
  const frac = s.value === null ? 0 : Math.min(1, s.value / (s.high || 1));
  fill.style.width = (100 * frac).toFixed(1) + '%';
  meter.appendChild(fill);
  return el('tr', { class: s.hot ? 'hot' : '' },
    el('td', {}, name), el('td', {}, shown(s.value)), el('td', { class: 'muted' }, shown(s.low) + ' / ' + shown(s.high)),
    el('td', {}, meter), el('td', {}, s.hot ? 'HOT' : 'cold'));
}

function policyBlock(pol) {
  const stageOf = pol.stages ? ' of ' + (pol.stages - 1) : '';
  const state = pol.hard_failover ? 'HARD FAILOVER: no healthy GPU backend' : pol.pressure ? 'under pressure' : pol.returning ? 'returning' : 'calm';
  return el('div', { class: 'policy' },
    el('div', { class: 'policy-state ' + (pol.hard_failover ? 'bad' : pol.pressure ? 'warn' : 'ok'), 'data-testid': 'policy-state' },
      'Stage ' + pol.stage + stageOf + ' · ' + state),
    kv([['CPU share', Object.entries(pol.cpu_share).map(([p, v]) => p + ' ' + pct(v)).join(' · ')]]),
    el('table', { class: 'signals' },
      el('thead', {}, el('tr', {}, ['Signal', 'Value', 'Low / high mark', '', ''].map((h) => el('th', {}, h)))),
      el('tbody', {}, Object.entries(pol.signals).map(([n, s]) => signalRow(n, s)))),
    el('p', { class: 'muted small' }, 'Pressure needs ' + (pol.require ?? '?') + ' hot signals held; a hard failover moves all traffic at once.'));
}

// A pool's /v1 streams as the router timed them (p95 since start, against the slo_ttft_ms and
// slo_itl_ms targets), its tokens per second in and out and what 1000 tokens cost it, from the
// change of its totals over the page's last polls. Shown once the pool has served /v1.
const over = (v, t) => t !== null && v !== null && v > t;
function p95Cell(v, target, id) {
  return el('td', { class: over(v, target) ? 'bad' : '', 'data-testid': id },
    fmt(v, 1, ' ms'), el('span', { class: 'muted' }, ' / ' + (target === null ? '—' : target + ' ms')));
}
function llmStreamsBlock(p) {
  // the rates' windows start before the block shows: the first stream's tokens count in them
  const L = p.llm || { prompt_tokens: 0, completion_tokens: 0, usd_total: 0 };
  const key = 'pool\n' + p.name;
  const inRate = rate(key + '\nin', L.prompt_tokens);
  const outRate = rate(key + '\nout', L.completion_tokens);
  const dTok = delta(key + '\ntok', L.prompt_tokens + L.completion_tokens);
  const dUsd = delta(key + '\nusd', L.usd_total);
  if (!p.llm) return null;
  const rows = Object.entries(L.priorities)
    .filter(([, s]) => s.streams || s.itl_samples || s.prompt_tokens || s.completion_tokens)
    .map(([prio, s]) => el('tr', { class: over(s.ttft_p95_ms, s.ttft_target_ms) || over(s.itl_p95_ms, s.itl_target_ms) ? 'hot' : '',
      'data-testid': 'llm-prio', 'data-priority': prio },
    el('td', {}, prio), el('td', {}, String(s.streams)),
    p95Cell(s.ttft_p95_ms, s.ttft_target_ms, 'llm-ttft-p95'), p95Cell(s.itl_p95_ms, s.itl_target_ms, 'llm-itl-p95'),
    el('td', {}, s.prompt_tokens + ' / ' + s.completion_tokens)));
  const per1k = dTok && dUsd !== null ? '$' + fmt(1000 * dUsd / dTok, 6) + ' (last ' + RATE_WINDOW_S + ' s)' : '—';
  return el('div', { class: 'llm-streams', 'data-testid': 'llm-streams' },
    el('h4', {}, 'LLM streams'),
    el('table', { class: 'slo' },
      el('thead', {}, el('tr', {}, ['Priority', 'Streams', 'TTFT p95 / target', 'Inter-token p95 / target', 'Tokens in / out']
        .map((h) => el('th', {}, h)))),
      el('tbody', {}, rows)),
    kv([
      ['Tokens/s in / out', fmt(inRate, 1) + ' / ' + fmt(outRate, 1) + ' (last ' + RATE_WINDOW_S + ' s)', 'llm-tokens-rate'],
      ['Tokens since start', L.prompt_tokens + ' in / ' + L.completion_tokens + ' out', 'llm-tokens'],
      ['Cost per 1k tokens', per1k, 'llm-cost'],
    ]),
    el('p', { class: 'muted small' }, 'p95 since the router started; cost: the pool\'s whole spend (its KServe requests too) over its tokens.'));
}

// Prefix affinity: how the router placed the tries it keyed by prefix (against the key's home
// backend), and what the workers' prefix caches really gave: the cached share of the prompt
// tokens of the /v1 replies whose worker reported it. Shown once the pool has either.
function affinityBlock(p) {
  const a = p.affinity || { hit: 0, miss: 0, overflow: 0 };
  const x = p.prefix || { prompt_tokens: 0, cached_tokens: 0, hit_rate: 0 };
  if (!(a.hit + a.miss + a.overflow) && !x.prompt_tokens) return null;
  return el('div', { class: 'affinity', 'data-testid': 'affinity' },
    el('h4', {}, 'Prefix affinity'),
    kv([
      ['Placed by prefix', 'hit ' + a.hit + ' · miss ' + a.miss + ' · overflow ' + a.overflow, 'affinity-placed'],
      ['Prompt tokens cached', x.cached_tokens + ' of ' + x.prompt_tokens + ' (' + pct(x.hit_rate) + ')', 'affinity-cached'],
    ]),
    el('p', { class: 'muted small' }, 'hit: the key\'s home backend; miss: the home was unhealthy or avoided; overflow: the home was over its load bound. Cached: what the workers\' prefix caches gave, as they reported it.'));
}

function poolCard(p) {
  const total = p.backends.length;
  const ejected = p.backends.filter((b) => b.ejected_for_ms > 0).length;
  const inflight = p.backends.reduce((s, b) => s + b.in_flight, 0);
  const bad = p.healthy === 0;
  return el('article', { class: 'card pool' + (bad ? ' card-bad' : ''), 'data-testid': 'pool-card', 'data-pool': p.name },
    el('header', {}, el('h3', {}, 'Pool ' + p.name), el('span', { class: 'tag' }, p.kind.toUpperCase() + (p.sensitive ? ' · sensitive' : ''))),
    bad ? alerts([['bad', 'NO HEALTHY BACKEND']]) : null,
    kv([
      ['Healthy backends', p.healthy + ' of ' + total],
      ['Desired backends', String(p.desired_backends ?? '—'), 'desired-backends'],
      ['Ejected now', String(ejected)],
      ['In flight', String(inflight)],
      ['p95 (10 s)', fmt(p.p95_ms, 1, ' ms')],
      ['min_tier', p.min_tier],
      ['Cost', p.cost.model === 'none' ? '—' : '$' + fmt(p.cost.usd_per_request * 1000, 4) + ' per 1000 requests'],
    ]),
    llmStreamsBlock(p),
    affinityBlock(p),
    p.policy ? policyBlock(p.policy) : null);
}

function sloBlock(st) {
  return el('table', { class: 'slo' },
    el('thead', {}, el('tr', {}, ['Priority', 'p50', 'p95', 'p99', 'p95 target', 'Within target', 'Requests (60 s)'].map((h) => el('th', {}, h)))),
    el('tbody', {}, Object.entries(st.slo).map(([prio, s]) => {
      const over = s.target_p95_ms !== null && s.p95_ms !== null && s.p95_ms > s.target_p95_ms;
      return el('tr', { class: over ? 'hot' : '' }, el('td', {}, prio), el('td', {}, fmt(s.p50_ms, 1, ' ms')),
        el('td', {}, fmt(s.p95_ms, 1, ' ms')), el('td', {}, fmt(s.p99_ms, 1, ' ms')),
        el('td', {}, s.target_p95_ms === null ? '—' : s.target_p95_ms + ' ms'),
        el('td', {}, s.compliance === null ? '—' : pct(s.compliance)), el('td', {}, String(s.requests_60s)));
    })));
}

// tenants with a budget: what each spent over the rolling hour and the UTC day against it
function budgetBlock(st) {
  const rows = (st.tenants || []).filter((t) => Object.values(t.budget).some((v) => v > 0));
  if (!rows.length) return null;
  const used = (spent, b) => (b > 0 ? pct(spent / b) : '—');
  return el('table', { class: 'slo', 'data-testid': 'budgets' },
    el('thead', {}, el('tr', {}, ['Tenant', 'State', 'Hour spent', 'of soft', 'of hard', 'Day spent', 'of soft', 'of hard',
      'Demoted', 'Refused'].map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.map((t) => el('tr', { class: t.state === 'ok' ? '' : 'hot', 'data-tenant': t.name },
      el('td', {}, t.name), el('td', {}, t.state), el('td', {}, fmt(t.spent_hour, 4)),
      el('td', {}, used(t.spent_hour, t.budget.soft_per_hour)), el('td', {}, used(t.spent_hour, t.budget.hard_per_hour)),
      el('td', {}, fmt(t.spent_day, 4)), el('td', {}, used(t.spent_day, t.budget.soft_per_day)),
      el('td', {}, used(t.spent_day, t.budget.hard_per_day)), el('td', {}, String(t.demoted)),
      el('td', {}, String(t.refused))))));
}

const KIND_CLASS = { hard_failover: 'bad', backend_unhealthy: 'bad', ejection: 'warn', stage_up: 'warn', pressure_start: 'warn' };

function renderTimeline(events) {
  const ol = $('timeline');
  const items = [...(events || [])].reverse().map((e) =>
    el('li', { class: 'ev ev-' + (KIND_CLASS[e.kind] || 'ok'), 'data-seq': e.seq, 'data-kind': e.kind },
      el('time', {}, new Date(e.time * 1000).toLocaleTimeString()),
      el('span', { class: 'kind' }, e.kind.replace(/_/g, ' ')),
      el('span', { class: 'pool' }, e.pool),
      el('span', { class: 'text' }, e.text)));
  ol.replaceChildren(...(items.length ? items : [el('li', { class: 'muted' }, 'no events yet')]));
}

function renderRouter(st) {
  $('title').textContent = 'tierrouter';
  const lead = st.lead_gpu_pool;
  $('summary').hidden = false;
  $('summary').replaceChildren(
    el('div', { class: 'stats' },
      el('div', { class: 'stat' }, el('b', {}, String(st.active)), ' in flight'),
      el('div', { class: 'stat' }, el('b', {}, String(st.retries)), ' retries'),
      el('div', { class: 'stat' }, el('b', {}, String(st.ejections)), ' ejections'),
      el('div', { class: 'stat ' + (st.hard_failover ? 'bad' : st.stage > 0 ? 'warn' : '') },
        'lead GPU pool ', el('b', {}, lead || '—'), ': stage ' + st.stage + (st.hard_failover ? ' · HARD FAILOVER' : ''),
        ' · CPU share normal ', el('b', {}, pct(st.cpu_share.normal)))),
    ...[sloBlock(st), budgetBlock(st)].filter(Boolean));
  $('pools-title').hidden = false;
  $('inference-title').hidden = false;
  $('timeline-box').hidden = false;
  $('pools').replaceChildren(...st.pools.map(poolCard));
  $('inference').replaceChildren(...st.pools.flatMap((p) => p.backends.map((b) => backendCard(p, b))));
  renderTimeline(st.events);
}

function renderWorker(st, metrics) {
  $('title').textContent = 'tierserve worker';
  $('inference-title').hidden = false;
  const llms = (st.models || []).filter((m) => m.llm);
  const llmKeys = new Set(llms.map((m) => m.name + '\n' + m.version));
  $('inference').replaceChildren(workerCard(st, workerQuantiles(metrics, llmKeys), null));
  $('llm-title').hidden = !llms.length;
  $('llm').replaceChildren(...llms.map((m) => llmCard(m, metrics)));
}

// Which program served the page decides what to poll; until it answers, ask again.
async function start() {
  try {
    program = (await getJSON('/dashboard/program.json')).program;
  } catch (e) {
    setConn(false, 'no answer: ' + e.message);
    setTimeout(start, POLL_MS * 2);
    return;
  }
  schedule(0);
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', onLogin);
  start();
});
