/**
 * The access evaluator: the ONE place that decides what an identity's source roles allow, used both
 * to enforce every request (pipeline step 3) and to answer interlock_describe_access, so the
 * description cannot drift from the decision (contract: interlock_describe_access; decisions.md
 * governance model: statements {effect, action, resource}, deny wins, no grant → no access).
 *
 * Resources of SQL sources are `schema.table` or `schema.table.column`; each part is a name or `*`.
 * A two-part pattern covers the table and all its columns; a three-part pattern covers columns only.
 * A one-part resource is a document category path (decideOpaque); on a SQL source it is never
 * meaningful and is refused when written (src/control/catalog-names.ts refuseOnePartSqlResources),
 * but one already stored fails closed (red team rtn4 item 4b): a one-part *deny* covers every
 * relation and every column of that name, in any schema (as `*.name` and `*.*.name` together), and
 * every relation and column of a schema of that name (`name.*`: what a one-part name means in the
 * policy engine; red team rt39); a one-part *allow* covers nothing.
 * read and write imply describe of the same resource (an agent cannot write correct SQL otherwise,
 * and could learn the names by reading) where the caller may read or write it — not where a deny of
 * that action wins, so a `deny read` column is not described to a caller who may only read the table
 * (task hfix item 3: describe_source lists only what a read or write would allow, as describe_access
 * does; contract: "nothing the caller cannot read is named"). Only a describe (or `*`) allow naming
 * that column itself still describes it (`public.employee.ssn`; a wildcard such as `public.*` does
 * not: task hnu41 item 1, describesExplicitly), and a describe (or `*`) deny still wins over everything.
 */
import type { RoleStatement, SourceRole } from '../../generated/role-v1';

/** The actions of the governance model. */
export type Action = 'read' | 'write' | 'describe' | 'discover' | 'request';

/** One role granted to the identity on one source. */
export interface RoleGrant {
  sourceId: string;
  role: SourceRole;
}

/** A relation or a column of a SQL source. Names are compared exactly (PostgreSQL folds unquoted names before they get here). */
export interface ResourceRef {
  schema: string;
  table: string;
  column?: string;
}

/** Outcome of one decision: allowed, explicitly denied (a deny statement matched), or not granted. */
export type Decision = 'allow' | 'deny' | 'none';

interface CompiledStatement {
  effect: 'allow' | 'deny';
  action: RoleStatement['action'];
  parts: string[];
  resource: string;
  role: string;
  /** Row rule of an allow (issue 27), as written. */
  rows?: string;
}

function splitPattern(resource: string): string[] {
  return resource === '*' ? ['*', '*'] : resource.split('.');
}

function partMatches(pattern: string, value: string): boolean {
  return pattern === '*' || pattern === value;
}

/** True when `parts` (a compiled pattern of a statement with `effect`) covers the resource (see module doc for table vs column patterns, and one-part resources). */
function covers(parts: string[], r: ResourceRef, effect: 'allow' | 'deny'): boolean {
  if (parts.length === 1) return effect === 'deny' && (r.schema === parts[0] || r.table === parts[0] || r.column === parts[0]);
  if (parts.length === 2) return partMatches(parts[0], r.schema) && partMatches(parts[1], r.table);
  if (parts.length === 3) return r.column !== undefined && partMatches(parts[0], r.schema) && partMatches(parts[1], r.table) && partMatches(parts[2], r.column);
  return false;
}

/** True when `parts` could cover some column of the table (used for zero-column reads such as count(*)). */
function touchesTable(parts: string[], schema: string, table: string): boolean {
  return (parts.length === 2 || parts.length === 3) && partMatches(parts[0], schema) && partMatches(parts[1], table);
}

/** True when a statement of `statementAction` names `action` itself (no implication). */
function namesAction(statementAction: string, action: Action): boolean {
  return statementAction === '*' || statementAction === action;
}

