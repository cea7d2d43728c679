// Controls (admins): pause and resume a kind for everyone or for one tenant
// (`POST …/queues/{kind}/pause|resume`), and bulk cancel / retry / forget over a filter
// (`POST …/operations/bulk`): the count it will affect comes from a dry run first and is
// shown in the confirmation. The same public API as every other client.

import { KINDS, STATES } from './widgets.js';

function field(el, id, label, control) {
  return el('div', { class: 'field' }, el('label', { for: id }, label), control);
}

function options(el, values, anyLabel) {
  return [anyLabel ? el('option', { value: '' }, anyLabel) : null, values.map((v) => el('option', { value: v }, v))];
}

const CONSEQUENCE = {
  cancel: 'Queued ones stop at once, running ones at their next batch boundary.',
  retry: 'They are queued again and run from their checkpoint where their kind can.',
  forget: 'Their records are deleted for good.',
};

const PAST = { cancel: 'Cancelled', retry: 'Queued again', forget: 'Forgot' };

export async function render(main, params, ctx) {
  const { el, api, paths } = ctx;
  main.append(el('h1', {}, 'Controls'));

  // Pauses.
  const tenantInput = el('input', { id: 'pause-tenant', name: 'tenant', placeholder: 'tenantId/projectId', autocomplete: 'off' });
  const pauseStatus = el('p', { class: 'live', role: 'status' });
  const body = el('tbody');
  main.append(
    el(
      'section',
      { class: 'panel', 'aria-labelledby': 'pauses-title' },
      el('h2', { id: 'pauses-title' }, 'Pause and resume'),
      el('p', {}, 'A paused kind keeps its queued work queued (phase "paused"); running work finishes. Leave the tenant empty to pause for everyone.'),
      el('div', { class: 'row' }, field(el, 'pause-tenant', 'For tenant (optional)', tenantInput)),
      el(
        'table',
        { id: 'pauses' },
        el('caption', {}, 'Kinds'),
        el('thead', {}, el('tr', {}, ['Kind', 'Paused for everyone', 'Paused for tenants', 'Actions'].map((h) => el('th', { scope: 'col' }, h)))),
        body,
      ),
      pauseStatus,
    ),
  );

  async function refresh() {
    const figures = await api('GET', paths.queues);
    body.replaceChildren(
      ...figures.kinds.map((k) =>
        el(
          'tr',
          { 'data-kind': k.kind },
          el('th', { scope: 'row' }, k.kind),
          el('td', {}, k.paused ? el('span', { class: 'badge paused' }, 'Paused') : 'No'),
          el(
            'td',
            {},
            k.pausedTenants.length
              ? el('ul', {}, k.pausedTenants.map((t) => el('li', {}, el('span', { class: 'mono' }, t), ' ', el('button', { type: 'button', class: 'secondary', 'aria-label': `Resume ${k.kind} for ${t}`, on: { click: () => setPaused(k.kind, false, t) } }, 'Resume'))))
              : '—',
          ),
          el(
            'td',
            {},
            el(
              'div',
              { class: 'actions' },
              el('button', { type: 'button', 'aria-label': `Pause ${k.kind}`, on: { click: () => setPaused(k.kind, true) } }, 'Pause'),
              el('button', { type: 'button', class: 'secondary', 'aria-label': `Resume ${k.kind}`, on: { click: () => setPaused(k.kind, false) } }, 'Resume'),
            ),
          ),
        ),
      ),
    );
  }

  async function setPaused(kind, paused, forTenant) {
    const tenant = forTenant ?? tenantInput.value.trim();
    try {
      const answer = await api('POST', paused ? paths.pause(kind) : paths.resume(kind), tenant ? { tenant } : undefined);
      const who = answer.tenant ? ` for ${answer.tenant}` : ' for everyone';
      pauseStatus.textContent = `${kind} ${answer.paused ? 'paused' : 'resumed'}${who}; ${answer.marked} queued operation${answer.marked === 1 ? '' : 's'} updated.`;
      await refresh();
    } catch (e) {
      pauseStatus.textContent = `Could not ${paused ? 'pause' : 'resume'} ${kind}: ${e.message}`;
    }
  }
  await refresh();

  // Bulk actions.
  const form = el(
    'form',
    { class: 'row', 'aria-labelledby': 'bulk-title' },
    field(el, 'bulk-action', 'Action', el('select', { id: 'bulk-action', name: 'action' }, options(el, ['cancel', 'retry', 'forget']))),
    field(el, 'bulk-kind', 'Kind', el('select', { id: 'bulk-kind', name: 'kind' }, options(el, KINDS, 'Any'))),
    field(el, 'bulk-state', 'State', el('select', { id: 'bulk-state', name: 'state' }, options(el, STATES, 'Any'))),
    field(el, 'bulk-tenant', 'Tenant', el('input', { id: 'bulk-tenant', name: 'tenant', placeholder: 'tenantId/projectId or *', autocomplete: 'off' })),
    field(el, 'bulk-after', 'Created after', el('input', { id: 'bulk-after', name: 'after', type: 'datetime-local' })),
    field(el, 'bulk-before', 'Created before', el('input', { id: 'bulk-before', name: 'before', type: 'datetime-local' })),
    el('button', { type: 'button', class: 'secondary', on: { click: () => preview() } }, 'Count affected'),
    el('button', { type: 'submit', class: 'danger' }, 'Run bulk action'),
  );
  const bulkStatus = el('p', { class: 'live', role: 'status' });
  main.append(
    el(
      'section',
      { class: 'panel' },
      el('h2', { id: 'bulk-title' }, 'Bulk actions'),
      el('p', {}, 'Cancel, retry or forget every operation a filter matches (at least one part of the filter is required). The count comes from a dry run first; nothing changes until you confirm.'),
      form,
      bulkStatus,
    ),
  );

  function request(dryRun) {
    const v = (id) => form.querySelector(`#${id}`).value.trim();
    const ms = (id) => (v(id) ? new Date(v(id)).getTime() : undefined);
    const filter = { kind: v('bulk-kind') || undefined, state: v('bulk-state') || undefined, tenant: v('bulk-tenant') || undefined, createdAfterMs: ms('bulk-after'), createdBeforeMs: ms('bulk-before') };
    return { action: v('bulk-action'), filter, dryRun };
  }

  async function preview() {
    try {
      const dry = await api('POST', paths.bulk, request(true));
      bulkStatus.textContent = `${dry.matched} operation${dry.matched === 1 ? '' : 's'} match; ${dry.changed} would change (${dry.action}).`;
      return dry;
    } catch (e) {
      bulkStatus.textContent = `Could not count: ${e.message}`;
      return null;
    }
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const dry = await preview();
    if (!dry) return;
    if (dry.changed === 0) {
      bulkStatus.textContent = `Nothing to ${dry.action}: ${dry.matched} match, none would change.`;
      return;
    }
    const ok = await ctx.confirm(`${dry.action[0].toUpperCase()}${dry.action.slice(1)} ${dry.changed} operation${dry.changed === 1 ? '' : 's'}?`, `${dry.matched} match the filter; ${dry.changed} would change. ${CONSEQUENCE[dry.action]}`);
    if (!ok) {
      bulkStatus.textContent = 'Nothing changed.';
      return;
    }
    try {
      const done = await api('POST', paths.bulk, request(false));
      bulkStatus.textContent = `${PAST[done.action]} ${done.changed} of ${done.matched} matching operation${done.matched === 1 ? '' : 's'}.`;
    } catch (err) {
      bulkStatus.textContent = `The bulk action failed: ${err.message}`;
    }
  });
  return null;
}
