/**
 * Red team rt47b J3b: every statement InterLock itself composes and sends on a source connection
 * (reader, writer, scan, guards, type lookups, row views, discovery) resolves no operator, type,
 * function, collation or relation through the connection role's search_path. A parse-tree check
 * (src/sources/postgres/qualify-sql.ts unqualifiedNames) over each statement as sent; statements
 * built from parts are checked as built, with their placeholders filled. And qualifySql itself:
 * what it rewrites, what it refuses, and that it keeps the statement's parse tree.
 */
import { parseSync } from 'libpg-query';
import { loadSqlQualifier, qualifySql, unqualifiedNames } from '../../../src/sources/postgres/qualify-sql';
import { JIT_OFF_SQL, JIT_RESTORE_SQL, SCAN_SQL } from '../../../src/sources/postgres/catalog';
import { hookGuardSql, lockSql } from '../../../src/sources/postgres/hook-guard';
import { functionGuardSql } from '../../../src/sources/postgres/function-guard';
import { typeGuardSql } from '../../../src/sources/postgres/type-guard';
import { shapeGuardSql } from '../../../src/sources/postgres/shape-guard';
import { generatedGuardSql, kindGuardSql, viewGuardSql } from '../../../src/sources/postgres/view-guard';
import { HIERARCHY_SQL, standaloneGuardSql, standaloneProbeSql } from '../../../src/sources/postgres/hierarchy';
import { REFERENTIAL_KEYS_SQL, VIEW_DEFINITIONS_SQL } from '../../../src/sources/postgres/referential-keys';
import { WRITER_MISSING_SQL } from '../../../src/sources/postgres/writer-privileges';
import { PG_TYPE_SQL } from '../../../src/sources/postgres/values';
import { currentSettingsSql, SET_SEARCH_PATH_SQL } from '../../../src/sources/postgres/pinned-client';
import { PINNED_SESSION_SETTINGS } from '../../../src/sources/postgres/session-settings';
import { BIND_SETTINGS_SQL } from '../../../src/sources/postgres/portal-read';
import { BEGIN_WITH_XID, BIND_LOCAL_SETTINGS, COMMIT_STATUS, END_OLD_BACKEND, PRE_GUARD, PRE_GUARD_SAVEPOINT, XACT_CHANGES } from '../../../src/sources/postgres/write';
import { PLAN_BIND_LOCAL_SETTINGS } from '../../../src/console/plan';
import { documentTableSql } from '../../../src/discovery/tables';
import { parseRowPredicate, renderRowPredicate } from '../../../src/sql/row-rules/predicate';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { initSqlParser } from '../../../src/sql/parser';
import { copyForeignCodeSql, rowViewStatements } from '../../../src/pipeline/row-rules';
import { ambiguousIdsSql, rowIdSql } from '../../../src/tools/handlers/discover';
import { maskedStatement } from '../../../src/sql/mask-sql';
import { ROW_VIEW_TABLE_SQL, ROW_VIEWS_OF_TABLE_SQL, ROW_VIEWS_SQL } from '../../../src/control/row-views';

/**
 * The SQL inside rowViewStatements' DO blocks (`DO $il$BEGIN IF <condition> THEN <statement>; END IF; END$il$`):
 * each condition as `SELECT <condition>` and each statement, for the parse-tree check (a DO body is a string to the parser).
 */
function doBlockSql(statements: string[]): string[] {
  return statements.flatMap((s) => {
    // A check after the statement (`IF (<SELECT>) THEN RAISE EXCEPTION '…'; END IF;`, rt48c K5): its SELECT too.
    const checks: string[] = [];
    const body = s.replace(/ IF \((SELECT EXISTS .*?)\) THEN RAISE EXCEPTION '(?:[^']|'')*'(?: USING ERRCODE = '[A-Z0-9]{5}')?; END IF;/gs, (_all, sql: string) => {
      checks.push(sql);
      return '';
    });
    const m = /^DO \$[a-z_]+\$BEGIN IF (.*) THEN (.*) END IF; END\$[a-z_]+\$$/s.exec(body);
    if (!m) throw new Error(`not a DO block of one IF: ${s}`);
    return [`SELECT ${m[1]}`, m[2], ...checks];
  });
}

beforeAll(async () => {
  await loadSqlQualifier();
  await initSqlParser();
});