function actionApplies(statementAction: string, action: Action, effect: 'allow' | 'deny'): boolean {
  if (statementAction === '*' || statementAction === action) return true;
  // read/write allows imply describe; denies do not spread across actions.
  return effect === 'allow' && action === 'describe' && (statementAction === 'read' || statementAction === 'write');
}

/**
 * Combines what decides `describe` once no describe (or `*`) deny applies (task hnu41 item 1): a read
 * or write allow implies it; where a read or write deny wins and nothing allows either, only a
 * describe allow naming the resource itself (`explicit`, evaluated lazily) describes it, so a
 * wildcard `allow describe public.*` no longer lists a `deny read` column; otherwise the describe
 * statements' own decision (`own`: allow or none) stands. Shared by AccessEvaluator.decide and the
 * hierarchy's describeInHierarchy (src/governance/hierarchy.ts), so both tools agree.
 */
export function describeOutcome(own: Decision, read: Decision, write: Decision, explicit: () => boolean): Decision {
  if (own === 'deny') return 'deny';
  if (read === 'allow' || write === 'allow') return 'allow';
  if (read === 'deny' || write === 'deny') return explicit() ? 'allow' : 'deny';
  return own;
}

/** A source's granted statements, split into allows and denies (AccessEvaluator.statements). Frozen at run time: a caller that wrote to them would throw (strict mode), never alter the next caller's answer. */
export interface StatementLists {
  allow: Array<{ action: string; resource: string }>;
  deny: Array<{ action: string; resource: string }>;
}

/** Access decisions for one identity over all its grants. Never changes once built; evaluatorFor (src/pipeline/analysis-cache.ts) shares one per grants array. */
export class AccessEvaluator {
  private readonly bySource = new Map<string, CompiledStatement[]>();
  private readonly rolesBySource = new Map<string, SourceRole[]>();
  /**
   * Per-source answers of roleNames, statements, hasReadDeny and hasRowRules, computed on first use
   * (issue 28 item 3: they ran on every interlock_query, a sort and two Maps each time). Safe because
   * an evaluator never changes after construction (evaluatorFor shares one per grants array); the
   * arrays handed out are frozen, so no caller can alter what the next one reads.
   */
  private readonly memo = new Map<string, { roleNames?: string[]; statements?: StatementLists; readDeny?: boolean; rowRules?: boolean }>();

  private memoFor(sourceId: string): { roleNames?: string[]; statements?: StatementLists; readDeny?: boolean; rowRules?: boolean } {
    let m = this.memo.get(sourceId);
    if (!m) {
      m = {};
      this.memo.set(sourceId, m);
    }
    return m;
  }

  constructor(grants: RoleGrant[]) {
    for (const g of grants) {
      const list = this.bySource.get(g.sourceId) ?? [];
      for (const s of g.role.statements) list.push({ effect: s.effect, action: s.action, parts: splitPattern(s.resource), resource: s.resource, role: g.role.name, ...(s.rows !== undefined ? { rows: s.rows } : {}) });
      this.bySource.set(g.sourceId, list);
      const roles = this.rolesBySource.get(g.sourceId) ?? [];
      if (!roles.some((r) => r.name === g.role.name)) roles.push(g.role);
      this.rolesBySource.set(g.sourceId, roles);
    }
  }

  /** True when the identity holds at least one grant on the source. */
  hasGrant(sourceId: string): boolean {
    return this.rolesBySource.has(sourceId);
  }

  /** Source ids the identity holds a grant on. */
  grantedSources(): string[] {
    return [...this.rolesBySource.keys()];
  }

  /** Names of the roles granted on the source, sorted (frozen; computed once per source). */
  roleNames(sourceId: string): string[] {
    const m = this.memoFor(sourceId);
    return (m.roleNames ??= Object.freeze((this.rolesBySource.get(sourceId) ?? []).map((r) => r.name).sort()) as string[]);
  }

