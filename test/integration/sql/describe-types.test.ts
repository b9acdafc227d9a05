/**
 * Issue 23 item 1: interlock_describe_source names each column's type so a client can interpret
 * it (spec/mcp-tools-v1.json $defs CatalogRow type_kind … value_form), on real PostgreSQL: a domain
 * shows its base type, arrays their element type, enums their labels, ranges their subtype, and
 * value_form says how interlock_query delivers the values (checked against a real read).
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { upsertRole as upsertRoleChecked } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { scanSource } from '../../../src/control/scan';
import { validateCatalogRow } from '../../../generated/validators';
import type { ControlDb } from '../../../src/control/db';

// Task hnu4a: these roles and policies name tables created on the source after its last scan (the cases under test),
// which the catalogue check refuses unless intended.
const upsertRole = (db: ControlDb, role: unknown) => upsertRoleChecked(db, role, {}, { allowUnknownNames: true });

let env: GovernedEnv;
let admin: pg.Client;
let rows: Array<Record<string, unknown>>;

const TYPE_FIELDS = ['type_kind', 'base_type', 'element_type', 'element_kind', 'enum_labels', 'range_subtype', 'value_form'] as const;

/** The type fields of the describe_source row of `typed.column`, absent fields left out. */
function typeOf(column: string): Record<string, unknown> {
  const row = rows.find((r) => r.table_name === 'typed' && r.column_name === column);
  if (!row) throw new Error(`no describe_source row for typed.${column}`);
  return Object.fromEntries(TYPE_FIELDS.filter((f) => row[f] !== undefined).map((f) => [f, row[f]]));
}

