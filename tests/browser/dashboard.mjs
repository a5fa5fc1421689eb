// Drives the dashboard in Debian's chromium for tests/e2e/test_dashboard.py.
//
//   node tests/browser/dashboard.mjs <url> <out.png>
//
// Opens <url> once and keeps the page open (never reloads it). Prints one JSON line when the
// page has rendered (an Inference card or the token form), then reads JSON commands from
// stdin, one a line, and answers each with one JSON line:
//   {"login": "<token>"}                  fill in the token form, wait for a card
//   {"wait_for": "<text>", "timeout_ms": N}  wait until the page's text contains <text>
//   {"wait_css": "<selector>", "text": "<text>", "timeout_ms": N}
//                                         wait until an element matching <selector> reads
//                                         exactly <text> (its textContent, trimmed)
//   {"shot": "<path>"}                    full-page screenshot (<out.png> when no path)
//   {"quit": true}
// Every answer carries a snapshot of what the page shows (see snapshot()) and what the page
// did on the wire: each request's path, status and whether it carried a bearer token.
import { chromium } from 'playwright-core';
import readline from 'node:readline';

const [url, outPng] = process.argv.slice(2);
if (!url || !outPng) {
  console.error('usage: node dashboard.mjs <url> <out.png>');
  process.exit(64);
}
const HARD_LIMIT_MS = 60000; // the whole run: a stuck browser must not hang the suite
setTimeout(() => { console.error('dashboard.mjs: hard time limit reached'); process.exit(3); }, HARD_LIMIT_MS).unref();

const wire = [];
const consoleErrors = [];
let navigations = 0;

function print(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

async function snapshot(page) {
  const seen = await page.evaluate(() => {
    const q = (sel, root = document) => [...root.querySelectorAll(sel)];
    const text = (e) => (e ? e.textContent.trim() : null);
    // every element below root with a data-testid: testid -> its text
    const fields = (root) => Object.fromEntries(q('[data-testid]', root).map((e) => [e.getAttribute('data-testid'), text(e)]));
    const chipOf = (root) => {
      const c = root.querySelector('[data-testid=kv-chip]');
      return c ? { text: text(c), title: c.getAttribute('title'), fallback: c.getAttribute('data-fallback') === 'true',
        red: c.classList.contains('chip-fallback') } : null;
    };
    return {
      title: text(document.getElementById('title')),
      conn: text(document.getElementById('conn')),
      login_visible: !document.getElementById('login').hidden,
      marker: window.__dashboardTestMarker || null,
      cards: q('[data-testid=inference-card]').map((c) => ({
        backend: c.getAttribute('data-backend'),
        chip: text(c.querySelector('[data-testid=chip]')),
        alerts: q('[data-testid=alert]', c).map(text),
        bad: c.classList.contains('card-bad'),
        text: c.innerText,
        llm: q('[data-testid=backend-llm]', c).map((tr) => ({ model: tr.getAttribute('data-model'), kv: chipOf(tr), ...fields(tr) })),
      })),
      llm_cards: q('[data-testid=llm-card]').map((c) => ({
        model: c.getAttribute('data-model'), kv: chipOf(c), fields: fields(c), text: c.innerText,
      })),
      pools: q('[data-testid=pool-card]').map((c) => {
        const b = c.querySelector('[data-testid=llm-streams]');
        const a = c.querySelector('[data-testid=affinity]');
        return {
          affinity: a ? fields(a) : null,
          pool: c.getAttribute('data-pool'),
          policy: text(c.querySelector('[data-testid=policy-state]')),
          text: c.innerText,
          llm: b ? { fields: fields(b), rows: q('[data-testid=llm-prio]', b).map((tr) => ({ priority: tr.getAttribute('data-priority'), cells: [...tr.children].map(text) })) } : null,
        };
      }),
      timeline: q('[data-testid=timeline] li[data-seq]').map((li) => ({
        seq: Number(li.getAttribute('data-seq')), kind: li.getAttribute('data-kind'), text: li.innerText,
      })),
    };
  });
  return { ...seen, navigations, console_errors: consoleErrors.slice(), wire: wire.slice() };
}

let browser;
let pageRef = null;
try {
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'], headless: true });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  pageRef = page;
  // failed loads are in `wire` with their paths; the console's copy of them names no path
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push('pageerror: ' + e.message));
  page.on('framenavigated', (f) => { if (f === page.mainFrame()) navigations++; });
  page.on('response', (r) => {
    const req = r.request();
    const u = new URL(r.url());
    wire.push({ path: u.pathname, query: u.search, status: r.status(), bearer: 'authorization' in req.headers() });
  });
  await page.goto(url, { waitUntil: 'load', timeout: 15000 });
  // a reload would lose this: the test checks it is still there at the end
  await page.evaluate(() => { window.__dashboardTestMarker = 'set-once'; });
  await page.waitForSelector('[data-testid=inference-card], [data-testid=login]:not([hidden])', { timeout: 15000 });
  print({ event: 'opened', ...(await snapshot(page)) });

  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    const cmd = JSON.parse(line);
    if (cmd.quit) break;
    if (cmd.login !== undefined) {
      await page.fill('#token', cmd.login);
      await page.click('#login button[type=submit]');
      await page.waitForSelector('[data-testid=inference-card]', { timeout: 15000 });
      print({ event: 'login', ...(await snapshot(page)) });
    } else if (cmd.wait_for !== undefined) {
      let found = true;
      try {
        await page.waitForFunction((t) => document.body.innerText.includes(t), cmd.wait_for,
          { timeout: cmd.timeout_ms || 10000, polling: 100 });
      } catch (_) {
        found = false;
      }
      print({ event: 'wait_for', found, ...(await snapshot(page)) });
    } else if (cmd.wait_css !== undefined) {
      let found = true;
      try {
        await page.waitForFunction(([sel, t]) => [...document.querySelectorAll(sel)].some((e) => e.textContent.trim() === t),
          [cmd.wait_css, cmd.text], { timeout: cmd.timeout_ms || 10000, polling: 100 });
      } catch (_) {
        found = false;
      }
      print({ event: 'wait_css', found, ...(await snapshot(page)) });
    } else if (cmd.shot !== undefined) {
      const path = cmd.shot || outPng;
      await page.screenshot({ path, fullPage: true });
      print({ event: 'shot', path });
    } else {
      print({ event: 'error', error: 'unknown command: ' + line });
    }
  }
} catch (e) {
  // what the page showed when it went wrong, for the report
  try { if (pageRef) await pageRef.screenshot({ path: outPng, fullPage: true }); } catch (_) { /* best effort */ }
  print({ event: 'error', page_text: pageRef ? await pageRef.evaluate(() => document.body.innerText).catch(() => null) : null, error: String(e && e.stack ? e.stack : e) + '\nconsole errors: ' + JSON.stringify(consoleErrors) });
  process.exitCode = 2;
} finally {
  if (browser) await browser.close();
}
