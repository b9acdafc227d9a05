/**
 * Red team rt48d: a fresh attacker on this session's new code (targets in the task: json-numbers,
 * rt48b B5's claims ordered by iat, rt48a K2/K6, rt48c K3/K5). The parser property and its cost are
 * in test/unit/attacks/rt48d-json-numbers.test.ts (R0-R2); real PostgreSQL and a loopback issuer here.
 *
 * Findings (severity, state):
 *  R1. high, fixed (unit test): a quadratic regex in parseClientJson, pre-auth on POST /mcp.
 *  R2. medium, fixed (task r2; unit test, bench/rt48d-json-numbers-cost.ts, bench/RESULTS.md): ~34×
 *      JSON.parse on a body of many numbers JSON rounds. parseClientJson no longer parses such a body a
 *      second time through a reviver: one JSON.parse, then one walk of the text beside the parsed value
 *      that judges most literals by their digits alone and records only the first rounded element of
 *      each interlock_query params array (the call is refused there): ~2× JSON.parse per MiB.
 *  R3. medium, fixed: jose checks a token's iat only for its type, so a token an IdP signed with iat
 *      years ahead (a clock fault, or an IdP that lets a client pick it) became the subject's
 *      claims_issued_at: every later token (iat now) was "older", its claims not recorded and its
 *      claim grants not synced, so a group removed at the IdP kept its role grant until that date.
 *      Now an iat ahead of the control database's clock counts as now. Shown failing before the fix
 *      (recorded tenant stayed 'Music', grant kept).
 *  R4. low, fixed: two sign-ins of one subject at once: the ordered UPDATE is one statement (row lock,
 *      re-checked on the newest row), but syncClaimGrants ran after it outside that transaction, so
 *      the older token's grants could be synced last (claims of the newer, grants of the older) until
 *      the next sign-in. Now the UPDATE and the sync run in one transaction (TokenIdentityStore
 *      recordAndSync): the row lock is held until the grants are synced, so the second sign-in waits
 *      and is decided on the first's row. Shown failing before the fix (grant of the older kept).
 *  R5. low, fixed: a token without iat after one with cleared claims_issued_at, after which an older
 *      unexpired token's claims (and claim grants) counted again (rt48b B5 reopened for issuers mixing
 *      tokens with and without iat). Now a token without iat counts as issued when it is used (RFC
 *      7519 makes iat optional, RFC 9068 requires it for JWT access tokens: its age is unknown, now is
 *      the latest it can be; like R3's iat ahead of now). Shown failing before the fix (tenant 'Music'
 *      and the grant back). docs/row-rules.md "Attributes at approval time".
 *  R6. low, fixed: the first call of a token whose group the IdP removed still ran with the claim
 *      grant it takes back, answered from the result cache (`cached: true`) when the subject's earlier
 *      token read the same statement with the same claims (the grants were synced in identityFor, the
 *      call authorised from the grant cache, refreshed by notification only later). Now a sync drops
 *      the identity's cached grants before the call is authorised (DbGovernanceStore.dropGrants, wired
 *      in src/gateway.ts). Shown failing before the fix (the Classical playlists, cached).
 *  R7. low, fixed (task r2): a number beyond the double's range (1e400, read as Infinity) was refused
 *      by the argument validator first, invalid_arguments "params.0 must be string,number,boolean,null",
 *      not with the hint to send it as a string (1e-400 and long decimals get the hint). The validator's
 *      message for a params item that is a number now is that hint (src/tools/registry.ts
 *      describeValidationErrors), on every route (test below).
 *  R8. low, fixed: a rule `owner = identity.name` on a citext column compared case-sensitively in its
 *      row view ('ann' read no row 'Ann'; `owner <> identity.name` let 'ann' read the row 'Ann'):
 *      verified, OPERATOR(pg_catalog.=) resolved to text = text through citext's implicit cast. Now a
 *      column type's own comparison operator (in the type's schema, from the scanned catalogue's
 *      operatorCode, named by that schema: ownOperatorsOf) compares it, when the source's
 *      trusted_functions lists its function (public.citext_eq, …; else row_rule_unenforceable).
 *      Shown failing before the fix ([] for 'ann', [1, 2] for the <> rule).
 * Held: (c) a rounded number reaches PostgreSQL by no route: params items are scalars (the tool
 * schema refuses arrays and objects), /v1 and legacy /mcp/tools/call and /mcp/sse/messages parse with
 * jsonBody (parseClientJson) and pass the same params array (the record is kept on it), and a queued
 * write's params were checked before it was queued. (d) numbers carried exactly are not refused but
 * integers beyond 2^53 that a double holds exactly (2^60, 1e20): refused by the documented rule.
 * Held (target 4): a rule on a citext column of a table with an hstore column gets its row view (the
 * K5 dependency check refuses no extension type of the table's own columns); an hstore operator is
 * outside the rule grammar (row_rule_unenforceable).
 * Not attacked for lack of time: K2/K6 (requeue races, a forged requeue chain, classification) and
 * whether an insider can keep ruled reads refused (K3) and what rescans then.
 */
