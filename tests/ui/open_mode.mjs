// Open mode (tests/it/ui/tenants.rs starts serve with no credential): the dashboard opens
// without a sign-in form, a visible banner (role=status) says the service takes calls
// without a credential, everyone is an admin (Controls is in the nav), there is nothing to
// sign out of, and the banner passes axe like the rest of the page.

import { BASE_URL, assert, checkAccessibility, expectText, scenario, screenshot } from './lib.mjs';

await scenario('open_mode', async ({ page }) => {
  await page.goto(`${BASE_URL}/ui`);
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
  const banner = page.getByRole('status').filter({ hasText: 'Open mode' });
  await expectText(banner, /without any credential/);
  assert(await banner.isVisible(), 'the banner is visible');
  assert((await page.getByLabel('Token or JWT').count()) === 0, 'no sign-in form');
  assert((await page.getByRole('button', { name: 'Sign out' }).count()) === 0, 'nothing to sign out of');
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Controls' }).waitFor();
  await checkAccessibility(page, 'the overview in open mode');
  await screenshot(page, 'open-mode');
});
