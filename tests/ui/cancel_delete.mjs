// Cancel a running delete from its page (tests/it/ui/operations.rs submits a delete of
// 50,000 messages, one per batch, and waits until it runs): the page shows it running,
// "Cancel operation" asks first, and after "Confirm" the page shows it cancelled, with
// "Retry operation" offered instead.

import { SERVICE_TOKEN, api, assert, env, expectText, log, scenario, screenshot, signIn } from './lib.mjs';

const OPERATION_ID = env('OPERATION_ID');

await scenario('cancel_delete', async ({ page }) => {
  await signIn(page, SERVICE_TOKEN, `#/operations/${OPERATION_ID}`);
  const heading = page.getByRole('heading', { level: 1 });
  await expectText(heading, /running/);
  await screenshot(page, 'delete-running');

  log('cancel it');
  await page.getByRole('button', { name: 'Cancel operation' }).click();
  const dialog = page.getByRole('dialog', { name: `Cancel operation ${OPERATION_ID}?` });
  await dialog.waitFor();
  await dialog.getByRole('button', { name: 'Confirm' }).click();
  await expectText(heading, /cancelled/, 30_000);
  await page.getByRole('button', { name: 'Retry operation' }).waitFor();
  assert((await page.getByRole('button', { name: 'Cancel operation' }).count()) === 0, 'a cancelled operation offers no cancel');
  const op = await api('GET', `/internal/v1/context/operations/${OPERATION_ID}`);
  assert(op.body.state === 'cancelled', `the API agrees: ${JSON.stringify(op.body)}`);
  assert(op.body.processed < op.body.total, `it stopped early: ${op.body.processed} of ${op.body.total}`);
  await screenshot(page, 'delete-cancelled');
});
