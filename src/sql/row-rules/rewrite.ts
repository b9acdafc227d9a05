/**
 * The row-rule rewrite (issue 27, docs/row-rules.md): every reference to a row-ruled relation
 * anywhere in a statement's parse tree — FROM and JOIN items, sub-selects, CTE bodies (recursive
 * ones too), LATERAL, set-operation arms, EXISTS and other sub-links, `TABLE t` — is replaced by
 * the relation's row view, keeping the name the agent sees (`FROM t` → `FROM
 * interlock_rows."t_…" AS "t"`).
 *
 * The rewrite edits the agent's own text at the byte spans the parser reports (libpg-query's
 * `location` of each RangeVar, and the scanner's token ends), so nothing else of the statement
 * changes; the result is parsed again and every relation reference re-resolved: a ruled relation
 * that is still referenced fails the rewrite (fail closed).
 *
 * An unqualified name that is both a CTE's name somewhere in the statement and a ruled relation is
 * refused (`cte_shadow`): which one it means depends on scope, and guessing wrong would skip a rule.
 * A ruled relation sampled with TABLESAMPLE is refused (`tablesample`): PostgreSQL samples tables
 * only, never a view, and sampling the base table before the rule's filter would need the rule
 * written into the agent's statement instead of a view (task hnu43 item 3).
 */
import { scanSync } from 'libpg-query';
import { parseSql } from '../parser';
import { quoteIdent } from './predicate';

/** The schema of the row views InterLock manages on a source. */
export const ROW_VIEW_SCHEMA = 'interlock_rows';

/** A relation reference as written: optional schema, name, and whether descendants are included (false for ONLY). */
export interface RelationReference {
  schema: string | null;
  name: string;
  inh: boolean;
}

/**
 * Decides one reference: the view name (in ROW_VIEW_SCHEMA) to use instead, or null when the
 * relation is not ruled. `target` is true for the bare relation an INSERT, UPDATE, DELETE or MERGE
 * writes (issue 27: its view is the check-option one), false for every other reference.
 */
export type RowViewResolver = (ref: RelationReference, target: boolean) => string | null;

/** Why a statement cannot be rewritten: a name that is both a CTE and a ruled relation, or a reference the rewrite could not place. */
export class RowRewriteRefusal extends Error {
  constructor(readonly reason: 'cte_shadow' | 'unplaced_reference' | 'tablesample', message: string) {
    super(message);
  }
}

interface Found {
  node: Record<string, unknown>;
  /** True for the bare relation of INSERT/UPDATE/DELETE/MERGE (no RangeVar wrapper). */
  target: boolean;
  /** True for the relation of `… TABLESAMPLE …` (a RangeTableSample's relation). */
  sampled?: true;
}

const TARGET_OWNERS = new Set(['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt']);

/** Every relation reference of a parse tree, and every CTE name defined anywhere in it. */
function collect(tree: unknown): { refs: Found[]; ctes: Set<string> } {
  const refs: Found[] = [];
  const ctes = new Set<string>();
  const sampled = new Set<unknown>();
  const walk = (n: unknown, key: string | null): void => {
    if (Array.isArray(n)) {
      for (const x of n) walk(x, null);
      return;
    }
    if (!n || typeof n !== 'object') return;
    for (const [k, v] of Object.entries(n as Record<string, unknown>)) {
      if (k === 'RangeTableSample') sampled.add((v as { relation?: { RangeVar?: unknown } }).relation?.RangeVar);
      if (k === 'RangeVar') refs.push({ node: v as Record<string, unknown>, target: false, ...(sampled.has(v) ? { sampled: true as const } : {}) });
      else if (k === 'CommonTableExpr') ctes.add(String((v as { ctename?: string }).ctename));
      else if (k === 'relation' && key !== null && TARGET_OWNERS.has(key)) refs.push({ node: v as Record<string, unknown>, target: true });
      walk(v, k);
    }
  };
  walk(tree, null);
  return { refs, ctes };
}

