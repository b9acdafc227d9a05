/**
 * Issue 24, items 3 and 4, in headless Chromium: the console served by the native TLS listener
 * (listen.tls) sets a Secure cookie; signing out in one browser ends the session for another
 * browser holding the same cookie (its open page returns to sign-in by itself); and a pending write
 * whose key was revoked shows the requester problem before anyone clicks, then ends failed
 * key_revoked when approved. Writes are queued through a plain-HTTP replica on the same control
 * database. Needs Debian's chromium at /usr/bin/chromium; skipped when absent, except under CI.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { makeTestCert } from '../../helpers/tls-cert';
import { createOperatorToken } from '../../../src/admin/tokens';
import { createApiKey, revokeApiKey } from '../../../src/control/keys';
import { requireIdentity } from '../../../src/control/identities';
import { getApproval } from '../../../src/control/approvals';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { createLogger } from '../../../src/observability/logger';

const CHROMIUM = '/usr/bin/chromium';
const run = existsSync(CHROMIUM) || process.env.CI ? describe : describe.skip;

let env: GovernedEnv;
let tlsGateway: GovernedGateway;
let browser: Browser;
let operatorToken: string;
let consoleUrl: string;

async function signedInPage(context: BrowserContext): Promise<Page> {
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  await page.goto(consoleUrl);
  await page.getByLabel(/Operator token/).fill(operatorToken);
  await page.keyboard.press('Enter');
  await page.getByText('Signed in as ops-uma').waitFor();
  return page;
}

run('console sessions and requester checks in headless Chromium', () => {
  beforeAll(async () => {
    env = await startGovernedEnv();
    const cert = makeTestCert();
    const config: ResolvedGatewayConfig = { ...structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig), listen: { ...DEFAULT_CONFIG.listen, tls: { cert_file: cert.certFile, key_file: cert.keyFile } } };
    tlsGateway = await startGovernedGateway({ db: env.db, config, host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
    consoleUrl = new URL('/console', tlsGateway.url).toString();
    operatorToken = (await createOperatorToken(env.db, 'ops-uma')).secret;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--ignore-certificate-errors'] });
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await tlsGateway?.close(500);
    await env?.close();
  });

  test('over TLS the session cookie is Secure; signing out in one browser ends the session in another that holds the same cookie', async () => {
    expect(consoleUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/console$/);
    const a = await browser.newContext({ ignoreHTTPSErrors: true });
    const pageA = await signedInPage(a);
    const cookies = await a.cookies();
    // Over TLS the __Host- name, Path=/ (rt48a L2).
    const session = cookies.find((c) => c.name === '__Host-interlock_console')!;
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/', secure: true });

    // A second browser with a copy of the cookie is signed in too (the page opens straight to the queue).
    const b = await browser.newContext({ ignoreHTTPSErrors: true });
    await b.addCookies([session]);
    const pageB = await b.newPage();
    pageB.setDefaultTimeout(15_000);
    await pageB.goto(consoleUrl);
    await pageB.getByText('Signed in as ops-uma').waitFor();

    await pageA.getByRole('button', { name: 'Sign out' }).click();
    await pageA.locator('#signin').waitFor({ state: 'visible' });
    // B did nothing: its event stream ends with the session and the page returns to sign-in.
    await pageB.getByRole('alert').filter({ hasText: 'Your session ended: sign in again.' }).waitFor();
    expect(await pageB.locator('#app').isHidden()).toBe(true);
    await pageB.reload();
    await pageB.locator('#signin').waitFor({ state: 'visible' });
    expect(await pageB.locator('#app').isHidden()).toBe(true);
    await a.close();
    await b.close();
  });

  test('a write whose key was revoked shows why before the click, then ends failed key_revoked', async () => {
    const key = await createApiKey(env.db, (await requireIdentity(env.db, 'demo-agent')).id);
    const queued = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (name) VALUES ($1)', params: ['revoked-in-browser'] }, key.secret);
    const id = queued.body.result.structuredContent.approval_id as string;
    await revokeApiKey(env.db, key.keyId);

    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await signedInPage(context);
    const item = page.locator(`#list button[data-id="${id}"]`);
    await item.waitFor();
    expect(await item.locator('.meta').textContent()).toMatch(/ · ⚠ key_revoked$/);
    await item.click();
    await page.locator('#d-id').filter({ hasText: id }).waitFor();
    const warning = page.locator('#d-requester');
    await warning.waitFor({ state: 'visible' });
    expect(await warning.textContent()).toBe('⚠ Approving will not run this write: the API key that queued this write has been revoked (or no longer exists). It would end failed (key_revoked).');
    expect(await warning.getAttribute('role')).toBe('alert');

    await page.locator('#approve').click();
    await page.getByRole('status').filter({ hasText: 'Approved, but the write failed: key_revoked — re-checked at approval: the API key that queued this write has been revoked (or no longer exists)' }).waitFor();
    expect(await sourceQuery(env, "SELECT count(*)::int AS n FROM playlist WHERE name = 'revoked-in-browser'")).toEqual([{ n: 0 }]);
    expect((await getApproval(env.db, id))!).toMatchObject({ state: 'failed', decidedBy: 'ops-uma', outcome: { error_code: 'key_revoked' } });
    // The decided approval no longer shows a requester warning.
    await page.locator('#d-requester').waitFor({ state: 'hidden' });
    await context.close();
  });
});
