/**
 * The function policy's decision per built-in function name (issue 12, Build 3): the rules of
 * rules.ts applied to every pg_proc row of the snapshots (PostgreSQL 15, 16, 17 and 18,
 * pg-proc.json), folded per `schema.name` because the analyser does not resolve overloads.
 *
 * Folding: a name is refused when any of its overloads is refused, except the reviewed
 * `MIXED_ALLOWED` names whose refused overloads take only types an agent cannot produce (see there).
 * Otherwise it is `resource_checked` when any overload is, else `allowed`. A name absent from every
 * snapshot (a function of a newer PostgreSQL) has no decision and the analyser refuses it.
 */
import { classifyRow, type FunctionClass } from './rules';
import { expandSnapshots, type ProcRow, type ProcSnapshot, type ProcSnapshotFile } from './snapshot';
import PG_PROC from './pg-proc.json';

/** The decision for one built-in `schema.name`. `rule` is the id of the rule that decided it. */
export interface BuiltinDecision {
  class: FunctionClass;
  rule: string;
  /** Agent-facing reason for refusals (completes "function X is not allowed: it …"). */
  reason: string;
}

/**
 * Names allowed although some overloads are refused, each with why the refused overloads cannot
 * be reached or are guarded:
 * - `age(xid)` needs a value of type `xid`: casts to `xid` are refused (function-policy.ts
 *   `deniedTypeReason`), every function returning one is refused, no implicit cast leads to `xid`,
 *   system columns (`xmin`) are unknown columns, and `age('…')` or `age($1)` is ambiguous in
 *   PostgreSQL (the timestamp overloads compete), so only the timestamp overloads can run.
 * - `int8(oid)`, `min`/`max` over `oid`, `tid`, `xid8`, `pg_lsn`: they compute on a value the
 *   statement already holds and look nothing up; values of those types cannot be produced (casts
 *   and producing functions are refused) except from a granted column.
 * - The text-search functions with a `regconfig` first argument look a configuration up by name:
 *   the analyser accepts that form only with a constant built-in configuration name
 *   (`regconfigCallReason`), so nothing is probed.
 */
export const MIXED_ALLOWED: ReadonlyMap<string, string> = new Map([
  ['pg_catalog.age', 'the xid overload needs an xid value, which agent SQL cannot produce (casts to xid and functions returning one are refused) except by reading a granted column of type xid'],
  ['pg_catalog.int8', 'the oid overload converts a number and looks nothing up'],
  ['pg_catalog.max', 'aggregates over values the statement already holds'],
  ['pg_catalog.min', 'aggregates over values the statement already holds'],
  ...['to_tsvector', 'to_tsquery', 'plainto_tsquery', 'phraseto_tsquery', 'websearch_to_tsquery', 'ts_headline', 'json_to_tsvector', 'jsonb_to_tsvector'].map(
    (n) => ['pg_catalog.' + n, 'the regconfig form is accepted only with a constant built-in configuration name'] as [string, string],
  ),
]);

/** The text-search configurations every PostgreSQL 15–18 server has in `pg_catalog`. */
export const BUILTIN_TS_CONFIGS: ReadonlySet<string> = new Set(
  'simple arabic armenian basque catalan danish dutch english finnish french german greek hindi hungarian indonesian irish italian lithuanian nepali norwegian portuguese romanian russian serbian spanish swedish tamil turkish yiddish'.split(' '),
);

/** The snapshots the policy covers. */
export function loadSnapshots(): ProcSnapshot[] {
  snapshots ??= expandSnapshots(PG_PROC as unknown as ProcSnapshotFile);
  return snapshots;
}
let snapshots: ProcSnapshot[] | null = null;

/** Rows that no rule classifies (the tests require none). */
export function unclassifiedRows(snapshots: ProcSnapshot[]): ProcRow[] {
  return snapshots.flatMap((s) => s.rows.filter((r) => classifyRow(r) === null));
}

