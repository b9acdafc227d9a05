/**
 * Task hdeny (red team rtn4 item 4b): a role resource of one part (`email`) means nothing on a
 * PostgreSQL source, where resources are schema.table[.column]. Written: a grant of such a role on a
 * PostgreSQL source, or a create/update of a role already granted on one, is refused
 * validation_failed with the qualified names it may mean (CLI, admin API, apply; never lifted by
 * --allow-unknown-names), while document sources keep their one-part category paths. Evaluated:
 * a one-part deny already stored (written into the control database directly) fails closed,
 * hiding the column from interlock_query, interlock_describe_source and interlock_describe_access.
 * Also (red team rtn4 item 2, at the gateway): a relation dropped since the scan is answered
 * statement_failed 42P01 on every read and logged for the operator once.
 * The real governed gateway over Chinook on this machine's PostgreSQL.
 */
import { Writable } from 'node:stream';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import pino from 'pino';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adminApi, callTool, operatorCli, sourceQuery, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken } from '../../../src/admin/tokens';

jest.setTimeout(180_000);

let env: GovernedEnv;
let dir: string;
let token: string;
const logLines: string[] = [];

const cli = (...args: string[]) => operatorCli(env)(...args);
const admin = (method: string, path: string, body?: unknown) => adminApi(env, () => token)(method, path, body);
const file = (name: string, text: string): string => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

const grantsOf = async (role: string) => (await env.db.pool.query<{ source_id: string }>('SELECT source_id FROM grants WHERE role_name = $1 ORDER BY 1', [role])).rows.map((r) => r.source_id);

