// The operations list: `GET …/operations` newest first, filtered by kind, state, tenant
// (admins), creation time and id prefix, cursor-paged. The filters live in the URL's hash
// (`#/operations?kind=export&state=running`), so a filtered view can be bookmarked and the
// Back button pages back. Rows update live from the operations' event stream: a shown
// operation's state and progress change in place, and on the first page a new matching
// operation is added at the top.

import { exportForm } from './export_form.js';
import { KINDS, STATES, fmtCount, progressBar, stateBadge, time } from './widgets.js';

const PAGE = 50;

/** `datetime-local` text ↔ epoch ms (local time, as the user reads it). */
function toLocalInput(ms) {
  if (!ms) return '';
  const d = new Date(Number(ms));
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function fromLocalInput(text) {
  if (!text) return '';
  const ms = new Date(text).getTime();
  return Number.isFinite(ms) ? String(ms) : '';
}

function select(el, id, label, values, current) {
  return el(
    'div',
    { class: 'field' },
    el('label', { for: id }, label),
    el('select', { id, name: id }, el('option', { value: '' }, 'Any'), values.map((v) => el('option', { value: v, selected: v === current }, v))),
  );
}

function input(el, id, label, attrs) {
  return el('div', { class: 'field' }, el('label', { for: id }, label), el('input', { id, name: id, autocomplete: 'off', ...attrs }));
}

/** Whether an operation from the stream belongs on this page's filters. */
function matches(op, f) {
  if (f.kind && op.kind !== f.kind) return false;
  if (f.state && op.state !== f.state) return false;
  if (f.q && !op.id.startsWith(f.q.toUpperCase())) return false;
  if (f.createdAfterMs && op.createdAtMs < Number(f.createdAfterMs)) return false;
  if (f.createdBeforeMs && op.createdAtMs >= Number(f.createdBeforeMs)) return false;
  return true;
}

export async function render(main, params, ctx) {
  const { el, api, paths, session } = ctx;
  const q = params.query;
  const f = {
    kind: q.get('kind') || '',
    state: q.get('state') || '',
    tenant: session.admin ? q.get('tenant') || '' : '',
    createdAfterMs: q.get('createdAfterMs') || '',
    createdBeforeMs: q.get('createdBeforeMs') || '',
    q: q.get('q') || '',
  };
  const cursor = q.get('cursor') || '';
  const showTenant = session.admin;

  const form = el(
    'form',
    { class: 'panel row', 'aria-label': 'Filter operations' },
    select(el, 'filter-kind', 'Kind', KINDS, f.kind),
    select(el, 'filter-state', 'State', STATES, f.state),
    showTenant ? input(el, 'filter-tenant', 'Tenant', { value: f.tenant, placeholder: 'tenantId/projectId or *' }) : null,
    input(el, 'filter-after', 'Created after', { type: 'datetime-local', value: toLocalInput(f.createdAfterMs) }),
    input(el, 'filter-before', 'Created before', { type: 'datetime-local', value: toLocalInput(f.createdBeforeMs) }),
    input(el, 'filter-id', 'Id starts with', { value: f.q, spellcheck: 'false', maxlength: 26 }),
    el('button', { type: 'submit' }, 'Apply filters'),
    el('button', { type: 'button', class: 'secondary', on: { click: () => ctx.navigate('#/operations') } }, 'Clear filters'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = (id) => form.querySelector(`#${id}`)?.value.trim() || '';
    const next = new URLSearchParams();
    const set = (k, val) => val && next.set(k, val);
    set('kind', v('filter-kind'));
    set('state', v('filter-state'));
    set('tenant', v('filter-tenant'));
    set('createdAfterMs', fromLocalInput(v('filter-after')));
    set('createdBeforeMs', fromLocalInput(v('filter-before')));
    set('q', v('filter-id'));
    const s = next.toString();
    ctx.navigate(`#/operations${s ? `?${s}` : ''}`);
  });

  const list = { ...f, cursor, limit: PAGE };
  const page = await api('GET', paths.operations + ctx.query(list));

  const rows = new Map();
  const body = el('tbody');
  const tenantShown = showTenant && f.tenant && f.tenant !== '';
  const drawRow = (op) => {
    const bar = progressBar(op, `Progress of ${op.id}`);
    const badge = el('td', {}, stateBadge(op.state));
    const updated = el('td', {}, time(op.updatedAtMs));
    const tr = el(
      'tr',
      { 'data-id': op.id, 'data-created': String(op.createdAtMs) },
      el('td', {}, el('a', { href: `#/operations/${op.id}`, class: 'mono' }, op.id)),
      el('td', {}, op.kind),
      badge,
      el('td', {}, bar),
      tenantShown ? el('td', { class: 'mono' }, op.tenant) : null,
      el('td', {}, time(op.createdAtMs)),
      updated,
      el('td', { class: 'num' }, fmtCount(op.attempt)),
    );
    rows.set(op.id, {
      tr,
      version: op.version,
      update(o) {
        // A page read may answer after a newer event: never show an older version.
        if (o.version < this.version) return;
        this.version = o.version;
        badge.replaceChildren(stateBadge(o.state));
        bar.update(o);
        updated.replaceChildren(time(o.updatedAtMs));
      },
    });
    return tr;
  };
  body.append(...page.items.map(drawRow));
  // Only operations newer than the page's newest are new: others changed off this page.
  let newest = page.items.length ? page.items[0].createdAtMs : 0;

  const heads = ['Id', 'Kind', 'State', 'Progress', tenantShown ? 'Tenant' : null, 'Created', 'Updated', 'Attempt'].filter(Boolean);
  const table = el(
    'table',
    { id: 'operations' },
    el('caption', {}, cursor ? 'Operations (older page), newest first' : 'Operations, newest first'),
    el('thead', {}, el('tr', {}, heads.map((h) => el('th', { scope: 'col', class: h === 'Attempt' ? 'num' : null }, h)))),
    body,
  );
  const empty = el('p', { class: 'muted' }, page.items.length ? '' : 'No operation matches.');
  const more = new URLSearchParams(q);
  if (page.nextCursor) more.set('cursor', page.nextCursor);
  const first = new URLSearchParams(q);
  first.delete('cursor');
  const pager = el(
    'nav',
    { class: 'pager', 'aria-label': 'Pages' },
    cursor ? el('a', { href: `#/operations${first.toString() ? `?${first}` : ''}` }, 'First page') : null,
    page.nextCursor ? el('a', { href: `#/operations?${more}` }, 'Older operations') : null,
  );
  const live = el('p', { class: 'live', role: 'status' });
  main.append(el('h1', {}, 'Operations'), form, live, el('div', { class: 'table-wrap' }, table), empty, pager, exportForm(ctx));

  // A row the table lacks goes in at its place by creation time (newest first).
  const insert = (op) => {
    const before = [...body.children].find((tr) => Number(tr.dataset.created) < op.createdAtMs);
    body.insertBefore(drawRow(op), before ?? null);
    newest = Math.max(newest, op.createdAtMs);
    empty.textContent = '';
  };
  const show = (op) => {
    const shown = rows.get(op.id);
    if (shown) shown.update(op);
    // A new operation (the newest): at the top of the first page.
    else if (!cursor && matches(op, f) && op.createdAtMs >= newest) insert(op);
  };
  // A stream opened without a position starts at the service's position then: what changed
  // since the page was read came as no event. Read the page again once it is open; what it
  // shows that the table lacks goes in at its place by creation time (an event for a newer
  // operation may have come first).
  const catchUp = async () => {
    const fresh = await api('GET', paths.operations + ctx.query(list));
    for (const op of fresh.items) {
      const shown = rows.get(op.id);
      if (shown) shown.update(op);
      else insert(op);
    }
  };
  const streamQuery = ctx.query({ kind: f.kind, tenant: f.tenant });
  const stop = ctx.stream(paths.operationsEvents + streamQuery, show, (state) => {
    live.textContent = state === 'open' ? 'Live: rows update as operations change.' : state === 'failed' ? 'Live updates are unavailable; reload to refresh.' : 'Reconnecting for live updates…';
    if (state === 'open') catchUp().catch(() => {});
  });
  return stop;
}
