/**
 * Task hfn (BLOCKER): user-defined functions read denied and masked columns past every rule.
 *
 * The new user's case on real PostgreSQL 15 through the governed pipeline: table
 * `staff(emp_id, name, dept_id, ssn, salary)` (the report's `employee`; Chinook has its own), a role
 * allowing read and describe of `public.*` but denying `public.staff.ssn`, a policy masking
 * `public.staff.salary`, and functions created by the database owner. Each statement that runs a
 * function whose body may read the denied or masked column is refused (the message names the
 * function and the column); an opaque body (plpgsql) is refused unless the source trusts it; pure
 * functions and functions reading only allowed columns keep working, their relations audited.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { upsertRole } from '../../../src/control/roles';
import { grantRole, revokeGrant } from '../../../src/control/grants';
import { loadCatalog } from '../../../src/control/catalog';
import { updateSource } from '../../../src/control/sources';
import { unprovableViews } from '../../../src/sql/analyze';
import { approveAndExecute } from '../../../src/approvals/execute';

let env: GovernedEnv;
let admin: pg.Client;

async function query(sql: string): Promise<any> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
  expect(r.status).toBe(200);
  return r.body.result;
}

/** The refusal's structuredContent without its request id. */
async function refusal(sql: string): Promise<{ status: string; code: string; message: string }> {
  const res = await query(sql);
  if (!res.isError) throw new Error(`expected a refusal for ${sql}: ${JSON.stringify(res).slice(0, 300)}`);
  const { request_id: _id, ...rest } = res.structuredContent;
  return rest;
}

async function rows(sql: string): Promise<unknown[]> {
  const res = await query(sql);
  if (res.isError) throw new Error(`expected rows for ${sql}: ${JSON.stringify(res).slice(0, 400)}`);
  return res.structuredContent.rows;
}

const TAIL = "A function's result cannot be masked or checked column by column, so the call is refused. Read the columns you may use directly (interlock_describe_access lists them), or ask an operator.";
/** The table part of "schema.table.column". */
const tableOf = (column: string) => column.slice(0, column.lastIndexOf('.'));
// Task hnu43 item 4: the body's tables are known, not its columns; the text says so.
const denied = (fn: string, column: string) => ({
  status: 'forbidden',
  code: 'source_role_denied',
  message: `The ${fn} reads table ${tableOf(column)}. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and no source role granted to this identity allows reading column ${column} (the body need not use it). ${TAIL}`,
});
const masked = (fn: string, column: string) => ({
  status: 'forbidden',
  code: 'policy_denied',
  message: `The ${fn} reads table ${tableOf(column)}. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and column ${column} (which the body need not use) is one a policy masks for this identity. A function's result cannot be masked, so the call is refused; select the column itself to see it masked.`,
});
const opaque = (fn: string, why: string) => ({ status: 'forbidden', code: 'function_not_allowed', message: `The ${fn} ${why}, so InterLock cannot tell what it reads; it is refused unless an operator lists it in the source's trusted_functions.` });

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  await admin.query(`
    CREATE TABLE staff (emp_id int PRIMARY KEY, name text, dept_id int, ssn text, salary numeric(10,2));
    INSERT INTO staff VALUES (1, 'Ada', 10, '123-45-6789', 98000.00), (2, 'Bob', 20, '987-65-4321', 120000.00), (3, 'Cy', 10, '555-12-3456', 175000.00);
    CREATE TABLE dept (dept_id int PRIMARY KEY, title text);
    INSERT INTO dept VALUES (10, 'Research'), (20, 'Sales');
    CREATE FUNCTION emp_ssn(i int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM staff WHERE emp_id = i $$;
    CREATE FUNCTION sec_ssn(i int) RETURNS text LANGUAGE sql STABLE SECURITY DEFINER AS $$ SELECT ssn FROM staff WHERE emp_id = i $$;
    CREATE FUNCTION emp_sal(i int) RETURNS numeric LANGUAGE sql STABLE AS $$ SELECT salary FROM staff WHERE emp_id = i $$;
    CREATE FUNCTION atomic_ssn(i int) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC SELECT ssn FROM staff WHERE emp_id = i; END;
    CREATE FUNCTION atomic_row(i int) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC SELECT s::text FROM staff s WHERE s.emp_id = i; END;
    CREATE FUNCTION outer_ssn(i int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT upper(emp_ssn(i)) $$;
    CREATE FUNCTION pl_ssn(i int) RETURNS text LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN (SELECT ssn FROM staff WHERE emp_id = i); END $$;
    CREATE FUNCTION pl_double(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN i * 2; END $$;
    CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT $1 * 2 $$;
    CREATE FUNCTION dept_title(d int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT title FROM dept WHERE dept_id = d $$;
    CREATE FUNCTION ssn_is(i int, s text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM staff WHERE emp_id = i AND ssn = s) $$;
    CREATE OPERATOR =%= (LEFTARG = int, RIGHTARG = text, FUNCTION = ssn_is);
    CREATE VIEW v_ssn AS SELECT emp_id, emp_ssn(emp_id) AS s FROM staff;
    CREATE VIEW v_twice AS SELECT emp_id, twice(dept_id) AS d2, dept_title(dept_id) AS title FROM staff;
    CREATE VIEW v_sal AS SELECT emp_id, emp_sal(emp_id) AS pay FROM staff;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${admin.escapeIdentifier(env.demo.readerRole)};`);
  await governAsHrAnalyst(env, 'hr-analyst');
  // Past a read deny only a describe allow naming the column lists it (hnu41 item 1): a second role
  // allows describing public.staff.ssn by name, so the refusals below may name it.
  await upsertRole(env.db, { name: 'hr-ssn-describe', statements: [{ effect: 'allow', action: 'describe', resource: 'public.staff.ssn' }] });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'hr-ssn-describe', sourceId: 'chinook' });
  env.gateway.store.invalidate('*');
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await env?.close();
});

