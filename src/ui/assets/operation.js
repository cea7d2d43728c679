// One operation: live progress from its own event stream, its facts (times, attempt,
// priority, lease holder), error and errorCode, result, attempts with their times, the
// artifact it made, and the actions Cancel / Retry / Forget (cancel and forget ask first)
// and Download artifact. The download reads the artifact in chunks with the session's
// credential (POST …/export-artifacts/chunk), checks its digest and saves it through a Blob
// URL: a credential never goes into a URL.
//
// The submitted request comes from `GET …/operations/{id}/request`, already shaped by the
// service (bounded, records summarised, nothing secret); it is read once, since a request
// never changes, and drawn as nested lists of its fields.

import { ApiFailure } from './api.js';
import { TERMINAL, facts, fmtCount, fmtDuration, progressBar, stateBadge, time } from './widgets.js';

/** 4 MiB: the most one chunk call returns. */
const CHUNK = 4 * 1024 * 1024;

function decodeBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

async function sha256(parts) {
  if (!globalThis.crypto?.subtle) return null; // not a secure context: cannot check
  const blob = new Blob(parts);
  const hash = await crypto.subtle.digest('SHA-256', await blob.arrayBuffer());
  return `sha256:${[...new Uint8Array(hash)].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** Download an artifact in chunks and hand it to the browser as a file. */
async function download(ctx, artifactId, report) {
  const parts = [];
  let offset = 0;
  let digest = '';
  for (;;) {
    const chunk = await ctx.api('POST', ctx.paths.artifactChunk, { artifactId, offset, limit: CHUNK });
    parts.push(decodeBase64(chunk.dataBase64));
    offset = chunk.nextOffset;
    digest = chunk.digest;
    report(`Downloading… ${fmtCount(offset)} bytes`);
    if (chunk.eof) break;
  }
  const actual = await sha256(parts);
  if (actual && digest && actual !== digest) throw new Error(`the download's digest ${actual} differs from the artifact's ${digest}`);
  const url = URL.createObjectURL(new Blob(parts, { type: 'application/x-ndjson' }));
  const a = ctx.el('a', { href: url, download: `${artifactId}.jsonl`, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
  return { bytes: offset, checked: Boolean(actual) };
}

/** A shown text (`{text, bytes, truncated}`) from the request's shape. */
function isShownText(v) {
  return v && typeof v === 'object' && !Array.isArray(v) && typeof v.text === 'string' && typeof v.truncated === 'boolean' && Object.keys(v).length === 3;
}

/** A JSON value drawn readably: objects as term lists, arrays as lists, texts as blocks. */
function jsonView(el, value) {
  if (value === null || value === undefined) return el('span', { class: 'muted' }, 'none');
  if (isShownText(value)) {
    if (!value.text) return el('span', { class: 'muted' }, 'empty');
    return el(
      'div',
      {},
      el('pre', { class: 'json' }, value.text),
      value.truncated ? el('p', { class: 'muted' }, `Cut: the first ${fmtCount(new TextEncoder().encode(value.text).length)} of ${fmtCount(value.bytes)} bytes.`) : null,
    );
  }
  if (Array.isArray(value)) {
    if (!value.length) return el('span', { class: 'muted' }, 'none');
    return el('ul', { class: 'json-list' }, value.map((v) => el('li', {}, jsonView(el, v))));
  }
  if (typeof value === 'object') {
    const keys = Object.keys(value);
    if (!keys.length) return el('span', { class: 'muted' }, 'none');
    return el('dl', { class: 'facts' }, keys.map((k) => [el('dt', {}, k), el('dd', {}, jsonView(el, value[k]))]));
  }
  return el('code', {}, String(value));
}

/** The operation's request section, filled once from its own route. */
async function drawRequest(ctx, section, id) {
  const { el } = ctx;
  const title = el('h2', { id: 'request-title' }, 'Request');
  try {
    const shown = await ctx.api('GET', ctx.paths.operationRequest(id));
    section.replaceChildren(title, el('div', { class: 'panel' }, jsonView(el, shown.request)));
  } catch (e) {
    section.replaceChildren(title, el('p', { class: 'muted' }, `The request could not be read (${e.message}).`));
  }
}

function attemptsTable(el, attempts) {
  if (!attempts || !attempts.length) return el('p', { class: 'muted' }, 'No finished attempt yet.');
  return el(
    'table',
    {},
    el('caption', {}, 'Finished attempts, oldest first'),
    el('thead', {}, el('tr', {}, ['Attempt', 'Started', 'Finished', 'Took', 'Outcome', 'Error code', 'Error', 'Worker'].map((h) => el('th', { scope: 'col' }, h)))),
    el(
      'tbody',
      {},
      attempts.map((a) =>
        el(
          'tr',
          {},
          el('td', { class: 'num' }, a.attempt),
          el('td', {}, time(a.startedAtMs)),
          el('td', {}, time(a.finishedAtMs)),
          el('td', { class: 'num' }, a.startedAtMs ? fmtDuration(a.finishedAtMs - a.startedAtMs) : '—'),
          el('td', {}, a.outcome),
          el('td', { class: 'mono' }, a.errorCode || ''),
          el('td', {}, a.error || ''),
          el('td', { class: 'mono' }, a.worker || ''),
        ),
      ),
    ),
  );
}

export async function render(main, params, ctx) {
  const { el, api, paths } = ctx;
  const id = params.id.toUpperCase();
  let op;
  try {
    op = await api('GET', paths.operation(id));
  } catch (e) {
    if (e instanceof ApiFailure && e.status === 404) {
      main.append(el('h1', {}, 'Operation not found'), el('p', {}, `No operation ${id} is visible to you. `, el('a', { href: '#/operations' }, 'Back to operations'), '.'));
      return null;
    }
    throw e;
  }

  const badge = el('span');
  const bar = progressBar(op, 'Progress');
  const live = el('p', { class: 'live', role: 'status' });
  const actionStatus = el('p', { class: 'live', role: 'status', 'aria-live': 'polite' });
  const actions = el('div', { class: 'actions' });
  const details = el('section', { 'aria-labelledby': 'details-title' });
  const problem = el('section');
  const request = el('section', { 'aria-labelledby': 'request-title' });
  const result = el('section');
  const artifact = el('section');
  const attempts = el('section', { 'aria-labelledby': 'attempts-title' });

  main.append(
    el('p', {}, el('a', { href: '#/operations' }, '← Operations')),
    el('h1', {}, 'Operation ', el('span', { class: 'mono' }, id), ' ', badge),
    el('div', { class: 'panel' }, bar, live),
    actions,
    actionStatus,
    details,
    request,
    problem,
    result,
    artifact,
    attempts,
  );

  const act = (label, fn) => async (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      await fn();
    } catch (e) {
      actionStatus.textContent = `${label} failed: ${e.message}`;
    } finally {
      button.disabled = false;
    }
  };

  const cancel = act('Cancel', async () => {
    if (!(await ctx.confirm(`Cancel operation ${id}?`, 'A queued operation is cancelled at once; a running one stops at its next batch boundary. What it already did stays done.'))) return;
    draw(await api('POST', paths.cancel(id)));
    actionStatus.textContent = 'Cancel requested.';
  });
  const retry = act('Retry', async () => {
    draw(await api('POST', paths.retry(id)));
    actionStatus.textContent = 'Queued again.';
    follow();
  });
  const forget = act('Forget', async () => {
    if (!(await ctx.confirm(`Forget operation ${id}?`, 'Its record is deleted for good (its artifact stays until it expires).'))) return;
    await api('DELETE', paths.operation(id));
    ctx.notify(`Operation ${id} forgotten.`);
    ctx.navigate('#/operations');
  });
  const fetchArtifact = act('Download', async () => {
    const done = await download(ctx, op.artifactRef, (text) => {
      actionStatus.textContent = text;
    });
    actionStatus.textContent = `Downloaded ${fmtCount(done.bytes)} bytes${done.checked ? ', digest checked' : ''}.`;
  });

  let artifactShown = null;
  async function drawArtifact() {
    if (!op.artifactRef || artifactShown === `${op.artifactRef}.${op.state}`) return;
    artifactShown = `${op.artifactRef}.${op.state}`;
    try {
      const info = await api('GET', paths.artifact(op.artifactRef));
      artifact.replaceChildren(
        el('h2', {}, 'Artifact'),
        facts([
          ['Id', el('span', { class: 'mono' }, info.id)],
          ['State', info.state],
          ['Size', `${fmtCount(info.sizeBytes)} bytes`],
          info.messages !== undefined && ['Messages', fmtCount(info.messages)],
          info.entries !== undefined && ['Entries', fmtCount(info.entries)],
          info.digest && ['Digest', el('span', { class: 'mono' }, info.digest)],
          ['Expires', time(info.expiresAtMs)],
        ]),
      );
    } catch (e) {
      artifact.replaceChildren(el('h2', {}, 'Artifact'), el('p', {}, el('span', { class: 'mono' }, op.artifactRef), ` (${e.message})`));
    }
    drawActions();
  }

  let actionsShown = null;
  function drawActions() {
    // Only when the offered actions change: a running operation's stream of progress
    // events must not keep replacing the buttons under the user's pointer.
    const offered = `${op.state}.${Boolean(op.artifactRef)}`;
    if (offered === actionsShown) return;
    actionsShown = offered;
    const buttons = [];
    if (!TERMINAL.has(op.state)) buttons.push(el('button', { type: 'button', class: 'danger', on: { click: cancel } }, 'Cancel operation'));
    if (op.state === 'failed' || op.state === 'cancelled') buttons.push(el('button', { type: 'button', on: { click: retry } }, 'Retry operation'));
    if (TERMINAL.has(op.state)) buttons.push(el('button', { type: 'button', class: 'danger', on: { click: forget } }, 'Forget operation'));
    if (op.artifactRef && op.state === 'succeeded') buttons.push(el('button', { type: 'button', class: 'secondary', on: { click: fetchArtifact } }, 'Download artifact'));
    // Keep focus on a button that survives the redraw.
    const focused = document.activeElement && actions.contains(document.activeElement) ? document.activeElement.textContent : null;
    actions.replaceChildren(...buttons);
    if (focused) [...actions.children].find((b) => b.textContent === focused)?.focus();
  }

  function draw(next) {
    if (next.version < op.version && next.id === op.id) return; // an older event
    op = next;
    badge.replaceChildren(stateBadge(op.state));
    bar.update(op);
    details.replaceChildren(
      el('h2', { id: 'details-title' }, 'Details'),
      facts([
        ['Kind', op.kind],
        ['State', op.state + (op.cancelRequested ? ' (cancel requested)' : '')],
        ['Phase', op.phase || '—'],
        ['Processed', `${fmtCount(op.processed)} of ${fmtCount(op.total)}`],
        ['Tenant', el('span', { class: 'mono' }, op.tenant)],
        ['Created', time(op.createdAtMs)],
        ['Started', time(op.startedAtMs)],
        ['Finished', time(op.finishedAtMs)],
        ['Updated', time(op.updatedAtMs)],
        ['Attempt', fmtCount(op.attempt)],
        ['Priority', String(op.priority)],
        op.deadlineMs && ['Deadline', time(op.deadlineMs)],
        op.notBeforeMs && ['Not before', time(op.notBeforeMs)],
        ['Lease holder', op.leaseOwner ? el('span', { class: 'mono' }, op.leaseOwner) : '—'],
        ['Version', String(op.version)],
      ]),
    );
    problem.replaceChildren(
      ...(op.error || op.errorCode
        ? [el('h2', {}, 'Error'), el('div', { class: 'error', role: 'alert' }, op.errorCode ? el('p', {}, el('strong', {}, 'errorCode '), el('code', {}, op.errorCode)) : null, op.error ? el('p', {}, op.error) : null)]
        : []),
    );
    result.replaceChildren(...(op.result !== undefined ? [el('h2', {}, 'Result'), el('pre', { class: 'json' }, JSON.stringify(op.result, null, 2))] : []));
    attempts.replaceChildren(el('h2', { id: 'attempts-title' }, 'Attempts'), attemptsTable(el, op.attempts));
    drawActions();
    drawArtifact();
  }
  draw(op);
  drawRequest(ctx, request, id);

  // A busy operation changes hundreds of times a second: draw the newest state at most
  // once per frame, so the page (and its buttons) stay responsive.
  let pending = null;
  function drawSoon(next) {
    const scheduled = pending !== null;
    if (!scheduled || next.version >= pending.version) pending = next;
    if (scheduled) return;
    requestAnimationFrame(() => {
      const latest = pending;
      pending = null;
      draw(latest);
    });
  }

  let stop = null;
  function follow() {
    if (stop) stop();
    stop = ctx.stream(
      paths.operationEvents(id),
      drawSoon,
      (state) => {
        live.textContent =
          state === 'open' ? 'Live.' : state === 'ended' ? (TERMINAL.has(op.state) ? 'Finished.' : '') : state === 'failed' ? 'Live updates are unavailable; reload to refresh.' : 'Reconnecting…';
      },
    );
  }
  follow();
  return () => stop && stop();
}
