/**
 * Red team rtn4 of hnu4a/hnu4b (task rtn4): a source 42501 as source_permission_denied, a vanished
 * row view remade and the read retried in the call, and the catalogue name check of policies
 * against what the policy engine masks. Real PostgreSQL (the row-rule fixture, loopback), driving
 * the interlock_query handler as an agent identity. Each block names its finding and severity.
 */
import { codeOf, REP_ROLE, rowsOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import { checkWrittenNames, policyWrittenNames, refuseUnknownPolicyNames, type KnownSources } from '../../../src/control/catalog-names';
import type { Policy } from '../../../src/control/policies';
import type { SourceRole } from '../../../src/control/roles';
import { ADMIN_URL } from '../../helpers/pg';
import { Writable } from 'node:stream';
import pino from 'pino';
import { callTool, sourceQuery, startGovernedEnv } from '../../helpers/governed';
import { runCli } from '../../../src/cli/main';
import { upsertRole } from '../../../src/control/roles';
import { addPolicy } from '../../../src/control/policies';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { logThrottle } from '../../../src/observability/log-throttle';

let fx: RowFixture;
const A = { employee_id: 1, regions: ['us'] };
/** A table the reader role may not read, and a view (owned by a role that may not read its base) the reader may. */
const EXTRA = `
CREATE TABLE hidden_base (id int, secret text);
INSERT INTO hidden_base VALUES (1, 'top');
CREATE TABLE unreadable_t (id int, note text);
INSERT INTO unreadable_t VALUES (1, 'n');
CREATE MATERIALIZED VIEW cust_mv AS SELECT customer_id, email AS mail FROM customer;
CREATE VIEW cust_renamed AS SELECT customer_id, upper(email) AS contact FROM customer;
`;

beforeAll(async () => {
  fx = await startRowFixture(EXTRA);
  await fx.admin(`REVOKE SELECT ON hidden_base, unreadable_t FROM "${fx.reader}"`);
  await fx.admin(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'il_rtn4_owner') THEN CREATE ROLE il_rtn4_owner NOLOGIN; END IF; END $$`);
  await fx.admin(`GRANT USAGE, CREATE ON SCHEMA public TO il_rtn4_owner`);
  await fx.admin(`CREATE VIEW leaky_v AS SELECT 1 AS id, (SELECT count(*) FROM hidden_base) AS n`);
  await fx.admin(`ALTER VIEW leaky_v OWNER TO il_rtn4_owner`);
  await fx.admin(`GRANT SELECT ON leaky_v, cust_mv, cust_renamed TO "${fx.reader}"`);
  await fx.rescan();
}, 60_000);
afterAll(async () => {
  await fx?.admin('DROP VIEW IF EXISTS leaky_v').catch(() => undefined);
  await fx?.admin('REVOKE ALL ON SCHEMA public FROM il_rtn4_owner').catch(() => undefined);
  await fx?.close();
  // The role is cluster-wide: dropped after the fixture database is gone (nothing left to own).
  const pg = (await import('pg')).default;
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect().then(() => c.query('DROP ROLE IF EXISTS il_rtn4_owner')).catch(() => undefined);
  await c.end().catch(() => undefined);
});

describe('item 1: 42501 as source_permission_denied (holds)', () => {
  it('a view whose owner may not read its base answers source_permission_denied naming nothing the agent did not write', async () => {
    fx.grant('v', [{ name: 'v', statements: [{ effect: 'allow', action: 'read', resource: 'public.leaky_v' }] }]);
    const o = await fx.call('v', undefined, 'SELECT id, n FROM leaky_v');
    expect(codeOf(o)).toBe('source_permission_denied');
    const raw = JSON.stringify(o);
    expect(raw).not.toMatch(/hidden_base|permission denied|il_rtn4_owner|il_rr_/);
    expect(fx.lastAudit().sqlstate).toBe('42501');
    expect(JSON.stringify(fx.lastAudit())).not.toMatch(/hidden_base|permission denied/);
  });
  it('a table the agent is granted but the reader may not read: same refusal; an ungranted one is refused by the gateway first (no oracle)', async () => {
    fx.grant('u', [{ name: 'u', statements: [{ effect: 'allow', action: 'read', resource: 'public.unreadable_t' }] }]);
    expect(codeOf(await fx.call('u', undefined, 'SELECT id FROM unreadable_t'))).toBe('source_permission_denied');
    // Another identity without the grant: hidden_base exists, unreadable by the reader; no_such does not exist.
    fx.grant('n', [{ name: 'n', statements: [{ effect: 'allow', action: 'read', resource: 'public.invoice' }] }]);
    const a = codeOf(await fx.call('n', undefined, 'SELECT id FROM hidden_base'));
    const b = codeOf(await fx.call('n', undefined, 'SELECT id FROM no_such_table'));
    expect([a, b]).toEqual(['source_role_denied', 'source_role_denied']);
  });
});

describe('item 2 (low, fixed): a ruled read of a relation dropped since the scan redoes the row-view statements and the read on every call', () => {
  // The agent's relations pass the analyser against the scanned catalogue; one dropped on the source
  // since fails 42P01, which the step-7 catch takes for a vanished row view: it forgets every row view
  // of the source, runs the writer's made-if-missing statements again and repeats the read, on each
  // call (an agent cannot cause a 42P01 itself: regclass casts and name-taking functions are refused).
  it('fixed: a second call neither repeats the read nor runs row-view statements (before: both happened on every call)', async () => {
    await fx.admin('CREATE TABLE IF NOT EXISTS gone_t (id int)');
    await fx.admin(`GRANT SELECT ON gone_t TO "${fx.reader}"`);
    await fx.rescan();
    await fx.admin('DROP TABLE gone_t');
    fx.grant('rep', [REP_ROLE, { name: 'g', statements: [{ effect: 'allow', action: 'read', resource: 'public.gone_t' }] }]);
    const SQL = 'SELECT c.customer_id FROM customer c, gone_t g WHERE g.id = c.customer_id';
    expect(codeOf(await fx.call('rep', A, SQL))).toBe('statement_failed');
    const writes = jest.spyOn(fx.connector, 'write');
    const reads = jest.spyOn(fx.connector, 'read');
    fx.gone.length = 0;
    try {
      for (let i = 0; i < 3; i++) {
        const o = await fx.call('rep', A, SQL);
        expect(codeOf(o)).toBe('statement_failed');
        // The contract's answer for a relation gone from the source: 42P01 undefined_table, naming what the agent wrote.
        expect((o as { details?: unknown }).details).toEqual({ sqlstate: '42P01', condition: 'undefined_table', object: { kind: 'relation', name: 'gone_t' } });
      }
      expect({ writes: writes.mock.calls.length, reads: reads.mock.calls.length }).toEqual({ writes: 0, reads: 3 });
      // Reported for the operator (the gateway logs it once a minute and marks the catalogue stale).
      expect(fx.gone).toEqual([0, 1, 2].map(() => ({ sourceId: 'rows', object: 'gone_t' })));
    } finally {
      writes.mockRestore();
      reads.mockRestore();
      await fx.rescan();
    }
  });
  it('fixed (hdeny): a ruled relation dropped with CASCADE (its row view with it): the remake fails 42P01 once, then no statement runs again before a rescan', async () => {
    await fx.admin('CREATE TABLE IF NOT EXISTS gone_r (id int, support_rep_id int)');
    await fx.admin(`GRANT SELECT ON gone_r TO "${fx.reader}"; GRANT SELECT ON gone_r TO "${fx.writer}"`);
    await fx.rescan();
    fx.grant('gr', [{ name: 'gr', statements: [{ effect: 'allow', action: 'read', resource: 'public.gone_r', rows: 'support_rep_id = identity.employee_id' }] }]);
    const SQL = 'SELECT id FROM gone_r';
    expect(rowsOf(await fx.call('gr', A, SQL))).toEqual([]);
    await fx.admin('DROP TABLE gone_r CASCADE');
    fx.gone.length = 0;
    const writes = jest.spyOn(fx.connector, 'write');
    const reads = jest.spyOn(fx.connector, 'read');
    try {
      const first = await fx.call('gr', A, `${SQL} WHERE id IS NOT NULL`); // not the cached text
      expect({ code: codeOf(first), details: (first as { details?: unknown }).details }).toEqual({ code: 'statement_failed', details: { sqlstate: '42P01', condition: 'undefined_table' } });
      const firstWrites = writes.mock.calls.length;
      expect(firstWrites).toBeGreaterThan(0); // the remake tried once
      for (let i = 0; i < 3; i++) {
        const o = await fx.call('gr', A, `${SQL} WHERE id > -${i}`);
        expect({ code: codeOf(o), details: (o as { details?: unknown }).details }).toEqual({ code: 'statement_failed', details: { sqlstate: '42P01', condition: 'undefined_table' } });
      }
      expect({ writes: writes.mock.calls.length - firstWrites, reads: reads.mock.calls.length }).toEqual({ writes: 0, reads: 1 });
      expect(fx.gone).toEqual([0, 1, 2, 3].map(() => ({ sourceId: 'rows' })));
    } finally {
      writes.mockRestore();
      reads.mockRestore();
      await fx.rescan();
    }
  });
  it('the retried read still applies the rule (no window on the base table): rows are employee 1\'s only', async () => {
    fx.grant('rep', [REP_ROLE]);
    await fx.admin('DROP SCHEMA IF EXISTS interlock_rows CASCADE');
    const rows = rowsOf(await fx.call('rep', A, 'SELECT customer_id FROM customer ORDER BY 1'));
    expect(rows.map((r) => Number(r.customer_id))).toEqual([6, 12, 18, 24, 36, 42, 48, 54]);
    // Remade with the caller's rule, then another identity's attributes give its own rows.
    const other = rowsOf(await fx.call('rep', { employee_id: 2, regions: ['us'] }, 'SELECT customer_id FROM customer ORDER BY 1'));
    expect(other.map((r) => Number(r.customer_id))).not.toContain(6);
  });
});

describe('item 4 (medium, fixed): a mask_columns name the check let through that masks nothing', () => {
  const known = (): KnownSources => ({ ids: new Set(['rows']), catalogs: new Map([['rows', fx.catalog]]) });
  const mask = (columns: string[]): Policy => ({ name: 'mask-email', rule: { type: 'mask_columns', columns, method: 'full' } }) as Policy;

  it('names the check refuses (typo, case, quoting, table without schema)', () => {
    for (const c of ['public.customer.emial', 'public.Customer.email', '"public"."customer"."email"', 'customer.email']) {
      expect(() => refuseUnknownPolicyNames(known(), [mask([c])])).toThrow(/no scanned catalogue has/);
    }
  });

  it('the engine masks nothing for a one-part name: before the fix the check accepted it and e-mails came back in clear', async () => {
    fx.grant('plain', [{ name: 'p', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer' }] }]);
    fx.store.policies = [mask(['email'])];
    try {
      expect(rowsOf(await fx.call('plain', undefined, 'SELECT email FROM customer WHERE customer_id = 1'))).toEqual([{ email: 'c1@x.test' }]);
    } finally {
      fx.store.policies = [];
    }
  });

  it.each([['email'], ['*'], ['rows.public.customer.email'], ['customer_id']])('fixed: mask column %s is refused, even with allowUnknownNames', (c) => {
    for (const allow of [false, true]) {
      expect(() => refuseUnknownPolicyNames(known(), [mask([c])], allow)).toThrow('policy "mask-email" names a masked column that matches no column');
    }
  });

  it('the catalogue check alone leaves one-part and four-part names unchecked (why the shape check is separate)', () => {
    const w = policyWrittenNames(mask(['email', 'rows.public.customer.email']));
    expect(checkWrittenNames(known(), undefined, w.names)).toEqual({ sources: [], names: [] });
  });

  it.each([
    ['a mask on the partitioned parent, read from a partition', 'public.ticket.body', 'SELECT body FROM ticket_us LIMIT 1'],
    ['a mask on a partition, read through the parent', 'public.ticket_us.body', "SELECT body FROM ticket WHERE region = 'us' LIMIT 1"],
    ['a mask on the base table, read through a view', 'public.customer.country', 'SELECT country FROM customer_countries LIMIT 1'],
    ['a mask on the base table, read through a materialized view (renamed column)', 'public.customer.email', 'SELECT mail FROM cust_mv LIMIT 1'],
    ['a mask on the base table, read through a view computing on it', 'public.customer.email', 'SELECT contact FROM cust_renamed LIMIT 1'],
  ])('holds: %s', async (_w, column, sql) => {
    fx.grant('all', [{ name: 'all', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] }]);
    refuseUnknownPolicyNames(known(), [mask([column])]);
    fx.store.policies = [mask([column])];
    try {
      const rows = rowsOf(await fx.call('all', undefined, sql));
      expect(rows).toHaveLength(1);
      expect(Object.values(rows[0])[0]).toBe('***');
    } finally {
      fx.store.policies = [];
    }
  });
});

describe('item 5 (medium, fixed): the text of a refused write on a readable table told which hidden columns exist (hnu4b d)', () => {
  const ROLE: SourceRole = { name: 'w', statements: [{ effect: 'allow' as const, action: 'read' as const, resource: 'public.customer.customer_id' }, { effect: 'allow' as const, action: 'read' as const, resource: 'public.customer.email' }] };
  const text = (o: unknown) => JSON.stringify(o);
  it('a column it may not read is not named, and an existing hidden column answers as a missing one (no existence oracle)', async () => {
    fx.grant('w', [ROLE]);
    const hidden = await fx.call('w', undefined, 'UPDATE customer SET credit = 1 WHERE customer_id = 1');
    const missing = await fx.call('w', undefined, 'UPDATE customer SET no_such_col = 1 WHERE customer_id = 1');
    expect(text(hidden)).not.toMatch(/credit/);
    expect({ code: codeOf(hidden), text: text(hidden) }).toEqual({ code: codeOf(missing), text: text(missing).replace(/no_such_col/g, 'credit') });
  });
  it('a write on a table it may not read keeps the generic text (no name of a hidden relation)', async () => {
    fx.grant('w', [ROLE]);
    const o = await fx.call('w', undefined, 'INSERT INTO invoice (invoice_id, customer_id, total) VALUES (9999, 1, 1)');
    expect(codeOf(o)).toBe('source_role_denied');
    expect(text(o)).not.toMatch(/public\.invoice|writing/);
  });
});

describe('item 4b (medium, fixed): a role deny naming a bare column is accepted by the name check and denies nothing', () => {
  // Role resources are also document category paths (one part), so a one-part resource cannot be
  // refused by shape alone as a mask name is; the evaluator (covers) matches only 2 or 3 parts.
  it('fixed: deny read "email" next to allow read public.customer: refused when written, or e-mails are not returned (before: accepted, and returned)', async () => {
    const role: SourceRole = { name: 'd', statements: [{ effect: 'allow' as const, action: 'read' as const, resource: 'public.customer' }, { effect: 'deny' as const, action: 'read' as const, resource: 'email' }] };
    const { refuseUnknownRoleNames } = await import('../../../src/control/catalog-names');
    let refused = false;
    try {
      refuseUnknownRoleNames({ ids: new Set(['rows']), catalogs: new Map([['rows', fx.catalog]]) }, role);
    } catch {
      refused = true;
    }
    if (refused) return;
    fx.grant('d', [role]);
    expect(codeOf(await fx.call('d', undefined, 'SELECT email FROM customer WHERE customer_id = 1'))).toBe('source_role_denied');
  });
});

describe('item 1b (low, fixed): the operator warning of a source 42501 was logged on every read: an agent flooded the log', () => {
  it('the throttle logs one line per key and window, then says how many were held back', () => {
    let t = 0;
    const gate = logThrottle(60_000, 2, () => t);
    expect([gate('a'), gate('a'), gate('a'), gate('b')]).toEqual([0, null, null, 0]);
    t = 60_000;
    expect([gate('a'), gate('a')]).toEqual([2, null]);
    expect(gate('c')).toBe(0); // a third key clears the memory (maxKeys 2): never unbounded
    expect(gate('a')).toBe(0);
  });

  it('twenty denied reads of one relation through MCP tools/call: twenty refusals, one warning line', async () => {
    const lines: string[] = [];
    const sink = new Writable({ write(chunk, _e, cb) { lines.push(String(chunk)); cb(); } });
    const env = await startGovernedEnv({ logger: pino({ level: 'info' }, sink), config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } as never });
    try {
      await sourceQuery(env, `CREATE TABLE rtn4_note (id int, body text); REVOKE ALL ON rtn4_note FROM "${env.demo.readerRole}"`);
      const scan = await runCli(['--database-url', env.controlUrl, 'source', 'scan', 'chinook'], { out: () => undefined, err: () => undefined });
      expect(scan).toBe(0);
      await upsertRole(env.db, { name: 'rtn4-note', statements: [{ effect: 'allow', action: 'read', resource: 'public.rtn4_note' }] });
      const who = await createIdentity(env.db, 'rtn4-agent');
      await grantRole(env.db, { identityId: who.id, roleName: 'rtn4-note', sourceId: 'chinook' });
      const key = (await createApiKey(env.db, who.id)).secret;
      const codes: string[] = [];
      for (let i = 0; i < 20; i++) codes.push((await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT body FROM rtn4_note' }, key)).body.result.structuredContent.code);
      expect(new Set(codes)).toEqual(new Set(['source_permission_denied']));
      const warned = lines.map((l) => JSON.parse(l)).filter((l) => String(l.msg).includes('insufficient_privilege'));
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatchObject({ source_id: 'chinook', relation: 'rtn4_note', sqlstate: '42501' });
    } finally {
      await env.close();
    }
  }, 180_000);
});

describe('item 4c (medium, fixed): a one-part relation pattern (a schema) in deny_relations / restrict_rows was never checked', () => {
  const known = (): KnownSources => ({ ids: new Set(['rows']), catalogs: new Map([['rows', fx.catalog]]) });
  const restrict = (relations: string[]): Policy => ({ name: 'own-rows', rule: { type: 'restrict_rows', relations, rows: 'support_rep_id = identity.employee_id' } }) as Policy;
  it('restrict_rows on the misspelt schema "pubic" is refused (before: accepted, and every customer row came back)', async () => {
    expect(() => refuseUnknownPolicyNames(known(), [restrict(['pubic'])])).toThrow(/no scanned catalogue has/);
    // What the typo did: the restriction never applies.
    fx.grant('plain', [{ name: 'p', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer' }] }]);
    fx.store.policies = [restrict(['pubic'])];
    try {
      expect(rowsOf(await fx.call('plain', A, 'SELECT count(*)::int AS n FROM customer'))).toEqual([{ n: 60 }]);
    } finally {
      fx.store.policies = [];
    }
  });
  it('the real schema passes, and a deny_relations schema is checked the same way', () => {
    expect(() => refuseUnknownPolicyNames(known(), [restrict(['public'])])).not.toThrow();
    const deny = (relations: string[]): Policy => ({ name: 'no-schema', rule: { type: 'deny_relations', relations } }) as Policy;
    expect(() => refuseUnknownPolicyNames(known(), [deny(['public'])])).not.toThrow();
    let details: unknown;
    try {
      refuseUnknownPolicyNames(known(), [deny(['pubic'])]);
    } catch (err) {
      details = (err as { details?: unknown }).details;
    }
    expect(details).toEqual(['no-schema/rule/relations/0: no relation pubic.* in the scanned catalogue of rows']);
  });
});

describe('item 3: source drop-row-views drops only row views (holds)', () => {
  it('a --table carrying SQL, a weird view name inside interlock_rows, a user view built on a row view', async () => {
    const env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } as never });
    const cli = async (...args: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(['--database-url', env.controlUrl, ...args], { out: (x) => void out.push(x), err: (x) => void err.push(x) });
      return { code, out, err };
    };
    const rel = async (name: string) => (await sourceQuery<{ n: number }>(env, `SELECT count(*)::int AS n FROM pg_class WHERE relname = '${name.replace(/'/g, "''")}'`))[0].n;
    try {
      await addPolicy(env.db, { name: 'own', applies_to: { identities: ['demo-agent'] }, rule: { type: 'restrict_rows', relations: ['public.customer'], rows: 'support_rep_id = identity.employee_id' } });
      expect((await cli('identity', 'attributes', 'demo-agent', 'employee_id=3')).code).toBe(0);
      expect((await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT count(*) AS n FROM customer' }, env.apiKey)).body.result.isError).toBeFalsy();
      const inj = await cli('source', 'drop-row-views', 'chinook', '--table', "public.customer'; DROP TABLE invoice_line; --");
      expect(inj.code).not.toBe(0);
      expect(await rel('invoice_line')).toBe(1);
      // A user view on a row view: no CASCADE, nothing dropped.
      await sourceQuery(env, 'CREATE SCHEMA IF NOT EXISTS rtn4_keep');
      const [row] = await sourceQuery<{ v: string }>(env, "SELECT relname AS v FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = 'interlock_rows' LIMIT 1");
      await sourceQuery(env, `CREATE VIEW rtn4_keep.on_row_view AS SELECT * FROM interlock_rows."${row.v}"`);
      const blocked = await cli('source', 'drop-row-views', 'chinook');
      expect(blocked.code).not.toBe(0);
      expect([await rel(row.v), await rel('on_row_view')]).toEqual([1, 1]);
      await sourceQuery(env, 'DROP VIEW rtn4_keep.on_row_view');
      // A view with quotes and SQL in its name inside interlock_rows is dropped as a name, nothing else.
      await sourceQuery(env, `CREATE VIEW interlock_rows."x""; DROP TABLE invoice_line; --" AS SELECT 1 AS one`);
      const ok = await cli('source', 'drop-row-views', 'chinook');
      expect(ok.code).toBe(0);
      expect([await rel(row.v), await rel('x"; DROP TABLE invoice_line; --'), await rel('invoice_line'), await rel('customer')]).toEqual([0, 0, 1, 1]);
    } finally {
      await env.close();
    }
  }, 180_000);
});
