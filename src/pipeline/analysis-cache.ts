/**
 * The analysis cache (issue 13): steps 3 and 4 of interlock_query — the parsed statement, its
 * source-role authorization and its policy verdict with the redaction plan — cached by statement
 * text, catalog version and the caller's access and policy fingerprints, in a bounded LRU. A
 * repeated statement skips parsing, authorization and redaction planning entirely.
 *
 * Safety: every input a decision depends on is part of the key by CONTENT (a hash of the grants the
 * caller holds, of the catalog snapshot, of the active policies, plus the caller's identity for
 * policy subjects), so an entry can never answer for different grants, policies or catalog — a
 * revoke that the governance store has seen changes the key, even before clear() runs. clear() is
 * called on every control-table NOTIFY (interlock_control) so memory holds no stale entries.
 * Policies with time windows depend on the clock: with any such policy active the policy verdict
 * is computed on every call (analysis and authorization are still cached).
 */
import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Policy } from '../../generated/policy-v1';
import type { SqlAnalysis } from '../sql/analyze';
import type { SourceCatalog } from '../sql/catalog-types';
import { AccessEvaluator, type RoleGrant } from '../governance/evaluator';
import type { ToolOutcome } from './types';
import type { PolicyRestrictions } from './04-policy';
import type { RowRuleShape } from './row-rules';

/** Steps 3's cached outcome for one statement, catalog and set of grants. */
export interface CachedAnalysis {
  analysis: SqlAnalysis;
  /** "schema.table" of every relation read or written, sorted (for the audit event); [] when refused. */
  relations: string[];
  /** Step 3's refusal (analysis refusal or source_role_denied), or null when authorized. */
  denied: ToolOutcome | null;
}

/** Step 4's cached outcome for one statement and caller under the active policies. */
export type CachedPolicy = { ok: true; restrictions: PolicyRestrictions; accessFingerprint: string } | { ok: false; outcome: ToolOutcome };

interface Entry {
  value: CachedAnalysis;
  /** Policy verdicts by policy fingerprint and subject (a few per statement at most). */
  policies: Map<string, CachedPolicy>;
  /**
   * Row-rule shapes (issue 27, row-rules.ts shapeRowRules) by the text that runs: the agent's, or
   * its masking wrapper (a few per statement at most). Null until the first ruled read.
   */
  rowRules: Map<string, RowRuleShape> | null;
  /** Characters of the texts the row-rule shapes hold (counted in the entry's size). */
  rowRuleChars: number;
}

/** Most row-rule shapes kept per statement (the agent's text and its masked wrappers). */
const MAX_ROW_RULE_SHAPES = 8;

const fingerprints = new WeakMap<object, string>();

/**
 * Content hash (sha256, base64url) of a JSON-serialisable value, memoised per object: the governance
 * stores hand out a new object on every reload and never change one in place, which this relies on.
 */
export function contentFingerprint(value: object): string {
  let f = fingerprints.get(value);
  if (f === undefined) {
    f = createHash('sha256').update(JSON.stringify(value)).digest('base64url');
    fingerprints.set(value, f);
  }
  return f;
}

const evaluators = new WeakMap<RoleGrant[], AccessEvaluator>();

/** The AccessEvaluator of a grants array, built once per array (it is immutable once built). */
export function evaluatorFor(grants: RoleGrant[]): AccessEvaluator {
  let e = evaluators.get(grants);
  if (!e) {
    e = new AccessEvaluator(grants);
    evaluators.set(grants, e);
  }
  return e;
}

const timeDependent = new WeakMap<Policy[], boolean>();

/** True when some active policy has a time-window rule (its verdict depends on the clock). */
export function hasTimeWindows(policies: Policy[]): boolean {
  let t = timeDependent.get(policies);
  if (t === undefined) {
    t = policies.some((p) => p.rule.type === 'time_window');
    timeDependent.set(policies, t);
  }
  return t;
}

/** What a lookup is keyed by. */
export interface AnalysisKey {
  sourceId: string;
  sql: string;
  catalog: SourceCatalog;
  grants: RoleGrant[];
  /** The source's statement complexity limits (they change what the analysis answers). */
  complexity?: unknown;
}

/** Stands for an absent `complexity` in keyPrefixes. */
const NO_COMPLEXITY = {};
/** Per catalogue, grants and complexity object: the analysis key's text before the statement (keyPrefix). */
const keyPrefixes = new WeakMap<object, WeakMap<object, WeakMap<object, { sourceId: string; complexity: string; prefix: string }>>>();

/**
 * The analysis key's text before the statement: source id, the catalogue's and grants' content
 * fingerprints and the complexity limits' JSON, each followed by U+0000. Made once per catalogue,
 * grants array and frozen complexity object (none edited once built) and source id, not per call
 * (issue 28, h28l); a complexity object that is not frozen is keyed by its JSON read on every call,
 * so one edited in place between calls still gets its own key.
 */
function keyPrefix(k: AnalysisKey): string {
  const c = k.complexity !== null && typeof k.complexity === 'object' ? k.complexity : NO_COMPLEXITY;
  let byGrants = keyPrefixes.get(k.catalog);
  if (!byGrants) keyPrefixes.set(k.catalog, (byGrants = new WeakMap()));
  let byComplexity = byGrants.get(k.grants);
  if (!byComplexity) byGrants.set(k.grants, (byComplexity = new WeakMap()));
  const hit = byComplexity.get(c);
  // A frozen complexity object (query.ts makes one per source settings) cannot have changed since its
  // prefix was made; any other is read again (its JSON compared) on every call.
  const fixed = c === NO_COMPLEXITY || Object.isFrozen(c);
  if (hit && hit.sourceId === k.sourceId && fixed) return hit.prefix;
  const complexity = JSON.stringify(k.complexity ?? null);
  if (hit && hit.sourceId === k.sourceId && hit.complexity === complexity) return hit.prefix;
  const prefix = `${k.sourceId}\u0000${contentFingerprint(k.catalog)}\u0000${contentFingerprint(k.grants)}\u0000${complexity}\u0000`;
  byComplexity.set(c, { sourceId: k.sourceId, complexity, prefix });
  return prefix;
}

