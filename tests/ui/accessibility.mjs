// axe-core on every page, signed in as the admin (so the Controls page shows), with data
// seeded by tests/it/ui/keyboard_a11y.rs; each page's screenshot is saved under its name
// (overview.png, operation.png, … — the README shows two of them).

import { ADMIN_TOKEN, BASE_URL, checkAccessibility, env, go, log, scenario, screenshot } from './lib.mjs';

const OPERATION_ID = env('OPERATION_ID');

await scenario('accessibility', async ({ page }) => {
  await page.goto(`${BASE_URL}/ui`);
  await page.getByRole('button', { name: 'Sign in' }).waitFor();
  await checkAccessibility(page, 'the sign-in form');
  await screenshot(page, 'sign-in');
  await page.getByLabel('Token or JWT').fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();

  const pages = [
    ['overview', '#/overview', 'Overview', async () => page.getByRole('table').first().waitFor()],
    ['operations', '#/operations', 'Operations', async () => page.getByRole('link', { name: OPERATION_ID }).first().waitFor()],
    [
      'operation',
      `#/operations/${OPERATION_ID}`,
      /Operation/,
      async () => page.locator('[role=progressbar][aria-valuenow="100"]').first().waitFor(),
    ],
    ['controls', '#/controls', 'Controls', async () => page.getByRole('button', { name: /^Pause/ }).first().waitFor()],
    ['conversations', '#/conversations', 'Conversations', async () => {
      await page.getByLabel('Agent id').fill('helpdesk');
      await page.getByRole('button', { name: 'List conversations' }).click();
      await page.getByRole('table', { name: /Conversations of agent helpdesk/ }).waitFor();
    }],
    ['conversation', '#/conversations/support-42', 'Conversation support-42', async () => page.getByRole('table', { name: /Messages/ }).waitFor()],
    ['entries', '#/entries/kafka-brokers', 'Entries', async () => {
      await page.getByLabel('Query').fill('kafka brokers');
      await page.getByRole('button', { name: 'Recall' }).click();
      await page.getByRole('table', { name: /Recall for/ }).waitFor();
      await page.getByRole('table', { name: /History/ }).waitFor();
    }],
  ];
  for (const [name, hash, heading, loaded] of pages) {
    log(`page ${name}`);
    await go(page, hash, heading);
    await loaded();
    await checkAccessibility(page, `the ${name} page`);
    await screenshot(page, name);
  }
});
