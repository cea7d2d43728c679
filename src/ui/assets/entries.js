// Entries, read-only: a recall box (`POST /internal/v1/context/recall`) showing each
// result's score breakdown (lexical, vector, recency and the final score the ranking used),
// and one entry by id with every version of its history (`entries/get`,
// `GET entries/{id}/history`). The API has no listing of a tenant's entries, so the page
// starts from a recall or an id — what an agent would be given is exactly what recall says.

import { contentView, failureNote, headRow, routeId } from './conversations.js';
import { facts, fmtCount, openByIdForm, time } from './widgets.js';

const QUERY_KEY = 'context-ops.recall-query';

export async function render(main, params, ctx) {
  const { el } = ctx;
  const entryId = routeId(params);
  const recallResults = el('div', { 'aria-live': 'polite' });
  const entryView = el('div', { 'aria-live': 'polite' });

  const query = el('input', { id: 'recall-query', name: 'query', type: 'search', required: true, autocomplete: 'off', value: sessionStorage.getItem(QUERY_KEY) || '' });
  const conversation = el('input', { id: 'recall-conversation', name: 'conversation', autocomplete: 'off' });
  const limit = el('input', { id: 'recall-limit', name: 'limit', type: 'number', min: 1, max: 100, value: '10' });
  const recall = async () => {
    const text = query.value.trim();
    if (!text) return;
    sessionStorage.setItem(QUERY_KEY, text);
    const request = { query: text, limit: Number(limit.value) || 10 };
    if (conversation.value.trim()) request.conversationId = conversation.value.trim();
    recallResults.replaceChildren(el('p', { class: 'muted' }, 'Recalling…'));
    try {
      recallResults.replaceChildren(recallTable(ctx, text, await ctx.api('POST', ctx.paths.recall, request)));
    } catch (e) {
      recallResults.replaceChildren(failureNote(ctx, e));
    }
  };
  const recallForm = el(
    'form',
    { class: 'panel row', 'aria-label': 'Recall', on: { submit: (e) => { e.preventDefault(); recall(); } } },
    el('div', { class: 'field' }, el('label', { for: 'recall-query' }, 'Query'), query),
    el('div', { class: 'field' }, el('label', { for: 'recall-conversation' }, 'Conversation id (optional)'), conversation),
    el('div', { class: 'field' }, el('label', { for: 'recall-limit' }, 'Results'), limit),
    el('button', { type: 'submit' }, 'Recall'),
  );

  const idForm = openByIdForm({
    id: 'entry-id', name: 'entry', label: 'Entry id', formLabel: 'Show an entry by id',
    button: 'Show entry', route: 'entries', value: entryId || '',
  });

  main.replaceChildren(
    el('h1', {}, 'Entries'),
    el('p', { class: 'muted' }, 'Read-only. Find entries by recall (as an agent would) or open one by id to see its history.'),
    el('section', { 'aria-labelledby': 'recall-title' }, el('h2', { id: 'recall-title' }, 'Recall'), recallForm, recallResults),
    el('section', { 'aria-labelledby': 'entry-title' }, el('h2', { id: 'entry-title' }, 'Entry'), idForm, entryView),
  );
  const work = [];
  if (query.value) work.push(recall());
  if (entryId) work.push(showEntry(ctx, entryId, entryView));
  await Promise.all(work);
  if (entryId) entryView.scrollIntoView({ block: 'start' });
}

const score = (n) => (typeof n === 'number' ? n.toFixed(3) : '—');

function recallTable(ctx, text, answer) {
  const { el } = ctx;
  const w = answer.indexWatermark;
  const watermark = el(
    'p',
    { class: 'muted' },
    `Index: ${fmtCount(w.projectedVersion)} of ${fmtCount(w.sourceVersion)} writes projected`,
    w.lag ? ` (${fmtCount(w.lag)} behind: the newest entries may be missing)` : ' (up to date)',
  );
  if (!answer.items.length) return el('div', {}, el('p', { role: 'status' }, `Nothing recalled for “${text}”.`), watermark);
  const table = el(
    'table',
    {},
    el('caption', {}, `Recall for “${text}”: ${answer.items.length} result${answer.items.length === 1 ? '' : 's'}, best first, with the score breakdown`),
    headRow(el, ['Rank', 'Entry', 'Kind', 'Content', 'Lexical', 'Vector', 'Recency', 'Final score']),
    el(
      'tbody',
      {},
      answer.items.map((item, i) =>
        el(
          'tr',
          {},
          el('td', { class: 'num' }, String(i + 1)),
          el('td', {}, el('a', { href: `#/entries/${encodeURIComponent(item.entry.id)}` }, item.entry.id)),
          el('td', {}, item.entry.kind),
          el('td', {}, contentView(ctx, item.entry.content)),
          el('td', { class: 'num' }, score(item.score.lexical)),
          el('td', { class: 'num' }, score(item.score.vector)),
          el('td', { class: 'num' }, score(item.score.recency)),
          el('td', { class: 'num' }, el('strong', {}, score(item.score.finalScore))),
        ),
      ),
    ),
  );
  return el('div', {}, el('div', { class: 'table-wrap' }, table), watermark);
}

async function showEntry(ctx, id, into) {
  const { el } = ctx;
  into.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
  try {
    const [entry, history] = await Promise.all([
      ctx.api('POST', ctx.paths.entryGet, { entryId: id }),
      ctx.api('GET', ctx.paths.entryHistory(id)),
    ]);
    into.replaceChildren(
      el('h3', {}, `Entry ${entry.id}`),
      facts([
        ['Kind', entry.kind],
        ['Status', entry.status],
        ['Version', String(entry.version)],
        ['Content', contentView(ctx, entry.content)],
        entry.attributes !== undefined && entry.attributes !== null ? ['Attributes', contentView(ctx, entry.attributes)] : null,
        ['Conversation', el('a', { href: `#/conversations/${encodeURIComponent(entry.provenance.conversationId)}` }, entry.provenance.conversationId)],
        entry.provenance.messageIds?.length ? ['Source messages', entry.provenance.messageIds.join(', ')] : null,
        entry.supersededBy ? ['Superseded by', el('a', { href: `#/entries/${encodeURIComponent(entry.supersededBy)}` }, entry.supersededBy)] : null,
        entry.expiresAtMs ? ['Expires', time(entry.expiresAtMs)] : null,
        ['Created', time(entry.createdAtMs)],
        ['Updated', time(entry.updatedAtMs)],
      ]),
      el('div', { class: 'table-wrap' }, historyTable(ctx, history.items)),
    );
  } catch (e) {
    into.replaceChildren(failureNote(ctx, e));
  }
}

function historyTable(ctx, items) {
  const { el } = ctx;
  return el(
    'table',
    {},
    el('caption', {}, `History: ${items.length} version${items.length === 1 ? '' : 's'}, oldest first`),
    headRow(el, ['Version', 'Change', 'Reason', 'Status', 'Content', 'Updated']),
    el(
      'tbody',
      {},
      items.map((v) =>
        el(
          'tr',
          {},
          el('td', { class: 'num' }, String(v.version)),
          el('td', {}, v.change),
          el('td', {}, v.reason ?? ''),
          el('td', {}, v.entry.status),
          el('td', {}, contentView(ctx, v.entry.content)),
          el('td', {}, time(v.entry.updatedAtMs)),
        ),
      ),
    ),
  );
}
