// "Submit an export" on the Operations page: `POST /internal/v1/context/exports` with the
// caller's credential (their own tenant's records), optionally narrowed to an agent's or
// some conversations and with expired entries; on success it opens the new operation's
// page, where its progress, result and artifact download are.

function field(el, id, label, control) {
  return el('div', { class: 'field' }, el('label', { for: id }, label), control);
}

export function exportForm(ctx) {
  const { el } = ctx;
  const agent = el('input', { id: 'export-agent', name: 'agent', autocomplete: 'off' });
  const conversations = el('input', { id: 'export-conversations', name: 'conversations', autocomplete: 'off', placeholder: 'id, id, …' });
  const expired = el('input', { id: 'export-expired', name: 'expired', type: 'checkbox' });
  const status = el('p', { class: 'live', role: 'status' });
  const form = el(
    'form',
    { class: 'row', 'aria-labelledby': 'export-title' },
    field(el, 'export-agent', 'Only agent (optional)', agent),
    field(el, 'export-conversations', 'Only conversations (optional)', conversations),
    el('div', { class: 'field' }, el('span', {}, expired, ' ', el('label', { for: 'export-expired' }, 'Include expired entries'))),
    el('button', { type: 'submit' }, 'Submit export'),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = {};
    const filter = {};
    if (agent.value.trim()) filter.agentId = agent.value.trim();
    const ids = conversations.value.split(',').map((s) => s.trim()).filter(Boolean);
    if (ids.length) filter.conversationIds = ids;
    if (Object.keys(filter).length) body.filter = filter;
    if (expired.checked) body.includeExpired = true;
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    status.textContent = 'Submitting…';
    try {
      const op = await ctx.api('POST', ctx.paths.exports, body);
      ctx.notify(`Export ${op.id} submitted.`);
      ctx.navigate(`#/operations/${op.id}`);
    } catch (e) {
      status.textContent = `The export was refused: ${e.message}`;
      button.disabled = false;
    }
  });
  return el(
    'section',
    { class: 'panel', 'aria-labelledby': 'export-title' },
    el('h2', { id: 'export-title' }, 'Submit an export'),
    el('p', {}, 'Exports your tenant’s messages and entries (or the part named here) to an artifact you can download from the operation’s page.'),
    form,
    status,
  );
}
