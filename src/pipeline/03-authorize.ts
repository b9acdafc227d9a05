/**
 * Pipeline step 3, source-role authorization (contract: "source-role authorization"; decisions.md:
 * deny wins): every relation and every column the parsed statement touches, with the action it
 * needs, is decided by the AccessEvaluator. A relation or column missing from the catalog is
 * answered exactly like a denied one, so refusals never reveal what exists.
 */
import type { SqlAnalysis } from '../sql/analyze';
import type { SourceCatalog } from '../sql/catalog-types';
import type { AccessEvaluator, Action } from '../governance/evaluator';
import { decideInHierarchy } from '../governance/hierarchy';
import { catalogHierarchy, type RelationHierarchy } from '../sql/hierarchy';
import type { RelationName } from '../sql/catalog-types';
import { isViewRelation, viewLineage } from '../sql/view-lineage';
import { referentialReach } from '../sql/referential-reach';
import { scanSql, type SqlToken } from '../sql/parser';
import type { FunctionRead } from '../sql/types';
import type { ToolOutcome } from './types';

type OkAnalysis = Extract<SqlAnalysis, { ok: true }>;

/**
 * The one text for every relation or column the caller may not use, whether it is denied, not
 * granted or does not exist: naming the relation or column, or wording the cases differently, would
 * let a caller probe what exists. It says what to do about the most common case, `SELECT *` over a
 * table with one denied column (issue 24 item 6): name the columns, found with describe_access.
 * A statement without a star gets DENIED_MESSAGE_NO_STAR instead, and a read refused by a deny
 * statement naming the column gets namedDenyMessage (task hnu41 item 2).
 */
export const DENIED_MESSAGE =
  'The statement uses a relation or column that no source role granted to this identity allows, or that does not exist. SELECT * (and table.*) reads every column, denied ones included: name the columns you need instead. Call interlock_describe_access for the tables and columns you may use.';

/**
 * DENIED_MESSAGE for a statement without `*` or `table.*` (task hnu41 item 2): the star advice misled
 * an agent whose statement had none, and for a caller whose roles deny no read (task fx45 item 4).
 * Chosen by the statement's text and the caller's own roles only (deniedText), never by what exists,
 * so a missing and an ungranted column still answer alike.
 */
export const DENIED_MESSAGE_NO_STAR =
  'The statement uses a relation or column that no source role granted to this identity allows, or that does not exist. Call interlock_describe_access for the tables and columns you may use.';

/**
 * True when `sql` selects `*` or `table.*` (a star token right after SELECT, DISTINCT, ALL,
 * RETURNING, `,` or `.`), by the parser's own scanner, so a `*` in a string, a comment, count(*) or
 * a multiplication does not count (`DISTINCT ON (a) *` is missed). Only chooses refusal prose; false
 * when the text cannot be lexed.
 */
export function selectsStar(sql: string): boolean {
  let tokens: SqlToken[];
  try {
    tokens = scanSql(sql);
  } catch {
    return false;
  }
  for (let i = 1; i < tokens.length; i++) {
    if (tokens[i].text !== '*') continue;
    const prev = tokens[i - 1].text.toUpperCase();
    if (prev === 'SELECT' || prev === 'DISTINCT' || prev === 'ALL' || prev === 'RETURNING' || prev === ',' || prev === '.') return true;
  }
  return false;
}

/**
 * The common refusal text for `sql` (undefined: not known, the star advice kept): DENIED_MESSAGE when
 * it selects a star and `anyReadDeny` (the caller's roles deny some read on the source:
 * AccessEvaluator.hasReadDeny, which describe_access already shows), else DENIED_MESSAGE_NO_STAR.
 * Without any read deny a star cannot be what is refused, so a typo'd table (`SELECT * FROM
 * artists`) gets the unknown-relation answer without the star advice (task fx45 item 4). Both
 * inputs are the statement's text and the caller's own roles, never what exists, so a missing and an
 * ungranted relation still answer alike.
 */
export function deniedText(sql: string | undefined, anyReadDeny = true): string {
  return sql === undefined || (anyReadDeny && selectsStar(sql)) ? DENIED_MESSAGE : DENIED_MESSAGE_NO_STAR;
}

