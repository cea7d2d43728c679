// Pause and resume a kind on the Controls page (admin): after "Pause export" the API says
// export is paused and an export submitted meanwhile waits queued with phase "paused" (its
// page says so); after "Resume export" the API says it is not, and that export runs to
// succeeded. The Rust test (tests/it/ui/controls.rs) checks the held export's end too.

import { ADMIN_TOKEN, SERVICE_TOKEN, api, assert, expectText, go, log, scenario, screenshot, signIn, until } from './lib.mjs';

/** The API's view: is export paused for everyone? */
async function exportPaused() {
  const answer = await api('GET', '/internal/v1/context/queues', undefined, ADMIN_TOKEN);
  assert(answer.status === 200, `queues: ${JSON.stringify(answer.body)}`);
  return answer.body.kinds.find((k) => k.kind === 'export').paused;
}

await scenario('controls', async ({ page, result }) => {
  await signIn(page, ADMIN_TOKEN, '#/controls');
  await page.getByRole('heading', { name: 'Controls', level: 1 }).waitFor();
  const row = page.locator('tr[data-kind="export"]');
  assert(!(await exportPaused()), 'export starts unpaused');

  log('pause export');
  await page.getByRole('button', { name: 'Pause export' }).click();
  await expectText(page.getByRole('status').filter({ hasText: 'export' }), /export paused for everyone/);
  await expectText(row, /Paused/);
  assert(await exportPaused(), 'the API says export is paused');
  await screenshot(page, 'controls-paused');

  log('an export submitted meanwhile is held');
  const submitted = await api('POST', '/internal/v1/context/exports', {}, SERVICE_TOKEN);
  assert(submitted.status === 202, `export: ${JSON.stringify(submitted.body)}`);
  const held = submitted.body.id;
  result.heldOperationId = held;
  await until('the export to be held with phase paused', async () => {
    const op = await api('GET', `/internal/v1/context/operations/${held}`);
    return op.body.state === 'queued' && op.body.phase === 'paused';
  });
  await go(page, `#/operations/${held}`);
  await expectText(page.getByRole('progressbar', { name: 'Progress', exact: true }).locator('xpath=..'), /paused/);
  await expectText(page.getByRole('heading', { level: 1 }), /queued/);

  log('resume export');
  await go(page, '#/controls', 'Controls');
  await page.getByRole('button', { name: 'Resume export' }).click();
  await expectText(page.getByRole('status').filter({ hasText: 'export' }), /export resumed for everyone/);
  await expectText(row, /^export\s*No/);
  assert(!(await exportPaused()), 'the API says export is not paused');
  await screenshot(page, 'controls-resumed');
  await go(page, `#/operations/${held}`);
  await expectText(page.getByRole('heading', { level: 1 }), /succeeded/, 30_000);
});
