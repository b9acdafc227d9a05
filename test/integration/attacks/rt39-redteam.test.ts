/**
 * Red team rt39: three changes merged into main on 2026-12-11 attacked on real PostgreSQL and over
 * loopback, every wait bounded.
 *
 *  1. hchain: token sign-in events stored in audit_pending_events while the approval events' chain
 *     lock is held (migration 20261211140000000), chained by the next append or the seal.
 *  2. hdeny: one-part role resources on PostgreSQL sources (src/governance/evaluator.ts covers).
 *  3. h29y: the refusal at capacity decided from a modern tools/call's headers (early-refusal.ts).
 *
 * Each test is one attack; its comment says whether it is a finding (severity, fixed or not:
 * test.failing while open) or an attack the change withstands.
 */
import { connect } from 'node:net';
import pg from 'pg';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import type { CapacityPermit } from '../../../src/transport/capacity';
import { grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { sealPendingAuditEvents } from '../../../src/audit/pending';
import { verifyAuditChain } from '../../../src/audit/verify';
import { within } from './harness';
import { upsertRole } from '../../../src/control/roles';
import { addSource, getSource, removeSource } from '../../../src/control/sources';
import { replaceConfiguredClaimGrants } from '../../../src/control/claim-rules';
import { applyInterlockFile } from '../../../src/declarative/apply';
import type { ClaimRoleGrant, TokenIssuer } from '../../../generated/config-v1';
import { AccessEvaluator, type RoleGrant } from '../../../src/governance/evaluator';

jest.setTimeout(300_000);

describe('hchain: pending sign-in events, runtime role credential', () => {
  let t: TestControlDb;
  let runtimeRole: string;
  let rtUrl: string;
  let rt: ControlDb;
  const codeOf = (c: { query: (s: string, p?: unknown[]) => Promise<unknown> }, sql: string, params: unknown[] = []) =>
    c.query(sql, params).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));

  beforeAll(async () => {
    t = await freshControlDb('rt39');
    ({ role: runtimeRole, url: rtUrl } = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole));
    rt = await openControlDb(rtUrl, { migrate: false, poolSize: 2 });
  });
  afterAll(async () => {
    await rt?.close();
    if (runtimeRole) await dropLoginRole(t, runtimeRole);
    await t?.cleanup();
  });

  // Finding (high, fixed: migration 20261211150000000_pending-audit-chunks_rt39): the drain chained
  // every pending event as ONE format-2 batch (string_agg of all of them, then ::jsonb). A holder of
  // the runtime credential keeps the chain's lock in one session (any append it holds open) and, in
  // another, provisions token identities with 2048-character issuers of 4-byte characters (8 KiB a
  // event, each accepted at once as pending, none waiting). Past 256 MiB of pending text the drain's
  // jsonb exceeds PostgreSQL's limit (54000): the gateway's seal fails on every run, and since every
  // append on the format-2 chain drains first, every approval event, source-removal rejection and
  // sign-in that gets the lock fails too, for ever (nobody may delete a pending row but the owner by
  // hand). Now the drain chains them in batches of at most 1000 events / 8 MiB, in id order.
  test('finding (high, fixed): a pending backlog past jsonb\'s size limit does not fail the seal and every later append', async () => {
    const holder = await t.db.pool.connect();
    const c = new pg.Client({ connectionString: rtUrl });
    await c.connect();
    const N = 33_000;
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
      // 2040 four-byte characters: 8 KiB of issuer in each event (length() counts characters).
      const issuer = `https://${'\u{1F600}'.repeat(2040)}`;
      const r = await within(
        codeOf(c, `DO $$ BEGIN FOR g IN 1..${N} LOOP PERFORM interlock_provision_token_identity('idn_' || lpad(to_hex(g), 20, '0'), 'rt39-' || g, '${issuer}', 's' || g); END LOOP; END $$`),
        240_000,
      );
      expect(r).toBe('ok');
      await holder.query('COMMIT');
      const pending = (await t.db.pool.query<{ n: number; bytes: string }>('SELECT count(*)::int AS n, sum(octet_length(event))::text AS bytes FROM audit_pending_events')).rows[0]!;
      expect(pending.n).toBe(N);
      expect(Number(pending.bytes)).toBeGreaterThan(256 * 1024 * 1024);
      // The gateway's seal, then an approval-like append of the owner.
      const seal = await within(sealPendingAuditEvents(rt).then((n) => n, (e: { code?: string }) => e.code ?? String(e)), 240_000);
      const append = await codeOf(t.db.pool, `SELECT interlock_audit_append_chain('[' || interlock_system_config_event('rt39_probe', NULL, '{}') || ']', false)`);
      expect({ seal, append }).toEqual({ seal: N, append: 'ok' });
      expect((await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_pending_events')).rows[0]!.n).toBe(0);
      const chained = (await t.db.pool.query<{ n: number; batches: number }>("SELECT count(*)::int AS n, count(DISTINCT batch_id)::int AS batches FROM audit_events WHERE decision = 'identity_created' AND details->>'identity' LIKE 'rt39-%'")).rows[0]!;
      expect(chained.n).toBe(N);
      expect(chained.batches).toBeGreaterThan(1);
      // In their order: event ids follow the pending ids (the identity number).
      const order = (await t.db.pool.query<{ ok: boolean }>("SELECT bool_and(x.ok) AS ok FROM (SELECT (substr(details->>'identity', 6))::int > lag((substr(details->>'identity', 6))::int, 1, 0) OVER (ORDER BY id) AS ok FROM audit_events WHERE decision = 'identity_created' AND details->>'identity' LIKE 'rt39-%') x")).rows[0]!;
      expect(order.ok).toBe(true);
      const report = await verifyAuditChain(t.db);
      expect({ ok: report.ok, first: report.firstMismatch }).toEqual({ ok: true, first: null });
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await c.end();
    }
  });

  // Withstood: seals of several gateways and an owner's append racing over a backlog that the
  // attacker keeps adding to (sign-ins deferred while the drain holds the lock) chain each pending
  // event exactly once, in batches, and the trail verifies; nothing stays pending.
  test('racing seals, appends and new deferrals: every pending event chained exactly once, the chain verifies', async () => {
    const holder = await t.db.pool.connect();
    const c = new pg.Client({ connectionString: rtUrl });
    await c.connect();
    const provisionMany = (from: number, to: number) =>
      codeOf(c, `DO $$ BEGIN FOR g IN ${from}..${to} LOOP PERFORM interlock_provision_token_identity('idn_' || lpad(to_hex(1000000 + g), 20, '0'), 'race-' || g, 'https://race.example', 'r' || g); END LOOP; END $$`);
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
      expect(await within(provisionMany(1, 2500), 60_000)).toBe('ok');
      await holder.query('COMMIT');
      const seals = Promise.all([0, 1, 2].map(() => sealPendingAuditEvents(rt).then((n) => n, (e: { code?: string }) => e.code ?? String(e))));
      const more = provisionMany(2501, 3000);
      const append = codeOf(t.db.pool, `SELECT interlock_audit_append_chain('[' || interlock_system_config_event('rt39_race', NULL, '{}') || ']', false)`);
      const got = await within(Promise.all([seals, more, append]), 120_000);
      expect(got).not.toBe('hung');
      expect(await sealPendingAuditEvents(rt)).not.toBeNull();
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await c.end();
    }
    expect((await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_pending_events')).rows[0]!.n).toBe(0);
    const per = (await t.db.pool.query<{ n: number; dup: number }>("SELECT count(*)::int AS n, count(*) FILTER (WHERE k > 1)::int AS dup FROM (SELECT details->>'identity' AS who, count(*) AS k FROM audit_events WHERE decision = 'identity_created' AND details->>'identity' LIKE 'race-%' GROUP BY 1) x")).rows[0]!;
    expect(per).toEqual({ n: 3000, dup: 0 });
    const report = await verifyAuditChain(t.db);
    expect({ ok: report.ok, first: report.firstMismatch }).toEqual({ ok: true, first: null });
  });
});

