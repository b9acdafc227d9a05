/**
 * Policy evaluation (pipeline step 4; contract: "A policy cannot grant source access that a source
 * role did not allow"). Policies only refuse or restrict: deny relations, require a WHERE on
 * UPDATE/DELETE, cap rows, weekly time windows, mask columns, hide document types or categories,
 * restrict rows (issue 27: `restrict_rows` predicates, ANDed with the role allows' row rules by
 * src/governance/row-rules.ts, never widening them). Rules are declared in spec/policy-v1.schema.json.
 */
import type { Policy, TimeWindowRule } from '../../generated/policy-v1';
import type { Action } from './evaluator';

/** Who is asking and where: used to select the policies that apply. */
export interface PolicySubject {
  identityId: string;
  identityName: string;
  roles: string[];
  sourceId: string;
}

/** What the request does, as far as policies care. */
export interface PolicyRequest {
  action: Action;
  /**
   * Relations touched, with the action on each ("read" for reads, the write operation's "write").
   * `governing`: the relation's ancestors and descendants (src/governance/hierarchy.ts), whose
   * `deny_relations` rules apply to it too; the refusal still names the relation touched.
   * `reached`: written by a foreign key's referential action, not named by the statement
   * (src/sql/referential-reach.ts); a `deny_relations` refusal of it does not name it.
   */
  relations: Array<{ schema: string; table: string; action: Action; governing?: Array<{ schema: string; table: string }>; reached?: boolean }>;
  /** UPDATE/DELETE targets with whether they have a WHERE clause. */
  writes: Array<{ schema: string; table: string; operation: string; hasWhere: boolean }>;
  now: Date;
}

/** A column mask a policy imposes. */
export interface ColumnMask {
  schema: string;
  table: string;
  column: string;
  method: 'full' | 'partial' | 'hash' | 'null';
  policy: string;
}

/** The policy verdict: refused (with the policy and a reason), or allowed with restrictions. */
export type PolicyVerdict =
  | { ok: false; policy: string; reason: string }
  | { ok: true; maxRows: number | null; maskPatterns: Array<{ parts: string[]; method: ColumnMask['method']; policy: string }>; hiddenDocumentTypes: string[]; hiddenCategoryPrefixes: string[][] };

/** True when the policy is enabled and its applies_to selects this subject (omitted lists select everyone). */
export function policyApplies(p: Policy, s: PolicySubject): boolean {
  if (p.enabled === false) return false;
  const a = p.applies_to;
  if (!a) return true;
  if (a.identities && !a.identities.includes(s.identityId) && !a.identities.includes(s.identityName)) return false;
  if (a.roles && !a.roles.some((r) => s.roles.includes(r))) return false;
  if (a.sources && !a.sources.includes(s.sourceId)) return false;
  return true;
}

function patternMatches(pattern: string, schema: string, table: string): boolean {
  const [ps, pt] = pattern === '*' ? ['*', '*'] : pattern.split('.');
  return (ps === '*' || ps === schema) && (pt === undefined || pt === '*' || pt === table);
}

const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];