/**
 * The refusal of a read that the caller's own deny statements refuse by name (task hnu41 item 2):
 * `named` are those statements' resources (`public.employee.ssn`, or `public.salary` for a whole
 * relation), exactly as interlock_describe_access lists them under `deny`, so the text discloses
 * nothing beyond that tool. `rest`: the statement also uses something else it may not (ungranted,
 * denied by a wildcard, or missing), which stays unnamed. `star`: the statement selects a star.
 */
export function namedDenyMessage(named: string[], rest: boolean, star: boolean): string {
  const list = named.length === 1 ? named[0] : `${named.slice(0, -1).join(', ')} and ${named[named.length - 1]}`;
  return (
    `The source roles granted to this identity deny reading ${list}, which this statement uses (in its select list, WHERE, JOIN, ORDER BY or elsewhere): remove ${named.length === 1 ? 'it' : 'them'} from the statement.` +
    (rest ? ' It also uses a relation or column that no source role granted to this identity allows, or that does not exist.' : '') +
    (star ? ' SELECT * (and table.*) reads every column, denied ones included: name the columns you need instead.' : '') +
    ' Call interlock_describe_access for the tables and columns you may use.'
  );
}

/**
 * The refusal of a write to a relation the caller may read (task hnu4b item d): the relation is
 * already visible to it (interlock_describe_access lists it), so naming it reveals nothing, and the
 * read-oriented DENIED_MESSAGE ("does not exist", SELECT *) would mislead. `column`: undefined when
 * the table's write is refused, else the refused column, which the caller may read. A relation or
 * column it may not read keeps DENIED_MESSAGE.
 */
export function writeDeniedMessage(relation: string, column?: string): string {
  const what = column === undefined ? relation : `column ${column} of ${relation}`;
  return `No source role granted to this identity allows writing ${what} (its roles let it read that table, not make this write). Ask an operator for a role that allows the write; interlock_describe_access lists what your roles allow and deny.`;
}

/**
 * The refusal of a write whose foreign keys' referential actions would write a relation the caller
 * may not write. It does not name the relation (the caller may not be allowed to know it exists),
 * only that a referential action reaches it, so the agent can explain and the operator can grant it.
 */
export const CASCADE_DENIED_MESSAGE =
  "This write would also write rows of another relation through a foreign key's referential action (ON DELETE or ON UPDATE CASCADE, SET NULL or SET DEFAULT), and no source role granted to this identity allows writing that relation. Ask an operator to grant the write on the referencing table too, or change the statement.";

/**
 * The refusal of a write that fires a user rewrite rule (CREATE RULE … DO ALSO / DO INSTEAD) on a
 * relation it writes: the rule's actions run with the privileges of the rule's table owner and write
 * relations that no catalogue fact names, so InterLock cannot decide what the write reaches.
 */
export const RULE_DENIED_MESSAGE =
  'This write fires a rewrite rule (CREATE RULE) on a relation it writes; PostgreSQL runs the rule with its table owner\'s privileges and it may write relations InterLock cannot check, so writes through rules are refused. Write the underlying table directly, or ask the database owner to replace the rule with a trigger.';

/**
 * Maps an analyzer refusal to the tool outcome of spec/errors-v1.json; `sql` (the statement) and
 * `anyReadDeny` (the caller's roles deny some read on the source) choose the denial's text (deniedText).
 */
export function analysisRefusal(a: Extract<SqlAnalysis, { ok: false }>, sql?: string, anyReadDeny = true): ToolOutcome {
  switch (a.code) {
    case 'invalid_sql':
      return { kind: 'tool_error', code: 'invalid_sql', message: a.message };
    case 'statement_not_allowed':
      return { kind: 'refusal', code: 'statement_not_allowed', message: a.message };
    case 'function_not_allowed':
      return { kind: 'refusal', code: 'function_not_allowed', message: a.message };
    case 'statement_too_complex':
      return { kind: 'refusal', code: 'statement_too_complex', message: a.message };
    default:
      // unknown_relation / unknown_column: answered exactly like a denial (same code, same text).
      return { kind: 'refusal', code: 'source_role_denied', message: deniedText(sql, anyReadDeny) };
  }
}

const columnIndex = new WeakMap<SourceCatalog, Map<string, string[]>>();

/** Columns of a relation per the catalog ([] when unknown). Indexed once per catalog snapshot. */
export function catalogColumns(catalog: SourceCatalog, schema: string, table: string): string[] {
  let idx = columnIndex.get(catalog);
  if (!idx) {
    idx = new Map(catalog.relations.map((r) => [`${r.schema}\u0000${r.name}`, r.columns.map((c) => c.name)]));
    columnIndex.set(catalog, idx);
  }
  return idx.get(`${schema}\u0000${table}`) ?? [];
}