/** Every statement InterLock sends on a source connection, as sent (name → text). */
function ownStatements(): Array<[string, string]> {
  const catalog = { relations: [{ schema: 'public', name: 't', kind: 'table', columns: [] }] } as unknown as SourceCatalog;
  const predicate = renderRowPredicate(parseRowPredicate("region = identity.region AND kind IN ('a', 'b') AND id NOT IN (1, 2) AND owner = ANY(identity.teams) AND lower(name) <> 'x'"), (c) => ({ region: 'text', kind: 'text', id: 'bigint', owner: 'uuid', name: 'character varying' })[c]);
  return [
    ['catalogue scan', qualifySql(SCAN_SQL)],
    ['scan JIT off', JIT_OFF_SQL],
    ['scan JIT restore', JIT_RESTORE_SQL],
    ['hook guard (1)', hookGuardSql(1)],
    ['hook guard (2, offset 4)', hookGuardSql(2, 4)],
    ['write lock', lockSql(catalog, [{ schema: 'public', name: 't' }])!],
    ['function guard', functionGuardSql({ fAbsent: 1, fPresent: 2, oAbsent: 1, oPresent: 1 })],
    ['type guard', typeGuardSql()],
    ['type guard (names only, offset 3)', typeGuardSql(3, { byOid: false, byName: true })],
    ['shape guard', shapeGuardSql(2, 1)],
    // Red team rt49 V1, V2, R1: the views' definitions, the generated columns' expressions, the tables' kinds.
    ['view guard', viewGuardSql(2, 1)],
    ['generated column guard', generatedGuardSql(2, 7)],
    ['relation kind guard', kindGuardSql(2, 3)],
    ['hierarchy walk', qualifySql(HIERARCHY_SQL)],
    ['hierarchy probe', qualifySql(standaloneProbeSql(2))],
    ['standalone guard', standaloneGuardSql(2)],
    ['referential keys', qualifySql(REFERENTIAL_KEYS_SQL)],
    ['view definitions', qualifySql(VIEW_DEFINITIONS_SQL)],
    ['writer privileges', qualifySql(WRITER_MISSING_SQL)],
    ['type lookup', PG_TYPE_SQL],
    ['session verification', currentSettingsSql(PINNED_SESSION_SETTINGS, PINNED_SESSION_SETTINGS.map((s) => s.name))],
    ['search path pin', SET_SEARCH_PATH_SQL],
    ['read settings', BIND_SETTINGS_SQL],
    ['write settings', BIND_LOCAL_SETTINGS],
    ['write changes', XACT_CHANGES],
    ['pre-guard', PRE_GUARD],
    ['pre-guard savepoint', PRE_GUARD_SAVEPOINT],
    ['begin', BEGIN_WITH_XID],
    ['commit status', COMMIT_STATUS],
    ['end old backend', END_OLD_BACKEND],
    ['plan settings', PLAN_BIND_LOCAL_SETTINGS],
    ['discovery table', documentTableSql({ table: 'public.docs', id_column: 'id', title_column: 't', body_column: 'b', type_column: 'k', category_column: 'c', time_column: 'ts', audience_column: 'a', entities_column: 'e', links_column: 'l' } as Parameters<typeof documentTableSql>[0])],
    ['row view predicate', `SELECT * FROM "public"."t" WHERE ${predicate}`],
    // Red team rt48c K1: the projection InterLock wraps around a read with masked columns (the agent's own text inside is not InterLock's: a constant here).
    ['mask wrapper', (maskedStatement('SELECT 1 AS a, 2 AS b, 3 AS c, 4 AS d, 5 AS e', (['full', 'null', 'partial', 'hash', null] as const).map((method, index) => ({ index, name: 'abcde'[index], method }))) as { sql: string }).sql],
    // Red team rt48c K2: `interlock source drop-row-views`, as the writer.
    ['drop-row-views table', qualifySql(ROW_VIEW_TABLE_SQL)],
    ['drop-row-views views of a table', qualifySql(ROW_VIEWS_OF_TABLE_SQL)],
    ['drop-row-views views', qualifySql(ROW_VIEWS_SQL)],
    // Red team rt48c K4: discovery's row filter for a ruled caller (its row-rule rewrite only replaces the relation).
    ['discovery row ids', rowIdSql({ relation: 'public.docs', schema: 'public', table: 'docs', idColumn: 'id', columns: ['id', 'title'] })],
    ['discovery ambiguous ids', ambiguousIdsSql({ relation: 'public.docs', schema: 'public', table: 'docs', idColumn: 'id', columns: ['id'] })],
    // Red team rt48c K3: whether a view's copy depends on code its original does not (inside the copy's DO block).
    ['row view copy check', copyForeignCodeSql('interlock_rows."v_1"', '"public"."v"')],
    ...doBlockSql(rowViewStatements({ name: 'v_1', schema: 'public', table: 't', only: false, predicateSql: predicate, check: true }, 'reader')).map((sql, i): [string, string] => [`row view DDL ${i}`, sql]),
  ];
}

