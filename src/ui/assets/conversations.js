// Conversations, read-only: an agent's conversations (`conversations:list` takes an agent
// id: the API has no tenant-wide listing), any conversation by id, and a conversation's
// messages page by page, oldest first (`POST /internal/v1/context/messages`, cursor-paged,
// optionally by role). Handy for seeing exactly what an agent will be given.

import { fmtCount, openByIdForm, time } from './widgets.js';

/** Columns of numbers: right-aligned like their cells. */
const NUMERIC = new Set(['Final score', 'Lexical', 'Messages', 'Rank', 'Recency', 'Sequence', 'Vector', 'Version']);

/** A table's head row of column headers (numeric columns right-aligned). */
export function headRow(el, names) {
  return el('thead', {}, el('tr', {}, names.map((h) => el('th', { scope: 'col', class: NUMERIC.has(h) ? 'num' : null }, h))));
}

const AGENT_KEY = 'context-ops.agent';
/** The most `conversations:list` is asked for (it has no cursor). */
const LIST_LIMIT = 200;
const PAGE_SIZES = [25, 50, 100, 200];
const ROLES = ['user', 'assistant', 'tool', 'system', 'event'];

export async function render(main, params, ctx) {
  const id = routeId(params);
  return id ? renderConversation(main, id, ctx) : renderList(main, ctx);
}

/** The id in the route (`#/conversations/<id>`, `#/entries/<id>`), percent-decoded. */
export function routeId(params) {
  if (!params.id) return null;
  try {
    return decodeURIComponent(params.id);
  } catch {
    return params.id; // not percent-encoded after all: take it as typed
  }
}

/** `#/conversations`: an agent's conversations, and a box to open one by id. */
async function renderList(main, ctx) {
  const { el } = ctx;
  const agent = el('input', { id: 'conv-agent', name: 'agent', required: true, autocomplete: 'off', value: sessionStorage.getItem(AGENT_KEY) || '' });
  const results = el('div', { 'aria-live': 'polite' });
  const list = async () => {
    const agentId = agent.value.trim();
    if (!agentId) return;
    sessionStorage.setItem(AGENT_KEY, agentId);
    results.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
    try {
      const answer = await ctx.api('POST', ctx.paths.conversations, { agentId, limit: LIST_LIMIT });
      results.replaceChildren(el('div', { class: 'table-wrap' }, conversationTable(ctx, agentId, answer.items)));
    } catch (e) {
      results.replaceChildren(failureNote(ctx, e));
    }
  };
  const byAgent = el(
    'form',
    { class: 'panel row', 'aria-label': 'List an agent’s conversations', on: { submit: (e) => { e.preventDefault(); list(); } } },
    el('div', { class: 'field' }, el('label', { for: 'conv-agent' }, 'Agent id'), agent),
    el('button', { type: 'submit' }, 'List conversations'),
  );
  const byId = openByIdForm({
    id: 'conv-id', name: 'conversation', label: 'Conversation id', formLabel: 'Open a conversation by id',
    button: 'Open conversation', route: 'conversations',
  });
  main.replaceChildren(
    el('h1', {}, 'Conversations'),
    el('p', { class: 'muted' }, 'Read-only. Conversations are listed per agent (the agent id of their messages’ scope).'),
    el('section', { 'aria-labelledby': 'conv-by-agent' }, el('h2', { id: 'conv-by-agent' }, 'By agent'), byAgent, results),
    el('section', { 'aria-labelledby': 'conv-by-id' }, el('h2', { id: 'conv-by-id' }, 'By id'), byId),
  );
  if (agent.value) await list();
}

function conversationTable(ctx, agentId, items) {
  const { el } = ctx;
  if (!items.length) return el('p', { role: 'status' }, `No conversations for agent ${agentId}.`);
  return el(
    'table',
    {},
    el('caption', {}, `Conversations of agent ${agentId} (${fmtCount(items.length)}), most recently updated first${items.length >= LIST_LIMIT ? ' (the most shown at once)' : ''}`),
    headRow(el, ['Conversation', 'Messages', 'Created', 'Updated']),
    el(
      'tbody',
      {},
      items.map((c) =>
        el(
          'tr',
          {},
          el('td', {}, el('a', { href: `#/conversations/${encodeURIComponent(c.conversationId)}` }, c.conversationId)),
          el('td', { class: 'num' }, fmtCount(c.messageCount)),
          el('td', {}, time(c.createdAtMs)),
          el('td', {}, time(c.updatedAtMs)),
        ),
      ),
    ),
  );
}