/** The action-resource checks a statement needs: reads of columns (or of the table) and writes of tables and columns. */
export function requiredChecks(a: OkAnalysis): Array<{ action: Action; schema: string; table: string; column?: string }> {
  const out: Array<{ action: Action; schema: string; table: string; column?: string }> = [];
  for (const r of a.reads) {
    if (r.columns.length === 0) out.push({ action: 'read', schema: r.schema, table: r.table });
    for (const c of r.columns) out.push({ action: 'read', schema: r.schema, table: r.table, column: c });
  }
  for (const w of a.writes) {
    out.push({ action: 'write', schema: w.schema, table: w.table });
    for (const c of w.columns) out.push({ action: 'write', schema: w.schema, table: w.table, column: c });
  }
  return out;
}

/**
 * Runs the step: null when every check is allowed, else the source_role_denied refusal.
 * Each relation is decided with its ancestors and descendants in `hierarchy` (default: the
 * catalogue's; issue 22 item 1, src/governance/hierarchy.ts): a deny on any of them wins, an allow
 * on the relation or an ancestor grants. `sql`, the statement's text, chooses the refusal's prose
 * (deniedText, readRefusalText: task hnu41 item 2); without it the star advice is kept.
 */
export function authorizeStatement(evaluator: AccessEvaluator, sourceId: string, a: OkAnalysis, catalog: SourceCatalog, hierarchy: RelationHierarchy = catalogHierarchy(catalog), sql?: string): ToolOutcome | null {
  const checks = requiredChecks(a);
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i];
    const d = decideInHierarchy(evaluator, sourceId, c.action, c, hierarchy, c.column === undefined && c.action === 'read' ? catalogColumns(catalog, c.schema, c.table) : []);
    if (d === 'allow') continue;
    if (c.action === 'write') return { kind: 'refusal', code: 'source_role_denied', message: writeRefusalText(evaluator, sourceId, c, a, catalog, hierarchy, sql) };
    return { kind: 'refusal', code: 'source_role_denied', message: readRefusalText(evaluator, sourceId, checks.slice(i), catalog, hierarchy, sql) };
  }
  // Views (issue 12; rt1 RT1-3): what feeds the views read (viewLineageDenied). deniedText lexes the
  // statement only on this refusal's path.
  if (viewLineageDenied(evaluator, sourceId, a, catalog, hierarchy)) return { kind: 'refusal', code: 'source_role_denied', message: deniedText(sql, evaluator.hasReadDeny(sourceId)) };
  const fn = authorizeFunctionReads(evaluator, sourceId, a, catalog, hierarchy);
  if (fn) return fn;
  return a.writes.length ? authorizeReferentialWrites(evaluator, sourceId, a, catalog, hierarchy) : null;
}

/**
 * True when what feeds the views a statement reads is denied to the caller (issue 12; rt1 RT1-3).
 * Reading a view needs a grant on the view only, but an explicit read deny on a column or table
 * behind a used view column (`a.viewSources`) applies; a view's rows come from every relation its
 * stored query reads, used columns or not (a count(*) through it counts them), so a table-level
 * read deny on one of them (the server's lineage, src/sql/view-lineage.ts; unrecorded lineage
 * leaves the check to the columns), or on a descendant, applies too; and unprovable lineage fails
 * closed for a caller with any read deny. Each relation is decided across `hierarchy`.
 * authorizeStatement refuses such a read with `source_role_denied`; the describe tools
 * (src/tools/handlers/describe.ts, red team rt40) hide a view column whose one-column read is denied here.
 */
export function viewLineageDenied(evaluator: AccessEvaluator, sourceId: string, a: OkAnalysis, catalog: SourceCatalog, hierarchy: RelationHierarchy): boolean {
  for (const c of a.viewSources ?? []) {
    if (decideInHierarchy(evaluator, sourceId, 'read', { schema: c.schema, table: c.table, column: c.column }, hierarchy) === 'deny') return true;
  }
  for (const b of viewBases(a, catalog)) {
    if (decideInHierarchy(evaluator, sourceId, 'read', { schema: b.schema, table: b.name }, hierarchy) === 'deny') return true;
  }
  return a.viewUnprovable && evaluator.hasReadDeny(sourceId);
}

