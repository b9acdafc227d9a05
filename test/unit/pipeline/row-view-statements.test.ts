/**
 * rowViewStatements (src/pipeline/row-rules.ts; red team rt27w findings C and D): each statement is
 * one DO block whose body creates the view only when missing and grants only what the reader lacks,
 * with a dollar-quote tag that a rule constant or a role name cannot end early.
 */
import { initSqlParser } from '../../../src/sql/analyze';
import { parseSql } from '../../../src/sql/parser';
import { ownOperatorsOf, rowViewForeignCodeSql, rowViewStatements, type RowView } from '../../../src/pipeline/row-rules';

beforeAll(async () => {
  await initSqlParser();
});

/** The body of the single DO statement `sql` is (throws when it is anything else). */
function doBody(sql: string): string {
  const stmts = (parseSql(sql) as unknown as { stmts: Array<{ stmt: { DoStmt?: { args: Array<{ DefElem: { arg: { String: { sval: string } } } }> } } }> }).stmts;
  expect(stmts).toHaveLength(1);
  const d = stmts[0].stmt.DoStmt;
  if (!d) throw new Error(`not a DO statement: ${sql}`);
  return d.args[0].DefElem.arg.String.sval;
}

const view = (predicateSql: string, check = false): RowView => ({ name: 'note_0123456789abcdef', schema: 'public', table: 'note', only: false, predicateSql, ...(check ? { check: true } : {}) });

describe('rowViewStatements', () => {
  it('creates the view only when no view of its name with its options exists; grants only what is missing', () => {
    const [schema, create, usage, select] = rowViewStatements(view("(body OPERATOR(pg_catalog.=) E'x')", true), 'reader');
    expect(doBody(schema)).toContain('CREATE SCHEMA interlock_rows');
    const body = doBody(create);
    expect(body).toMatch(/^BEGIN IF NOT EXISTS \(SELECT 1 FROM pg_catalog\.pg_class c .* c\.relname OPERATOR\(pg_catalog\.=\) E'note_0123456789abcdef' .*ARRAY\[E'security_barrier=true', E'security_invoker=true', E'check_option=cascaded'\]::pg_catalog\.text\[\]\) THEN CREATE OR REPLACE VIEW interlock_rows\."note_0123456789abcdef" WITH \(security_barrier = true, security_invoker = true, check_option = cascaded\) AS SELECT \* FROM "public"\."note" WHERE \(body OPERATOR\(pg_catalog\.=\) E'x'\); IF \(/);
    // Refused when the view depends on a type, function or operator not its table's (red team rt48c K5).
    expect(body.endsWith(`; IF (${rowViewForeignCodeSql('interlock_rows."note_0123456789abcdef"', '"public"."note"')}) THEN RAISE EXCEPTION 'a row view resolves a function, operator, type or collation that is not its table''s (rescan the source)' USING ERRCODE = 'ILRV1'; END IF; END IF; END`)).toBe(true);
    expect(doBody(usage)).toBe(`BEGIN IF NOT pg_catalog.has_schema_privilege(E'reader', 'interlock_rows', 'USAGE') THEN GRANT USAGE ON SCHEMA interlock_rows TO "reader"; END IF; END`);
    expect(doBody(select)).toBe(`BEGIN IF NOT pg_catalog.has_table_privilege(E'reader', E'interlock_rows."note_0123456789abcdef"', 'SELECT') THEN GRANT SELECT ON interlock_rows."note_0123456789abcdef" TO "reader"; END IF; END`);
  });

  it('a rule constant or a role name holding the dollar tag does not end the block early', () => {
    const predicate = "(body OPERATOR(pg_catalog.=) E'$il$; DROP TABLE note; $il_$')";
    const [, create, usage] = rowViewStatements(view(predicate), 'r$il$x');
    expect(doBody(create)).toContain(`WHERE ${predicate}; IF (SELECT EXISTS (`);
    expect(create.startsWith('DO $il__$BEGIN')).toBe(true);
    expect(doBody(usage)).toContain(`TO "r$il$x"; END IF;`);
  });
});

describe('ownOperatorsOf (red team rt48d R8)', () => {
  // Types: 16400 ext.citext, 25 pg_catalog.text, 16500 public.tag.
  const type = (oid: number, schema: string, name: string) => [oid, schema, name, 'b', 'S', false, 0, 0, name, name] as [number, string, string, string, string, boolean, number, number, string, string];
  const catalog = {
    relations: [],
    functions: [],
    searchPath: ['public'],
    scannedAt: '2026-01-01T00:00:00Z',
    truncated: false,
    operatorResolution: { operators: [], types: [type(16400, 'ext', 'citext'), type(25, 'pg_catalog', 'text'), type(16500, 'public', 'tag')], implicitCasts: [] },
    operatorCode: [
      ['ext', '=', 16400, 16400, 'ext', 'citext_eq', '1:1'],
      ['ext', '<>', 16400, 16400, 'ext', 'citext_ne', '2:1'],
      // Another schema's operator for the type, one over two types, one not a comparison, a shell.
      ['public', '<', 16400, 16400, 'public', 'evil_lt', '3:1'],
      ['ext', '>', 16400, 25, 'ext', 'citext_gt_text', '4:1'],
      ['ext', '~~', 16400, 16400, 'ext', 'citext_like', '5:1'],
      ['public', '=', 16500, 16500, null, null, '6:1'],
      // An insider's = for a built-in type is never one.
      ['public', '=', 25, 25, 'public', 'evil_eq', '7:1'],
    ] as Array<[string, string, number, number, string | null, string | null, string]>,
  };
  it("keeps a type's comparison operators of its own schema over two values of it, with their functions", () => {
    expect([...ownOperatorsOf(catalog).entries()]).toEqual([
      ['16400\u0000=', { schema: 'ext', fn: 'ext.citext_eq' }],
      ['16400\u0000<>', { schema: 'ext', fn: 'ext.citext_ne' }],
    ]);
    expect(ownOperatorsOf({ ...catalog, operatorResolution: undefined }).size).toBe(0);
  });
});
