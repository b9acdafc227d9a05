/**
 * The value matrix (issue 23 "Must show"): every built-in base, range and multirange type in the
 * server's pg_type, and an array of each, read through interlock_query on a governed gateway, must
 * come back byte for byte as spec/value-mapping-v1.json says, computed here from PostgreSQL's own
 * text output (a superuser session with the pinned output settings and no type parsing at all).
 * Edge values per type are in value-edges.ts; a built-in type missing there or from the spec table
 * fails the test. User types (enum, domain over int8, composite, and their arrays) are covered too.
 *
 * Host independence: everything is read through two gateways: the in-process one (the Jest
 * worker's zone) and a child process started with TZ=Pacific/Chatham (+12:45/+13:45; zone-gateway.ts,
 * since a Jest worker cannot change its own zone) on the same control database; and the source database's own defaults are hostile (DateStyle
 * 'SQL, DMY', TimeZone America/Chicago, IntervalStyle sql_standard, extra_float_digits -3,
 * bytea_output escape). The reader role carries the pinned settings (role-in-database settings win
 * over the database's), standing in for the startup-packet pins of issue 22 until they land.
 *
 * Runs against INTERLOCK_TEST_PG_URL (the machine's PostgreSQL 15 by default; point it at the
 * embedded PostgreSQL 18 to check that major too).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { parse as postgresArray } from 'postgres-array';
import { BUILTIN_TYPE_MAPPINGS, type BuiltinTypeMapping } from '../../../generated/value-mapping-v1';
import { PINNED_SESSION_SETTINGS } from '../../../src/sources/postgres/session-settings';
import { scanSource } from '../../../src/control/scan';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { callTool, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { EDGE_VALUES, type Edge } from './value-edges';

let env: GovernedEnv;
let admin: pg.Client;
/** A superuser session on the source that returns every value as PostgreSQL's text (no parsing). */
let oracle: pg.Client;
/** Gateway URL by label: the in-process gateway and the child under Pacific/Chatham. */
const gateways: Record<string, string> = {};
let child: ChildProcess | null = null;
const CHILD_ZONE = 'Pacific/Chatham';
const identityTypes = { getTypeParser: () => (s: string) => s };
const OUTPUT_PINS = PINNED_SESSION_SETTINGS.filter((s) => s.family === 'output');

/** Built-in types the matrix reads (base, range, multirange; not arrays, not pseudo-types). */
let serverTypes: Array<{ typname: string; oid: number; typarray: number }> = [];
const tableOf = (name: string) => `m_${name}`;