/**
 * The text of a refused read (task hnu41 item 2): `checks` start at the first refused check; every
 * refused read among them whose refusal a deny statement naming it decides (AccessEvaluator.denyNaming,
 * on the relation or an ancestor the caller may describe: shownAncestors) is named by that statement's resource, which describe_access lists;
 * anything refused otherwise (not granted, a wildcard deny: naming it would tell an existing column
 * from a missing one) stays unnamed. Nothing named: the common text (deniedText).
 */
function readRefusalText(evaluator: AccessEvaluator, sourceId: string, checks: Array<{ action: Action; schema: string; table: string; column?: string }>, catalog: SourceCatalog, hierarchy: RelationHierarchy, sql: string | undefined): string {
  const named = new Set<string>();
  let rest = false;
  for (const c of checks) {
    if (c.action !== 'read') continue;
    const d = decideInHierarchy(evaluator, sourceId, 'read', c, hierarchy, c.column === undefined ? catalogColumns(catalog, c.schema, c.table) : []);
    if (d === 'allow') continue;
    const by = d === 'deny' ? [{ schema: c.schema, name: c.table }, ...shownAncestors(evaluator, sourceId, c, catalog, hierarchy)].map((t) => evaluator.denyNaming(sourceId, 'read', { schema: t.schema, table: t.name, ...(c.column !== undefined ? { column: c.column } : {}) })).find((x) => x !== null) : undefined;
    if (by) named.add(by);
    else rest = true;
  }
  return named.size ? namedDenyMessage([...named].sort(), rest, sql !== undefined && selectsStar(sql)) : deniedText(sql, evaluator.hasReadDeny(sourceId));
}

/**
 * The ancestors of `c`'s relation, nearest first, up to (not including) the first one the caller may
 * not describe (no column of it describable): those describe_source shows as partition_of/inherits
 * links (rt1 RT1-5). A refusal naming a deny on an ancestor past that point would tell the caller
 * that the relation it reads descends from one describe hides from it (red team rt41a, low).
 */
function shownAncestors(evaluator: AccessEvaluator, sourceId: string, c: { schema: string; table: string }, catalog: SourceCatalog, hierarchy: RelationHierarchy): RelationName[] {
  const shown: RelationName[] = [];
  for (const t of hierarchy.ancestors(c.schema, c.table)) {
    if (!catalogColumns(catalog, t.schema, t.name).some((column) => decideInHierarchy(evaluator, sourceId, 'describe', { schema: t.schema, table: t.name, column }, hierarchy) === 'allow')) break;
    shown.push(t);
  }
  return shown;
}

/**
 * The text of a refused write check `c`: writeDeniedMessage when the caller may read some column of
 * the relation (so it is visible) and every column the statement sets on it (a DELETE sets none),
 * else the common text (deniedText: with or without the star advice, by `sql` alone).
 * A column it may not read keeps the common text (red team rtn4 item 5): the write text for an
 * existing hidden column against DENIED_MESSAGE ("or that does not exist") for a missing one told
 * the caller which hidden columns exist.
 */
function writeRefusalText(evaluator: AccessEvaluator, sourceId: string, c: { schema: string; table: string; column?: string }, a: OkAnalysis, catalog: SourceCatalog, hierarchy: RelationHierarchy, sql: string | undefined): string {
  const readable = (column: string) => decideInHierarchy(evaluator, sourceId, 'read', { schema: c.schema, table: c.table, column }, hierarchy) === 'allow';
  if (!catalogColumns(catalog, c.schema, c.table).some(readable)) return deniedText(sql, evaluator.hasReadDeny(sourceId));
  const written = a.writes.filter((w) => w.schema === c.schema && w.table === c.table && w.operation !== 'delete').flatMap((w) => w.columns);
  if (!written.every(readable) || (c.column !== undefined && !readable(c.column))) return deniedText(sql, evaluator.hasReadDeny(sourceId));
  return writeDeniedMessage(`${c.schema}.${c.table}`, c.column);
}