describe('hdeny: a one-part role resource already stored on a PostgreSQL source', () => {
  const role = (name: string, statements: Array<[string, string, string]>): RoleGrant['role'] =>
    ({ name, statements: statements.map(([effect, action, resource]) => ({ effect, action, resource })) }) as RoleGrant['role'];

  // Finding (low, fixed): the stored one-part deny "fails closed" by covering every relation and
  // column of that name, but not a schema of that name, though a one-part name is a schema in the
  // policy engine (deny_relations / restrict_rows: `hr` means `hr.*`, src/governance/policies.ts)
  // and is what an operator writing `deny read hr` next to `allow read hr.*` means. Such a role
  // stored before hdeny's write check, or through a road the check does not see, hid nothing of
  // schema hr: hr.salaries and every column of it stayed readable. Now a one-part deny covers a
  // schema of that name too (and, as before, relations and columns of that name).
  test('finding (low, fixed): a stored one-part deny naming a schema hides that schema', () => {
    const ev = new AccessEvaluator([{ sourceId: 'db', role: role('hr-block', [['allow', 'read', '*'], ['deny', 'read', 'hr']]) }]);
    const got = {
      table: ev.decide('db', 'read', { schema: 'hr', table: 'salaries' }),
      column: ev.decide('db', 'read', { schema: 'hr', table: 'salaries', column: 'amount' }),
      count: ev.decideTable('db', 'read', 'hr', 'salaries', ['amount']),
      other: ev.decide('db', 'read', { schema: 'public', table: 'customer', column: 'email' }),
      named: ev.decide('db', 'read', { schema: 'public', table: 'hr' }),
    };
    expect(got).toEqual({ table: 'deny', column: 'deny', count: 'deny', other: 'allow', named: 'deny' });
  });

  // Withstood: a one-part allow stored on a SQL source grants nothing, whatever it looks like
  // (a quoted name, a case variant, a name with a dot inside quotes splits into parts that name no
  // table); `*` is the documented every-resource pattern (two parts), not a one-part resource.
  test('a stored one-part allow (quoted, cased, dotted inside quotes) grants nothing', () => {
    for (const resource of ['"public"', 'Email', '"Email"', 'email', 'customer']) {
      const ev = new AccessEvaluator([{ sourceId: 'db', role: role('odd', [['allow', 'read', resource]]) }]);
      const d = [
        ev.decide('db', 'read', { schema: 'public', table: 'customer' }),
        ev.decide('db', 'read', { schema: 'public', table: 'customer', column: 'email' }),
        ev.decideTable('db', 'read', 'public', 'customer', ['email']),
        ev.rowTerms('db', 'public', 'customer').length,
      ];
      expect({ resource, d }).toEqual({ resource, d: ['none', 'none', 'none', 0] });
    }
  });
});

