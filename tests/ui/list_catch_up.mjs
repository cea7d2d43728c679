// The Operations list catches up when its event stream opens: a stream that starts after
// the page's list was read (here: refused at first, the process's one stream being held)
// begins at the service's position then, so what changed in between came as no event —
// a new operation never appeared and a finished one stayed "running" until a reload.
// tests/it/ui/operations.rs starts the service with CONTEXT_OPS_MAX_EVENT_STREAMS=1.

import { BASE_URL, SERVICE_TOKEN, api, assert, expectText, log, scenario, screenshot, signIn, until } from './lib.mjs';

await scenario('list_catch_up', async ({ page, result }) => {
  log('hold the process\'s one event stream');
  const held = new AbortController();
  const stream = await fetch(`${BASE_URL}/internal/v1/context/operations/events`, {
    headers: { authorization: `Bearer ${SERVICE_TOKEN}`, accept: 'text/event-stream' },
    signal: held.signal,
  });
  assert(stream.ok, `the held stream answered ${stream.status}`);
  await signIn(page, SERVICE_TOKEN, '#/operations');
  const live = page.getByText(/Reconnecting for live updates|Live: rows update/);
  await expectText(live, /Reconnecting/);

  log('a delete runs to its end while the page has no stream');
  const submitted = await api('POST', '/internal/v1/context/conversations/delete', { scope: { conversationId: 'gone' } });
  assert(submitted.status === 202, `submitted: ${JSON.stringify(submitted)}`);
  const id = submitted.body.id;
  await until('the delete succeeded', async () => (await api('GET', `/internal/v1/context/operations/${id}`)).body.state === 'succeeded');
  result.operationId = id;

  log('release the stream: the page connects and catches up');
  held.abort();
  await expectText(live, /Live/, 30_000);
  await expectText(page.locator(`tr[data-id="${id}"]`), /succeeded/, 15_000);
  await screenshot(page, 'list-caught-up');
});