test('the scan records each user function: language, SECURITY DEFINER, body or dependencies', async () => {
  const cat = await loadCatalog(env.db, 'chinook');
  const by = new Map((cat!.routines ?? []).map((r) => [r.name, r]));
  expect(by.get('emp_ssn')).toMatchObject({ schema: 'public', language: 'sql', securityDefiner: false, config: null, source: ' SELECT ssn FROM staff WHERE emp_id = i ' });
  expect(by.get('sec_ssn')).toMatchObject({ language: 'sql', securityDefiner: true });
  expect(by.get('atomic_ssn')).toMatchObject({ language: 'sql', depends: { relations: [{ schema: 'public', name: 'staff' }], functions: [], unsafeTypes: false } });
  expect(by.get('atomic_ssn')!.source).toBeUndefined();
  expect(by.get('pl_ssn')).toMatchObject({ language: 'plpgsql' });
  expect(by.get('pl_ssn')!.source).toBeUndefined();
  // The last element is the operator's row version, oid:xmin (task hg1; checked by the function guard).
  expect(cat!.operatorCode).toContainEqual(['public', '=%=', 23, 25, 'public', 'ssn_is', expect.stringMatching(/^[0-9]+:[0-9]+$/)]);
});

describe("the new user's four statements are refused, naming the function and the column", () => {
  test('SELECT emp_ssn(1): denied column', async () => {
    expect(await refusal('SELECT emp_ssn(1)')).toEqual(denied('function public.emp_ssn', 'public.staff.ssn'));
  });
  test('SELECT sec_ssn(1): SECURITY DEFINER, same', async () => {
    expect(await refusal('SELECT sec_ssn(1)')).toEqual(denied('function public.sec_ssn', 'public.staff.ssn'));
  });
  test('SELECT emp_sal(3): masked column', async () => {
    // Every column of the relation counts as read: ssn (denied) is found before salary (masked).
    expect(await refusal('SELECT emp_sal(3)')).toEqual(denied('function public.emp_sal', 'public.staff.ssn'));
  });
  test('a filter through the function', async () => {
    expect(await refusal("SELECT emp_id FROM staff WHERE emp_ssn(emp_id) LIKE '9%'")).toEqual(denied('function public.emp_ssn', 'public.staff.ssn'));
  });
});

