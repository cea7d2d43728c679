// What every browser scenario shares: Debian's Chromium through playwright-core, sign-in,
// screenshots, axe-core checks, direct API calls, and condition waits (never fixed sleeps).
// A scenario is `scenario(name, async (t) => { ... })`; it exits 0 when its body returns
// and 1 (after a screenshot of the failing page) when anything throws. The Rust side
// (tests/it/ui/) starts the service and passes BASE_URL, tokens and directories in the
// environment.

import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);

export function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (the Rust test tests/it/ui/ sets it)`);
  return value;
}

export const BASE_URL = env('BASE_URL');
export const SERVICE_TOKEN = env('SERVICE_TOKEN');
export const ADMIN_TOKEN = env('ADMIN_TOKEN');
export const OTHER_TENANT_TOKEN = env('OTHER_TENANT_TOKEN');

/// Every wait's bound: long enough for a busy 2-core machine, short enough to fail fast.
export const WAIT_MS = 20_000;

// Without the background-networking flags Chromium keeps dialling hosts this machine
// cannot reach; --no-sandbox because CI runs as root.
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
];

const started = Date.now();
export function log(...parts) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(2)}s]`, ...parts);
}

/// Poll `check` (sync or async) until it returns a truthy value, which is returned; throws
/// with `what` and the last value or error at the deadline.
export async function until(what, check, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  let last;
  for (let delay = 25; ; delay = Math.min(delay * 2, 250)) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

/// Wait until `locator`'s text matches `pattern`; returns the text.
export async function expectText(locator, pattern, timeout = WAIT_MS) {
  return until(`text matching ${pattern}`, async () => {
    const text = (await locator.textContent({ timeout: 1000 })) ?? '';
    return pattern.test(text) ? text : false;
  }, timeout);
}

/// A call to the service as `token` (the test's own view of what the UI did).
export async function api(method, urlPath, body, token = SERVICE_TOKEN) {
  const response = await fetch(BASE_URL + urlPath, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

export function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

/// Sign in on the sign-in form (label "Token or JWT", button "Sign in") and wait until
/// the shell shows the signed-in user's "Sign out" button.
export async function signIn(page, token, hash = '#/overview') {
  await page.goto(`${BASE_URL}/ui${hash}`);
  await page.getByLabel('Token or JWT').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

/// Navigate inside the app by its hash route and wait for the page's heading.
export async function go(page, hash, heading) {
  await page.evaluate((h) => { window.location.hash = h; }, hash);
  if (heading) await page.getByRole('heading', { name: heading, level: 1 }).waitFor({ timeout: WAIT_MS });
}

const SCREENSHOT_DIR = env('SCREENSHOT_DIR');
export const WORK_DIR = env('WORK_DIR');

export async function screenshot(page, name) {
  const file = path.join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log('screenshot', file);
  return file;
}

const AXE_SOURCE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/// axe-core on the current page (evaluated over CDP, so the page's strict CSP stays on):
/// throws on any serious or critical violation.
export async function checkAccessibility(page, label) {
  const violations = await page.evaluate(async (source) => {
    if (!window.axe) (0, eval)(source);
    const result = await window.axe.run(document, { resultTypes: ['violations'] });
    return result.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.impact} ${v.id}: ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  }, AXE_SOURCE);
  assert(violations.length === 0, `axe on ${label}:\n  ${violations.join('\n  ')}`);
  log(`axe: ${label} has no serious or critical violations`);
}

/// Run a scenario: one Chromium, one context (downloads accepted), one page. Uncaught page
/// errors and Content-Security-Policy violations fail it too.
export async function scenario(name, body) {
  const browser = await chromium.launch({ executablePath: env('CHROMIUM'), headless: true, args: CHROMIUM_ARGS });
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`uncaught in page: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  const result = {};
  let failed = false;
  try {
    await body({ page, context, browser, result });
    assert(problems.length === 0, `the page reported:\n  ${problems.join('\n  ')}`);
    log(`${name}: passed`);
  } catch (e) {
    failed = true;
    console.error(`${name}: FAILED\n${e.stack ?? e}`);
    if (problems.length) console.error(`page problems:\n  ${problems.join('\n  ')}`);
    await screenshot(page, `${name}-failure`).catch(() => {});
  } finally {
    await browser.close();
  }
  if (!failed && process.env.RESULT_FILE) writeFileSync(process.env.RESULT_FILE, JSON.stringify(result));
  process.exit(failed ? 1 : 0);
}
