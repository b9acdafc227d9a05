/**
 * Issue 12, Build 3: the test server's pg_proc is fully classified. Every function of the built-in
 * schemas of the running PostgreSQL must be matched by a rule, and every name must have a decision
 * in the policy the analyser uses; a PostgreSQL upgrade that adds a function fails here until the
 * function is classified (and a snapshot of the new version is taken: scripts/function-policy.ts).
 */
import { Client } from 'pg';
import { builtinFunctionDecision, loadSnapshots } from '../../../src/sql/builtin-functions/classes';
import { classifyRow, OBJECT_ID_TYPES } from '../../../src/sql/builtin-functions/rules';
import { SERVER_STATE_TYPES } from '../../../src/sql/function-policy';
import { PROC_SNAPSHOT_SQL, type ProcRow } from '../../../src/sql/builtin-functions/snapshot';
import { ADMIN_URL } from '../../helpers/pg';

let rows: ProcRow[] = [];
let major = 0;
beforeAll(async () => {
  const c = new Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    major = Number((await c.query<{ server_version_num: string }>('SHOW server_version_num')).rows[0].server_version_num.slice(0, 2));
    rows = (await c.query<{ r: ProcRow }>(PROC_SNAPSHOT_SQL)).rows.map((x) => x.r);
  } finally {
    await c.end();
  }
});

test('the test server runs a PostgreSQL version the policy has a snapshot of', () => {
  expect(loadSnapshots().map((s) => s.postgres)).toContain(major);
});

test('every pg_proc row of pg_catalog and information_schema is classified by exactly one rule', () => {
  expect(rows.length).toBeGreaterThan(3000);
  const unclassified = rows.filter((r) => classifyRow(r) === null).map((r) => `${r[0]}.${r[1]}(${r[2]})`);
  expect(unclassified).toEqual([]);
});

test('every built-in function name on the server has a decision in the analyser policy', () => {
  const missing = [...new Set(rows.map((r) => `${r[0]}.${r[1]}`))].filter((k) => {
    const [schema, name] = k.split('.');
    return builtinFunctionDecision(schema, name) === null;
  });
  expect(missing).toEqual([]);
});

test("the server's rows are exactly the snapshot of its version (take a new snapshot after a minor upgrade that adds functions)", () => {
  const snap = loadSnapshots().find((s) => s.postgres === major)!;
  const key = (r: ProcRow) => JSON.stringify(r);
  const known = new Set(snap.rows.map(key));
  expect(rows.filter((r) => !known.has(key(r))).map((r) => `${r[0]}.${r[1]}(${r[2]})`)).toEqual([]);
});

test('no built-in operator over ordinary types (not object identifiers, server-state types, aclitem or internal) is implemented by a refused function (operators are not classified separately)', async () => {
  const c = new Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    const ops = await c.query<{ op: string; l: string; r: string; f: string }>(
      `SELECT o.oprname AS op, coalesce(lt.typname, '-') AS l, coalesce(rt.typname, '-') AS r, p.proname AS f
       FROM pg_operator o JOIN pg_proc p ON p.oid = o.oprcode
       LEFT JOIN pg_type lt ON lt.oid = o.oprleft LEFT JOIN pg_type rt ON rt.oid = o.oprright
       WHERE o.oprnamespace = 'pg_catalog'::regnamespace`,
    );
    expect(ops.rows.length).toBeGreaterThan(700);
    const unproducible = (t: string) => {
      const b = t.startsWith('_') ? t.slice(1) : t;
      return OBJECT_ID_TYPES.has(b) || SERVER_STATE_TYPES.has(b) || b === 'aclitem' || b === 'internal';
    };
    const leaks = ops.rows.filter((o) => builtinFunctionDecision('pg_catalog', o.f)?.class === 'refused' && !unproducible(o.l) && !unproducible(o.r));
    expect(leaks.map((o) => `${o.l} ${o.op} ${o.r} (${o.f})`)).toEqual([]);
  } finally {
    await c.end();
  }
});
