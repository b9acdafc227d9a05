/**
 * Pipeline step 4, policy (contract: "A policy cannot grant source access that a source role did
 * not allow"). Runs only after step 3 allowed the statement; it can refuse (deny relations, require
 * WHERE, time windows, predicates on masked columns, unprovable redaction) or restrict (row cap,
 * column masks). The redaction plan is computed here, before execution, so a query whose output
 * could carry masked values in an unprovable way is refused without running.
 */
import type { Policy } from '../../generated/policy-v1';
import type { SqlAnalysis } from '../sql/analyze';
import { planRedaction, type MaskRule, type RedactionPlan } from '../sql/redaction';
import type { SourceCatalog } from '../sql/catalog-types';
import { evaluatePolicies, unprovableMaskMethod, type PolicySubject } from '../governance/policies';
import { governingRelations, maskInHierarchy } from '../governance/hierarchy';
import { catalogHierarchy, type RelationHierarchy } from '../sql/hierarchy';
import { referentialReach } from '../sql/referential-reach';
import type { ToolOutcome } from './types';
import { catalogColumns, functionLabel, type ColumnName } from './03-authorize';

type OkAnalysis = Extract<SqlAnalysis, { ok: true }>;

/** The restrictions a passing request carries into execution and redaction. */
export interface PolicyRestrictions {
  maxRows: number | null;
  masks: MaskRule[];
  redaction: Extract<RedactionPlan, { ok: true }> | null;
  /** Stable text describing the restrictions (part of the cache key). */
  fingerprint: string;
}

/**
 * Runs the step for a SQL statement. `deny_relations` and column masks written on a relation's
 * ancestors or descendants in `hierarchy` (default: the catalogue's) apply to it as well (issue 22
 * item 1, src/governance/hierarchy.ts). A write's `deny_relations` also apply to each relation its
 * foreign keys' referential actions write (src/sql/referential-reach.ts, from the catalogue's keys),
 * refused `policy_denied` with a reason that does not name that relation. `describable`: whether
 * the caller may describe a column (03-authorize.ts describesColumn); the refusal of a user
 * function reading a masked column names the column only then (default: never).
 */