function reference(node: Record<string, unknown>): RelationReference {
  return { schema: typeof node.schemaname === 'string' ? node.schemaname : null, name: String(node.relname), inh: node.inh === true };
}

/**
 * Rewrites `sql` so that every reference the resolver names a view for reads that view instead.
 * Returns the new text and how many references were replaced (0: `sql` unchanged). Throws
 * RowRewriteRefusal (see its reasons) and the
 * parser's SqlParseFailure for text that does not parse. Requires initSqlParser().
 */
export function rewriteRowRules(sql: string, resolve: RowViewResolver): { sql: string; replaced: number } {
  const { refs, ctes } = collect(parseSql(sql));
  const edits: Array<{ start: number; end: number; text: string }> = [];
  let tokens: ReturnType<typeof scanSync>['tokens'] | null = null;
  const bytes = Buffer.from(sql, 'utf8');
  for (const { node, target, sampled } of refs) {
    const ref = reference(node);
    const view = resolve(ref, target);
    if (view === null) continue;
    // A row view is a view: PostgreSQL samples only tables and materialized views (0A000 "TABLESAMPLE
    // clause can only be applied to tables and materialized views"), so refuse before running (task hnu43 item 3).
    if (sampled) {
      throw new RowRewriteRefusal('tablesample', `TABLESAMPLE on ${ref.schema === null ? '' : `${quoteIdent(ref.schema)}.`}${quoteIdent(ref.name)}, a table with a row rule for this identity: a row rule reads the table through a view, which PostgreSQL cannot sample`);
    }
    if (ref.schema === null && ctes.has(ref.name)) {
      throw new RowRewriteRefusal('cte_shadow', `the name ${quoteIdent(ref.name)} is both a CTE of the statement and a row-ruled table`);
    }
    tokens ??= scanSync(sql).tokens;
    const at = Number(node.location);
    const first = tokens.findIndex((t) => t.start === at);
    const parts = 1 + (ref.schema === null ? 0 : 1) + (typeof node.catalogname === 'string' ? 1 : 0);
    const last = first + 2 * (parts - 1);
    if (first < 0 || last >= tokens.length || tokens.slice(first, last + 1).some((t, i) => (i % 2 === 1) !== (t.text === '.'))) {
      throw new RowRewriteRefusal('unplaced_reference', 'a reference to a row-ruled table could not be placed in the text');
    }
    const prev = first > 0 ? tokens[first - 1] : null;
    // `TABLE t` takes no alias (the scanner names reserved keywords' tokens UNKNOWN: compare the text).
    const bareTable = prev !== null && prev.text.toUpperCase() === 'TABLE' && !('alias' in node);
    const alias = 'alias' in node || bareTable ? '' : ` AS ${quoteIdent(ref.name)}`;
    edits.push({ start: at, end: tokens[last].end, text: `${ROW_VIEW_SCHEMA}.${quoteIdent(view)}${alias}` });
  }
  if (edits.length === 0) return { sql, replaced: 0 };
  edits.sort((a, b) => b.start - a.start);
  let out = bytes;
  for (const e of edits) out = Buffer.concat([out.subarray(0, e.start), Buffer.from(e.text, 'utf8'), out.subarray(e.end)]);
  const rewritten = out.toString('utf8');
  // Verify on the new text: no ruled relation is referenced any more, and every view is there.
  let again;
  try {
    again = collect(parseSql(rewritten));
  } catch {
    throw new RowRewriteRefusal('unplaced_reference', 'the rewritten statement does not parse');
  }
  let views = 0;
  for (const { node, target } of again.refs) {
    const ref = reference(node);
    if (ref.schema === ROW_VIEW_SCHEMA) views++;
    else if (resolve(ref, target) !== null) throw new RowRewriteRefusal('unplaced_reference', 'a reference to a row-ruled table survived the rewrite');
  }
  if (views !== edits.length) throw new RowRewriteRefusal('unplaced_reference', 'the rewritten statement does not reference every row view');
  return { sql: rewritten, replaced: edits.length };
}