describe('rt47b J3b: the statements InterLock sends on source connections name every operator, type, function and relation with its schema', () => {
  // Shown failing before the fix: the scan 467 unqualified (241 `=`, 119 `||`, 225 casts …), the hook guard, the
  // function, type and shape guards, the hierarchy walk, the writes' statements, the row view's IN list and casts.
  test('no statement resolves a name through the search path (libpg-query parse tree)', () => {
    const left = Object.fromEntries(ownStatements().map(([name, sql]) => [name, unqualifiedNames(sql)]).filter(([, l]) => l.length > 0));
    expect(left).toEqual({});
  });
});

describe('qualifySql', () => {
  test('qualifies operators (binary, prefix, ANY), IN (SELECT …), types, functions, collations and relations, not CTE names', () => {
    expect(qualifySql(`WITH w AS (SELECT 1 AS x) SELECT -a.x, a.y::oid, 'r'::"char"[], min(a.z), a.v COLLATE "C" FROM pg_class a, w WHERE a.x = 0 AND a.y ->> 'k' = ANY ($1::text[]) AND a.o IN (SELECT x FROM w)`)).toBe(
      `WITH w AS (SELECT 1 AS x) SELECT OPERATOR(pg_catalog.-)a.x, a.y::pg_catalog.oid, 'r'::pg_catalog."char"[], pg_catalog.min(a.z), a.v COLLATE pg_catalog."C" FROM pg_catalog.pg_class a, w WHERE a.x OPERATOR(pg_catalog.=) 0 AND a.y OPERATOR(pg_catalog.->>) 'k' OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) AND a.o OPERATOR(pg_catalog.=) ANY (SELECT x FROM w)`,
    );
  });

  test('leaves qualified names and keyword types as they are', () => {
    const sql = 'SELECT x::integer, y::pg_catalog.text, pg_catalog.now() FROM pg_catalog.pg_class WHERE a OPERATOR(pg_catalog.=) 1';
    expect(qualifySql(sql)).toBe(sql);
    // An option's value parses as a TypeName: a word, left as it is.
    const view = 'CREATE VIEW interlock_rows.v WITH (check_option = cascaded) AS SELECT 1';
    expect(qualifySql(view)).toBe(view);
  });

  test.each([
    ["SELECT 1 WHERE a IN (1, 2)", 'AEXPR_IN'],
    ["SELECT 1 WHERE a NOT IN (SELECT 1)", 'sublink ANY_SUBLINK IN'],
    ["SELECT 1 WHERE a NOT LIKE 'x%'", 'AEXPR_LIKE'],
    ["SELECT 1 WHERE a ILIKE 'x%'", 'AEXPR_ILIKE'],
    ['SELECT 1 WHERE a BETWEEN 1 AND 2', 'AEXPR_BETWEEN'],
    ['SELECT nullif(a, 1)', 'AEXPR_NULLIF'],
    ['SELECT 1 WHERE a IS DISTINCT FROM b', 'AEXPR_DISTINCT'],
    ['SELECT 1 WHERE a IS NOT DISTINCT FROM b', 'AEXPR_NOT_DISTINCT'],
    ["SELECT CASE a WHEN 1 THEN 'x' END", 'CASE x WHEN'],
    ['SELECT 1 FROM pg_catalog.pg_class JOIN pg_catalog.pg_type USING (oid)', 'JOIN USING/NATURAL'],
    ['SELECT 1 FROM pg_catalog.pg_class NATURAL JOIN pg_catalog.pg_type', 'JOIN USING/NATURAL'],
    ['SELECT a FROM pg_catalog.pg_class ORDER BY a USING <', 'ORDER BY USING'],
    ['SELECT * FROM unnest($1::text[], $2::text[]) AS u(a, b)', 'ROWS FROM'],
    // rt48c K2: the text input of regclass, regtype, … looks a one-part name up on the search path.
    ["SELECT 1 FROM pg_catalog.pg_depend d WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_class'::pg_catalog.regclass", "regclass input 'pg_class'"],
    ["SELECT 'text'::regtype", "regtype input 'text'"],
  ])('refuses what has no qualified spelling: %s', (sql, what) => {
    expect(() => qualifySql(sql)).toThrow(what);
  });

  test('refuses a rewrite that would regroup an operand (a rewritten operator has a generic operator\'s precedence)', () => {
    expect(() => qualifySql("SELECT 1 WHERE a = b || 'x'")).toThrow('parses to another statement');
    expect(qualifySql("SELECT 1 WHERE a = (b || 'x')")).toBe("SELECT 1 WHERE a OPERATOR(pg_catalog.=) (b OPERATOR(pg_catalog.||) 'x')");
  });

  test('the qualified scan parses to the same statement as its source text, names qualified', () => {
    const q = qualifySql(SCAN_SQL);
    expect(q).not.toBe(SCAN_SQL);
    expect(parseSync(q).stmts).toHaveLength(1);
    expect(unqualifiedNames(SCAN_SQL).length).toBeGreaterThan(400);
  });
});