/** Per policies array and roles array: the last policy key made (AnalysisCache.policyKey). */
const policyKeys = new WeakMap<Policy[], WeakMap<string[], { identityId: string; identityName: string; key: string }>>();

/** Bounded LRU of analysis and authorization (and policy verdicts) per statement; see module doc. */
export class AnalysisCache {
  private readonly lru: LRUCache<string, Entry>;
  /** Lookups answered from the cache / computed. */
  hits = 0;
  misses = 0;
  /** Row-rule shapes answered from the cache / computed (rowRules). */
  rowRuleHits = 0;
  rowRuleMisses = 0;

  /**
   * At most `max` entries (default 5000) and about `maxBytes` (default 16 MiB; an entry counts twice
   * its key's length plus 4 KiB for the analysis); statements longer than `maxSqlLength` characters
   * (default 16 384) are not cached. The byte bound keeps a client sending many distinct long
   * statements from growing the process.
   */
  constructor(private readonly opts: { max?: number; maxBytes?: number; maxSqlLength?: number } = {}) {
    this.lru = new LRUCache<string, Entry>({ max: opts.max ?? 5000, maxSize: opts.maxBytes ?? 16 * 1024 * 1024, sizeCalculation: (v, key) => key.length * 2 + 4096 + v.rowRuleChars * 2 });
  }

  private key(k: AnalysisKey): string {
    return keyPrefix(k) + k.sql;
  }

  /**
   * Step 3 for `k`: from the cache, or computed by `compute` (and stored). With it: `policy`, step
   * 4's verdict under a policy key, and `rowRules`, the row-rule shape (issue 27) of the text that
   * runs (`runSql`: the statement or its masking wrapper), computed by `computeShape` on first use.
   * Both live in the statement's entry, so they share its key — the statement, the catalogue
   * snapshot, the caller's grants (so its row rules) and the complexity limits, all by content — and
   * its life: a changed rule, grant, table or rescan changes the key, and clear() drops them all.
   * A shape may depend on nothing else but the caller's `restrict_rows` policies: the caller passes
   * their content (PolicyRowRestrictions.key) inside `runSql`'s key (src/pipeline/query.ts).
   */
  analyse(k: AnalysisKey, compute: () => CachedAnalysis): {
    entry: CachedAnalysis;
    policy: (policyKey: string, computePolicy: () => CachedPolicy) => CachedPolicy;
    rowRules: (runSql: string, computeShape: () => RowRuleShape) => RowRuleShape;
  } {
    if (k.sql.length > (this.opts.maxSqlLength ?? 16_384)) {
      this.misses++;
      return { entry: compute(), policy: (_pk, computePolicy) => computePolicy(), rowRules: (_s, computeShape) => computeShape() };
    }
    const key = this.key(k);
    let e = this.lru.get(key);
    if (e) this.hits++;
    else {
      this.misses++;
      e = { value: compute(), policies: new Map(), rowRules: null, rowRuleChars: 0 };
      this.lru.set(key, e);
    }
    const entry = e;
    return {
      entry: entry.value,
      policy: (policyKey, computePolicy) => {
        const hit = entry.policies.get(policyKey);
        if (hit) return hit;
        const v = computePolicy();
        if (entry.policies.size < 16) entry.policies.set(policyKey, v);
        return v;
      },
      rowRules: (runSql, computeShape) => {
        const hit = entry.rowRules?.get(runSql);
        if (hit) {
          this.rowRuleHits++;
          return hit;
        }
        this.rowRuleMisses++;
        const shape = computeShape();
        if ((entry.rowRules?.size ?? 0) < MAX_ROW_RULE_SHAPES) {
          (entry.rowRules ??= new Map()).set(runSql, shape);
          entry.rowRuleChars += runSql.length + (shape.kind === 'ruled' ? shape.sql.length : 0);
          // Entered again so the LRU counts the entry's new size (it does not recompute it when the
          // same value is set again) and evicts others to stay within maxBytes.
          if (this.lru.peek(key) === entry) {
            this.lru.delete(key);
            this.lru.set(key, entry);
          }
        }
        return shape;
      },
    };
  }

  /** Key of a policy verdict: the active policies' content and the policy subject. */
  static policyKey(policies: Policy[], subject: { identityId: string; identityName: string; roles: string[] }): string {
    // Made once per policies array, roles array (the evaluator's frozen answer) and identity (issue 28, h28l).
    let byRoles = policyKeys.get(policies);
    if (!byRoles) policyKeys.set(policies, (byRoles = new WeakMap()));
    const hit = byRoles.get(subject.roles);
    if (hit && hit.identityId === subject.identityId && hit.identityName === subject.identityName) return hit.key;
    const key = `${contentFingerprint(policies)}\u0000${subject.identityId}\u0000${subject.identityName}\u0000${subject.roles.join(',')}`;
    byRoles.set(subject.roles, { identityId: subject.identityId, identityName: subject.identityName, key });
    return key;
  }

  /** Drops every entry (called on every interlock_control notification). */
  clear(): void {
    this.lru.clear();
  }

  /** Entries held. */
  get size(): number {
    return this.lru.size;
  }
}
