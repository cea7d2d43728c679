// The keyboard alone: sign in (type, Tab to "Sign in", Enter), reach the navigation's links
// with Tab and follow one with Enter, and submit a page's form with Enter — each focused
// control showing a visible focus indicator.

import { BASE_URL, SERVICE_TOKEN, assert, log, scenario, screenshot, until } from './lib.mjs';

/** The focused element's accessible-ish description and whether its focus is visible. */
const focused = (page) =>
  page.evaluate(() => {
    const a = document.activeElement;
    if (!a || a === document.body) return { tag: 'body' };
    const style = getComputedStyle(a);
    const ring = (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0) || style.boxShadow !== 'none';
    return { tag: a.tagName.toLowerCase(), text: (a.textContent || '').trim(), label: a.labels?.[0]?.textContent?.trim(), href: a.getAttribute('href'), ring };
  });

/**
 * Press Tab until `wanted(focused)` holds, at most `max` times (a date-time box alone is
 * several stops, and Tab wraps from the page's end to the navigation); returns what is focused.
 */
async function tabTo(page, what, wanted, max = 60) {
  for (let i = 0; i < max; i++) {
    await page.keyboard.press('Tab');
    const f = await focused(page);
    if (wanted(f)) {
      assert(f.ring, `${what} shows a visible focus indicator: ${JSON.stringify(f)}`);
      return f;
    }
  }
  throw new Error(`Tab never reached ${what} in ${max} presses`);
}

await scenario('keyboard', async ({ page }) => {
  await page.goto(`${BASE_URL}/ui`);
  log('the sign-in form takes the focus');
  await page.getByLabel('Token or JWT').waitFor();
  await until('the credential box to be focused', async () => (await focused(page)).label === 'Token or JWT');
  await page.keyboard.type(SERVICE_TOKEN);
  await tabTo(page, 'the Sign in button', (f) => f.tag === 'button' && f.text === 'Sign in', 3);
  await page.keyboard.press('Enter');
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  assert(!page.url().includes(SERVICE_TOKEN), 'the credential never goes in the URL');

  log('the navigation by Tab and Enter');
  await tabTo(page, 'the Operations link', (f) => f.tag === 'a' && f.href === '#/operations');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Operations', level: 1 }).waitFor();
  assert(page.url().endsWith('#/operations'), `Enter followed the link: ${page.url()}`);
  const current = page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Operations' });
  assert((await current.getAttribute('aria-current')) === 'page', 'the nav marks the current page');

  log('a page form by keyboard');
  await tabTo(page, 'the Conversations link', (f) => f.tag === 'a' && f.href === '#/conversations');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Conversations', level: 1 }).waitFor();
  await tabTo(page, 'the Agent id box', (f) => f.label === 'Agent id');
  await page.keyboard.type('helpdesk');
  await page.keyboard.press('Enter');
  await page.getByRole('table', { name: /Conversations of agent helpdesk/ }).waitFor();
  await tabTo(page, 'the support-42 link', (f) => f.tag === 'a' && f.text === 'support-42');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Conversation support-42', level: 1 }).waitFor();
  await screenshot(page, 'keyboard-conversation');
});