/** Runs `fn` with the demo identity holding role `name` (these statements) instead of hr-analyst. */
async function asRole(name: string, statements: Array<{ effect: 'allow' | 'deny'; action: 'read' | 'describe'; resource: string }>, fn: () => Promise<void>): Promise<void> {
  const who = { identityId: env.demo.identityId, sourceId: 'chinook' };
  await upsertRole(env.db, { name, statements });
  await revokeGrant(env.db, { ...who, roleName: 'hr-analyst' });
  await grantRole(env.db, { ...who, roleName: name });
  env.gateway.store.invalidate('*');
  try {
    await fn();
  } finally {
    await revokeGrant(env.db, { ...who, roleName: name });
    await grantRole(env.db, { ...who, roleName: 'hr-analyst' });
    env.gateway.store.invalidate('*');
  }
}

test('a masked column read through a function is refused by policy (ssn readable)', async () => {
  await asRole('hr-open', [{ effect: 'allow', action: 'read', resource: 'public.*' }], async () => {
    expect(await refusal('SELECT emp_sal(3)')).toEqual(masked('function public.emp_sal', 'public.staff.salary'));
    expect(await refusal('SELECT emp_ssn(1)')).toEqual(masked('function public.emp_ssn', 'public.staff.salary'));
    // The column itself is still served masked.
    expect(await rows('SELECT salary FROM staff WHERE emp_id = 3')).toEqual([{ salary: '***' }]);
  });
});

test('a column the caller may not describe is not named', async () => {
  const statements = [
    { effect: 'allow' as const, action: 'read' as const, resource: 'public.*' },
    { effect: 'deny' as const, action: 'read' as const, resource: 'public.staff.ssn' },
    // The demo's own role allows describe of public.*: an explicit deny hides the column.
    { effect: 'deny' as const, action: 'describe' as const, resource: 'public.staff.ssn' },
  ];
  await asRole('hr-narrow', statements, async () => {
    expect(await refusal('SELECT emp_ssn(1)')).toEqual({ status: 'forbidden', code: 'source_role_denied', message: `The function public.emp_ssn reads table public.staff. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and a column of it is one no source role granted to this identity allows reading. ${TAIL}` });
  });
});

test('a BEGIN ATOMIC body: its dependency records (a whole-row reference records only emp_id; every column counts)', async () => {
  expect(await refusal('SELECT atomic_ssn(1)')).toEqual(denied('function public.atomic_ssn', 'public.staff.ssn'));
  expect(await refusal('SELECT atomic_row(1)')).toEqual(denied('function public.atomic_row', 'public.staff.ssn'));
});

test('a nested function: the outer body calls emp_ssn', async () => {
  expect(await refusal('SELECT outer_ssn(1)')).toEqual(denied('function public.outer_ssn', 'public.staff.ssn'));
});

test('a plpgsql function is opaque: refused, allowed once the source trusts it', async () => {
  expect(await refusal('SELECT pl_double(21) AS d')).toEqual(opaque('function public.pl_double', 'runs code InterLock cannot analyse (LANGUAGE plpgsql)'));
  expect(await refusal('SELECT pl_ssn(1)')).toEqual(opaque('function public.pl_ssn', 'runs code InterLock cannot analyse (LANGUAGE plpgsql)'));
  await updateSource(env.db, 'chinook', { settings: { trusted_functions: ['public.pl_double'] } }, { operator: 'test' });
  env.gateway.store.invalidate('*');
  try {
    expect(await rows('SELECT pl_double(21) AS d')).toEqual([{ d: 42 }]);
    // Trust is per function: the other one stays refused.
    expect(await refusal('SELECT pl_ssn(1)')).toEqual(opaque('function public.pl_ssn', 'runs code InterLock cannot analyse (LANGUAGE plpgsql)'));
  } finally {
    await updateSource(env.db, 'chinook', { settings: { trusted_functions: null } }, { operator: 'test' });
    env.gateway.store.invalidate('*');
  }
  expect(await refusal('SELECT pl_double(21) AS d')).toEqual(opaque('function public.pl_double', 'runs code InterLock cannot analyse (LANGUAGE plpgsql)'));
});