/**
 * What a write's foreign keys write beyond its targets must be writable by the caller too: PostgreSQL
 * runs `ON DELETE CASCADE`, `SET NULL`, `SET DEFAULT` and `ON UPDATE CASCADE` as the table's owner,
 * whatever the writer may write, so a role that may delete from `invoice` but not from
 * `invoice_line` would otherwise delete invoice lines through the key. Each relation reached
 * (transitively, src/sql/referential-reach.ts, descendants included) is decided like a write
 * target: the table, and each key column an update action writes; a deny or no allow refuses with
 * `source_role_denied` and CASCADE_DENIED_MESSAGE. User triggers and rules are not followed (what
 * they write is code, not a catalogue fact); the keys of a relation that has them are. Triggers run
 * as the invoking writer role under its own privileges, so they are left to PostgreSQL; a rule's
 * actions run with the privileges of its table's owner, like a referential action, so a write that
 * fires a user rule on any relation it writes is refused with RULE_DENIED_MESSAGE (red team rtfk
 * finding 5, test/integration/sql/referential-redteam.test.ts). The keys are the last scan's here; at approval
 * src/approvals/execute.ts passes a catalogue with the keys read live (rtfk finding 1). A catalogue snapshot that predates
 * the foreign-key records (`referencedBy` absent) ends the walk at that relation until the source is
 * rescanned; a reached relation the catalogue lacks altogether refuses. A caller with row rules is refused all three cases in src/pipeline/row-rules.ts.
 */
export function authorizeReferentialWrites(evaluator: AccessEvaluator, sourceId: string, a: OkAnalysis, catalog: SourceCatalog, hierarchy: RelationHierarchy): ToolOutcome | null {
  const reach = referentialReach(catalog, hierarchy, a.writes, { pastHooks: true });
  // A rule's actions run as its table's owner, like a referential action, but what they write is a
  // query, not a key the catalogue records: refused for every caller (rtfk finding 5).
  if (reach.rules) return { kind: 'refusal', code: 'source_role_denied', message: RULE_DENIED_MESSAGE };
  for (const r of reach.reached) {
    // A relation the catalogue lacks (created since the scan; approval passes the keys read live)
    // ends the walk there, so what it reaches is unknown: refused (rtfk finding 6). A reached
    // relation holds the key's columns, so no columns recorded means not catalogued.
    if (catalogColumns(catalog, r.schema, r.name).length === 0) return { kind: 'refusal', code: 'source_role_denied', message: CASCADE_DENIED_MESSAGE };
    const checks: Array<{ schema: string; table: string; column?: string }> = [{ schema: r.schema, table: r.name }, ...r.columns.map((column) => ({ schema: r.schema, table: r.name, column }))];
    for (const c of checks) {
      if (decideInHierarchy(evaluator, sourceId, 'write', c, hierarchy) !== 'allow') {
        return { kind: 'refusal', code: 'source_role_denied', message: CASCADE_DENIED_MESSAGE };
      }
    }
  }
  return null;
}

/** How a refusal names a function the statement runs: `function s.f`, or `operator s.op (function s.f)`. */
export function functionLabel(f: FunctionRead): string {
  return f.operator !== undefined ? `operator ${f.operator} (function ${f.schema}.${f.name})` : `function ${f.schema}.${f.name}`;
}

/**
 * The refusal of a call of a user function that may read what the caller may not (task hfn).
 * `column`: the refused column when the caller may describe it (so naming it discloses nothing);
 * its table alone (no `column`) when the caller may describe some column of that table but not the
 * refused one; else undefined and the text names no relation or column (refusals never disclose
 * what exists).
 * InterLock knows the relations a function's body reads, not its columns (src/sql/function-reads.ts:
 * every column of each counts as read), so a named column is one of that table the caller may not
 * read, which the body need not use: the text says so (task hnu43 item 4: "reads column ssn" of a
 * body that selects only email misled a new user).
 */
export function functionDeniedMessage(f: FunctionRead, column?: { schema: string; table: string; column?: string }): string {
  if (column === undefined) return `The ${functionLabel(f)} reads a relation or column that no source role granted to this identity allows reading. ${FUNCTION_DENIED_TAIL}`;
  const table = `${column.schema}.${column.table}`;
  const which = column.column !== undefined ? `no source role granted to this identity allows reading column ${table}.${column.column} (the body need not use it)` : 'a column of it is one no source role granted to this identity allows reading';
  return `The ${functionLabel(f)} reads table ${table}. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and ${which}. ${FUNCTION_DENIED_TAIL}`;
}

/** The end of functionDeniedMessage's texts. */
const FUNCTION_DENIED_TAIL = "A function's result cannot be masked or checked column by column, so the call is refused. Read the columns you may use directly (interlock_describe_access lists them), or ask an operator.";