beforeAll(async () => {
  const sink = new Writable({ write(chunk, _enc, cb) { logLines.push(String(chunk)); cb(); } });
  env = await startGovernedEnv({ logger: pino({ level: 'info' }, sink), config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  dir = mkdtempSync(join(tmpdir(), 'il-hdeny-'));
  token = (await createOperatorToken(env.db, 'ops-hdeny')).secret;
}, 120_000);

afterAll(async () => {
  await env?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const MESSAGE = 'role "no-email" is granted on PostgreSQL source chinook: a one-part resource matches no relation or column there';
const LINE = 'statements/1/resource: email is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing; did you mean public.customer.email, public.employee.email?';
const ROLE_YAML = 'name: no-email\nstatements:\n  - { effect: allow, action: read, resource: public.customer }\n  - { effect: deny, action: read, resource: email }\n';

describe('written: refused on a PostgreSQL grant, kept on a document source', () => {
  test('CLI: the role is stored (no grant yet); grant on chinook exits 2 with the did-you-mean; grant on the documents source works', async () => {
    expect(await cli('role', 'create', file('r.yaml', ROLE_YAML))).toEqual({ code: 0, out: ['created role no-email (2 statement(s))'], err: [] });
    expect(await cli('grant', 'demo-agent', 'no-email', 'chinook')).toEqual({ code: 2, out: [], err: [`error: ${MESSAGE}`, `  ${LINE}`] });
    expect(await grantsOf('no-email')).toEqual([]);
    // A document source keeps one-part paths (category paths there).
    expect(await cli('grant', 'demo-agent', 'no-email', 'handbook')).toEqual({ code: 0, out: ['granted role no-email on handbook to demo-agent'], err: [] });
    expect(await grantsOf('no-email')).toEqual(['handbook']);
  });

  test('CLI: a role already granted on chinook cannot be updated to carry a one-part resource, even with --allow-unknown-names', async () => {
    expect(await cli('role', 'create', file('ok.yaml', 'name: cust-reader\nstatements:\n  - { effect: allow, action: read, resource: public.customer }\n'))).toMatchObject({ code: 0 });
    expect(await cli('grant', 'demo-agent', 'cust-reader', 'chinook')).toMatchObject({ code: 0 });
    const bad = file('bad.yaml', 'name: cust-reader\nstatements:\n  - { effect: allow, action: read, resource: public.customer }\n  - { effect: deny, action: read, resource: email }\n');
    const refused = { code: 2, out: [], err: ['error: role "cust-reader" is granted on PostgreSQL source chinook: a one-part resource matches no relation or column there', `  ${LINE}`] };
    expect(await cli('role', 'create', bad)).toEqual(refused);
    expect(await cli('role', 'create', '--allow-unknown-names', bad)).toEqual(refused);
    expect((await env.db.pool.query("SELECT statements FROM roles WHERE name = 'cust-reader'")).rows[0].statements).toHaveLength(1);
  });

  test('admin API: POST /grants and PUT /roles answer 400 validation_failed with the details; allow_unknown_names=true does not lift it', async () => {
    expect(await admin('POST', '/grants', { identity: 'demo-agent', role: 'no-email', source: 'chinook' })).toEqual({ status: 400, json: { error: 'invalid_request', code: 'validation_failed', message: MESSAGE, details: [LINE] } });
    const put = await admin('PUT', '/roles/cust-reader?allow_unknown_names=true', { statements: [{ effect: 'allow', action: 'read', resource: 'public.customer' }, { effect: 'deny', action: 'read', resource: 'email' }] });
    expect(put).toEqual({ status: 400, json: { error: 'invalid_request', code: 'validation_failed', message: 'role "cust-reader" is granted on PostgreSQL source chinook: a one-part resource matches no relation or column there', details: [LINE] } });
    // The qualified name is accepted.
    expect((await admin('PUT', '/roles/cust-reader', { statements: [{ effect: 'allow', action: 'read', resource: 'public.customer' }, { effect: 'deny', action: 'read', resource: 'public.customer.email' }] })).status).toBe(200);
    // Documents source: accepted.
    expect((await admin('POST', '/grants', { identity: 'demo-agent', role: 'no-email', source: 'handbook' })).status).toBe(200);
  });

  test('apply (and --plan): a file granting the role on chinook, or giving a role granted there a one-part resource, exits 2 and changes nothing; the documents source is fine', async () => {
    const grantFile = file('a1.yaml', `version: 1\nroles:\n  - name: no-email\n    statements:\n      - { effect: allow, action: read, resource: public.customer }\n      - { effect: deny, action: read, resource: email }\nidentities:\n  - name: apply-agent\n    grants:\n      - { role: no-email, source: chinook }\n`);
    for (const extra of [['--plan'], [], ['--allow-unknown-names']]) expect(await cli('apply', '-f', grantFile, ...extra)).toEqual({ code: 2, out: [], err: [`error: ${MESSAGE}`, `  ${LINE}`] });
    expect((await env.db.pool.query("SELECT 1 FROM identities WHERE name = 'apply-agent'")).rowCount).toBe(0);
    // The role is already granted on chinook (cust-reader): its update in a file is refused.
    const roleFile = file('a2.yaml', 'version: 1\nroles:\n  - name: cust-reader\n    statements:\n      - { effect: allow, action: read, resource: public.customer }\n      - { effect: deny, action: read, resource: email }\n');
    expect(await cli('apply', '-f', roleFile, '--plan')).toEqual({ code: 2, out: [], err: ['error: role "cust-reader" is granted on PostgreSQL source chinook: a one-part resource matches no relation or column there', `  ${LINE}`] });
    const docsFile = file('a3.yaml', `version: 1\nidentities:\n  - name: apply-agent\n    grants:\n      - { role: no-email, source: handbook }\n`);
    expect((await cli('apply', '-f', docsFile)).code).toBe(0);
    expect((await env.db.pool.query("SELECT g.source_id FROM grants g JOIN identities i ON i.id = g.identity_id WHERE i.name = 'apply-agent'")).rows).toEqual([{ source_id: 'handbook' }]);
    // A claim mapping granting it on chinook (by a token's claims) is refused the same way; on the documents source it is fine.
    const mapping = (source: string) => file(`m-${source}.yaml`, `version: 1\nclaim_mappings:\n  - issuer: https://idp.example/\n    role_grants:\n      - { claim: groups, value: staff, role: no-email, source: ${source} }\n`);
    expect(await cli('apply', '-f', mapping('chinook'), '--plan')).toEqual({ code: 2, out: [], err: [`error: ${MESSAGE}`, `  ${LINE}`] });
    expect((await cli('apply', '-f', mapping('handbook'))).code).toBe(0);
    // And a role a claim mapping names on chinook cannot be given a one-part resource (CLI role create).
    expect((await cli('role', 'create', file('m-ok.yaml', 'name: claim-reader\nstatements:\n  - { effect: allow, action: read, resource: public.customer }\n'))).code).toBe(0);
    expect((await cli('apply', '-f', file('m2.yaml', 'version: 1\nclaim_mappings:\n  - issuer: https://idp2.example/\n    role_grants:\n      - { claim: groups, value: staff, role: claim-reader, source: chinook }\n'))).code).toBe(0);
    expect(await cli('role', 'create', file('m-bad.yaml', 'name: claim-reader\nstatements:\n  - { effect: allow, action: read, resource: public.customer }\n  - { effect: deny, action: read, resource: email }\n'))).toEqual({ code: 2, out: [], err: ['error: role "claim-reader" is granted on PostgreSQL source chinook: a one-part resource matches no relation or column there', `  ${LINE}`] });
    // cust-reader (now denying public.customer.email) leaves the demo agent for the next block.
    expect((await cli('revoke', 'demo-agent', 'cust-reader', 'chinook')).code).toBe(0);
  });
});

describe('rt39 finding 4: rules older than the source they name', () => {
  test('apply adding a PostgreSQL source whose id a configured claim rule names for a role with a one-part resource exits 2 and adds nothing; the role fixed in the same file, it is added', async () => {
    await env.db.pool.query("INSERT INTO configured_claim_grants (issuer, role_name, source_id) VALUES ('https://idp.rt39.example', 'no-email', 'kb3')");
    const chinook = (await env.db.pool.query<{ settings: Record<string, unknown> }>("SELECT settings FROM sources WHERE id = 'chinook'")).rows[0].settings;
    // Inline passwords are refused in files; trust auth on loopback needs none.
    const settings = JSON.parse(JSON.stringify(chinook), (k, v) => (k === 'password' ? undefined : v));
    const source = `sources:\n  - id: kb3\n    type: postgres\n    name: kb3\n    settings: ${JSON.stringify(settings)}\n`;
    const refused = { code: 2, out: [], err: ['error: role "no-email" is granted on PostgreSQL source kb3: a one-part resource matches no relation or column there', '  statements/1/resource: email is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing'] };
    expect(await cli('apply', '-f', file('kb3.yaml', `version: 1\n${source}`))).toEqual(refused);
    expect((await env.db.pool.query("SELECT 1 FROM sources WHERE id = 'kb3'")).rowCount).toBe(0);
    const fixed = `version: 1\n${source}roles:\n  - name: no-email\n    statements:\n      - { effect: allow, action: read, resource: public.customer }\n      - { effect: deny, action: read, resource: public.customer.email }\n`;
    expect((await cli('apply', '-f', file('kb3-fixed.yaml', fixed))).code).toBe(0);
    expect((await env.db.pool.query("SELECT type FROM sources WHERE id = 'kb3'")).rows).toEqual([{ type: 'postgres' }]);
    await env.db.pool.query("DELETE FROM configured_claim_grants WHERE source_id = 'kb3'");
  });
});

describe('evaluated: a one-part deny already stored (written into the control database directly) fails closed', () => {
  const call = async (name: string, args: Record<string, unknown>) => (await callTool(env, name, { source_id: 'chinook', ...args }, env.apiKey)).body.result;
  const customerColumns = async () => {
    const access = await call('interlock_describe_access', {});
    return (access.structuredContent.chinook.resources.tables as Array<{ table: string; columns: string[] }>).find((t) => t.table === 'public.customer')?.columns;
  };
  const described = async () => (await call('interlock_describe_source', {})).structuredContent.rows.filter((r: { table_name: string }) => r.table_name === 'customer').map((r: { column_name: string }) => r.column_name);
  const store = async (statement: Record<string, string> | null) => {
    await env.db.pool.query("UPDATE roles SET statements = (SELECT jsonb_agg(s) FROM jsonb_array_elements(statements) s WHERE s->>'resource' <> 'email') || COALESCE($1::jsonb, '[]'::jsonb) WHERE name = 'demo-analyst'", [statement ? JSON.stringify([statement]) : null]);
    // The gateway hears of the change by NOTIFY: wait (bounded) until its answer reflects it.
    const want = statement === null;
    for (let i = 0; i < 100 && (await customerColumns())?.includes('email') !== want; i++) await new Promise((r) => setTimeout(r, 100));
  };

  test('before: the demo agent reads customer e-mails (masked by the demo policy) and sees the column', async () => {
    expect((await call('interlock_query', { sql: 'SELECT email FROM customer WHERE customer_id = 1' })).isError).toBeFalsy();
    expect(await customerColumns()).toContain('email');
    expect(await described()).toContain('email');
  });

  test('deny read "email": refused in interlock_query (alone or under *), absent from describe_access and describe_source (past a read deny only a describe allow naming the column lists it: hnu41 item 1)', async () => {
    await store({ effect: 'deny', action: 'read', resource: 'email' });
    try {
      expect((await call('interlock_query', { sql: 'SELECT email FROM customer WHERE customer_id = 1' })).structuredContent.code).toBe('source_role_denied');
      expect((await call('interlock_query', { sql: 'SELECT * FROM customer WHERE customer_id = 1' })).structuredContent.code).toBe('source_role_denied');
      expect((await call('interlock_query', { sql: 'SELECT first_name FROM customer WHERE customer_id = 1' })).isError).toBeFalsy();
      const cols = await customerColumns();
      expect(cols).toContain('first_name');
      expect(cols).not.toContain('email');
      expect(await described()).not.toContain('email');
    } finally {
      await store(null);
    }
  });

  test('deny * "email": also absent from describe_source', async () => {
    await store({ effect: 'deny', action: '*', resource: 'email' });
    try {
      expect((await call('interlock_query', { sql: 'SELECT email FROM customer WHERE customer_id = 1' })).structuredContent.code).toBe('source_role_denied');
      expect(await customerColumns()).not.toContain('email');
      const d = await described();
      expect(d).toContain('first_name');
      expect(d).not.toContain('email');
    } finally {
      await store(null);
    }
  });
});

describe('rtn4 item 2 at the gateway: a relation dropped on the source since the scan', () => {
  test('five reads: five statement_failed 42P01 naming it, one warning line for the operator (source, relation, stale catalogue)', async () => {
    await sourceQuery(env, `CREATE TABLE hdeny_gone (id int); GRANT SELECT ON hdeny_gone TO "${env.demo.readerRole}"`);
    expect((await cli('source', 'scan', 'chinook')).code).toBe(0);
    expect((await cli('role', 'create', file('g.yaml', 'name: gone-reader\nstatements:\n  - { effect: allow, action: read, resource: public.hdeny_gone }\n'))).code).toBe(0);
    expect((await cli('grant', 'demo-agent', 'gone-reader', 'chinook')).code).toBe(0);
    // Each text its own (the result cache would answer a repeated one from before the drop).
    let n = 0;
    const read = async () => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql: `SELECT id FROM hdeny_gone WHERE id > -${++n}` }, env.apiKey)).body.result.structuredContent;
    // Bounded wait for the grant to reach the gateway (NOTIFY).
    for (let i = 0; i < 100 && (await read()).code !== undefined; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await read()).toMatchObject({ rows: [] });
    await sourceQuery(env, 'DROP TABLE hdeny_gone');
    const before = logLines.length;
    for (let i = 0; i < 5; i++) {
      expect(await read()).toMatchObject({ code: 'statement_failed', sqlstate: '42P01', condition: 'undefined_table', object: { kind: 'relation', name: 'hdeny_gone' } });
    }
    const warned = logLines.slice(before).map((l) => JSON.parse(l)).filter((l) => String(l.msg).includes('undefined_table'));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ source_id: 'chinook', relation: 'hdeny_gone', sqlstate: '42P01' });
    expect(warned[0].msg).toContain('the catalogue is stale; run interlock source scan chinook');
  });
});
