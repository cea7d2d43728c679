// Tenant walls in the browser (tests/it/ui/tenants.rs seeds the first tenant's export and
// a conversation of agent helpdesk): the first tenant sees its operation; after "Sign out"
// nothing of the credential is left in the tab; a second tenant sees an empty list, "not
// found" at the first tenant's operation URL, and no conversations of agent helpdesk.

import { OTHER_TENANT_TOKEN, SERVICE_TOKEN, assert, env, expectText, go, log, scenario, screenshot, signIn } from './lib.mjs';

const OPERATION_ID = env('OPERATION_ID');

await scenario('tenants', async ({ page }) => {
  log('the first tenant sees its operation');
  await signIn(page, SERVICE_TOKEN, '#/operations');
  await page.getByRole('heading', { name: 'Operations', level: 1 }).waitFor();
  await page.getByRole('link', { name: OPERATION_ID }).first().waitFor();

  log('signing out forgets the credential');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Token or JWT').waitFor();
  const kept = await page.evaluate(() => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }));
  assert(!kept.includes(SERVICE_TOKEN), `no credential left in the tab's storage: ${kept}`);

  log('a second tenant sees none of it');
  await signIn(page, OTHER_TENANT_TOKEN, '#/operations');
  await page.getByRole('heading', { name: 'Operations', level: 1 }).waitFor();
  // The list has loaded when it says nothing matches.
  await page.getByText('No operation matches.').waitFor();
  assert((await page.getByRole('link', { name: OPERATION_ID }).count()) === 0, "the first tenant's operation is not listed");
  await screenshot(page, 'tenants-other-operations');

  await go(page, `#/operations/${OPERATION_ID}`, 'Operation not found');
  assert(!(await page.getByRole('button', { name: 'Cancel operation' }).count()), 'no actions on an operation it cannot see');
  await screenshot(page, 'tenants-other-operation');

  await go(page, '#/conversations', 'Conversations');
  await page.getByLabel('Agent id').fill('helpdesk');
  await page.getByRole('button', { name: 'List conversations' }).click();
  await expectText(page.getByRole('status').filter({ hasText: 'helpdesk' }), /^No conversations for agent helpdesk\.$/);
  assert(!page.url().includes(OTHER_TENANT_TOKEN) && !page.url().includes(SERVICE_TOKEN), 'no credential in the URL');
});