/** Folds classified rows into one decision per `schema.name` (see the module comment). */
export function foldDecisions(snapshots: ProcSnapshot[]): Map<string, BuiltinDecision> {
  // Distinct rows only: most rows are the same in every version.
  const byName = new Map<string, ProcRow[]>();
  const seen = new Set<string>();
  for (const s of snapshots) {
    for (const r of s.rows) {
      const id = r.join('\u0001');
      if (seen.has(id)) continue;
      seen.add(id);
      const key = r[0] + '.' + r[1];
      const list = byName.get(key);
      if (list) list.push(r);
      else byName.set(key, [r]);
    }
  }
  const out = new Map<string, BuiltinDecision>();
  for (const [key, rows] of byName) {
    let refused: BuiltinDecision | null = null;
    let unclassified = false;
    let checked: BuiltinDecision | null = null;
    let allowed: BuiltinDecision | null = null;
    for (const r of rows) {
      const rule = classifyRow(r);
      if (!rule) {
        unclassified = true;
        continue;
      }
      const d = { class: rule.class, rule: rule.id, reason: rule.reason(r) };
      if (rule.class === 'refused') refused ??= d;
      else if (rule.class === 'resource_checked') checked ??= d;
      else allowed ??= d;
    }
    if (unclassified) continue; // no decision: refused by the analyser, reported by the tests
    if (refused && (!(checked || allowed) || !MIXED_ALLOWED.has(key))) out.set(key, refused);
    else out.set(key, (checked ?? allowed)!);
  }
  return out;
}

let decisions: Map<string, BuiltinDecision> | null = null;
let configArities: Map<string, Set<number>> | null = null;

/**
 * Why a call to the built-in `pg_catalog.name` with `argCount` arguments is refused because of a
 * text-search configuration argument, or null. When some overload of that arity takes a
 * `regconfig` first argument, the first argument must be a constant string naming a built-in
 * configuration (`'english'`, `'pg_catalog.english'`); `firstConstant` is that constant, or null
 * when the first argument is not a string constant. The form looks the name up in the catalogue,
 * so a free name (a parameter, a column) could probe which configurations exist.
 */
export function regconfigCallReason(name: string, argCount: number, firstConstant: string | null): string | null {
  if (!configArities) {
    configArities = new Map();
    for (const snap of loadSnapshots()) {
      for (const r of snap.rows) {
        if (r[0] !== 'pg_catalog' || !r[2].startsWith('regconfig ')) continue;
        const set = configArities.get(r[1]) ?? configArities.set(r[1], new Set()).get(r[1])!;
        set.add(r[2].split(' ').length);
      }
    }
  }
  if (!configArities.get(name)?.has(argCount)) return null;
  const cfg = firstConstant?.toLowerCase().replace(/^pg_catalog\./, '');
  if (cfg !== undefined && BUILTIN_TS_CONFIGS.has(cfg)) return null;
  return 'with a text search configuration that is not a constant built-in name (e.g. \'english\')';
}

/**
 * Why the built-in function `schema.name` is refused (completes "function X is not allowed: it
 * …"), or null when the policy allows it (class `allowed` or `resource_checked`). A function in
 * no snapshot, or unclassified, is refused as not classified.
 */
export function builtinFunctionRefusal(schema: string, name: string): string | null {
  const d = builtinFunctionDecision(schema, name);
  if (!d) return 'is not classified by the function policy (docs/function-policy.md)';
  return d.class === 'refused' ? d.reason : null;
}

/**
 * The policy's decision for a built-in function (`schema` is `pg_catalog` or
 * `information_schema`), or null when the function is in no snapshot or unclassified: callers
 * refuse it. Computed once per process from the snapshots (a few milliseconds).
 */
export function builtinFunctionDecision(schema: string, name: string): BuiltinDecision | null {
  decisions ??= foldDecisions(loadSnapshots());
  return decisions.get(schema + '.' + name) ?? null;
}

/** Schemas whose functions the built-in policy covers. */
export const BUILTIN_SCHEMAS: ReadonlySet<string> = new Set(['pg_catalog', 'information_schema']);
