// The overview: per kind, what is queued and running, the last hour's outcomes, retries
// and recoveries, the oldest queued operation's age, queue wait and run time (p50/p95),
// throughput by minute (a small chart) and whether it is paused — all from
// `GET …/queues`. It re-reads the figures when the operations' event stream reports a
// change (at most once a second) and every 10 s besides (ages and minutes move on their
// own; and it is the fallback when the stream is down). Admins also see live workers.

import { fmtCount, fmtDuration, throttle, throughputChart, time } from './widgets.js';

const POLL_MS = 10000;

function row(k, el) {
  const status = k.paused
    ? el('span', { class: 'badge paused' }, 'Paused')
    : k.pausedTenants.length
      ? el('span', { class: 'badge paused' }, `Paused for ${k.pausedTenants.length} tenant${k.pausedTenants.length > 1 ? 's' : ''}`)
      : el('span', { class: 'muted' }, 'Active');
  const limit = [k.maxRunning && `at most ${k.maxRunning} running`, k.maxRunningPerTenant && `${k.maxRunningPerTenant} per tenant`].filter(Boolean).join(', ');
  return el(
    'tr',
    { 'data-kind': k.kind },
    el('th', { scope: 'row' }, el('a', { href: `#/operations?kind=${k.kind}` }, k.kind)),
    el('td', {}, status, limit ? el('div', { class: 'muted' }, limit) : null),
    el('td', { class: 'num' }, fmtCount(k.queued)),
    el('td', { class: 'num' }, fmtCount(k.running)),
    el('td', { class: 'num' }, fmtCount(k.succeededLastHour)),
    el('td', { class: 'num' }, fmtCount(k.failedLastHour)),
    el('td', { class: 'num' }, fmtCount(k.cancelledLastHour)),
    el('td', { class: 'num' }, fmtCount(k.retriesLastHour)),
    el('td', { class: 'num' }, fmtCount(k.recoveriesLastHour)),
    el('td', { class: 'num' }, k.oldestQueuedAgeMs === undefined ? '—' : fmtDuration(k.oldestQueuedAgeMs)),
    el('td', { class: 'num' }, `${fmtDuration(k.queueWaitMs.p50)} / ${fmtDuration(k.queueWaitMs.p95)}`),
    el('td', { class: 'num' }, `${fmtDuration(k.runMs.p50)} / ${fmtDuration(k.runMs.p95)}`),
    el('td', {}, throughputChart(k.finishedPerMinute, `${k.kind} throughput`)),
  );
}

const HEADS = [
  'Kind', 'Status', 'Queued', 'Running', 'Succeeded (1 h)', 'Failed (1 h)', 'Cancelled (1 h)',
  'Retries (1 h)', 'Recoveries (1 h)', 'Oldest queued', 'Queue wait p50 / p95', 'Run time p50 / p95',
  'Finished per minute (1 h)',
];

export async function render(main, params, ctx) {
  const { el, api, paths, session } = ctx;
  const tenant = session.admin ? params.query.get('tenant') || '' : '';
  const scopeText = el('p', { class: 'muted' });
  const live = el('p', { class: 'live', role: 'status' }, 'Connecting to the event stream…');
  const updated = el('p', { class: 'live' });
  const body = el('tbody');
  const table = el(
    'table',
    { id: 'kinds' },
    el('caption', {}, 'Operations by kind'),
    el('thead', {}, el('tr', {}, HEADS.map((h, i) => el('th', { scope: 'col', class: i >= 2 && i < 12 ? 'num' : null }, h)))),
    body,
  );
  const workers = el('section', { 'aria-labelledby': 'workers-title' });

  const input = el('input', { id: 'overview-tenant', name: 'tenant', placeholder: 'tenantId/projectId', value: tenant, autocomplete: 'off' });
  const show = (e) => {
    e.preventDefault();
    const t = input.value.trim();
    ctx.navigate(`#/overview${t ? `?tenant=${encodeURIComponent(t)}` : ''}`);
  };
  const filter = session.admin
    ? el(
        'form',
        { class: 'row panel', on: { submit: show } },
        el('div', { class: 'field' }, el('label', { for: 'overview-tenant' }, 'Tenant'), input),
        el('button', { type: 'submit' }, 'Show tenant'),
        tenant ? el('button', { type: 'button', class: 'secondary', on: { click: () => ctx.navigate('#/overview') } }, 'Every tenant') : null,
      )
    : null;

  main.append(el('h1', {}, 'Overview'), scopeText, filter, live, el('div', { class: 'table-wrap' }, table), updated, workers);

  let failures = 0;
  async function refresh() {
    try {
      const figures = await api('GET', paths.queues + (tenant ? `?tenant=${encodeURIComponent(tenant)}` : ''));
      failures = 0;
      scopeText.textContent = figures.scope === 'all' ? 'Every tenant’s operations.' : tenant ? `Tenant ${tenant}.` : 'Your tenant’s operations.';
      body.replaceChildren(...figures.kinds.map((k) => row(k, el)));
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
      if (figures.workers) {
        workers.replaceChildren(
          el('h2', { id: 'workers-title' }, `Live workers (${figures.workers.length})`),
          figures.workers.length
            ? el(
                'table',
                {},
                el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Worker'), el('th', { scope: 'col' }, 'Started'), el('th', { scope: 'col' }, 'Last seen'))),
                el('tbody', {}, figures.workers.map((w) => el('tr', {}, el('td', { class: 'mono' }, w.holder), el('td', {}, time(w.startedAtMs)), el('td', {}, time(w.seenAtMs))))),
              )
            : el('p', { class: 'muted' }, 'No worker process is announcing itself.'),
        );
      }
    } catch (e) {
      failures += 1;
      updated.textContent = `Could not refresh (${e.message}); trying again.`;
      if (failures === 1 && !body.childElementCount) throw e;
    }
  }
  await refresh();

  const soon = throttle(() => refresh().catch(() => {}), 1000);
  const timer = setInterval(soon, POLL_MS);
  const streamPath = paths.operationsEvents + (session.admin ? `?tenant=${encodeURIComponent(tenant || '*')}` : '');
  const stop = ctx.stream(streamPath, soon, (state) => {
    live.textContent =
      state === 'open'
        ? 'Live: updates on every change.'
        : state === 'failed'
          ? `The event stream is unavailable; refreshing every ${POLL_MS / 1000} s.`
          : `Reconnecting to the event stream; refreshing every ${POLL_MS / 1000} s meanwhile.`;
    if (state === 'open') soon();
  });
  return () => {
    stop();
    clearInterval(timer);
  };
}
