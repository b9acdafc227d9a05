/**
 * Red team rt48a: the operator's side as it stands on 2026-12-07 (console, approvals queue,
 * webhooks, the CLI's secrets, the console's OpenAPI), attacked by a fresh attacker: an agent with a
 * key whose writes need approval (it writes statement text and parameter values an operator then
 * reads), a person with a browser on another site, and someone who can read the process list or
 * the gateway's log. Real PostgreSQL, loopback only.
 *
 * Findings (severity, state):
 *   K1 medium, fixed: Unicode space characters other than U+0020 (U+00A0 no-break space, U+2000–U+200A,
 *      U+202F, U+205F, U+3000, U+1680) are identifier characters to PostgreSQL but render as spaces,
 *      and the operator's display (console list and detail, confirmation, CLI, webhooks) showed them
 *      raw and counted none as invisible: `DELETE FROM playlist AS x<NBSP>WHERE<NBSP>false` (its
 *      alias is the one identifier "x where false") read as a delete of nothing and deleted every row.
 *      Fixed: src/approvals/statement.ts INVISIBLE holds them, so they show as ⟨U+00A0⟩ and are flagged.
 *
 * Held (no finding): see the tests marked "held".
 */
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken } from '../../../src/admin/tokens';
import { getApproval } from '../../../src/control/approvals';
import { paramsForDisplay, showInvisible } from '../../../src/approvals/statement';
import { chatText } from '../../../src/approvals/webhooks';

let env: GovernedEnv;
let token: { secret: string; tokenId: string };

beforeAll(async () => {
  env = await startGovernedEnv({ config: { approvals: { max_pending_per_identity: 10_000, max_pending_per_source: 10_000 } } as never });
  token = await createOperatorToken(env.db, 'ops-rt48a');
}, 120_000);
afterAll(async () => env?.close());

const base = () => new URL(env.url).origin;
/** A console API call with a session's cookie and, for changes, its CSRF token: status, Set-Cookie and JSON body. */
async function http(method: string, path: string, opts: { cookie?: string; csrf?: string; body?: unknown } = {}) {
  const r = await fetch(base() + path, {
    method,
    headers: { ...(opts.cookie ? { cookie: opts.cookie } : {}), ...(opts.csrf ? { 'x-csrf-token': opts.csrf } : {}), ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  return { status: r.status, setCookie: r.headers.get('set-cookie') ?? '', json: (await r.json().catch(() => null)) as any };
}
async function signIn() {
  const r = await http('POST', '/console/api/session', { body: { token: token.secret } });
  return { cookie: r.setCookie.split(';')[0], csrf: r.json?.csrfToken as string };
}
async function queue(sql: string, params: unknown[] = []): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey);
  const sc = r.body?.result?.structuredContent;
  if (!sc?.approval_id) throw new Error(`not queued: ${JSON.stringify(r.body).slice(0, 400)}`);
  return sc.approval_id as string;
}

/** Every Unicode space separator but U+0020 (\p{Zs}), and U+2800 (braille blank): PostgreSQL reads each as part of an identifier. */
const LOOKALIKE_SPACES = ['\u00a0', '\u1680', '\u2000', '\u2005', '\u200a', '\u202f', '\u205f', '\u3000', '\u2800'];

describe('K1 (medium, fixed): look-alike spaces make a statement read otherwise than it runs', () => {
  test('a DELETE of every row reads "AS x WHERE false": the console flags and shows the no-break spaces', async () => {
    const s = await signIn();
    const sql = 'DELETE FROM playlist_track AS x\u00a0WHERE\u00a0false';
    const id = await queue(sql);
    // What PostgreSQL runs: the alias is the one identifier "x where false", so no WHERE at all.
    expect((await getApproval(env.db, id))!.classification).toMatchObject({ writes: [{ table: 'playlist_track', operation: 'delete', hasWhere: false }] });
    const d = await http('GET', `/console/api/approvals/${id}`, { cookie: s.cookie });
    expect(d.status).toBe(200);
    expect(d.json.statement).toEqual({ text: 'DELETE FROM playlist_track AS x⟨U+00A0⟩WHERE⟨U+00A0⟩false', comments: [], visible: 'DELETE FROM playlist_track AS x⟨U+00A0⟩WHERE⟨U+00A0⟩false', invisible: 2 });
    const l = await http('GET', '/console/api/approvals?state=pending&page_size=200', { cookie: s.cookie });
    expect(l.json.approvals.find((a: { id: string }) => a.id === id)).toMatchObject({ statement: 'DELETE FROM playlist_track AS x⟨U+00A0⟩WHERE⟨U+00A0⟩false', invisible: 2, destructive: true });
    // Not approved here: the table keeps its rows for the other tests.
    await http('POST', `/console/api/approvals/${id}/reject`, { cookie: s.cookie, csrf: s.csrf, body: { reason: 'rt48a K1' } });
  });

  test('every look-alike space is shown as ⟨U+XXXX⟩ in statements and parameters (console, CLI, webhooks share showInvisible)', async () => {
    for (const c of LOOKALIKE_SPACES) {
      const code = `⟨U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}⟩`;
      expect(showInvisible(`a${c}b`)).toEqual({ text: `a${code}b`, count: 1 });
      expect(paramsForDisplay([`x${c}y`]).text).toBe(`["x${code}y"]`);
      expect(chatText(`a${c}b`)).toBe(`a${code}b`);
    }
    // The plain space, tab and line feed stay as they are.
    expect(showInvisible('a b\tc\nd')).toEqual({ text: 'a b\tc\nd', count: 0 });
  });
});