import { useTenantClaimsEnv } from '../../helpers/tenant-claims';
import { codeOf, rowsOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import { callTool, type GovernedEnv } from '../../helpers/governed';
import { TokenIdentityStore } from '../../../src/auth/token-identities';
import { ClaimMappingCache } from '../../../src/control/claim-mappings';
import type { ControlDb } from '../../../src/control/db';
import type { TokenIssuer } from '../../../generated/config-v1';

describe('R3: a token whose iat lies years ahead', () => {
  const started = useTenantClaimsEnv('https://gateway.rt48d.example/mcp', 'rt48d-tenant');
  const sc = (r: { body: any }) => r.body.result.structuredContent;
  const read = (token: string) => callTool(started().env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT playlist_id, name FROM playlist ORDER BY 1', params: [] }, token);
  const grantsOf = async (subject: string) =>
    (await started().env.db.pool.query("SELECT g.role_name FROM identity_subjects s JOIN grants g ON g.identity_id = s.identity_id WHERE s.subject = $1 ORDER BY 1", [subject])).rows.map((r) => r.role_name);

  test('R3 (medium, fixed): it does not freeze the recorded claims and claim grants of later tokens', async () => {
    const { iss } = started();
    const now = Math.floor(Date.now() / 1000);
    const sub = 'okta|rt48d-future';
    const claims = (tenant: string, groups: string[], iat: number) => ({ sub, email: 'rt48d-future@example.com', groups, tenant, iat });
    // The IdP's clock jumped ten years ahead for one token.
    expect(sc(await read(await iss.mint(claims('Music', ['writers'], now + 10 * 365 * 86400)))).rows.length).toBe(2);
    expect(await grantsOf(sub)).toEqual(['rt48d-tenant']);
    // It counts as issued when it was used (the control database's clock): later tokens are issued after
    // that moment. A token issued before it is older: the first call took over a second in a clean-clone
    // CI, past `now + 1` (shown failing with a 2.5 s pause before the first call).
    const first = await started().env.db.pool.query('SELECT pg_catalog.ceil(extract(epoch FROM claims_issued_at))::int AS at FROM identity_subjects WHERE subject = $1', [sub]);
    const after = Math.max(now, first.rows[0].at);
    // Back to normal: the requester moved to Classical, then out of the writers group.
    expect(sc(await read(await iss.mint(claims('Classical', ['writers'], after + 1)))).rows.length).toBe(1);
    const recorded = await started().env.db.pool.query('SELECT claim_attributes->>\'tenant\' AS tenant, claims_issued_at <= now() AS not_ahead FROM identity_subjects WHERE subject = $1', [sub]);
    expect(recorded.rows).toEqual([{ tenant: 'Classical', not_ahead: true }]);
    // Out of the writers group: the claim grant is taken back, for that very call too (R6).
    expect(sc(await read(await iss.mint(claims('Classical', [], after + 2))))).toMatchObject({ status: 'not_found', code: 'unknown_source' });
    expect(await grantsOf(sub)).toEqual([]);
    expect(sc(await read(await iss.mint(claims('Classical', [], after + 3))))).toMatchObject({ status: 'not_found', code: 'unknown_source' });
  });
});

describe('R4, R5, R6: the claims and claim grants of one subject', () => {
  const ROLE = 'rt48d-r6';
  const started = useTenantClaimsEnv('https://gateway.rt48d-r6.example/mcp', ROLE);
  const sc = (r: { body: any }) => r.body.result.structuredContent;
  const read = (token: string) => callTool(started().env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT playlist_id, name FROM playlist ORDER BY 1', params: [] }, token);
  const grantsOf = async (subject: string) =>
    (await started().env.db.pool.query('SELECT g.role_name FROM identity_subjects s JOIN grants g ON g.identity_id = s.identity_id WHERE s.subject = $1 ORDER BY 1', [subject])).rows.map((r) => r.role_name);
  const tenantOf = async (subject: string) => (await started().env.db.pool.query("SELECT claim_attributes->>'tenant' AS tenant FROM identity_subjects WHERE subject = $1", [subject])).rows[0]?.tenant;

  // R6 (low, fixed): the grants were synced in identityFor, but the call was authorised from the grant
  // cache (refreshed by the grants notification, which came later) and answered from the result cache.
  // Shown failing before the fix: the last call answered the Classical playlists (cached: true).
  test('R6 (low, fixed): a token without the group is refused on its first call', async () => {
    const { iss } = started();
    const now = Math.floor(Date.now() / 1000);
    const claims = (tenant: string, groups: string[], iat: number) => ({ sub: 'okta|rt48d-r6', email: 'rt48d-r6@example.com', groups, tenant, iat });
    expect(sc(await read(await iss.mint(claims('Music', ['writers'], now)))).rows.length).toBe(2);
    expect(sc(await read(await iss.mint(claims('Classical', ['writers'], now + 1)))).rows.length).toBe(1);
    expect(sc(await read(await iss.mint(claims('Classical', [], now + 2))))).toMatchObject({ status: 'not_found', code: 'unknown_source' });
  });

  // R5 (low, fixed): a token without iat cleared claims_issued_at, after which an older unexpired
  // token's claims (and claim grants) counted again. Now a token without iat counts as issued when it
  // is used. Shown failing before the fix: the recorded tenant went back to 'Music', the grant came back.
  test('R5 (low, fixed): after a token without iat, an older token replaces neither the claims nor the claim grants', async () => {
    const { iss } = started();
    const now = Math.floor(Date.now() / 1000);
    const sub = 'okta|rt48d-r5';
    const claims = (tenant: string, groups: string[], iat: number | undefined) => ({ sub, email: 'rt48d-r5@example.com', groups, tenant, iat });
    const old = await iss.mint(claims('Music', ['writers'], now - 60));
    expect(sc(await read(old)).rows.length).toBe(2);
    expect(await grantsOf(sub)).toEqual([ROLE]);
    // The issuer's next token carries no iat: the requester moved to Classical and out of the group.
    const noIat = await iss.mint(claims('Classical', [], undefined));
    expect(JSON.parse(Buffer.from(noIat.split('.')[1], 'base64url').toString()).iat).toBeUndefined();
    expect(sc(await read(noIat))).toMatchObject({ status: 'not_found', code: 'unknown_source' });
    expect([await tenantOf(sub), await grantsOf(sub)]).toEqual(['Classical', []]);
    // The older token, still unexpired, once more: its own call runs with the grants held (none).
    expect(sc(await read(old))).toMatchObject({ status: 'not_found', code: 'unknown_source' });
    expect([await tenantOf(sub), await grantsOf(sub)]).toEqual(['Classical', []]);
    const issued = await started().env.db.pool.query('SELECT claims_issued_at > to_timestamp($2) AS after_old FROM identity_subjects WHERE subject = $1', [sub, now - 60]);
    expect(issued.rows).toEqual([{ after_old: true }]);
    // A token issued after it is recorded again, though its claims and grants are the older token's (which was not recorded).
    expect(sc(await read(await iss.mint(claims('Music', ['writers'], Math.floor(Date.now() / 1000) + 1)))).rows.length).toBe(2);
    expect([await tenantOf(sub), await grantsOf(sub)]).toEqual(['Music', [ROLE]]);
  });

  // R4 (low, fixed): two sign-ins of one subject at once. The older token's claims were recorded
  // first, then the newer one's, and the older token's grant sync (run after its UPDATE had committed)
  // came last: claims of the newer token, grants of the older. The older one's sync is held here until
  // the newer sign-in has finished or waits on the subject's row. Shown failing before the fix (the
  // grant of the older token was kept: [ROLE] instead of []).
  test('R4 (low, fixed): of two sign-ins at once, the grants are the newer token\'s, as the claims are', async () => {
    const { iss, env } = started();
    const now = Math.floor(Date.now() / 1000);
    const sub = 'okta|rt48d-r4';
    const claims = (tenant: string, groups: string[], iat: number) => ({ iss: iss.issuer, sub, email: 'rt48d-r4@example.com', groups, tenant, iat, exp: now + 300 });
    // Provisioned, with the claim grant, through the gateway.
    expect(sc(await read(await iss.mint(claims('Music', ['writers'], now - 30)))).rows.length).toBe(2);
    expect(await grantsOf(sub)).toEqual([ROLE]);

    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const atSync = new Promise<void>((r) => (reached = r));
    // The older token's sync (the one that gives the grant) waits for the gate.
    const held = (sql: unknown, params: unknown) => typeof sql === 'string' && sql.includes('interlock_sync_claim_grants') && Array.isArray(params) && (params[2] as string[]).length > 0;
    const real = env.db.pool;
    const pool = {
      query: async (sql: string, params?: unknown[]) => {
        if (held(sql, params)) (reached(), await gate);
        return real.query(sql, params);
      },
      connect: async () => {
        const c = await real.connect();
        const query = c.query.bind(c);
        const done = c.release.bind(c);
        Object.assign(c, {
          query: async (sql: string, params?: unknown[]) => {
            if (held(sql, params)) (reached(), await gate);
            return query(sql, params);
          },
          release: (err?: Error) => {
            delete (c as Partial<typeof c>).query;
            delete (c as Partial<typeof c>).release;
            done(err);
          },
        });
        return c;
      },
    };
    const cfg = { issuer: iss.issuer, jwks_uri: iss.jwksUri, unknown_subjects: 'provision', identity_claim: 'email', attribute_claims: ['tenant', 'email'], role_grants: [{ claim: 'groups', value: 'writers', role: ROLE, source: 'chinook' }] } as TokenIssuer;
    const store = new TokenIdentityStore({ ...env.db, pool } as unknown as ControlDb, undefined, new ClaimMappingCache(env.db));
    const older = store.identityFor(cfg, claims('Music', ['writers'], now - 10));
    await atSync;
    let newerDone = false;
    const newer = store.identityFor(cfg, claims('Classical', [], now)).finally(() => (newerDone = true));
    // Until the newer sign-in finished (before the fix) or waits for the subject's row (the fix).
    const waiting = async () => (await real.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE identity_subjects%'")).rows[0].n > 0;
    for (let i = 0; i < 500 && !newerDone && !(await waiting()); i++) await new Promise((r) => setTimeout(r, 20));
    release();
    expect(['identity' in (await older), 'identity' in (await newer)]).toEqual([true, true]);
    expect([await tenantOf(sub), await grantsOf(sub)]).toEqual(['Classical', []]);
  });
});

describe('held (c), (d): a number JSON rounds reaches PostgreSQL by no agent route; exact ones are not refused', () => {
  // The tenant-claims gateway, used here through its demo API key only.
  const started = useTenantClaimsEnv('https://gateway.rt48d-held.example/mcp', 'rt48d-held');
  const env = (): GovernedEnv => started().env;
  const origin = () => new URL(env().url).origin;
  const args = (num: string, sql = 'SELECT $1::numeric::text AS v') => `{"source_id":"chinook","sql":${JSON.stringify(sql)},"params":[${num}]}`;
  async function post(path: string, body: string, extra: Record<string, string> = {}): Promise<{ status: number; body: any }> {
    const r = await fetch(origin() + path, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${env().apiKey}`, ...extra }, body });
    const text = await r.text();
    const data = text.startsWith('event:') || text.includes('\ndata: ') ? text.split('\n').find((l) => l.startsWith('data: '))!.slice(6) : text;
    return { status: r.status, body: JSON.parse(data) };
  }
  /** The structured answer of one interlock_query call with params `[num]` on `route`. */
  async function query(route: 'mcp' | 'v1' | 'legacy', num: string, sql?: string): Promise<{ status: number; sc: any }> {
    if (route === 'mcp') {
      const r = await post('/mcp', `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":${args(num, sql)}}}`, { 'mcp-protocol-version': '2025-11-25' });
      return { status: r.status, sc: r.body.result.structuredContent };
    }
    if (route === 'legacy') {
      const r = await post('/mcp/tools/call', `{"name":"interlock_query","arguments":${args(num, sql)}}`);
      return { status: r.status, sc: r.body.structuredContent ?? r.body };
    }
    const r = await post('/v1/sources/chinook/query', args(num, sql).replace('"source_id":"chinook",', ''));
    return { status: r.status, sc: r.body };
  }

  test.each(['mcp', 'v1', 'legacy'] as const)('%s: 0.12345678901234567891, 1e400 and 1.0000000000000000001 refused with the hint; exact 0.30000000000000004, 1.50 and -0 read back as written', async (route) => {
    // R7 (fixed): 1e400 and -1e400 (±Infinity), which the schema's validator refuses first, get the same hint.
    for (const n of ['0.12345678901234567891', '1e-400', '1e400', '-1e400', '1.0000000000000000001', '12345678901234567890.123', '9007199254740993']) {
      const r = await query(route, n);
      expect([route, n, r.sc.code, r.sc.message]).toEqual([route, n, 'invalid_arguments', expect.stringMatching(/^params\[0\] is a number JSON cannot carry exactly/)]);
    }
    for (const [n, v] of [['0.30000000000000004', '0.30000000000000004'], ['1.50', '1.5'], ['123456789012345', '123456789012345'], ['-0', '0']] as const) {
      const r = await query(route, n);
      expect([route, n, r.sc.rows]).toEqual([route, n, [{ v }]]);
    }
  });

  test('a write with a rounded number is refused before it is queued; nested params are refused by the schema', async () => {
    const w = await query('mcp', '0.12345678901234567891', 'UPDATE playlist SET name = name WHERE playlist_id = $1');
    expect([w.sc.code, w.sc.message]).toEqual(['invalid_arguments', expect.stringMatching(/^params\[0\] is a number JSON cannot carry exactly/)]);
    expect((await env().db.pool.query('SELECT count(*)::int AS n FROM approvals')).rows[0].n).toBe(0);
    const nested = await query('mcp', '[0.12345678901234567891]');
    expect(nested.sc.code).toBe('invalid_arguments');
  });
});

describe('target 4: row views over columns of extension types (citext, hstore)', () => {
  let fx: RowFixture;
  beforeAll(async () => {
    fx = await startRowFixture(`CREATE EXTENSION citext; CREATE EXTENSION hstore;
      CREATE TABLE public.ci (id int PRIMARY KEY, owner citext, tags hstore); INSERT INTO public.ci VALUES (1, 'Ann', 'a=>1'), (2, 'bob', 'a=>2');`);
    await fx.admin(`GRANT SELECT ON public.ci TO "${fx.reader}"`);
    await fx.rescan();
    fx.grant('ci', [{ name: 'ci', statements: [{ effect: 'allow', action: 'read', resource: 'public.ci', rows: 'owner = identity.name' }] }]);
    fx.grant('not', [{ name: 'not', statements: [{ effect: 'allow', action: 'read', resource: 'public.ci', rows: 'owner <> identity.name' }] }]);
    fx.grant('hs', [{ name: 'hs', statements: [{ effect: 'allow', action: 'read', resource: 'public.ci', rows: "tags -> 'a' = identity.name" }] }]);
  }, 120_000);
  afterAll(async () => {
    await fx?.close();
  });
  const read = async (who: string, name: string) => {
    const out = await fx.call(who, { name }, 'SELECT id FROM ci ORDER BY 1');
    return out.kind === 'result' ? rowsOf(out) : codeOf(out);
  };

  // R8 (low, fixed): the row view compared a citext column with OPERATOR(pg_catalog.=), which resolves
  // to text = text through citext's implicit cast: case-sensitive, so 'ann' read no row 'Ann' (closed),
  // and `owner <> identity.name` let 'ann' read the row 'Ann' (text's <>; citext's own would not).
  // Shown failing before the fix: [] for 'ann', [1, 2] for the <> rule. Now citext's own operators,
  // named by the schema the catalogue records them in, when the source trusts their functions.
  test('R8 (low, fixed): a rule on a citext column compares with citext\'s own operators, when the source trusts them', async () => {
    const settings = fx.source.settings as Record<string, unknown>;
    try {
      // Their C functions run on every row of the view: refused until trusted, as an agent's own `owner = 'x'` is.
      expect(await read('ci', 'ann')).toBe('row_rule_unenforceable');
      settings.trusted_functions = ['public.citext_eq'];
      expect([await read('ci', 'Ann'), await read('ci', 'ann'), await read('ci', 'BOB')]).toEqual([[{ id: 1 }], [{ id: 1 }], [{ id: 2 }]]);
      expect(await read('not', 'ann')).toBe('row_rule_unenforceable');
      settings.trusted_functions = ['public.citext_eq', 'public.citext_ne'];
      expect(await read('not', 'ann')).toEqual([{ id: 2 }]);
      // The views depend on citext's own = and <> (pg_catalog's, pinned, are not recorded).
      const ops = await fx.admin(
        "SELECT DISTINCT on_.nspname || '.' || o.oprname || '(' || pg_catalog.format_type(o.oprleft, NULL) || ')' AS op FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace " +
          "JOIN pg_operator o ON d.refclassid = 'pg_operator'::regclass AND o.oid = d.refobjid JOIN pg_namespace on_ ON on_.oid = o.oprnamespace WHERE d.classid = 'pg_rewrite'::regclass AND n.nspname = 'interlock_rows' ORDER BY 1",
      );
      expect(ops).toEqual([{ op: 'public.<>(citext)' }, { op: 'public.=(citext)' }]);
    } finally {
      delete settings.trusted_functions;
    }
  });
  test('an hstore operator in a rule is outside the rule grammar: refused', async () => {
    expect(await read('hs', '2')).toBe('row_rule_unenforceable');
  });
});