beforeAll(async () => {
  env = await startGovernedEnv({});
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  await admin.query(`
    CREATE DOMAIN email_address AS text CHECK (VALUE LIKE '%@%');
    CREATE DOMAIN work_email AS email_address;
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    CREATE DOMAIN calm_mood AS mood;
    CREATE TYPE complex AS (r float8, i float8);
    CREATE DOMAIN int_list AS int4[];
    CREATE TABLE typed (
      id int8 PRIMARY KEY,
      email email_address,
      work work_email,
      feeling mood,
      moods mood[],
      calm calm_mood[],
      z complex,
      zs complex[],
      span int4range,
      spans int4multirange,
      spells tstzrange[],
      ids int_list,
      price numeric(10, 2),
      ratio float8,
      doc jsonb,
      at timestamp,
      grid int4[],
      ok boolean,
      small int2
    );
    INSERT INTO typed VALUES (9007199254740993, 'a@b.c', 'w@b.c', 'ok', '{sad,happy}', '{ok}', '(1,2)', '{"(1,2)"}', '[1,5)', '{[1,2),[5,6)}', NULL, '{1,2}', 1.50, 'NaN', '{"n": 12345678901234567890}', '2026-01-02 03:04:05', '{{1,2},{3,4}}', true, 7);`);
  await admin.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${admin.escapeIdentifier(env.demo.readerRole)}`);
  await upsertRole(env.db, { name: 'typed-reader', statements: [{ effect: 'allow', action: 'read', resource: 'public.typed' }] });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'typed-reader', sourceId: 'chinook' });
  await scanSource(env.db, 'chinook');
  env.gateway.store.invalidate('*');
  const r = await callTool(env, 'interlock_describe_source', { source_id: 'chinook' }, env.apiKey);
  expect(r.body.result.isError).toBeFalsy();
  rows = r.body.result.structuredContent.rows;
  // Every row, the new fields included, is valid against the spec's CatalogRow (additionalProperties: false).
  const invalid = rows.filter((row) => !validateCatalogRow(row)).map((row) => [row.table_name, row.column_name, validateCatalogRow.errors]);
  expect(invalid).toEqual([]);
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await env?.close();
});

test('a domain shows its own name and the type beneath every domain; values arrive as that type', () => {
  expect(typeOf('email')).toEqual({ type_kind: 'domain', base_type: 'text', value_form: 'text' });
  expect(typeOf('work')).toEqual({ type_kind: 'domain', base_type: 'text', value_form: 'text' });
  expect(typeOf('ids')).toEqual({ type_kind: 'domain', base_type: 'integer[]', element_type: 'integer', element_kind: 'base', value_form: 'array' });
  expect(rows.find((r) => r.table_name === 'typed' && r.column_name === 'email')).toMatchObject({ data_type: 'email_address' });
});

test('enums carry their labels in sort order, also as array elements and under a domain', () => {
  expect(typeOf('feeling')).toEqual({ type_kind: 'enum', enum_labels: ['sad', 'ok', 'happy'], value_form: 'text' });
  expect(typeOf('moods')).toEqual({ type_kind: 'array', element_type: 'mood', element_kind: 'enum', enum_labels: ['sad', 'ok', 'happy'], value_form: 'array' });
  expect(typeOf('calm')).toEqual({ type_kind: 'array', element_type: 'calm_mood', element_kind: 'domain', enum_labels: ['sad', 'ok', 'happy'], value_form: 'array' });
});

test('composites, ranges and multiranges: kind, element and subtype', () => {
  expect(typeOf('z')).toEqual({ type_kind: 'composite', value_form: 'text' });
  expect(typeOf('zs')).toEqual({ type_kind: 'array', element_type: 'complex', element_kind: 'composite', value_form: 'array' });
  expect(typeOf('span')).toEqual({ type_kind: 'range', range_subtype: 'integer', value_form: 'text' });
  expect(typeOf('spans')).toEqual({ type_kind: 'multirange', range_subtype: 'integer', value_form: 'text' });
  expect(typeOf('spells')).toEqual({ type_kind: 'array', element_type: 'tstzrange', element_kind: 'range', range_subtype: 'timestamp with time zone', value_form: 'array' });
});

test('built-in types take their form from the value mapping', () => {
  expect(typeOf('id')).toEqual({ type_kind: 'base', value_form: 'int8' });
  expect(typeOf('price')).toEqual({ type_kind: 'base', value_form: 'text' });
  expect(typeOf('ratio')).toEqual({ type_kind: 'base', value_form: 'float' });
  expect(typeOf('doc')).toEqual({ type_kind: 'base', value_form: 'json' });
  expect(typeOf('at')).toEqual({ type_kind: 'base', value_form: 'text' });
  expect(typeOf('grid')).toEqual({ type_kind: 'array', element_type: 'integer', element_kind: 'base', value_form: 'array' });
  expect(typeOf('ok')).toEqual({ type_kind: 'base', value_form: 'boolean' });
  expect(typeOf('small')).toEqual({ type_kind: 'base', value_form: 'number' });
});

test('value_form matches what interlock_query returns for every column', async () => {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT * FROM typed' }, env.apiKey);
  expect(r.body.result.isError).toBeFalsy();
  const [row] = JSON.parse(r.body.result.content[0].text) as Array<Record<string, unknown>>;
  const formOf = (v: unknown): string[] =>
    v === null ? ['null'] : Array.isArray(v) ? ['array'] : typeof v === 'boolean' ? ['boolean'] : typeof v === 'number' ? ['number', 'int8', 'float'] : typeof v === 'string' ? ['text', 'int8', 'float'] : ['json'];
  const checked: string[] = [];
  for (const d of rows.filter((x) => x.table_name === 'typed')) {
    const v = row[String(d.column_name)];
    if (v === null) continue;
    expect({ column: d.column_name, form: formOf(v).includes(String(d.value_form)) }).toEqual({ column: d.column_name, form: true });
    checked.push(String(d.column_name));
  }
  expect(checked).toHaveLength(18);
  // The big int8 and the special float arrive as strings; jsonb keeps every digit.
  expect(row.id).toBe('9007199254740993');
  expect(row.ratio).toBe('NaN');
  expect(row.moods).toEqual(['sad', 'happy']);
  expect(r.body.result.content[0].text).toContain('12345678901234567890');
});