export function policyStep(policies: Policy[], subject: PolicySubject, a: OkAnalysis, catalog: SourceCatalog, now: Date, hierarchy: RelationHierarchy = catalogHierarchy(catalog), describable: (c: ColumnName) => boolean = () => false): { ok: true; restrictions: PolicyRestrictions } | { ok: false; outcome: ToolOutcome } {
  const governing = (schema: string, table: string) => governingRelations(schema, table, hierarchy).slice(1);
  const relations = [
    ...a.reads.map((r) => ({ schema: r.schema, table: r.table, action: 'read' as const, governing: governing(r.schema, r.table) })),
    ...a.writes.map((w) => ({ schema: w.schema, table: w.table, action: 'write' as const, governing: governing(w.schema, w.table) })),
    // What the user functions it runs may read is read too (task hfn): a read deny_relations applies.
    ...(a.functionReads ?? []).flatMap((f) => f.relations).map((r) => ({ schema: r.schema, table: r.table, action: 'read' as const, governing: governing(r.schema, r.table) })),
    // What the write's foreign keys write (ON DELETE/UPDATE CASCADE, SET NULL, SET DEFAULT) is
    // written too: a write deny_relations on it applies (red team rtfk finding 2).
    ...(a.writes.length ? referentialReach(catalog, hierarchy, a.writes, { pastHooks: true }).reached : []).map((r) => ({ schema: r.schema, table: r.name, action: 'write' as const, governing: governing(r.schema, r.name), reached: true })),
  ];
  const verdict = evaluatePolicies(policies, subject, {
    action: a.kind === 'write' ? 'write' : 'read',
    relations,
    writes: a.writes.map((w) => ({ schema: w.schema, table: w.table, operation: w.operation, hasWhere: w.hasWhere })),
    now,
  });
  if (!verdict.ok) return { ok: false, outcome: { kind: 'refusal', code: 'policy_denied', message: verdict.reason, extra: { policy: verdict.policy } } };

  // A function's result cannot be masked (task hfn): a call that may read a masked column is refused.
  if (verdict.maskPatterns.length) {
    for (const f of a.functionReads ?? []) {
      for (const r of f.relations) {
        const column = catalogColumns(catalog, r.schema, r.table).find((c) => maskInHierarchy(verdict.maskPatterns, r.schema, r.table, c, hierarchy));
        if (column !== undefined) {
          // Named only when the caller may describe it (red team rt41b F8).
          // The body's columns are not known, only its tables (task hnu43 item 4): say so rather than claim it reads that column.
          const what = describable({ schema: r.schema, table: r.table, column })
            ? `table ${r.schema}.${r.table}. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and column ${r.schema}.${r.table}.${column} (which the body need not use) is one`
            : 'a column that';
          return { ok: false, outcome: { kind: 'refusal', code: 'policy_denied', message: `The ${functionLabel(f)} reads ${what} a policy masks for this identity. A function's result cannot be masked, so the call is refused; select the column itself to see it masked.` } };
        }
      }
    }
  }
  const masks: MaskRule[] = [];
  if (verdict.maskPatterns.length) {
    const seen = new Set<string>();
    // Relations read directly, and those behind used view columns (issue 12: masks follow lineage).
    const behind = new Map((a.viewSources ?? []).map((c) => [`${c.schema}\u0000${c.table}`, { schema: c.schema, table: c.table }]));
    for (const r of [...a.reads, ...behind.values()]) {
      for (const column of catalogColumns(catalog, r.schema, r.table)) {
        const key = `${r.schema}.${r.table}.${column}`;
        if (seen.has(key)) continue;
        seen.add(key);
        const method = maskInHierarchy(verdict.maskPatterns, r.schema, r.table, column, hierarchy);
        if (method) masks.push({ column: { schema: r.schema, table: r.table, column }, method });
      }
    }
  }
  let redaction: PolicyRestrictions['redaction'] = null;
  // A view column with unprovable lineage may carry any masked column (issue 12: fail closed).
  const unprovableMethod = unprovableMaskMethod(verdict.maskPatterns);
  if (unprovableMethod && a.unprovableUses) {
    return { ok: false, outcome: { kind: 'refusal', code: 'policy_denied', message: 'The statement uses a view column whose lineage cannot be proven in a condition, expression, join, grouping, ordering or set operation; masks apply to it, so it can only be selected as it is.' } };
  }
  if (masks.length || (unprovableMethod && a.viewUnprovable)) {
    const masked = new Set(masks.map((m) => `${m.column.schema}.${m.column.table}.${m.column.column}`));
    const key = (c: { schema: string; table: string; column: string }) => `${c.schema}.${c.table}.${c.column}`;
    // A masked column may only be selected as it is: any other use (predicate, function or operator
    // input, set operation, DISTINCT, window, FROM function, EXISTS, a value written elsewhere…) can
    // reveal its value by inference. The analyser lists such uses in nonOutputUses (filterSources is
    // the older, narrower list; use whichever is wider).
    const uses = [...((a as { nonOutputUses?: typeof a.filterSources }).nonOutputUses ?? []), ...(a.filterSources ?? [])];
    // A masked column the statement reached only through a view is not named: the caller may hold no
    // grant on the view's base relation, whose structure the refusal must not disclose.
    const named = new Set(a.reads.map((r) => `${r.schema}.${r.table}`));
    const shown = (c: { schema: string; table: string; column: string }) => (named.has(`${c.schema}.${c.table}`) ? `Column ${key(c)} is` : 'A column this statement reads through a view is');
    const misused = uses.find((c) => masked.has(key(c)));
    if (misused) {
      // Only what works is suggested (task hnu42b item 2), and only what happens (task hnu43 item 5):
      // any other aggregate (max, min, sum, string_agg…) takes the column as an input and is refused
      // here like any expression; a plain count(col) is the one aggregate allowed, and its result is an
      // output derived from the column, masked whole (count(email) answers the mask, e.g. '***', not a
      // number: a `full` mask hides nullness, so a count of its non-null values would tell more than
      // the mask); count(*) reads no column. docs/operators.md "Masks".
      const count = named.has(`${misused.schema}.${misused.table}`) ? `count(${misused.column})` : 'a count of it';
      return { ok: false, outcome: { kind: 'refusal', code: 'policy_denied', message: `${shown(misused)} masked by policy: it can only be selected as it is, not used in conditions, expressions, joins, grouping, ordering, set operations, aggregates other than count, or writes; ${count} returns the mask instead of a number, and count(*) counts rows.` } };
    }
    if (a.kind === 'write') {
      // A write must not copy a masked value somewhere it would be read back in clear.
      const read = [...a.reads.flatMap((r) => r.columns.map((column) => ({ schema: r.schema, table: r.table, column }))), ...(a.viewSources ?? [])];
      const copied = read.find((c) => masked.has(key(c)));
      if (copied) return { ok: false, outcome: { kind: 'refusal', code: 'policy_denied', message: `${shown(copied)} masked by policy; a write may not read it.` } };
    } else {
      const plan = planRedaction(a.outputs, masks, { onOpaque: 'mask', unprovable: unprovableMethod });
      if (!plan.ok) return { ok: false, outcome: { kind: 'refusal', code: 'redaction_unprovable', message: plan.message } };
      redaction = plan;
    }
  }
  const maskKey: unknown[] = masks.map((m) => [m.column.schema, m.column.table, m.column.column, m.method]);
  if (a.viewUnprovable && unprovableMethod) maskKey.push(['*', unprovableMethod]);
  const fingerprint = JSON.stringify([verdict.maxRows, maskKey]);
  return { ok: true, restrictions: { maxRows: verdict.maxRows, masks, redaction, fingerprint } };
}
