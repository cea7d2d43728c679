// The read-only pages with seeded data (tests/it/ui/browse.rs): agent helpdesk's
// conversations, support-42's 120 messages over three pages and by role, a recall for
// "kafka brokers" with its score breakdown (handed back to the Rust test, which compares it
// with the API's), and the kafka-brokers entry's two versions.

import { SERVICE_TOKEN, api, assert, expectText, log, scenario, screenshot, signIn } from './lib.mjs';

/** Each body row's cell texts. */
const rows = (table) => table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent.trim())));

await scenario('browse', async ({ page, result }) => {
  await signIn(page, SERVICE_TOKEN);

  log('conversations of agent helpdesk');
  await page.getByRole('link', { name: 'Conversations' }).click();
  await page.getByRole('heading', { name: 'Conversations', level: 1 }).waitFor();
  await page.getByLabel('Agent id').fill('helpdesk');
  await page.getByRole('button', { name: 'List conversations' }).click();
  const list = page.getByRole('table', { name: /Conversations of agent helpdesk/ });
  await list.waitFor();
  const listed = await rows(list);
  assert(listed.length === 2, `two conversations listed: ${JSON.stringify(listed)}`);
  const byId = Object.fromEntries(listed.map((r) => [r[0], r[1]]));
  assert(byId['support-42'] === '120' && byId['support-43'] === '3', `message counts: ${JSON.stringify(listed)}`);
  await screenshot(page, 'browse-conversations');

  log('support-42, page by page');
  await page.getByRole('link', { name: 'support-42' }).click();
  await page.getByRole('heading', { name: 'Conversation support-42', level: 1 }).waitFor();
  const status = page.getByRole('status').filter({ hasText: /Page \d/ });
  await expectText(status, /Page 1: 50 messages, sequence 1 to 50$/);
  const messages = page.getByRole('table', { name: /Messages/ });
  let shown = await rows(messages);
  assert(shown[0][0] === '1' && shown[0][4] === 'support-42 says hello #1', `first message: ${JSON.stringify(shown[0])}`);
  await screenshot(page, 'browse-conversation');
  const next = page.getByRole('button', { name: 'Next page' });
  const previous = page.getByRole('button', { name: 'Previous page' });
  assert(await previous.isDisabled(), 'no previous page on the first');
  await next.click();
  await expectText(status, /Page 2: 50 messages, sequence 51 to 100$/);
  await next.click();
  await expectText(status, /Page 3: 20 messages, sequence 101 to 120 \(the last page\)$/);
  assert(await next.isDisabled(), 'no next page after the last');
  await previous.click();
  await expectText(status, /Page 2: 50 messages, sequence 51 to 100$/);
  await page.getByLabel('Role').selectOption('assistant');
  await expectText(status, /Page 1: 50 messages, sequence 2 to 100$/);
  shown = await rows(messages);
  assert(shown.every((r) => r[1] === 'assistant'), 'the role filter shows assistant messages only');

  log('recall with the score breakdown');
  await page.getByRole('link', { name: 'Entries' }).click();
  await page.getByRole('heading', { name: 'Entries', level: 1 }).waitFor();
  await page.getByLabel('Query').fill('kafka brokers');
  await page.getByRole('button', { name: 'Recall' }).click();
  const recall = page.getByRole('table', { name: /Recall for “kafka brokers”/ });
  await recall.waitFor();
  const header = await recall.locator('thead th').allTextContents();
  assert(['Lexical', 'Vector', 'Recency', 'Final score'].every((h) => header.includes(h)), `breakdown columns: ${header}`);
  const recalled = await rows(recall);
  assert(recalled[0][1] === 'kafka-brokers', `the kafka entry ranks first: ${JSON.stringify(recalled)}`);
  assert(recalled[0][3] === 'Kafka runs on three brokers in the eu-west cluster', 'recall shows the corrected content');
  result.recall = recalled.map((r) => [r[1], r[4], r[5], r[6], r[7]]);
  // The same query through the API, at the same moment: the page shows its numbers.
  const answer = await api('POST', '/internal/v1/context/recall', { query: 'kafka brokers', limit: 10 });
  assert(answer.status === 200, `recall: ${JSON.stringify(answer.body)}`);
  assert(answer.body.items.length === recalled.length, `as many rows as results: ${recalled.length} vs ${answer.body.items.length}`);
  answer.body.items.forEach((item, i) => {
    const expected = [item.entry.id, ...['lexical', 'vector', 'recency', 'finalScore'].map((k) => item.score[k].toFixed(3))];
    assert(JSON.stringify(result.recall[i]) === JSON.stringify(expected), `row ${i + 1}: ${result.recall[i]} vs the API's ${expected}`);
  });
  await screenshot(page, 'browse-recall');

  log('an entry and its history');
  await recall.getByRole('link', { name: 'kafka-brokers' }).click();
  await page.getByRole('heading', { name: 'Entry kafka-brokers' }).waitFor();
  assert(page.url().endsWith('#/entries/kafka-brokers'), `an entry has its own URL: ${page.url()}`);
  const history = page.getByRole('table', { name: /History: 2 versions/ });
  await history.waitFor();
  const versions = await rows(history);
  const apiHistory = await api('GET', '/internal/v1/context/entries/kafka-brokers/history');
  assert(versions.length === apiHistory.body.items.length, `every version shown: ${JSON.stringify(versions)}`);
  apiHistory.body.items.forEach((v, i) => {
    assert(versions[i][0] === String(v.version) && versions[i][1] === v.change, `version ${i + 1}: ${versions[i]} vs ${JSON.stringify(v)}`);
  });
  assert(versions[1][2] === 'a third broker was added', `the correction's reason: ${versions[1]}`);
  assert(versions[0][4].includes('two brokers') && versions[1][4].includes('three brokers'), `each version's content: ${JSON.stringify(versions)}`);
  await screenshot(page, 'browse-entry');

  log('an unknown entry is not found');
  await page.getByLabel('Entry id').fill('no-such-entry');
  await page.getByRole('button', { name: 'Show entry' }).click();
  await expectText(page.getByRole('alert'), /^404: /);
});