  /** Discovery audiences carried by the roles granted on the source. */
  audiences(sourceId: string): string[] {
    const out = new Set<string>();
    for (const r of this.rolesBySource.get(sourceId) ?? []) for (const a of r.audiences ?? []) out.add(a);
    return [...out].sort();
  }

  /** The statements granted on the source, split into allow and deny, as {action, resource} pairs (deduplicated, sorted; frozen, computed once per source). */
  statements(sourceId: string): StatementLists {
    const m = this.memoFor(sourceId);
    return (m.statements ??= this.computeStatements(sourceId));
  }

  private computeStatements(sourceId: string): StatementLists {
    const allow = new Map<string, { action: string; resource: string }>();
    const deny = new Map<string, { action: string; resource: string }>();
    for (const s of this.bySource.get(sourceId) ?? []) (s.effect === 'allow' ? allow : deny).set(`${s.action} ${s.resource}`, { action: s.action, resource: s.resource });
    const sort = (m: Map<string, { action: string; resource: string }>) => Object.freeze([...m.values()].sort((a, b) => (a.action + a.resource).localeCompare(b.action + b.resource)).map((x) => Object.freeze(x))) as Array<{ action: string; resource: string }>;
    return Object.freeze({ allow: sort(allow), deny: sort(deny) });
  }

  /**
   * The allows for `action` (read by default; or *) on the source that cover `schema.table` or any
   * of its columns, each with its row rule text or null (grants every row). Row rules (issue 27,
   * src/governance/row-rules.ts) combine them with OR. Empty when nothing allows reading it.
   * With `column`: only the allows covering that column (a table or wildcard pattern, or a column
   * pattern matching it).
   */
  rowTerms(sourceId: string, schema: string, table: string, action: 'read' | 'write' = 'read', column?: string): Array<{ role: string; resource: string; rows: string | null }> {
    const out: Array<{ role: string; resource: string; rows: string | null }> = [];
    for (const s of this.bySource.get(sourceId) ?? []) {
      if (s.effect !== 'allow' || (s.action !== action && s.action !== '*')) continue;
      if (column === undefined ? !touchesTable(s.parts, schema, table) : !covers(s.parts, { schema, table, column }, s.effect)) continue;
      out.push({ role: s.role, resource: s.resource, rows: s.rows ?? null });
    }
    return out;
  }

  /** True when some allow of the caller's roles on the source carries a row rule (issue 27). */
  hasRowRules(sourceId: string): boolean {
    const m = this.memoFor(sourceId);
    return (m.rowRules ??= (this.bySource.get(sourceId) ?? []).some((s) => s.effect === 'allow' && s.rows !== undefined));
  }

  /** True when any of the caller's roles on the source denies reads (or everything): unprovable lineage is then refused (issue 12). */
  hasReadDeny(sourceId: string): boolean {
    const m = this.memoFor(sourceId);
    return (m.readDeny ??= this.statements(sourceId).deny.some((s) => s.action === 'read' || s.action === '*'));
  }

  /**
   * Decides one action on one resource: deny wins over allow; nothing matching → none. `describe`
   * is decided by its own statements (describe or `*`: a deny wins, an allow grants) and otherwise
   * implied by what a read or write of the resource decides: allow when either is allowed, deny when
   * one is denied and neither allowed, none when neither is granted (see the module doc).
   */
  decide(sourceId: string, action: Action, resource: ResourceRef): Decision {
    if (action !== 'describe') return this.decideNamed(sourceId, action, resource);
    const own = this.decideNamed(sourceId, 'describe', resource);
    if (own === 'deny') return 'deny';
    const read = this.decideNamed(sourceId, 'read', resource);
    const write = this.decideNamed(sourceId, 'write', resource);
    return describeOutcome(own, read, write, () => this.describesExplicitly(sourceId, resource));
  }

