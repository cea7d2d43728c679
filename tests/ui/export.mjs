// Export from the UI (tests/it/ui/operations.rs seeds 1,500 messages): "Submit export" on
// the Operations page opens the new operation, whose progress bar reaches 100 % and whose
// state becomes succeeded; "Download artifact" saves the file the Rust test compares, byte
// for byte and by digest, with the API's artifact.

import path from 'node:path';
import { statSync } from 'node:fs';
import { SERVICE_TOKEN, WORK_DIR, api, assert, expectText, log, scenario, screenshot, signIn, until } from './lib.mjs';

await scenario('export', async ({ page, result }) => {
  await signIn(page, SERVICE_TOKEN, '#/operations');
  await page.getByRole('heading', { name: 'Operations', level: 1 }).waitFor();

  log('submit an export');
  await page.getByRole('button', { name: 'Submit export' }).click();
  await page.waitForURL(/#\/operations\/[0-9A-Z]{26}$/);
  const id = page.url().split('/').pop();
  result.operationId = id;
  const heading = page.getByRole('heading', { level: 1 });
  await expectText(heading, new RegExp(`Operation ${id}`));

  log('watch its progress bar reach 100 %');
  const bar = page.getByRole('progressbar', { name: 'Progress', exact: true });
  const seen = new Set();
  await until('the progress bar at 100 %', async () => {
    const now = await bar.getAttribute('aria-valuenow');
    seen.add(now);
    return now === '100';
  }, 60_000);
  log(`progress values seen: ${[...seen].join(', ')}`);
  assert((await bar.getAttribute('aria-valuemax')) === '100', 'the bar counts to 100');
  await expectText(heading, /succeeded/);
  const op = await api('GET', `/internal/v1/context/operations/${id}`);
  assert(op.body.state === 'succeeded' && op.body.processed === op.body.total, `the API agrees: ${JSON.stringify(op.body)}`);
  await page.getByRole('heading', { name: 'Artifact' }).waitFor();
  await screenshot(page, 'export-operation');

  log('download its artifact');
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download artifact' }).click()]);
  const file = path.join(WORK_DIR, 'artifact.bin');
  await download.saveAs(file);
  assert(download.suggestedFilename() === `${op.body.artifactRef}.jsonl`, `file name: ${download.suggestedFilename()}`);
  await expectText(page.getByRole('status').filter({ hasText: 'Downloaded' }), /^Downloaded [\d,]+ bytes, digest checked\.$/);
  const info = await api('GET', `/internal/v1/context/export-artifacts/${op.body.artifactRef}`);
  assert(statSync(file).size === info.body.sizeBytes, `the file has the artifact's size: ${statSync(file).size} vs ${info.body.sizeBytes}`);
});