/**
 * Step 3 for the user functions a statement runs (task hfn; `SqlAnalysisOk.functionReads`): every
 * column of every relation each function's body may read must be readable by the caller, as if the
 * statement read it (deny wins, hierarchy included); else `source_role_denied` with
 * functionDeniedMessage, naming the function, and the column when the caller may describe it.
 * Opaque functions (body not analysable) are refused or trusted per source by `untrustedFunction`,
 * which is not cached with the analysis.
 */
export function authorizeFunctionReads(evaluator: AccessEvaluator, sourceId: string, a: OkAnalysis, catalog: SourceCatalog, hierarchy: RelationHierarchy): ToolOutcome | null {
  for (const f of a.functionReads ?? []) {
    for (const r of f.relations) {
      const cols = catalogColumns(catalog, r.schema, r.table);
      const checks: Array<{ schema: string; table: string; column?: string }> = cols.length ? cols.map((column) => ({ schema: r.schema, table: r.table, column })) : [{ schema: r.schema, table: r.table }];
      for (const c of checks) {
        if (decideInHierarchy(evaluator, sourceId, 'read', c, hierarchy, c.column === undefined ? cols : []) === 'allow') continue;
        const describable = c.column !== undefined && decideInHierarchy(evaluator, sourceId, 'describe', c, hierarchy) === 'allow';
        // A hidden column is not named; its table is when describe shows the caller some column of it (task hnu43 item 4).
        const tableShown = !describable && cols.some((column) => decideInHierarchy(evaluator, sourceId, 'describe', { schema: r.schema, table: r.table, column }, hierarchy) === 'allow');
        return { kind: 'refusal', code: 'source_role_denied', message: functionDeniedMessage(f, describable ? { schema: c.schema, table: c.table, column: c.column! } : tableShown ? { schema: r.schema, table: r.table } : undefined) };
      }
    }
  }
  return null;
}

/** A column `schema.table.column` (what a refusal may name). */
export interface ColumnName {
  schema: string;
  table: string;
  column: string;
}

/**
 * Whether the caller (`evaluator`, source `sourceId`) may describe a column, in the catalogue's
 * hierarchy (as authorizeFunctionReads decides it): what step 4 (policyStep) asks before naming a
 * masked column in a refusal (red team rt41b F8). The hierarchy is built on the first question.
 */
export function describesColumn(evaluator: AccessEvaluator, sourceId: string, catalog: SourceCatalog): (c: ColumnName) => boolean {
  let hierarchy: RelationHierarchy | null = null;
  return (c) => decideInHierarchy(evaluator, sourceId, 'describe', c, (hierarchy ??= catalogHierarchy(catalog))) === 'allow';
}

/**
 * Task hfn: a user function whose body InterLock cannot analyse (`FunctionRead.opaque`: another
 * language than SQL, an unparsable body, an unknown relation, …) may read anything, so the call is
 * refused `function_not_allowed` unless the source's `trusted_functions` names it ("schema.name",
 * the function the statement runs; docs/operators.md). Not cached with the analysis: the source's
 * settings may change without a rescan: src/pipeline/query.ts calls it after the cached step, and
 * src/approvals/execute.ts again before an approved write runs. Returns the refusal, or null.
 */
export function untrustedFunction(analysis: OkAnalysis, trusted: unknown): ToolOutcome | null {
  const list = Array.isArray(trusted) ? (trusted as unknown[]) : [];
  for (const f of analysis.functionReads ?? []) {
    if (f.opaque === undefined || list.includes(`${f.schema}.${f.name}`)) continue;
    return { kind: 'refusal', code: 'function_not_allowed', message: `The ${functionLabel(f)} ${f.opaque}, so InterLock cannot tell what it reads; it is refused unless an operator lists it in the source's trusted_functions.` };
  }
  return null;
}

/** The base relations behind the views a statement reads, as the catalogue records their lineage (each once). */
export function viewBases(a: OkAnalysis, catalog: SourceCatalog): RelationName[] {
  const out = new Map<string, RelationName>();
  for (const r of a.reads) {
    if (!isViewRelation(catalog, r.schema, r.table)) continue;
    for (const b of viewLineage(catalog, r.schema, r.table).bases) out.set(`${b.schema}\u0000${b.name}`, b);
  }
  return [...out.values()];
}