  /**
   * True when a describe (or `*`) allow of the caller's roles names the resource itself (task hnu41
   * item 1): for a column, a three-part pattern whose column part is that column's name (not `*`),
   * e.g. `public.employee.ssn` or `public.*.ssn`; for a relation, a two-part pattern whose table part
   * is its name. A schema or relation wildcard (`public.*`, `public.employee`, `public.employee.*`)
   * never names a column, so it does not describe one a read or write deny refuses.
   */
  describesExplicitly(sourceId: string, resource: ResourceRef): boolean {
    const named = (parts: string[]) => (resource.column !== undefined ? parts.length === 3 && parts[2] !== '*' : parts.length === 2 && parts[1] !== '*');
    return (this.bySource.get(sourceId) ?? []).some((s) => s.effect === 'allow' && namesAction(s.action, 'describe') && named(s.parts) && covers(s.parts, resource, s.effect));
  }

  /**
   * Decides `action` on the resource by the statements naming that action (or `*`) only: no
   * implication of describe by read or write (deny wins, allow grants, else none). Used by
   * decideInHierarchy (src/governance/hierarchy.ts) to decide describe across a relation tree.
   */
  decideNamed(sourceId: string, action: Action, resource: ResourceRef): Decision {
    let allowed = false;
    for (const s of this.bySource.get(sourceId) ?? []) {
      if (!namesAction(s.action, action) || !covers(s.parts, resource, s.effect)) continue;
      if (s.effect === 'deny') return 'deny';
      allowed = true;
    }
    return allowed ? 'allow' : 'none';
  }

  /**
   * The resource of a deny statement for `action` (or `*`) that names `resource` itself, every part
   * written out (no `*`): for a column `schema.table.column`, or `schema.table` (its whole relation);
   * for a relation `schema.table`. Null when none does (a wildcard deny, or none at all). Such a
   * resource is listed verbatim under `deny` by interlock_describe_access, so a refusal may name it
   * (task hnu41 item 2, src/pipeline/03-authorize.ts).
   */
  denyNaming(sourceId: string, action: Action, resource: ResourceRef): string | null {
    for (const s of this.bySource.get(sourceId) ?? []) {
      if (s.effect !== 'deny' || !namesAction(s.action, action) || s.parts.includes('*') || (s.parts.length !== 2 && s.parts.length !== 3)) continue;
      if (s.parts[0] === resource.schema && s.parts[1] === resource.table && (s.parts.length === 2 || s.parts[2] === resource.column)) return s.resource;
    }
    return null;
  }

  /** Decides an action on a whole-resource basis for non-SQL sources: the resource is matched as one string (`*` or a prefix pattern ending in `/*`). */
  decideOpaque(sourceId: string, action: Action, resource: string): Decision {
    let allowed = false;
    for (const s of this.bySource.get(sourceId) ?? []) {
      if (!actionApplies(s.action, action, s.effect)) continue;
      const p = s.resource;
      const hit = p === '*' || p === '*.*' || p === resource || (p.endsWith('/*') && (resource + '/').startsWith(p.slice(0, -1)));
      if (!hit) continue;
      if (s.effect === 'deny') return 'deny';
      allowed = true;
    }
    return allowed ? 'allow' : 'none';
  }

  /**
   * Decides an action on a table when no column is named (count(*), DELETE): allowed when the table
   * is covered by a table pattern, or (for read/describe) some column of it is allowed; a table-level
   * deny wins.
   */
  decideTable(sourceId: string, action: Action, schema: string, table: string, columns: string[]): Decision {
    const t = this.decide(sourceId, action, { schema, table });
    if (t !== 'none') return t;
    if (action !== 'read' && action !== 'describe') return 'none';
    for (const column of columns) if (this.decide(sourceId, action, { schema, table, column }) === 'allow') return 'allow';
    return 'none';
  }

  /** True when some statement for `action` could apply to the table (cheap pre-filter for describe). */
  mentionsTable(sourceId: string, action: Action, schema: string, table: string): boolean {
    return (this.bySource.get(sourceId) ?? []).some((s) => s.effect === 'allow' && actionApplies(s.action, action, 'allow') && touchesTable(s.parts, schema, table));
  }
}