test('a view calling the function, with a deny on the base column, is refused', async () => {
  const r = await refusal('SELECT s FROM v_ssn WHERE emp_id = 1');
  expect(r).toMatchObject({ status: 'forbidden', code: 'source_role_denied' });
  // The view's other column does not run the function.
  expect(await rows('SELECT emp_id FROM v_ssn ORDER BY emp_id LIMIT 1')).toEqual([{ emp_id: 1 }]);
});

test("a view's columns computed by analysable functions have proven lineage (a caller with a read deny elsewhere may read them)", async () => {
  // Before task hfn every user function made the column unprovable: refused to any caller with a read deny.
  expect(await rows('SELECT emp_id, d2, title FROM v_twice WHERE emp_id = 1')).toEqual([{ emp_id: 1, d2: 20, title: 'Research' }]);
  const cat = await loadCatalog(env.db, 'chinook');
  expect(unprovableViews(cat!).filter((v) => v.includes('v_'))).toEqual([]);
});

test("a view column computed by a function reading a masked column is masked (no denies)", async () => {
  await asRole('hr-open', [{ effect: 'allow', action: 'read', resource: 'public.*' }], async () => {
    expect(await rows('SELECT emp_id, pay FROM v_sal WHERE emp_id = 3')).toEqual([{ emp_id: 3, pay: '***' }]);
    expect(await refusal('SELECT emp_id FROM v_sal WHERE pay > 100000')).toMatchObject({ status: 'forbidden', code: 'policy_denied' });
  });
});

test('a user operator implemented by a data-reading function is refused', async () => {
  expect(await refusal("SELECT 1 =%= '123-45-6789' AS hit")).toEqual(denied('operator public.=%= (function public.ssn_is)', 'public.staff.ssn'));
});

test('a pure function still works; a function reading only allowed columns works and its relations are audited', async () => {
  expect(await rows('SELECT twice(21) AS t')).toEqual([{ t: 42 }]);
  expect(await rows('SELECT name, dept_title(dept_id) AS title FROM staff WHERE emp_id = 1')).toEqual([{ name: 'Ada', title: 'Research' }]);
  const ev = await env.db.pool.query<{ decision: string; relations: string[] }>(
    "SELECT decision, relations FROM audit_events WHERE kind = 'tool_call' AND decision = 'allowed' ORDER BY id DESC LIMIT 1",
  );
  expect(ev.rows[0]).toEqual({ decision: 'allowed', relations: ['public.dept', 'public.staff'] });
  // A refused call records what the function reads too.
  await refusal('SELECT emp_ssn(1)');
  const ref = await env.db.pool.query<{ decision: string; relations: string[] }>("SELECT decision, relations FROM audit_events WHERE kind = 'tool_call' ORDER BY id DESC LIMIT 1");
  expect(ref.rows[0]).toEqual({ decision: 'refused', relations: ['public.staff'] });
});

test('an approved write calling an opaque function runs only while the source still trusts it', async () => {
  const trust = async (list: string[] | null) => {
    await updateSource(env.db, 'chinook', { settings: { trusted_functions: list } }, { operator: 'test' });
    env.gateway.store.invalidate('*');
  };
  const queue = async (id: number): Promise<string> => {
    const res = await query(`INSERT INTO playlist (playlist_id, name) VALUES (pl_double(${id}), 'hfn')`);
    expect(res.structuredContent).toMatchObject({ status: 'queued' });
    return res.structuredContent.approval_id;
  };
  await trust(['public.pl_double']);
  const kept = await queue(4601);
  const dropped = await queue(4602);
  expect(await approveAndExecute(env.db, kept, { operator: 'ops-hfn' })).toMatchObject({ state: 'executed', rowCount: 1 });
  await trust(null);
  expect(await approveAndExecute(env.db, dropped, { operator: 'ops-hfn' })).toMatchObject({ state: 'failed', errorCode: 'classification_changed' });
  const got = await admin.query("SELECT playlist_id FROM playlist WHERE name = 'hfn' ORDER BY 1");
  expect(got.rows).toEqual([{ playlist_id: 9202 }]);
});