/** `#/conversations/<id>`: its messages, a page at a time, with a role filter. */
async function renderConversation(main, conversationId, ctx) {
  const { el } = ctx;
  // Cursors of the pages seen so far: index i holds the cursor that fetched page i+1.
  const cursors = [null];
  let page = 0;
  let nextCursor = null;
  const size = el('select', { id: 'msg-size', name: 'size' }, PAGE_SIZES.map((n) => el('option', { value: String(n), selected: n === 50 }, String(n))));
  const role = el('select', { id: 'msg-role', name: 'role' }, el('option', { value: '' }, 'all roles'), ROLES.map((r) => el('option', { value: r }, r)));
  const status = el('p', { role: 'status', class: 'muted' });
  const body = el('div', { class: 'table-wrap' });
  const prev = el('button', { type: 'button', disabled: true, on: { click: () => load(page - 1) } }, 'Previous page');
  const next = el('button', { type: 'button', disabled: true, on: { click: () => load(page + 1) } }, 'Next page');

  async function load(target) {
    if (target < 0 || target >= cursors.length) return;
    const request = { scope: { conversationId }, limit: Number(size.value) };
    if (cursors[target]) request.cursor = cursors[target];
    if (role.value) request.roles = [role.value];
    prev.disabled = next.disabled = true;
    status.textContent = 'Loading…';
    try {
      const answer = await ctx.api('POST', ctx.paths.messagesPage, request);
      page = target;
      nextCursor = answer.nextCursor ?? null;
      cursors.length = page + 1;
      if (nextCursor) cursors.push(nextCursor);
      body.replaceChildren(messageTable(ctx, answer.items));
      const first = answer.items[0]?.sequence;
      const last = answer.items.at(-1)?.sequence;
      status.textContent = answer.items.length
        ? `Page ${page + 1}: ${fmtCount(answer.items.length)} messages, sequence ${first} to ${last}${nextCursor ? '' : ' (the last page)'}`
        : page === 0 ? 'No messages in this conversation.' : `Page ${page + 1} is empty.`;
    } catch (e) {
      body.replaceChildren(failureNote(ctx, e));
      status.textContent = '';
    }
    prev.disabled = page === 0;
    next.disabled = !nextCursor;
  }
  const restart = () => {
    cursors.length = 1;
    load(0);
  };
  size.addEventListener('change', restart);
  role.addEventListener('change', restart);

  main.replaceChildren(
    el('p', {}, el('a', { href: '#/conversations' }, '← Conversations')),
    el('h1', {}, `Conversation ${conversationId}`),
    el(
      'div',
      { class: 'row' },
      el('div', { class: 'field' }, el('label', { for: 'msg-role' }, 'Role'), role),
      el('div', { class: 'field' }, el('label', { for: 'msg-size' }, 'Page size'), size),
    ),
    status,
    body,
    el('nav', { class: 'pager', 'aria-label': 'Message pages' }, prev, next),
  );
  await load(0);
}

function messageTable(ctx, items) {
  const { el } = ctx;
  if (!items.length) return el('div');
  return el(
    'table',
    {},
    el('caption', {}, 'Messages, oldest first'),
    headRow(el, ['Sequence', 'Role', 'Message id', 'Created', 'Content']),
    el(
      'tbody',
      {},
      items.map((m) =>
        el(
          'tr',
          {},
          el('td', { class: 'num' }, String(m.sequence ?? '')),
          el('td', {}, m.role, m.name ? ` (${m.name})` : '', m.toolCallId ? ` · call ${m.toolCallId}` : ''),
          el('td', { class: 'mono' }, m.id),
          el('td', {}, time(m.createdAtMs)),
          el('td', {}, contentView(ctx, m.content)),
        ),
      ),
    ),
  );
}

/** A message's or an entry's content: text as text, anything else as indented JSON. */
export function contentView(ctx, content) {
  if (typeof content === 'string') return ctx.el('span', {}, content);
  return ctx.el('pre', { class: 'json' }, JSON.stringify(content, null, 2));
}

/** A refusal as a visible alert (404 for another tenant's data reads as not found). */
export function failureNote(ctx, e) {
  const status = e && e.status ? `${e.status}: ` : '';
  return ctx.el('p', { role: 'alert', class: 'error' }, `${status}${e && e.message ? e.message : String(e)}`);
}