describe('h29y: the refusal at capacity decided from the headers', () => {
  const MODERN = '2026-07-28';
  let env: GovernedEnv;
  let port = 0;
  beforeAll(async () => {
    env = await startGovernedEnv({
      config: {
        admission: { enabled: true, initial_limit: 1, min_limit: 1, max_limit: 1, queue_size: 0, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 1000, pause_refused_connections: false },
        cache: { ttl_ms: 0, max_bytes: 0 },
      },
    });
    port = Number(new URL(env.url).port);
  }, 90_000);
  afterAll(async () => env?.close());

  const hold = (): CapacityPermit => {
    const got = env.gateway.capacity!.acquire(undefined, 'someone-else');
    if (got instanceof Promise || 'retryAfterMs' in got) throw new Error('the slot was not free');
    return got;
  };
  const head = (length: number, name = 'interlock_query', extra: string[] = []) =>
    [`POST /mcp HTTP/1.1`, `Host: 127.0.0.1:${port}`, 'Content-Type: application/json', 'Accept: application/json, text/event-stream', `Authorization: Bearer ${env.apiKey}`, `MCP-Protocol-Version: ${MODERN}`, 'Mcp-Method: tools/call', `Mcp-Name: ${name}`, ...extra, `Content-Length: ${length}`].join('\r\n') + '\r\n\r\n';
  const call = (id: string, tool: string, args: Record<string, unknown>) =>
    JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
  /** Writes `parts` (each its own write, `gapMs` apart) on one connection; the status lines and JSON-RPC ids of what came back within `ms`, and whether the server closed. */
  async function exchange(parts: string[], ms: number, gapMs = 30): Promise<{ answers: Array<[number, unknown]>; interim: number; closed: boolean }> {
    const s = connect(port, '127.0.0.1');
    let buf = '';
    let closed = false;
    s.on('data', (d) => (buf += d.toString('latin1')));
    s.on('close', () => (closed = true));
    s.on('error', () => undefined);
    await new Promise((r) => s.once('connect', r));
    for (const p of parts) {
      s.write(p);
      await new Promise((r) => setTimeout(r, gapMs));
    }
    await new Promise((r) => setTimeout(r, ms));
    s.destroy();
    const answers: Array<[number, unknown]> = [];
    let interim = 0;
    for (const m of buf.matchAll(/HTTP\/1\.1 (\d{3})[^\r]*\r\n((?:[^\r]+\r\n)*)\r\n/g)) {
      const status = Number(m[1]);
      if (status === 100) {
        interim++;
        continue;
      }
      const len = Number(/content-length: (\d+)/i.exec(m[2])?.[1] ?? 0);
      const at = m.index! + m[0].length;
      let id: unknown = undefined;
      try {
        id = JSON.parse(buf.slice(at, at + len)).id;
      } catch {
        id = undefined;
      }
      answers.push([status, id]);
    }
    return { answers, interim, closed };
  }

  // Withstood: with the token known and the replica full, a body whose Content-Length covers a
  // whole second request (a smuggling attempt) is read as that body only: one refusal, the inner
  // request never served; headers that lie (Mcp-Name interlock_query, the body calling another
  // tool) are refused at capacity as documented, never served; Expect: 100-continue gets node's
  // interim 100 and then the refusal; a body cut short by the client closing is counted and the
  // gateway serves the next connection.
  test('smuggled inner request, lying headers, Expect: 100-continue, a body cut short: refused once each, nothing served, connection in step', async () => {
    // The token's first call (resolved) teaches the limiter the token.
    const slot = hold();
    try {
      const warm = call('warm', 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1', params: [] });
      expect((await exchange([head(Buffer.byteLength(warm)) + warm], 1500)).answers).toEqual([[429, 'warm']]);
      const before = env.gateway.capacity!.refused;

      const inner = call('inner', 'interlock_list_sources', {});
      const innerReq = head(Buffer.byteLength(inner), 'interlock_list_sources') + inner;
      const smuggle = await exchange([head(Buffer.byteLength(innerReq)) + innerReq], 1500);
      expect(smuggle.answers).toEqual([[429, null]]);

      const lie = call('lie', 'interlock_list_sources', {});
      expect((await exchange([head(Buffer.byteLength(lie)) + lie], 1500)).answers).toEqual([[429, 'lie']]);

      const body = call('cont', 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1', params: [] });
      const cont = await exchange([head(Buffer.byteLength(body), 'interlock_query', ['Expect: 100-continue']), body], 1500, 300);
      expect({ interim: cont.interim, answers: cont.answers }).toEqual({ interim: 1, answers: [[429, 'cont']] });

      const cut = await exchange([head(5000) + '{"jsonrpc":"2.0","id":"cut"'], 300);
      expect(cut.answers).toEqual([]);
      expect(env.gateway.capacity!.refused - before).toBe(4);
    } finally {
      slot.release();
    }
    // The replica has room again: the same token is served.
    const ok = call('ok', 'interlock_list_sources', {});
    // (A served answer may be chunked or an event stream: its status only.)
    expect((await exchange([head(Buffer.byteLength(ok), 'interlock_list_sources') + ok], 3000)).answers.map((x) => x[0])).toEqual([200]);
  }, 60_000);
});

describe('hdeny: the write check of one-part resources, by apply', () => {
  let env: GovernedEnv;
  const IDP = 'https://idp.rt39.example';
  const rule = (value: string, role: string, source: string): ClaimRoleGrant => ({ claim: 'groups', value, role, source });
  const issuerCfg = (issuer: string, grants: ClaimRoleGrant[]): TokenIssuer => ({ issuer, jwks_uri: `${issuer}/jwks`, unknown_subjects: 'provision', identity_claim: 'email', role_grants: grants }) as TokenIssuer;
  beforeAll(async () => {
    env = await startGovernedEnv();
  }, 90_000);
  afterAll(async () => env?.close());
  const outcome = (p: Promise<unknown>) => p.then(() => 'ok', (e: { name?: string; message?: string }) => `${e.name}: ${e.message}`);
  const stored = async (name: string) => (await env.db.pool.query<{ s: Array<{ resource: string }> }>('SELECT statements AS s FROM roles WHERE name = $1', [name])).rows[0]!.s.map((x) => x.resource);

  // Finding (low, fixed): apply's one-part check (refuseOnePartSqlGrants) looked at operator
  // grants and claim mappings only, not at the gateway configuration's claim rules
  // (configured_claim_grants) nor at grants the claims already made, though `role update` checks
  // all of them (loadSqlGrantTargets). A role that a configured claim rule grants on PostgreSQL
  // source chinook was refused `deny read email` by `role update` but took it from `interlock
  // apply`: a one-part resource stored on a PostgreSQL grant, the state hdeny meant to refuse when
  // written. Now apply refuses it too (validation_failed, nothing changed).
  test('finding (low, fixed): apply cannot give a role that a configured claim rule grants on PostgreSQL a one-part resource', async () => {
    await upsertRole(env.db, { name: 'cfg-claim-role', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer' }] });
    await replaceConfiguredClaimGrants(env.db, [issuerCfg(IDP, [rule('staff', 'cfg-claim-role', 'chinook')])]);
    const statements = [
      { effect: 'allow', action: 'read', resource: 'public.customer' },
      { effect: 'deny', action: 'read', resource: 'email' },
    ];
    const byUpdate = await outcome(upsertRole(env.db, { name: 'cfg-claim-role', statements } as never));
    expect(byUpdate).toMatch(/^ValidationError: role "cfg-claim-role" is granted on PostgreSQL source chinook: a one-part resource/);
    const byApply = await outcome(applyInterlockFile(env.db, { document: { version: 1, roles: [{ name: 'cfg-claim-role', statements }] } } as never, { operator: 'ops-rt39', scan: false }));
    expect({ byApply, stored: await stored('cfg-claim-role') }).toEqual({ byApply: byUpdate, stored: ['public.customer'] });
  });

  // Finding (low, fixed in src/control/catalog-names.ts refuseOnePartRolesOnSource, called by
  // addSource and apply's source creation: the re-add is refused): claim rules outlive their source. A configured claim rule
  // (gateway config) or a claim mapping's rule names a source id; removing the source removes its
  // grants but not the rules (configured_claim_grants and claim_mappings.role_grants hold no
  // foreign key), and adding a source under the same id checks no rule. A role with a one-part
  // resource (a document category path, fine on a documents source) named by a rule on documents
  // source `kb` is, once `kb` is removed and added again as PostgreSQL, granted there at the next
  // sign-in: the stored one-part resource on a PostgreSQL grant that hdeny refuses when written
  // (the evaluator still fails closed: the deny hides every column `email`, the allow grants
  // nothing). More broadly the re-added source inherits every rule of the old one (a documents
  // role's `allow read *` reads the whole database). A fix needs a decision (drop or refuse rules
  // with the source, or check them when a source is added): not small.
  test('finding (low, fixed): a source removed and added again as PostgreSQL inherits claim rules for a role with a one-part resource', async () => {
    await addSource(env.db, { id: 'kb', type: 'documents', name: 'kb', settings: { path: '/tmp' } });
    await upsertRole(env.db, { name: 'kb-role', statements: [{ effect: 'allow', action: 'discover', resource: '*' }, { effect: 'deny', action: 'read', resource: 'email' }] });
    await replaceConfiguredClaimGrants(env.db, [issuerCfg(IDP, [rule('staff', 'cfg-claim-role', 'chinook'), rule('kb', 'kb-role', 'kb')])]);
    await removeSource(env.db, 'kb', { operator: 'ops-rt39' });
    const chinook = (await getSource(env.db, 'chinook'))!;
    const readd = await outcome(addSource(env.db, { id: 'kb', type: 'postgres', name: 'kb', settings: chinook.settings }));
    const inherited = (
      await env.db.pool.query(
        `SELECT c.role_name, c.source_id FROM configured_claim_grants c JOIN sources s ON s.id = c.source_id AND s.type = 'postgres' JOIN roles r ON r.name = c.role_name
          WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(r.statements) x WHERE x->>'action' NOT IN ('discover', 'request') AND x->>'resource' <> '*' AND strpos(x->>'resource', '.') = 0)`,
      )
    ).rows;
    // The re-add is refused, naming the role and its one-part resource; nothing is left behind.
    expect({ readd, inherited, kb: await getSource(env.db, 'kb') }).toEqual({
      readd: 'ValidationError: role "kb-role" is granted on PostgreSQL source kb: a one-part resource matches no relation or column there',
      inherited: [],
      kb: null,
    });
  });
});