/** True when `now` is inside the rule's weekly window, in the rule's time zone (IANA name; default UTC). */
export function insideTimeWindow(rule: TimeWindowRule, now: Date): boolean {
  const fmt = new Intl.DateTimeFormat('en-GB', { timeZone: rule.timezone ?? 'UTC', weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
  const parts = Object.fromEntries(fmt.formatToParts(now).map((p) => [p.type, p.value]));
  const day = String(parts.weekday).slice(0, 3).toLowerCase();
  const minutes = Number(parts.hour) * 60 + Number(parts.minute);
  const toMin = (s: string) => Number(s.slice(0, 2)) * 60 + Number(s.slice(3, 5));
  if (!rule.days.includes(day as TimeWindowRule['days'][number])) return false;
  if (!DAYS.includes(day)) return false;
  return minutes >= toMin(rule.start) && minutes < toMin(rule.end);
}

/**
 * Evaluates the applicable policies against a request. The first refusing rule wins (policies are
 * evaluated in name order so the answer is deterministic); otherwise returns the restrictions.
 */
export function evaluatePolicies(policies: Policy[], subject: PolicySubject, req: PolicyRequest): PolicyVerdict {
  let maxRows: number | null = null;
  const maskPatterns: Array<{ parts: string[]; method: ColumnMask['method']; policy: string }> = [];
  const hiddenDocumentTypes: string[] = [];
  const hiddenCategoryPrefixes: string[][] = [];
  const applicable = policies.filter((p) => policyApplies(p, subject)).sort((a, b) => a.name.localeCompare(b.name));
  for (const p of applicable) {
    const r = p.rule;
    switch (r.type) {
      case 'deny_relations': {
        const actions = r.actions ?? ['read', 'write'];
        for (const rel of req.relations) {
          if (actions.includes(rel.action) && r.relations.some((pat) => [rel, ...(rel.governing ?? [])].some((g) => patternMatches(pat, g.schema, g.table)))) {
            const what = rel.reached ? "a write this statement makes through a foreign key's referential action" : `${rel.action} on ${rel.schema}.${rel.table}`;
            return { ok: false, policy: p.name, reason: r.reason ?? `Policy ${p.name} refuses ${what}.` };
          }
        }
        break;
      }
      case 'require_where': {
        const ops = r.operations ?? ['update', 'delete'];
        const bad = req.writes.find((w) => ops.includes(w.operation as 'update' | 'delete') && !w.hasWhere);
        if (bad) return { ok: false, policy: p.name, reason: r.reason ?? `Policy ${p.name} requires a WHERE clause on ${bad.operation.toUpperCase()} of ${bad.schema}.${bad.table}.` };
        break;
      }
      case 'max_rows':
        maxRows = maxRows === null ? r.max_rows : Math.min(maxRows, r.max_rows);
        break;
      case 'time_window': {
        const actions = r.actions ?? ['read', 'write', 'describe', 'discover', 'request'];
        if (actions.includes(req.action) && !insideTimeWindow(r, req.now)) {
          return { ok: false, policy: p.name, reason: r.reason ?? `Policy ${p.name} allows ${req.action} only ${r.days.join(',')} ${r.start}-${r.end} ${r.timezone ?? 'UTC'}.` };
        }
        break;
      }
      case 'mask_columns':
        for (const c of r.columns) maskPatterns.push({ parts: c.split('.'), method: r.method, policy: p.name });
        break;
      case 'hide_documents':
        hiddenDocumentTypes.push(...(r.document_types ?? []));
        hiddenCategoryPrefixes.push(...(r.category_prefixes ?? []));
        break;
      case 'restrict_rows':
        // Applied by the row-rule rewrite (policyRowRestrictions), not by this verdict.
        break;
    }
  }
  return { ok: true, maxRows, maskPatterns, hiddenDocumentTypes, hiddenCategoryPrefixes };
}

/**
 * The mask a value of unprovable lineage gets for a caller with these mask patterns (issue 12, fail
 * closed): `null` when any of the caller's masks is `null`, `full` when any mask applies, else none.
 */
export function unprovableMaskMethod(patterns: Array<{ method: ColumnMask['method'] }>): 'null' | 'full' | null {
  return patterns.some((p) => p.method === 'null') ? 'null' : patterns.length ? 'full' : null;
}

/** The method masking a column, or null: the strongest of all matching mask patterns (null > full > hash > partial). */
export function maskFor(patterns: Array<{ parts: string[]; method: ColumnMask['method'] }>, schema: string, table: string, column: string): ColumnMask['method'] | null {
  const rank = { partial: 1, hash: 2, full: 3, null: 4 } as const;
  let best: ColumnMask['method'] | null = null;
  for (const p of patterns) {
    const [ps, pt, pc] = p.parts;
    const hit = (ps === '*' || ps === schema) && (pt === '*' || pt === table) && (pc === undefined || pc === '*' || pc === column);
    if (hit && (best === null || rank[p.method] > rank[best])) best = p.method;
  }
  return best;
}

/** One restricting row predicate of a policy (issue 27): the policy's name and its `rows` text. */
export interface PolicyRowTerm {
  policy: string;
  rows: string;
}

/**
 * The `restrict_rows` predicates that apply to a subject (issue 27, docs/row-rules.md): `any` is
 * true when some enabled policy selecting the subject restricts rows at all (for any relation or
 * action); `of(schema, table, action)` lists the predicates of those whose `relations` cover the
 * relation (exact names or `*` wildcards, as deny_relations) for `action` (their `actions`, default
 * read and write), in policy-name order. The caller ANDs each with the role rule; a policy never widens.
 */
export interface PolicyRowRestrictions {
  any: boolean;
  /** The selected policies' names and rules as one stable string ('' when none): part of a cached row-rule shape's key. */
  key: string;
  of(schema: string, table: string, action: 'read' | 'write'): PolicyRowTerm[];
  /** Names of the selected policies whose `relations` list `schema.table` itself (no wildcard): a view's own rule (rt27z Z5). */
  naming(schema: string, table: string): Set<string>;
}

/** Selects the `restrict_rows` policies applying to `subject` (policyApplies) once; see PolicyRowRestrictions. */
export function policyRowRestrictions(policies: Policy[], subject: PolicySubject): PolicyRowRestrictions {
  const rules = policies
    .filter((p) => p.rule.type === 'restrict_rows' && policyApplies(p, subject))
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((p) => ({ name: p.name, rule: p.rule as Extract<Policy['rule'], { type: 'restrict_rows' }> }));
  return {
    any: rules.length > 0,
    key: rules.length > 0 ? JSON.stringify(rules) : '',
    of(schema, table, action) {
      const out: PolicyRowTerm[] = [];
      for (const { name, rule } of rules) {
        if (!(rule.actions ?? ['read', 'write']).includes(action)) continue;
        if (rule.relations.some((pat) => patternMatches(pat, schema, table))) out.push({ policy: name, rows: rule.rows });
      }
      return out;
    },
    naming(schema, table) {
      const exact = `${schema}.${table}`;
      return new Set(rules.filter(({ rule }) => rule.relations.includes(exact)).map(({ name }) => name));
    },
  };
}

/** No policy restricts rows. */
export const NO_POLICY_ROW_RESTRICTIONS: PolicyRowRestrictions = { any: false, key: '', of: () => [], naming: () => new Set() };
