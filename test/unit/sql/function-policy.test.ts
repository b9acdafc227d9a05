/**
 * Issue 12, Build 3: a function policy that covers every built-in function. Every pg_proc row of
 * the PostgreSQL 15, 16, 17 and 18 snapshots lands in exactly one class; the published table
 * (docs/function-policy.md) is current; the disclosed families are refused by the analyser with
 * their reason; legitimate functions still pass. (test/integration/sql/function-policy.test.ts
 * checks the live server's pg_proc against the same rules.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { analyzeSql, initSqlParser, prepareCatalog } from '../../../src/sql/analyze';
import { builtinFunctionDecision, foldDecisions, loadSnapshots, MIXED_ALLOWED, unclassifiedRows } from '../../../src/sql/builtin-functions/classes';
import { renderPolicyMarkdown } from '../../../src/sql/builtin-functions/render';
import { classifyRow, FUNCTION_RULES } from '../../../src/sql/builtin-functions/rules';
import { expandSnapshots, formatSnapshotFile, mergeSnapshot, type ProcRow } from '../../../src/sql/builtin-functions/snapshot';
import ALLOWED from '../../../src/sql/builtin-functions/allowed.json';
import { CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const snapshots = loadSnapshots();
const cat = prepareCatalog(CATALOG);
const answer = (sql: string) => {
  const r = analyzeSql(sql, cat);
  return r.ok ? 'ok' : `${r.code}: ${r.message}`;
};

describe('classification of every built-in function', () => {
  test('the snapshots cover PostgreSQL 15, 16, 17 and 18, thousands of rows each', () => {
    expect(snapshots.map((s) => s.postgres)).toEqual([15, 16, 17, 18]);
    for (const s of snapshots) expect(s.rows.length).toBeGreaterThan(3000);
  });

  test('no row is unclassified', () => {
    expect(unclassifiedRows(snapshots)).toEqual([]);
  });

  test('each row lands in exactly one class: the first matching rule; the allow-list shadows no refusal rule', () => {
    for (const s of snapshots) {
      for (const r of s.rows) {
        const rule = classifyRow(r)!;
        const idx = FUNCTION_RULES.indexOf(rule);
        expect(FUNCTION_RULES.slice(0, idx).some((x) => x.test(r))).toBe(false);
        if (rule.class === 'allowed' && rule.id === 'allow-list') {
          // No refusal rule would have matched the row had the allow-list come first.
          expect(FUNCTION_RULES.filter((x) => x.class === 'refused').some((x) => x.test(r))).toBe(false);
        }
      }
    }
  });

  test('the allow-list is exact: sorted, unique, and every name decides at least one row', () => {
    const names = ALLOWED as string[];
    expect([...names].sort()).toEqual(names);
    expect(new Set(names).size).toBe(names.length);
    const used = new Set<string>();
    for (const s of snapshots) for (const r of s.rows) if (classifyRow(r)?.id === 'allow-list') used.add(r[1]);
    expect(names.filter((n) => !used.has(n))).toEqual([]);
  });

  test('mixed names are exactly the reviewed ones; every other name with a refused overload is refused', () => {
    const decisions = foldDecisions(snapshots);
    const mixed = new Set<string>();
    for (const s of snapshots) {
      for (const r of s.rows) {
        const key = r[0] + '.' + r[1];
        if (classifyRow(r)!.class === 'refused' && decisions.get(key)!.class !== 'refused') mixed.add(key);
      }
    }
    expect([...mixed].sort()).toEqual([...MIXED_ALLOWED.keys()].filter((k) => mixed.has(k)).sort());
    expect([...MIXED_ALLOWED.keys()].every((k) => decisions.has(k))).toBe(true);
  });

  test('docs/function-policy.md is the rendering of the snapshots and rules (run scripts/function-policy.ts render)', () => {
    const published = readFileSync(join(__dirname, '..', '..', '..', 'docs', 'function-policy.md'), 'utf8');
    expect(published).toBe(renderPolicyMarkdown(snapshots));
  });

  test.each([
    ['pg_catalog', 'regclass', 'refused', 'object-identifier'],
    ['pg_catalog', 'regclassout', 'refused', 'support-function'],
    ['pg_catalog', 'regprocedureout', 'refused', 'support-function'],
    ['pg_catalog', 'to_regclass', 'refused', 'deny-list'],
    ['pg_catalog', 'txid_current', 'refused', 'deny-list'],
    ['pg_catalog', 'pg_current_xact_id', 'refused', 'deny-list'],
    ['pg_catalog', 'mxid_age', 'refused', 'server-state-type'],
    ['pg_catalog', 'pg_extension_update_paths', 'refused', 'extensions'],
    ['pg_catalog', 'pg_available_extensions', 'refused', 'extensions'],
    ['pg_catalog', 'plpgsql_validator', 'refused', 'loads-code'],
    ['pg_catalog', 'fmgr_c_validator', 'refused', 'loads-code'],
    ['pg_catalog', 'fmgr_sql_validator', 'refused', 'loads-code'],
    ['pg_catalog', 'array_in', 'refused', 'support-function'],
    ['information_schema', '_pg_expandarray', 'refused', 'information-schema'],
    ['pg_catalog', 'age', 'allowed', 'allow-list'],
    ['pg_catalog', 'lower', 'allowed', 'allow-list'],
    ['pg_catalog', 'generate_series', 'resource_checked', 'resource-checked'],
    ['pg_catalog', 'pg_typeof', 'allowed', 'type-exception'],
  ])('%s.%s is %s (%s)', (schema, name, cls, rule) => {
    expect(builtinFunctionDecision(schema, name)).toMatchObject({ class: cls, rule });
  });

  test('a function in no snapshot has no decision (refused by the analyser)', () => {
    expect(builtinFunctionDecision('pg_catalog', 'pg_brand_new_function')).toBeNull();
  });
});

describe('the stored snapshot file', () => {
  const a: ProcRow = ['pg_catalog', 'abs', 'int4', 'int4', 'internal', 'f', 'i', false];
  const b: ProcRow = ['pg_catalog', 'new_fn', 'text', 'text', 'internal', 'f', 'i', false];
  test('merging versions keeps each row once with its versions; re-merging a version replaces it', () => {
    let f = mergeSnapshot({ versions: [], rows: [] }, { postgres: 15, rows: [a] });
    f = mergeSnapshot(f, { postgres: 18, rows: [a, b] });
    expect(f).toEqual({ versions: [15, 18], rows: [[...a, '15 18'], [...b, '18']] });
    expect(mergeSnapshot(f, { postgres: 18, rows: [a] })).toEqual({ versions: [15, 18], rows: [[...a, '15 18']] });
    expect(expandSnapshots(f)).toEqual([{ postgres: 15, rows: [a] }, { postgres: 18, rows: [a, b] }]);
    expect(JSON.parse(formatSnapshotFile(f))).toEqual(f);
  });
});

describe('the analyser applies the policy', () => {
  test.each([
    ["SELECT regclass('customer')", 'function_not_allowed: function "regclass" is not allowed: it reads the catalogue by object id or by name'],
    ["SELECT regclassout('customer')", 'function_not_allowed: function "regclassout" is not allowed: it is a type input/output or planner support function'],
    ["SELECT regprocedureout('1')", 'function_not_allowed: function "regprocedureout" is not allowed: it is a type input/output or planner support function'],
    ["SELECT to_regclass('customer')", 'function_not_allowed: function "to_regclass" is not allowed: it reveals the existence of database objects'],
    ["SELECT age('1'::xid)", 'function_not_allowed: type "xid" is not allowed: it holds transaction ids, snapshots, tuple ids or write-ahead log positions (reveals server state)'],
    ["SELECT mxid_age('1')", 'function_not_allowed: function "mxid_age" is not allowed: it reveals transaction ids, snapshots, tuple ids or write-ahead log positions'],
    ['SELECT txid_current()', 'function_not_allowed: function "txid_current" is not allowed: it has transaction-level side effects'],
    ['SELECT pg_current_xact_id()', 'function_not_allowed: function "pg_current_xact_id" is not allowed: it has transaction-level side effects'],
    ["SELECT * FROM pg_extension_update_paths('plpgsql')", 'function_not_allowed: function "pg_extension_update_paths" is not allowed: it reads the server\'s extension directory or extension state'],
    ['SELECT * FROM pg_available_extensions()', 'function_not_allowed: function "pg_available_extensions" is not allowed: it reads the server\'s extension directory or extension state'],
    ['SELECT plpgsql_validator(1)', 'function_not_allowed: function "plpgsql_validator" is not allowed: it loads or validates code (language handlers and validators, triggers)'],
    ['SELECT pg_catalog.fmgr_c_validator(1)', 'function_not_allowed: function "fmgr_c_validator" is not allowed: it loads or validates code (language handlers and validators, triggers)'],
    ["SELECT array_in('{1}', 23, -1)", 'function_not_allowed: function "array_in" is not allowed: it is a type input/output or planner support function'],
    ['SELECT pg_jit_available()', 'function_not_allowed: function "pg_jit_available" is not allowed: it reveals or changes server state'],
    ['SELECT getdatabaseencoding()', 'function_not_allowed: function "getdatabaseencoding" is not allowed: it reveals details of the server or the connection'],
    ['SELECT information_schema._pg_char_max_length(1, 2)', 'function_not_allowed: function "_pg_char_max_length" is not allowed: it is an information_schema helper that reads the catalogue by object id (use the describe tool)'],
    ["SELECT to_tsvector($1, 'a b')", 'function_not_allowed: function "to_tsvector" is not allowed with a text search configuration that is not a constant built-in name (e.g. \'english\')'],
    ["SELECT to_tsvector(name, 'a b') FROM genre", 'function_not_allowed: function "to_tsvector" is not allowed with a text search configuration that is not a constant built-in name (e.g. \'english\')'],
    ["SELECT to_tsvector('secret_config', 'a b')", 'function_not_allowed: function "to_tsvector" is not allowed with a text search configuration that is not a constant built-in name (e.g. \'english\')'],
    ["SELECT 'a'::regconfig", 'function_not_allowed: type "regconfig" is not allowed: it looks objects up by name in the system catalogues (reveals which exist)'],
  ])('%s', (sql, expected) => {
    expect(answer(sql)).toBe(expected);
  });

  test.each([
    "SELECT to_tsvector('english', name) @@ plainto_tsquery('english', 'love') FROM track",
    "SELECT to_tsvector('pg_catalog.simple', name), to_tsvector(name), ts_headline(name, to_tsquery('x')) FROM track",
    "SELECT age(invoice_date), age(now(), invoice_date) FROM invoice",
    'SELECT min(total), max(total), int8(1), pg_typeof(total) FROM invoice',
    "SELECT lower(name), upper(name), length(name), substr(name, 1, 3), pg_size_pretty(1024::bigint), generate_series(1, 10) FROM genre",
  ])('%s is allowed', (sql) => {
    expect(answer(sql)).toBe('ok');
  });
});
