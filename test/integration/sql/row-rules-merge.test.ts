/**
 * Issue 27: MERGE into a row-ruled table on PostgreSQL 17+ (docs/row-rules.md "Writes"), on a
 * private PostgreSQL 18 server (this machine's shared server is 15: test/helpers/private-postgres.ts).
 * The MERGE target is rewritten to the same check-option row view (read rule R AND write rule W)
 * as an UPDATE/DELETE/INSERT target; its source reads the read views. Each MERGE is queued through
 * interlock_query and run as its approval runs it (test/helpers/row-rules.ts `write`).
 *
 * Identity `ann` (owner 2) may read notes with owner_id = identity.owner and write those whose body
 * is not 'locked'. Pinned: WHEN MATCHED sees only permitted rows (a hidden row never matches; its
 * WHEN conditions, SET expressions and the ON condition's non-leakproof parts are never evaluated
 * on it: error probes), an inserted or updated row outside R AND W fails the whole statement
 * (`row_rule_violation`, nothing changed), triggers and referential actions stay refused, and a
 * small differential check: the same rule as an RLS policy on a twin table, the MERGE run as a
 * per-identity role, gives the same final table (or both fail).
 */
import fc from 'fast-check';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { codeOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import { startPrivatePostgres, type PrivatePostgres } from '../../helpers/private-postgres';
import type { SourceRole } from '../../../src/control/roles';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { authorizeSql } from '../../../src/pipeline/query';
import { planRowRules } from '../../../src/pipeline/row-rules';

jest.setTimeout(180_000);

const TABLES = `
CREATE TABLE note (note_id int PRIMARY KEY, owner_id int NOT NULL, body text NOT NULL, amount int NOT NULL DEFAULT 0);
CREATE TABLE note_twin (LIKE note INCLUDING ALL);
CREATE TABLE note_src (note_id int PRIMARY KEY, owner_id int NOT NULL, body text NOT NULL);
CREATE TABLE note_trg (note_id int PRIMARY KEY, owner_id int NOT NULL, body text NOT NULL);
CREATE FUNCTION note_trg_touch() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER note_trg_touch BEFORE UPDATE ON note_trg FOR EACH ROW EXECUTE FUNCTION note_trg_touch();
CREATE TABLE note_parent (note_id int PRIMARY KEY, owner_id int NOT NULL, body text NOT NULL);
CREATE TABLE note_child (child_id int PRIMARY KEY, note_id int NOT NULL REFERENCES note_parent ON DELETE CASCADE, owner_id int NOT NULL);
`;
/** 24 notes, owners 1–3 (owner_id = 1 + id % 3), body 'locked' on ids 10 and 13 (both owner 2's), amount = id. */
const SEED = (t: string) => `TRUNCATE ${t}; INSERT INTO ${t} SELECT g, 1 + g % 3, CASE WHEN g IN (10, 13) THEN 'locked' ELSE 'n' || g END, g FROM generate_series(1, 24) g;`;
const RESET = `${SEED('note')} ${SEED('note_twin')}
TRUNCATE note_src; INSERT INTO note_src SELECT g, 1 + g % 3, 's' || g FROM generate_series(1, 30) g WHERE g % 2 = 0;
TRUNCATE note_trg; INSERT INTO note_trg SELECT g, 1 + g % 3, 'n' || g FROM generate_series(1, 6) g;`;
/** Owner 2's notes (owner_id = 1 + g % 3 = 2) and those it may write (body not 'locked'). */
const OWNED = [1, 4, 7, 10, 13, 16, 19, 22];
const WRITABLE = OWNED.filter((g) => g !== 10 && g !== 13);
const ME = { owner: 2 };
const R = 'owner_id = identity.owner';
const W = "body <> 'locked'";

const ANN: SourceRole = {
  name: 'ann',
  statements: [
    { effect: 'allow', action: 'read', resource: 'public.note', rows: R },
    { effect: 'allow', action: 'write', resource: 'public.note', rows: W },
    { effect: 'allow', action: 'read', resource: 'public.note_src' },
    { effect: 'allow', action: '*', resource: 'public.note_trg', rows: R },
    { effect: 'allow', action: '*', resource: 'public.note_parent', rows: R },
    { effect: 'allow', action: 'read', resource: 'public.note_child', rows: R },
    { effect: 'allow', action: 'write', resource: 'public.note_child' },
  ],
};

let server: PrivatePostgres;
let fx: RowFixture;
let twinRole: string;
beforeAll(async () => {
  server = await startPrivatePostgres('h27x');
  fx = await startRowFixture(TABLES, server.adminUrl);
  fx.grant('ann', [ANN]);
  // The oracle: the same R AND W as one RLS policy for every command on the twin, for a role standing for ann.
  twinRole = `il_twin_${randomBytes(4).toString('hex')}`;
  await fx.admin(`CREATE ROLE ${twinRole};
    GRANT USAGE ON SCHEMA public TO ${twinRole};
    GRANT SELECT, INSERT, UPDATE, DELETE ON note_twin TO ${twinRole};
    GRANT SELECT ON note_src TO ${twinRole};
    ALTER TABLE note_twin ENABLE ROW LEVEL SECURITY;
    CREATE POLICY ann ON note_twin FOR ALL TO ${twinRole} USING (owner_id = 2 AND body <> 'locked') WITH CHECK (owner_id = 2 AND body <> 'locked');`);
}, 180_000);
afterAll(async () => {
  await fx?.close();
  await server?.stop();
});
beforeEach(async () => {
  await fx.admin(RESET);
});

type Note = { note_id: number; owner_id: number; body: string; amount: number };
const table = (t = 'note') => fx.admin<Note>(`SELECT note_id, owner_id, body, amount FROM ${t} ORDER BY note_id`);
const ids = (rows: Array<{ note_id: number }>) => rows.map((r) => Number(r.note_id));
const untouched = async () => expect(await fx.admin(`SELECT count(*)::int AS n FROM note WHERE body <> CASE WHEN note_id IN (10, 13) THEN 'locked' ELSE 'n' || note_id END OR owner_id <> 1 + note_id % 3 OR amount <> note_id OR note_id > 24`)).toEqual([{ n: 0 }]);

test('the source is PostgreSQL 18, as the catalogue scan and the live read say', async () => {
  expect(fx.catalog.serverVersionNum).toBeGreaterThanOrEqual(180000);
  expect(await fx.connector.serverVersionNum()).toBe(fx.catalog.serverVersionNum);
});

describe('WHEN MATCHED sees only permitted rows', () => {
  it('UPDATE reaches only matched rows in R AND W; hidden matched rows are untouched', async () => {
    // note_src holds the even ids 2–30: matched and writable are 4, 16, 22.
    expect(await fx.write('ann', ME, 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = s.body')).toEqual({ rowCount: 3 });
    expect(ids((await table()).filter((r) => r.body.startsWith('s')))).toEqual([4, 16, 22]);
  });

  it('DELETE deletes only permitted matched rows', async () => {
    expect(await fx.write('ann', ME, 'MERGE INTO note USING note_src s ON note.note_id = s.note_id WHEN MATCHED THEN DELETE')).toEqual({ rowCount: 3 });
    expect(ids(await table()).filter((g) => g % 2 === 0)).toEqual([2, 6, 8, 10, 12, 14, 18, 20, 24]);
  });

  it('WHEN NOT MATCHED BY SOURCE (PostgreSQL 17) reaches only permitted rows', async () => {
    const sql = "MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET body = 'orphan'";
    expect(await fx.write('ann', ME, sql)).toEqual({ rowCount: 3 });
    expect(ids((await table()).filter((r) => r.body === 'orphan'))).toEqual([1, 7, 19]);
  });

  it('a MERGE in a CTE is rewritten the same way', async () => {
    const sql = "WITH m AS (MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'cte' RETURNING n.note_id) SELECT count(*) FROM m";
    // The three rows the CTE's MERGE updated, not the outer SELECT's one (hnu42 finding 1).
    expect(await fx.write('ann', ME, sql)).toEqual({ rowCount: 3 });
    expect(ids((await table()).filter((r) => r.body === 'cte'))).toEqual([4, 16, 22]);
  });

  // Note 2 (owner 3) and note 6 (owner 1) are matched by the source but hidden: a probe dividing by
  // zero on their owner or key would fail the statement if PostgreSQL evaluated it there.
  it.each([
    ['a WHEN condition', 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED AND 1/(n.owner_id - 3) = 0 THEN DELETE'],
    ['a SET expression', 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET amount = 1/(n.note_id - 2)'],
    ['a DELETE guarded by a probe on the key', 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED AND 1/(n.note_id - 6) = 0 THEN DELETE'],
    ['the ON condition', 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id AND 1/(n.owner_id - 3) >= 0 WHEN MATCHED THEN UPDATE SET amount = 0'],
  ])('an error probe in %s is never evaluated on a hidden row', async (_where, sql) => {
    const r = await fx.write('ann', ME, sql);
    expect(r).toEqual({ rowCount: expect.any(Number) });
    // The probe is live: aimed at a permitted row (owner 2, note 4) it fails the statement.
    const live = sql.replace('n.owner_id - 3', 'n.owner_id - 2').replace('n.note_id - 2', 'n.note_id - 4').replace('n.note_id - 6', 'n.note_id - 4');
    await fx.admin(RESET);
    expect(await fx.write('ann', ME, live)).toEqual({ code: 'statement_failed' });
    await untouched();
  });
});

describe('rows written outside R AND W fail the whole statement (row_rule_violation), nothing changed', () => {
  it.each([
    ['UPDATE moving a row to another owner', 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED AND n.note_id = 22 THEN UPDATE SET owner_id = 3 WHEN MATCHED THEN UPDATE SET body = s.body'],
    ['UPDATE writing a locked body', "MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'locked'"],
    // A new key: PostgreSQL checks a view's check option after uniqueness (an existing hidden key fails 23505 first, below).
    ['INSERT of another owner\'s row beside permitted updates', "MERGE INTO note n USING (SELECT note_id FROM note_src UNION ALL SELECT 101) s ON n.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'x' WHEN NOT MATCHED AND s.note_id > 100 THEN INSERT VALUES (s.note_id, 3, 'other', 0)"],
    ['INSERT of a locked row of its own owner', "MERGE INTO note n USING (VALUES (100, 2)) s(id, o) ON n.note_id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.o, 'locked', 0)"],
  ])('%s', async (_what, sql) => {
    expect(await fx.write('ann', ME, sql)).toEqual({ code: 'row_rule_violation' });
    await untouched();
  });

  it('an own row inserted and own rows updated pass', async () => {
    const sql = "MERGE INTO note n USING (VALUES (4, 2), (100, 2)) s(id, o) ON n.note_id = s.id WHEN MATCHED THEN UPDATE SET body = 'upd' WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.o, 'new', 0)";
    expect(await fx.write('ann', ME, sql)).toEqual({ rowCount: 2 });
    expect((await table()).filter((r) => r.body === 'upd' || r.body === 'new').map((r) => [r.note_id, r.body])).toEqual([[4, 'upd'], [100, 'new']]);
  });

  it('a hidden row is not matched: WHEN NOT MATCHED inserts its key again and fails as PostgreSQL reports it (unique violation)', async () => {
    const sql = "MERGE INTO note n USING (VALUES (2, 2)) s(id, o) ON n.note_id = s.id WHEN MATCHED THEN UPDATE SET body = 'seen' WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.o, 'mine', 0)";
    expect(await fx.write('ann', ME, sql)).toEqual({ code: 'statement_failed' });
    await untouched();
  });
});

describe('still refused', () => {
  it('a MERGE into a ruled table with user triggers', async () => {
    const o = await fx.call('ann', ME, "MERGE INTO note_trg t USING note_src s ON t.note_id = s.note_id WHEN MATCHED THEN UPDATE SET body = 'x'");
    expect(codeOf(o)).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toMatch(/runs the user trigger/);
  });

  it('a MERGE whose foreign keys cascade into a ruled table', async () => {
    const o = await fx.call('ann', ME, 'MERGE INTO note_parent p USING note_src s ON p.note_id = s.note_id WHEN MATCHED THEN DELETE');
    expect(codeOf(o)).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toMatch(/note_child, which is row-ruled/);
  });

  it('on a server older than 17 (the live version at approval wins over the catalogue\'s)', async () => {
    const sql = 'MERGE INTO note n USING note_src s ON n.note_id = s.note_id WHEN MATCHED THEN DELETE';
    const evaluator = new AccessEvaluator(await fx.store.grantsForIdentity('ann'));
    const { analysis } = authorizeSql(evaluator, 'rows', sql, fx.catalog);
    if (!analysis.ok) throw new Error('expected an analysis');
    const plan = (serverVersionNum: number | undefined, catalogVersion: number | undefined) =>
      planRowRules({ evaluator, sourceId: 'rows', analysis, catalog: { ...fx.catalog, serverVersionNum: catalogVersion }, attributes: ME, sql, serverVersionNum });
    const old = plan(150004, fx.catalog.serverVersionNum);
    expect(old).toMatchObject({ kind: 'refused', outcome: { code: 'row_rule_unenforceable' } });
    expect(old.kind === 'refused' && old.reason).toMatch(/^MERGE into a row-ruled table needs PostgreSQL 17 or later .*; this source runs PostgreSQL 15 /);
    expect(plan(undefined, undefined)).toMatchObject({ kind: 'refused', reason: expect.stringContaining('an unrecorded version') });
    expect(plan(170000, 150004).kind).toBe('ruled');
    expect(plan(undefined, 180004).kind).toBe('ruled');
  });
});

describe('differential: the same rule as an RLS policy on a twin table, run as a per-identity role', () => {
  const cond = fc.constantFrom('', ' AND s.owner_id = 2', ' AND t.amount > 5', " AND s.body <> 's4'", ' AND 1/(t.owner_id - 3) = 0', ' AND 1/(t.note_id - 2) = 0');
  const matched = fc.constantFrom(
    'UPDATE SET body = s.body',
    "UPDATE SET body = 'locked'",
    'UPDATE SET owner_id = s.owner_id',
    'UPDATE SET amount = t.amount + 1',
    'UPDATE SET amount = 1/(t.owner_id - 3)',
    'DELETE',
    'DO NOTHING',
  );
  const notMatched = fc.constantFrom('INSERT VALUES (s.note_id, s.owner_id, s.body, 0)', "INSERT VALUES (s.note_id, 2, 'ins', 0)", "INSERT VALUES (s.note_id + 100, 2, 'ins', 0)", 'DO NOTHING');
  const bySource = fc.constantFrom("UPDATE SET body = 'gone'", 'DELETE', 'DO NOTHING');
  const source = fc.constantFrom('note_src', '(SELECT note_id + 1 AS note_id, owner_id, body FROM note_src)', '(SELECT note_id, 2 AS owner_id, body FROM note_src WHERE note_id > 12)');
  const merge = fc.record({
    source,
    whens: fc.array(
      fc.oneof(
        fc.tuple(cond, matched).map(([c, a]) => `WHEN MATCHED${c} THEN ${a}`),
        fc.tuple(cond.filter((c) => !c.includes('t.')), notMatched).map(([c, a]) => `WHEN NOT MATCHED${c} THEN ${a}`),
        fc.tuple(cond.filter((c) => !c.includes('s.')), bySource).map(([c, a]) => `WHEN NOT MATCHED BY SOURCE${c} THEN ${a}`),
      ),
      { minLength: 1, maxLength: 3 },
    ),
  });

  it('final table contents are equal, or both fail', async () => {
    const twin = new pg.Client({ connectionString: fx.db.url });
    await twin.connect();
    let agreed = 0;
    let failed = 0;
    try {
      await fc.assert(
        fc.asyncProperty(merge, async ({ source: src, whens }) => {
          await fx.admin(RESET);
          const text = (target: string) => `MERGE INTO ${target} t USING ${src} s ON t.note_id = s.note_id ${whens.join(' ')}`;
          const ours = await fx.write('ann', ME, text('note'));
          let theirs: { rowCount: number } | { error: string };
          await twin.query(`BEGIN; SET LOCAL ROLE ${twinRole}`);
          try {
            theirs = { rowCount: (await twin.query(text('note_twin'))).rowCount ?? 0 };
            await twin.query('COMMIT');
          } catch (err) {
            theirs = { error: String((err as { code?: string }).code) };
            await twin.query('ROLLBACK');
          }
          const label = JSON.stringify({ sql: text('note'), ours, theirs });
          expect([label, 'rowCount' in ours]).toEqual([label, 'rowCount' in theirs]);
          if ('rowCount' in ours && 'rowCount' in theirs) expect([label, ours.rowCount]).toEqual([label, theirs.rowCount]);
          else failed++;
          expect([label, await table('note')]).toEqual([label, await table('note_twin')]);
          agreed++;
        }),
        { numRuns: Number(process.env.ROW_RULES_MERGE_RUNS ?? 40), seed: process.env.ROW_RULES_SEED ? Number(process.env.ROW_RULES_SEED) : undefined },
      );
    } finally {
      await twin.end();
    }
    // Both outcomes were exercised (a generator that never fails, or never succeeds, checks half the semantics).
    expect(agreed).toBeGreaterThan(0);
    expect(failed).toBeGreaterThan(0);
    expect(failed).toBeLessThan(agreed);
  });
});