function literal(type: string, e: Edge): string {
  return typeof e === 'string' ? `${admin.escapeLiteral(e)}::pg_catalog.${type}` : `(${e.sql})`;
}

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  const dbName = new URL(env.sourceUrl).pathname.slice(1);
  const reader = admin.escapeIdentifier(env.demo.readerRole);
  await admin.query(`ALTER DATABASE "${dbName}" SET DateStyle = 'SQL, DMY'; ALTER DATABASE "${dbName}" SET TimeZone = 'America/Chicago';
    ALTER DATABASE "${dbName}" SET IntervalStyle = 'sql_standard'; ALTER DATABASE "${dbName}" SET extra_float_digits = -3; ALTER DATABASE "${dbName}" SET bytea_output = 'escape'`);
  for (const s of OUTPUT_PINS) await admin.query(`ALTER ROLE ${reader} IN DATABASE "${dbName}" SET ${s.name} = ${admin.escapeLiteral(s.value)}`);
  await admin.query(`CREATE TABLE il_stats (a int, b int); INSERT INTO il_stats SELECT i % 10, i % 5 FROM generate_series(1, 200) i;
    CREATE STATISTICS il_st (ndistinct, dependencies, mcv) ON a, b FROM il_stats; ANALYZE il_stats`);
  serverTypes = (
    await admin.query(`SELECT typname, oid::int, typarray::int FROM pg_catalog.pg_type
      WHERE oid < 16384 AND typtype IN ('b', 'r', 'm') AND typcategory <> 'A' AND typnamespace = 'pg_catalog'::regnamespace ORDER BY oid`)
  ).rows;
  for (const t of serverTypes) {
    const edges = EDGE_VALUES[t.typname] ?? [];
    const hasArray = t.typarray !== 0;
    await admin.query(`CREATE TABLE ${tableOf(t.typname)} (k int PRIMARY KEY, v pg_catalog.${t.typname}${hasArray ? `, a pg_catalog.${t.typname}[]` : ''})`);
    const rows: string[] = edges.map((e, i) => `(${i + 1}, ${literal(t.typname, e)}${hasArray ? ', NULL' : ''})`);
    rows.push(`(100, NULL${hasArray ? ', NULL' : ''})`);
    if (hasArray) {
      const all = [...edges.map((e) => literal(t.typname, e)), `NULL::pg_catalog.${t.typname}`];
      rows.push(`(101, NULL, ARRAY[${all.join(', ')}])`, `(102, NULL, '{}')`);
      if (edges.length > 0) {
        const first = literal(t.typname, edges[0]);
        rows.push(`(103, NULL, ARRAY[ARRAY[${first}, NULL], ARRAY[NULL, ${first}]])`);
        rows.push(`(104, NULL, ('[0:0]=' || ARRAY[${first}]::text)::pg_catalog.${t.typname}[])`);
      }
    }
    await admin.query(`INSERT INTO ${tableOf(t.typname)} VALUES ${rows.join(', ')}`);
  }
  await admin.query(`CREATE TYPE mood AS ENUM ('sad', 'happy', 'ünï "q"');
    CREATE DOMAIN big_id AS int8 CHECK (VALUE <> 0);
    CREATE TYPE pair AS (x int8, y text);
    CREATE TABLE m_user (k int PRIMARY KEY, e mood, ea mood[], d big_id, da big_id[], c pair, ca pair[]);
    INSERT INTO m_user VALUES
      (1, 'sad', '{sad,happy,NULL,"ünï \\"q\\""}', 9223372036854775807, '{1,9007199254740993,NULL}', ROW(9007199254740993, 'a b')::pair, ARRAY[ROW(1, 'x,y')::pair, NULL]),
      (2, NULL, '{}', NULL, '[0:0]={5}', NULL, '{}')`);
  await admin.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader}`);
  await scanSource(env.db, 'chinook');
  await upsertRole(env.db, { name: 'values-reader', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'values-reader', sourceId: 'chinook' });
  env.gateway.store.invalidate('*');
  oracle = new pg.Client({ connectionString: env.sourceUrl, types: identityTypes });
  await oracle.connect();
  for (const s of OUTPUT_PINS) await oracle.query(`SET ${s.name} = ${oracle.escapeLiteral(s.value)}`);
  gateways['in-process'] = env.url;
  const c = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'zone-gateway.ts'), env.db.url], { env: { ...process.env, TZ: CHILD_ZONE }, stdio: ['pipe', 'pipe', 'inherit'] });
  child = c;
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    c.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]);
    });
    c.on('exit', (code) => reject(new Error(`zone gateway exited with ${code}`)));
  });
  const started = JSON.parse(line) as { url: string; hour: number };
  expect(started.hour).toBe(1); // 12:00 UTC on 15 January is 01:45 in Chatham: the child's zone took effect
  gateways[CHILD_ZONE] = started.url;
}, 240_000);

afterAll(async () => {
  if (child) {
    const exited = new Promise((r) => child!.once('exit', r));
    child.stdin!.end();
    await exited;
  }
  await oracle?.end();
  await admin?.end();
  await env?.close();
});

/** The JSON text the mapping gives a value whose PostgreSQL text is `raw` (null: SQL NULL), computed without the gateway's decoders. */
function expectedJson(raw: string | null, form: BuiltinTypeMapping['form'] | 'array', elem?: BuiltinTypeMapping): string {
  if (raw === null) return 'null';
  switch (form) {
    case 'text':
      return JSON.stringify(raw);
    case 'boolean':
      return raw === 't' ? 'true' : 'false';
    case 'number':
      return String(BigInt(raw));
    case 'int8': {
      const b = BigInt(raw);
      return b <= 9007199254740991n && b >= -9007199254740991n ? b.toString() : JSON.stringify(raw);
    }
    case 'float':
      if (raw === 'NaN' || raw === 'Infinity' || raw === '-Infinity') return JSON.stringify(raw);
      if (raw === '-0') return '-0';
      expect(Number(raw)).toBe(Number.parseFloat(raw));
      return JSON.stringify(Number(raw));
    case 'json':
      return raw;
    case 'array': {
      if (!raw.startsWith('{')) return JSON.stringify(raw); // non-default lower bounds
      const e = elem!;
      // postgres-array splits on ","; box elements hold commas and are separated by ";", so swap them around the parse.
      const swap = (s: string) => s.replace(/[,;]/g, (c) => (c === ',' ? ';' : ','));
      const parsed = e.arrayDelimiter === ';' ? postgresArray(swap(raw), swap) : postgresArray(raw);
      const render = (x: unknown): string => (Array.isArray(x) ? `[${x.map(render).join(',')}]` : expectedJson(x as string | null, e.form));
      return render(parsed);
    }
  }
}

async function gatewayText(sql: string, url = env.url): Promise<{ text: string; structured: unknown; content: unknown[] }> {
  const r = await callTool({ url }, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
  const res = r.body.result;
  if (!res || res.isError) throw new Error(`interlock_query failed for ${sql}: ${JSON.stringify(r.body).slice(0, 500)}`);
  return { text: res.content[0].text, structured: res.structuredContent, content: res.content };
}

test('every built-in type of the server is in the spec table and has edge values in the matrix', () => {
  const spec = new Map(BUILTIN_TYPE_MAPPINGS.map((t) => [t.name, t]));
  expect(serverTypes.length).toBeGreaterThanOrEqual(80);
  const missingSpec = serverTypes.filter((t) => spec.get(t.typname)?.oid !== t.oid || (spec.get(t.typname)?.arrayOid ?? 0) !== t.typarray).map((t) => t.typname);
  const missingEdges = serverTypes.filter((t) => !(t.typname in EDGE_VALUES)).map((t) => t.typname);
  expect(missingSpec).toEqual([]);
  expect(missingEdges).toEqual([]);
});

describe.each(['in-process', CHILD_ZONE])('gateway %s', (zone) => {
  test('every built-in type and its arrays read exactly as PostgreSQL writes them, under the mapping', async () => {
    const spec = new Map(BUILTIN_TYPE_MAPPINGS.map((t) => [t.name, t]));
    const failures: string[] = [];
    for (const t of serverTypes) {
      const m = spec.get(t.typname)!;
      const cols = t.typarray !== 0 ? 'k, v, a' : 'k, v';
      const sql = `SELECT ${cols} FROM ${tableOf(t.typname)} /* ${zone} */ ORDER BY k`;
      const raw = (await oracle.query(sql)).rows as Array<{ k: string; v: string | null; a?: string | null }>;
      const expected = `[${raw.map((r) => `{"k":${r.k},"v":${expectedJson(r.v, m.form)}${t.typarray !== 0 ? `,"a":${expectedJson(r.a ?? null, 'array', m)}` : ''}}`).join(',')}]`;
      const got = await gatewayText(sql, gateways[zone]);
      if (got.text !== expected) failures.push(`${t.typname}:\n  expected ${expected}\n  got      ${got.text}`);
      expect((got.structured as { row_count: number }).row_count).toBe(raw.length);
    }
    expect(failures).toEqual([]);
  }, 180_000);

  test('user types: enum and domain arrays are JSON arrays mapped by element (domain as its base), composites are text', async () => {
    const got = await gatewayText(`SELECT k, e, ea, d, da, c, ca FROM m_user /* ${zone} */ ORDER BY k`, gateways[zone]);
    expect(got.text).toBe(
      '[{"k":1,"e":"sad","ea":["sad","happy",null,"ünï \\"q\\""],"d":"9223372036854775807","da":[1,"9007199254740993",null],"c":"(9007199254740993,\\"a b\\")","ca":["(1,\\"x,y\\")",null]},' +
        '{"k":2,"e":null,"ea":[],"d":null,"da":"[0:0]={5}","c":null,"ca":[]}]',
    );
  });
});

test('the issue\'s reported cases, through structuredContent too', async () => {
  const got = await gatewayText(`SELECT '2024-01-15 12:00'::timestamp AS ts, '2024-07-01'::date AS d, '{"id": 9007199254740993}'::jsonb AS j,
    'NaN'::float8 AS nan, '-Infinity'::float4 AS ninf, '\\x00ff'::bytea AS b FROM m_bool LIMIT 1`);
  expect(got.text).toBe('[{"ts":"2024-01-15 12:00:00","d":"2024-07-01","j":{"id": 9007199254740993},"nan":"NaN","ninf":"-Infinity","b":"\\\\x00ff"}]');
  expect(got.structured).toEqual({ rows: JSON.parse(got.text), row_count: 1, truncated: false, cached: false });
});

test('a truncated result says so in a second text item', async () => {
  const got = await gatewayText('SELECT k FROM m_int8 ORDER BY k LIMIT 5 /* cut */');
  expect(got.content).toHaveLength(1);
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT k FROM m_int8 ORDER BY k', max_rows: 2 }, env.apiKey);
  expect(r.body.result.content).toEqual([
    { type: 'text', text: '[{"k":1},{"k":2}]' },
    { type: 'text', text: 'TRUNCATED: this result is incomplete: more rows matched than the row limit (max_rows, or a source or policy row cap). 2 rows returned. Narrow the query (WHERE, fewer columns) or page with ORDER BY and LIMIT/OFFSET to see the rest.' },
  ]);
  expect(r.body.result.structuredContent).toEqual({ rows: [{ k: 1 }, { k: 2 }], row_count: 2, truncated: true, truncated_by: 'max_rows', cached: false });
});

test('everywhere the same: POST /mcp (fresh and cached), the legacy /mcp/tools/call and /v1 carry the mapped values verbatim', async () => {
  const sql = `SELECT '{"id": 9007199254740993}'::jsonb AS j, 9007199254740993::int8 AS n, '2024-01-15 12:00'::timestamp AS ts, 'NaN'::float8 AS f FROM m_bool WHERE k = 1 /* routes */`;
  const rows = '[{"j":{"id": 9007199254740993},"n":"9007199254740993","ts":"2024-01-15 12:00:00","f":"NaN"}]';
  const auth = { authorization: `Bearer ${env.apiKey}`, 'content-type': 'application/json', accept: 'application/json' };
  const mcp = async () => {
    const r = await fetch(env.url, {
      method: 'POST',
      headers: { ...auth, accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql } } }),
    });
    return r.text();
  };
  const fresh = await mcp();
  const cached = await mcp();
  for (const [raw, wasCached] of [[fresh, false], [cached, true]] as const) {
    expect(raw).toContain(`"text":${JSON.stringify(rows)}`);
    expect(raw).toContain(`"structuredContent":{"rows":${rows},"row_count":1,"truncated":false,"cached":${wasCached}}`);
  }
  const legacy = await fetch(new URL('/mcp/tools/call', env.url), { method: 'POST', headers: auth, body: JSON.stringify({ name: 'interlock_query', arguments: { source_id: 'chinook', sql } }) });
  expect(legacy.status).toBe(200);
  expect(legacy.headers.get('content-type')).toBe('application/json; charset=utf-8');
  expect(await legacy.text()).toContain(`"structuredContent":{"rows":${rows},`);
  const v1 = await fetch(new URL('/v1/sources/chinook/query', env.url), { method: 'POST', headers: auth, body: JSON.stringify({ sql }) });
  expect(v1.status).toBe(200);
  expect(v1.headers.get('content-type')).toBe('application/json; charset=utf-8');
  expect(await v1.text()).toBe(`{"rows":${rows},"row_count":1,"truncated":false,"cached":true}`);
});
