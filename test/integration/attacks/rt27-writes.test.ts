/**
 * Red team on row-ruled writes (issue 27, rt27 writes): an agent whose identity may read and write
 * only its own rows of `note` (owner_id = identity.employee_id; employee 1 owns 10 of 40 notes)
 * tries to change, add, copy, delete or probe other owners' rows. Each write is queued through
 * interlock_query and then run as its approval runs it (test/helpers/row-rules.ts `write`: the
 * requester's roles and policies re-planned, row views with a check option, attributes bound in
 * the write's own transaction). A violation must change nothing (the transaction rolls back).
 */
import { codeOf, rowsOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import type { SourceRole } from '../../../src/control/roles';

const NOTES = `
CREATE TABLE note (note_id int PRIMARY KEY, owner_id int NOT NULL, tenant text NOT NULL, body text);
CREATE TABLE note_copy (note_id int PRIMARY KEY, body text);
`;
const RESET = `TRUNCATE note, note_copy;
INSERT INTO note SELECT g, 1 + g % 4, (ARRAY['a','b'])[1 + g % 2], 'n' || g FROM generate_series(1, 40) g;`;
/** Employee 1's notes: owner_id = 1 + g % 4 = 1. */
const MINE = [4, 8, 12, 16, 20, 24, 28, 32, 36, 40];

const OWNER: SourceRole = {
  name: 'owner',
  statements: [
    { effect: 'allow', action: 'read', resource: 'public.note', rows: 'owner_id = identity.employee_id' },
    { effect: 'allow', action: 'write', resource: 'public.note' },
    { effect: 'allow', action: 'read', resource: 'public.note_copy' },
    { effect: 'allow', action: 'write', resource: 'public.note_copy' },
    { effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' },
    { effect: 'allow', action: 'read', resource: 'public.ticket', rows: 'region = ANY(identity.regions)' },
    { effect: 'allow', action: 'write', resource: 'public.ticket' },
  ],
};
const BOSS: SourceRole = { name: 'boss', statements: [{ effect: 'allow', action: '*', resource: 'public.*' }] };
const ME = { employee_id: 1, regions: ['eu'] };

let fx: RowFixture;
beforeAll(async () => {
  fx = await startRowFixture(NOTES);
  fx.grant('agent', [OWNER]);
  fx.grant('boss', [BOSS]);
}, 60_000);
afterAll(async () => fx?.close());
beforeEach(async () => {
  await fx.admin(RESET);
});

const notes = async (where = 'true') => (await fx.admin<{ note_id: number; owner_id: number; body: string }>(`SELECT note_id, owner_id, body FROM note WHERE ${where} ORDER BY note_id`));
const ids = (rows: Array<{ note_id: number }>) => rows.map((r) => Number(r.note_id));
const untouched = async () => expect(await fx.admin(`SELECT count(*)::int AS n FROM note WHERE body <> 'n' || note_id OR owner_id <> 1 + note_id % 4 OR note_id > 40`)).toEqual([{ n: 0 }]);

describe('UPDATE', () => {
  it('touches only permitted rows, whatever its WHERE says', async () => {
    expect(await fx.write('agent', ME, "UPDATE note SET body = 'mine'")).toEqual({ rowCount: 10 });
    expect(ids(await notes("body = 'mine'"))).toEqual(MINE);
  });

  it("setting the ruled column to another owner's value: row_rule_violation, nothing changed", async () => {
    expect(await fx.write('agent', ME, 'UPDATE note SET owner_id = 2 WHERE note_id = 4')).toEqual({ code: 'row_rule_violation' });
    expect(await fx.write('agent', ME, 'UPDATE note SET owner_id = owner_id + 1, body = $1', ['moved'])).toEqual({ code: 'row_rule_violation' });
    await untouched();
  });

  it('UPDATE … FROM a ruled table reads only its permitted rows', async () => {
    await fx.admin("INSERT INTO note_copy SELECT g, 'c' FROM generate_series(1, 40) g");
    expect(await fx.write('agent', ME, "UPDATE note_copy c SET body = n.body FROM note n WHERE n.note_id = c.note_id")).toEqual({ rowCount: 10 });
    expect((await fx.admin<{ note_id: number }>("SELECT note_id FROM note_copy WHERE body <> 'c' ORDER BY note_id")).map((r) => r.note_id)).toEqual(MINE);
  });

  it('an error probe in the WHERE (1/0 on hidden rows) never raises on hidden rows', async () => {
    // owner_id = 2 rows are hidden: 1/(owner_id - 2) divides by zero only there.
    const probe = "UPDATE note SET body = 'p' WHERE 1 / (owner_id - 2) < 0";
    expect(await fx.write('boss', undefined, probe)).toEqual({ code: 'statement_failed' }); // the probe is real
    await untouched();
    expect(await fx.write('agent', ME, probe)).toEqual({ rowCount: 10 });
    expect(ids(await notes("body = 'p'"))).toEqual(MINE);
  });
});

describe('INSERT', () => {
  it('a row of another owner: row_rule_violation, nothing inserted; an own row is inserted', async () => {
    expect(await fx.write('agent', ME, "INSERT INTO note VALUES (100, 2, 'a', 'x')")).toEqual({ code: 'row_rule_violation' });
    expect(await fx.write('agent', ME, "INSERT INTO note VALUES (101, 1, 'a', 'x'), (102, 3, 'a', 'y')")).toEqual({ code: 'row_rule_violation' });
    await untouched();
    expect(await fx.write('agent', ME, "INSERT INTO note VALUES (103, 1, 'a', 'x')")).toEqual({ rowCount: 1 });
    expect(ids(await notes('note_id > 40'))).toEqual([103]);
  });

  it('INSERT … SELECT from a ruled table copies only permitted rows', async () => {
    expect(await fx.write('agent', ME, 'INSERT INTO note_copy SELECT note_id, body FROM note')).toEqual({ rowCount: 10 });
    expect((await fx.admin<{ note_id: number }>('SELECT note_id FROM note_copy ORDER BY note_id')).map((r) => r.note_id)).toEqual(MINE);
  });

  it('INSERT … SELECT into the ruled table itself re-checks every new row', async () => {
    expect(await fx.write('agent', ME, 'INSERT INTO note SELECT note_id + 100, owner_id, tenant, body FROM note')).toEqual({ rowCount: 10 });
    expect(await fx.write('agent', ME, 'INSERT INTO note SELECT note_id + 200, owner_id + 1, tenant, body FROM note')).toEqual({ code: 'row_rule_violation' });
    expect(ids(await notes('note_id > 200'))).toEqual([]);
  });

  it('ON CONFLICT DO UPDATE on a hidden row: refused, the hidden row unchanged', async () => {
    // note 1 belongs to owner 2.
    expect(await fx.write('agent', ME, "INSERT INTO note VALUES (1, 1, 'a', 'x') ON CONFLICT (note_id) DO UPDATE SET body = 'stolen'")).toEqual({ code: 'row_rule_violation' });
    await untouched();
    expect(await fx.write('agent', ME, "INSERT INTO note VALUES (4, 1, 'a', 'x') ON CONFLICT (note_id) DO UPDATE SET body = 'own'")).toEqual({ rowCount: 1 });
    expect(ids(await notes("body = 'own'"))).toEqual([4]);
  });
});

describe('DELETE', () => {
  it('a WHERE matching hidden rows deletes only permitted rows (the count says so)', async () => {
    expect(await fx.write('agent', ME, 'DELETE FROM note WHERE note_id > 0')).toEqual({ rowCount: 10 });
    const left = await notes();
    expect(left).toHaveLength(30);
    expect(left.some((r) => r.owner_id === 1)).toBe(false);
  });

  it('an error probe in the WHERE never raises on hidden rows', async () => {
    expect(await fx.write('boss', undefined, 'DELETE FROM note WHERE 10 / (owner_id - 3) < 0')).toEqual({ code: 'statement_failed' });
    expect(await fx.write('agent', ME, 'DELETE FROM note WHERE 10 / (owner_id - 3) < 0')).toEqual({ rowCount: 10 });
  });

  it('DELETE … USING a ruled table joins only its permitted rows', async () => {
    await fx.admin("INSERT INTO note_copy SELECT g, 'c' FROM generate_series(1, 40) g");
    expect(await fx.write('agent', ME, 'DELETE FROM note_copy c USING note n WHERE n.note_id = c.note_id')).toEqual({ rowCount: 10 });
  });
});

describe('data-modifying CTEs', () => {
  it('a DELETE in a CTE feeding an INSERT touches only permitted rows', async () => {
    expect(await fx.write('agent', ME, "WITH d AS (DELETE FROM note WHERE note_id > 0 RETURNING note_id) INSERT INTO note_copy SELECT note_id, 'gone' FROM d")).toEqual({ rowCount: 20 }); // 10 deleted, 10 inserted (hnu42)
    expect((await fx.admin<{ note_id: number }>('SELECT note_id FROM note_copy ORDER BY note_id')).map((r) => r.note_id)).toEqual(MINE);
    expect(await notes()).toHaveLength(30);
  });

  it('an UPDATE in a CTE moving rows out of scope: row_rule_violation, nothing changed (the other CTE neither)', async () => {
    const sql = "WITH u AS (UPDATE note SET owner_id = 4 RETURNING note_id) INSERT INTO note_copy SELECT note_id, 'moved' FROM u";
    expect(await fx.write('agent', ME, sql)).toEqual({ code: 'row_rule_violation' });
    await untouched();
    expect(await fx.admin('SELECT count(*)::int AS n FROM note_copy')).toEqual([{ n: 0 }]);
  });
});

describe('MERGE', () => {
  it('on this PostgreSQL 15 source, MERGE into a ruled table is refused before it is queued, saying it needs PostgreSQL 17 (test/integration/sql/row-rules-merge.test.ts runs it on 18)', async () => {
    expect(fx.catalog.serverVersionNum).toBeLessThan(170000);
    const o = await fx.call('agent', ME, "MERGE INTO note n USING note_copy c ON n.note_id = c.note_id WHEN MATCHED THEN UPDATE SET body = c.body");
    expect(codeOf(o)).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toMatch(/^MERGE into a row-ruled table needs PostgreSQL 17 or later .*; this source runs PostgreSQL 15 /);
  });

  it('MERGE into an unruled table using a ruled one sees only permitted source rows', async () => {
    await fx.admin("INSERT INTO note_copy SELECT g, 'c' FROM generate_series(1, 40) g");
    expect(await fx.write('agent', ME, "MERGE INTO note_copy c USING note n ON c.note_id = n.note_id WHEN MATCHED THEN UPDATE SET body = 'merged'")).toEqual({ rowCount: 10 });
  });
});

describe('reads after ruled writes still see only permitted rows', () => {
  it('a read through interlock_query after an own insert', async () => {
    expect(await fx.write('agent', ME, "INSERT INTO note VALUES (150, 1, 'b', 'z')")).toEqual({ rowCount: 1 });
    expect(rowsOf(await fx.call('agent', ME, 'SELECT note_id FROM note ORDER BY note_id')).map((r) => r.note_id)).toEqual([...MINE, 150]);
  });
});

describe('a partitioned target (the rule is carried by every partition)', () => {
  it('INSERT routed to a partition outside the rule: row_rule_violation; inside: inserted; DELETE reaches only permitted partitions', async () => {
    expect(await fx.write('agent', ME, "INSERT INTO ticket VALUES (500, 'us', 'x')")).toEqual({ code: 'row_rule_violation' });
    expect(await fx.admin('SELECT count(*)::int AS n FROM ticket WHERE ticket_id = 500')).toEqual([{ n: 0 }]);
    expect(await fx.write('agent', ME, "INSERT INTO ticket VALUES (501, 'eu', 'x')")).toEqual({ rowCount: 1 });
    expect(await fx.write('agent', ME, "UPDATE ticket SET region = 'ap' WHERE ticket_id = 501")).toEqual({ code: 'row_rule_violation' });
    expect(await fx.write('agent', ME, 'DELETE FROM ticket WHERE ticket_id > 0')).toEqual({ rowCount: 11 });
    expect(await fx.admin("SELECT region, count(*)::int AS n FROM ticket GROUP BY region ORDER BY region")).toEqual([{ region: 'ap', n: 10 }, { region: 'us', n: 10 }]);
    await fx.admin("DELETE FROM ticket; INSERT INTO ticket SELECT g, (ARRAY['eu','us','ap'])[1 + g % 3], 'body ' || g FROM generate_series(1, 30) g");
  });
});
