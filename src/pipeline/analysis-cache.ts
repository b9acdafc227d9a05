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
}

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

/** Bounded LRU of analysis and authorization (and policy verdicts) per statement; see module doc. */
export class AnalysisCache {
  private readonly lru: LRUCache<string, Entry>;
  /** Lookups answered from the cache / computed. */
  hits = 0;
  misses = 0;

  /**
   * At most `max` entries (default 5000) and about `maxBytes` (default 16 MiB; an entry counts twice
   * its key's length plus 4 KiB for the analysis); statements longer than `maxSqlLength` characters
   * (default 16 384) are not cached. The byte bound keeps a client sending many distinct long
   * statements from growing the process.
   */
  constructor(private readonly opts: { max?: number; maxBytes?: number; maxSqlLength?: number } = {}) {
    this.lru = new LRUCache<string, Entry>({ max: opts.max ?? 5000, maxSize: opts.maxBytes ?? 16 * 1024 * 1024, sizeCalculation: (_v, key) => key.length * 2 + 4096 });
  }

  private key(k: AnalysisKey): string {
    return `${k.sourceId}\u0000${contentFingerprint(k.catalog)}\u0000${contentFingerprint(k.grants)}\u0000${JSON.stringify(k.complexity ?? null)}\u0000${k.sql}`;
  }

  /** Step 3 for `k`: from the cache, or computed by `compute` (and stored). */
  analyse(k: AnalysisKey, compute: () => CachedAnalysis): { entry: CachedAnalysis; policy: (policyKey: string, computePolicy: () => CachedPolicy) => CachedPolicy } {
    if (k.sql.length > (this.opts.maxSqlLength ?? 16_384)) {
      this.misses++;
      return { entry: compute(), policy: (_pk, computePolicy) => computePolicy() };
    }
    const key = this.key(k);
    let e = this.lru.get(key);
    if (e) this.hits++;
    else {
      this.misses++;
      e = { value: compute(), policies: new Map() };
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
    };
  }

  /** Key of a policy verdict: the active policies' content and the policy subject. */
  static policyKey(policies: Policy[], subject: { identityId: string; identityName: string; roles: string[] }): string {
    return `${contentFingerprint(policies)}\u0000${subject.identityId}\u0000${subject.identityName}\u0000${subject.roles.join(',')}`;
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
