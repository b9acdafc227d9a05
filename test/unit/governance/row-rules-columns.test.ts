/**
 * Column allows and row rules (issue 27, rt27 finding 3; src/governance/row-rules.ts): the rule of a
 * table for the used columns is the AND over them of the OR over the allows covering each; and the
 * statements creating a view's copy (src/pipeline/row-rules.ts rowViewStatements).
 */
import { AccessEvaluator, type RoleGrant } from '../../../src/governance/evaluator';
import { relationRowRule, ruleGroups, sameRowRule } from '../../../src/governance/row-rules';
import { NO_HIERARCHY } from '../../../src/sql/hierarchy';
import { copyForeignCodeSql, rowViewStatements } from '../../../src/pipeline/row-rules';

type S = { resource: string; rows?: string };
const ev = (...statements: S[]) => new AccessEvaluator([{ sourceId: 's', role: { name: 'r', statements: statements.map((x) => ({ effect: 'allow', action: 'read', ...x })) } as unknown as RoleGrant['role'] }]);
const groups = (e: AccessEvaluator, columns?: string[]) => { const r = relationRowRule(e, 's', 'public', 'customer', NO_HIERARCHY, undefined, 'read', columns); return r ? ruleGroups(r).map((g) => g.map((t) => t.rows)) : null; };

const R = 'support_rep_id = identity.employee_id';
const JP = "country = 'JP'";

describe('relationRowRule over used columns', () => {
  it('a column allow without rows frees its own column only', () => {
    const e = ev({ resource: 'public.customer', rows: R }, { resource: 'public.customer.email' });
    expect(groups(e, ['email'])).toBeNull();
    expect(groups(e, ['email', 'credit'])).toEqual([[R]]);
    expect(groups(e, ['credit'])).toEqual([[R]]);
    // No column used (count(*)): the OR of every covering allow, as before.
    expect(groups(e, [])).toBeNull();
    expect(groups(e)).toBeNull();
  });

  it('a column allow with rows widens that column: AND over columns of the OR over their allows', () => {
    const e = ev({ resource: 'public.customer', rows: R }, { resource: 'public.customer.email', rows: JP });
    expect(groups(e, ['email'])).toEqual([[JP, R]]);
    expect(groups(e, ['customer_id', 'email'])).toEqual([[JP, R], [R]]);
    expect(groups(e)).toEqual([[JP, R]]);
  });

  it('columns no allow covers add nothing; when none is covered the table-level rule applies', () => {
    const e = ev({ resource: 'public.customer.email', rows: JP });
    expect(groups(e, ['email', 'credit'])).toEqual([[JP]]);
    expect(groups(e, ['credit'])).toEqual([[JP]]);
    expect(groups(ev({ resource: 'public.invoice' }), ['credit'])).toBeNull();
  });

  it('sameRowRule compares the groups', () => {
    const e = ev({ resource: 'public.customer', rows: R }, { resource: 'public.customer.email', rows: JP });
    const rule = (c?: string[]) => relationRowRule(e, 's', 'public', 'customer', NO_HIERARCHY, undefined, 'read', c);
    expect(sameRowRule(rule(['credit']), rule(['customer_id']))).toBe(true);
    expect(sameRowRule(rule(['credit']), rule(['customer_id', 'email']))).toBe(false);
    expect(sameRowRule(rule(['email']), rule())).toBe(true);
  });
});

describe('rowViewStatements for a view\'s copy', () => {
  it('creates it with the view\'s columns and barrier, as invoker, under the catalogue\'s search path, in one DO block', () => {
    const [, create, usage, select] = rowViewStatements({ name: 'v_1', schema: 'public', table: 'v', only: false, predicateSql: '', definition: ' SELECT a AS "x y" FROM interlock_rows."t_2" t;', columns: ['x y'], securityBarrier: true, searchPath: ['app', 'public'] }, 'reader');
    // Created only when missing (red team rt27w, finding C), with the copy's own options.
    expect(create.startsWith("DO $il$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c ")).toBe(true);
    expect(create).toContain("c.relname OPERATOR(pg_catalog.=) E'v_1' AND c.relkind OPERATOR(pg_catalog.=) 'v' AND c.reloptions OPERATOR(pg_catalog.@>) ARRAY[E'security_barrier=true', E'security_invoker=true']::pg_catalog.text[])");
    // Refused when the copy depends on code its view does not (red team rt48c K3).
    const check = `IF (${copyForeignCodeSql('interlock_rows."v_1"', '"public"."v"')}) THEN RAISE EXCEPTION 'the copy of a view resolves a function, operator, type, collation or relation its original does not (rescan the source)' USING ERRCODE = 'ILRV1'; END IF;`;
    expect(create.endsWith(
      `) THEN PERFORM pg_catalog.set_config('search_path', $ddl$"app", "public"$ddl$, true); EXECUTE $ddl$CREATE OR REPLACE VIEW interlock_rows."v_1" ("x y") WITH (security_barrier = true, security_invoker = true) AS SELECT a AS "x y" FROM interlock_rows."t_2" t$ddl$; ${check} END IF; END$il$`,
    )).toBe(true);
    // Granted only when the reader lacks it (rt27w, finding D).
    expect([usage, select]).toEqual([
      "DO $il$BEGIN IF NOT pg_catalog.has_schema_privilege(E'reader', 'interlock_rows', 'USAGE') THEN GRANT USAGE ON SCHEMA interlock_rows TO \"reader\"; END IF; END$il$",
      "DO $il$BEGIN IF NOT pg_catalog.has_table_privilege(E'reader', E'interlock_rows.\"v_1\"', 'SELECT') THEN GRANT SELECT ON interlock_rows.\"v_1\" TO \"reader\"; END IF; END$il$",
    ]);
  });

  it('picks dollar-quote tags the definition does not contain', () => {
    const [, create] = rowViewStatements({ name: 'v_1', schema: 'public', table: 'v', only: false, predicateSql: '', definition: "SELECT '$il$ $ddl$' AS s", columns: ['s'], securityBarrier: false, searchPath: [] }, 'reader');
    expect(create.startsWith('DO $il_$BEGIN IF NOT EXISTS')).toBe(true);
    expect(create).toContain("ARRAY[E'security_barrier=false', E'security_invoker=true']");
    expect(create).toContain("EXECUTE $ddlx$CREATE OR REPLACE VIEW interlock_rows.\"v_1\" (\"s\") WITH (security_barrier = false, security_invoker = true) AS SELECT '$il$ $ddl$' AS s$ddlx$; IF (");
    expect(create.endsWith("(rescan the source)' USING ERRCODE = 'ILRV1'; END IF; END IF; END$il_$")).toBe(true);
  });
});
