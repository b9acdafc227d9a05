/**
 * The console's queue view in headless Chromium (issue 24 items 2, 5, 6): the whole queue is paged,
 * filtered (state, source, identity, age) and counted; destructive statements are flagged and
 * approving one goes through a confirmation step showing the statement, its parameters and the
 * planner's row estimate (and the API refuses it without confirm); control and bidirectional
 * characters are shown visibly; disabled buttons look disabled. Needs /usr/bin/chromium; skipped
 * when absent, except under CI.
 */
import { existsSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startGovernedEnv, callTool, sourceQuery, playlistOwnerKey, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken } from '../../../src/admin/tokens';
import { createApproval, getApproval } from '../../../src/control/approvals';

const CHROMIUM = '/usr/bin/chromium';
const run = existsSync(CHROMIUM) || process.env.CI ? describe : describe.skip;

let env: GovernedEnv;
let browser: Browser;
let page: Page;
let operatorToken: string;

const queue = async (sql: string, params: unknown[]) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey)).body.result.structuredContent.approval_id as string;
const openItem = async (id: string) => {
  const item = page.locator(`#list button[data-id="${id}"]`);
  await item.waitFor();
  await item.click();
  await page.locator('#d-id').filter({ hasText: id }).waitFor();
  return item;
};

run('console queue view in headless Chromium', () => {
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { approvals: { max_pending_per_identity: 100, max_pending_per_source: 200 } } as never });
    operatorToken = (await createOperatorToken(env.db, 'ops-quinn')).secret;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(15_000);
    await page.goto(new URL('/console', env.url).toString());
    await page.getByLabel(/Operator token/).fill(operatorToken);
    await page.keyboard.press('Enter');
    await page.getByText('Signed in as ops-quinn').waitFor();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await env?.close();
  });

  test('a destructive statement is flagged and needs confirmation showing statement, parameters and the row estimate', async () => {
    const id = await queue('DELETE FROM playlist_track WHERE playlist_id = $1', [1]);
    const item = await openItem(id);
    expect(await item.locator('.flag.danger').textContent()).toBe('⚠ destructive (deletes, updates or merges rows)');
    expect(await page.locator('#d-destructive').isVisible()).toBe(true);
    await page.locator('#approve').click();
    await page.locator('#confirm').waitFor();
    expect(await page.locator('#confirm-sql').textContent()).toBe('DELETE FROM playlist_track WHERE playlist_id = $1');
    expect(await page.locator('#confirm-params').textContent()).toBe('[\n  1\n]');
    // Playlist 1 holds thousands of tracks (Chinook, analysed by loadChinook): an estimate above 1, so no note on 1.
    expect(await page.locator('#confirm-estimate').textContent()).toMatch(/^The planner estimates about \d{2,} row\(s\) will be changed\. This is an estimate, not a count: the rows changed may differ\.$/);
    // Cancel: nothing ran.
    await page.locator('#confirm-cancel').click();
    expect(await page.locator('#confirm').isHidden()).toBe(true);
    expect((await getApproval(env.db, id))!.state).toBe('pending');
    // Confirm: it runs.
    await page.locator('#approve').click();
    await page.locator('#confirm-approve').click();
    await page.getByRole('status').filter({ hasText: /^Approved and executed: \d+ row\(s\) affected\.$/ }).waitFor();
    expect(await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist_track WHERE playlist_id = 1')).toEqual([{ n: 0 }]);
  });

  test('the API refuses a destructive approval without confirm (400 validation_failed)', async () => {
    const id = await queue('UPDATE playlist SET name = $1 WHERE playlist_id = $2', ['x', 2]);
    const r = await page.evaluate(async (id) => {
      const s = (await (await fetch('/console/api/session')).json()) as { csrfToken: string };
      const res = await fetch(`/console/api/approvals/${id}/approve`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': s.csrfToken }, body: '{}' });
      return { status: res.status, body: await res.json() };
    }, id);
    expect(r).toEqual({ status: 400, body: { error: 'invalid_request', code: 'validation_failed', message: 'confirm: true is required to approve a destructive statement (DELETE, UPDATE, MERGE): review the statement, its parameters and the row estimate first' } });
    expect((await getApproval(env.db, id))!.state).toBe('pending');
  });

  test('control and bidirectional characters are shown visibly in the list and the detail', async () => {
    const id = await queue("INSERT INTO playlist (name) VALUES ('admin\u202e txt.exe\u200b')", []);
    const item = await openItem(id);
    expect(await item.locator('.stmt').textContent()).toBe("INSERT INTO playlist (name) VALUES ('admin⟨U+202E⟩ txt.exe⟨U+200B⟩')");
    expect(await item.textContent()).toContain('⚠ 2 invisible character(s) shown as ⟨U+…⟩');
    expect(await page.locator('#d-sql').textContent()).toBe("INSERT INTO playlist (name) VALUES ('admin⟨U+202E⟩ txt.exe⟨U+200B⟩')");
    expect(await page.locator('#d-invisible').textContent()).toBe('⚠ This statement holds 2 invisible character(s) (control, bidirectional or zero-width), shown as ⟨U+…⟩.');
  });

  test('disabled buttons look disabled', async () => {
    // The approval of the first test is executed: approve and reject are disabled.
    const executed = (await env.db.pool.query<{ id: string }>("SELECT id FROM approvals WHERE state = 'executed' LIMIT 1")).rows[0].id;
    await page.locator('#filter').selectOption('executed');
    await openItem(executed);
    const approve = page.locator('#approve');
    expect(await approve.isDisabled()).toBe(true);
    const style = await approve.evaluate((b) => {
      const cs = (globalThis as unknown as { getComputedStyle(e: unknown): { backgroundColor: string; cursor: string; borderStyle: string } }).getComputedStyle(b);
      return { background: cs.backgroundColor, cursor: cs.cursor, border: cs.borderStyle };
    });
    expect(style).toEqual({ background: 'rgb(228, 231, 235)', cursor: 'not-allowed', border: 'dashed' });
  });

  test('task nu47fix (5): each row shows the short approval id and a compact, escaped preview of its parameters, so two INSERTs of one statement differ', async () => {
    const sql = 'INSERT INTO playlist (name) VALUES ($1)';
    const html = '<img src=x onerror="document.title=1"><b>bold</b>';
    const a = await queue(sql, [html]);
    const b = await queue(sql, ['admin\u202e txt\u200b']);
    const c = await queue(sql, ['y'.repeat(80)]);
    const d = await queue('INSERT INTO playlist (name) VALUES (\'no params\')', []);
    await page.locator('#filter').selectOption('pending');
    const row = async (id: string) => {
      const item = page.locator(`#list button[data-id="${id}"]`);
      await item.waitFor();
      return { aid: await item.locator('.aid').textContent(), title: await item.locator('.aid').getAttribute('title'), params: (await item.locator('.params').count()) ? await item.locator('.params').textContent() : null, stmt: await item.locator('.stmt').textContent(), markup: await item.locator('img, b').count() };
    };
    expect(await row(a)).toEqual({ aid: `${a.slice(0, 12)}…`, title: a, params: `params ${JSON.stringify([html])}`, stmt: sql, markup: 0 });
    expect(await row(b)).toEqual({ aid: `${b.slice(0, 12)}…`, title: b, params: 'params ["admin⟨U+202E⟩ txt⟨U+200B⟩"]', stmt: sql, markup: 0 });
    // Longer than 60 characters: cut with … and a digest of the full values (task low48 item 3), as `approval list` cuts its params column.
    const cut = `["${'y'.repeat(50)}…#${createHash('sha256').update(JSON.stringify(['y'.repeat(80)])).digest('hex').slice(0, 6)}`;
    expect(await row(c)).toEqual({ aid: `${c.slice(0, 12)}…`, title: c, params: `params ${cut}`, stmt: sql, markup: 0 });
    expect(await row(d)).toMatchObject({ aid: `${d.slice(0, 12)}…`, params: null });
    expect(await page.title()).not.toBe('1');
    // The API carries the preview (spec/openapi-v1.yaml ConsoleApprovalSummary: params, paramsTruncated).
    const listed = await page.evaluate(async () => (await (await fetch('/console/api/approvals?state=pending')).json()) as { approvals: Array<{ id: string; params: string; paramsTruncated: boolean }> });
    expect(listed.approvals.filter((x) => [a, c, d].includes(x.id)).map((x) => [x.id, x.params, x.paramsTruncated]).sort()).toEqual([
      [a, JSON.stringify([html]), false],
      [c, cut, true],
      [d, '', false],
    ].sort());
  });

  test("task nu47fix (6): an UPDATE of a row the requester's row rules hide: the estimate (1) is said to be an estimate that may mean none, and 0 rows change", async () => {
    const key = await playlistOwnerKey(env, 'pl-agent', 'playlist-owner', ['Music']);
    const hidden = (await sourceQuery(env, "SELECT playlist_id FROM playlist WHERE name <> 'Music' ORDER BY playlist_id LIMIT 1"))[0].playlist_id as number;
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'UPDATE playlist SET name = name WHERE playlist_id = $1', params: [hidden] }, key);
    const id = r.body.result.structuredContent.approval_id as string;
    await page.locator('#filter').selectOption('pending');
    await openItem(id);
    await page.locator('#approve').click();
    await page.locator('#confirm').waitFor();
    expect(await page.locator('#confirm-estimate').textContent()).toBe(
      "The planner estimates about 1 row(s) will be changed (with the requester's row rules). This is an estimate, not a count: the rows changed may differ (PostgreSQL never estimates fewer than 1 row, so 1 can mean none).",
    );
    await page.locator('#confirm-approve').click();
    await page.getByRole('status').filter({ hasText: 'Approved and executed: 0 row(s) affected.' }).waitFor();
    expect((await getApproval(env.db, id))!).toMatchObject({ state: 'executed', outcome: { row_count: 0 } });
  });

  test('the whole queue is paged, filtered and counted', async () => {
    // 60 more pending approvals, older than a minute.
    for (let i = 0; i < 60; i++) {
      await createApproval(env.db, { sourceId: 'chinook', identityId: env.demo.identityId, keyId: null, requestId: `req_page_${i}`, sql: `INSERT INTO playlist (name) VALUES ('p${i}')`, params: [], classification: { statement: 'InsertStmt' } });
    }
    const pending = (await env.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM approvals WHERE state = 'pending'")).rows[0].n;
    await page.locator('#filter').selectOption('pending');
    await page.locator('#page-info').filter({ hasText: `Page 1 of 2 · ${pending} matching` }).waitFor();
    expect(await page.locator('#list li').count()).toBe(50);
    expect(await page.locator('#counts').textContent()).toContain(`pending: ${pending}`);
    expect(await page.locator('#prev').isDisabled()).toBe(true);
    await page.locator('#next').click();
    await page.locator('#page-info').filter({ hasText: `Page 2 of 2` }).waitFor();
    expect(await page.locator('#list li').count()).toBe(pending - 50);
    // Filters: an unknown identity matches nothing; the source and identity match everything here; age 1 h matches nothing yet.
    await page.locator('#f-identity').fill('nobody');
    await page.locator('#apply-filters').click();
    await page.locator('#page-info').filter({ hasText: 'Page 1 of 1 · 0 matching' }).waitFor();
    expect(await page.locator('#empty').isVisible()).toBe(true);
    await page.locator('#f-identity').fill('demo-agent');
    await page.locator('#f-source').fill('chinook');
    await page.locator('#apply-filters').click();
    await page.locator('#page-info').filter({ hasText: `Page 1 of 2 · ${pending} matching` }).waitFor();
    await page.locator('#f-age').selectOption('3600');
    await page.locator('#page-info').filter({ hasText: 'Page 1 of 1 · 0 matching' }).waitFor();
  });
});
