/**
 * interlock_list_sources (contract: "Returns a JSON object keyed by source ID. Only active sources
 * visible through the caller's current source-role grants are included.")
 */
import type { ToolHandler } from '../types';
import type { SourceEntry } from '../../../generated/mcp-tools-v1';
import { AccessEvaluator } from '../../governance/evaluator';
import type { GovernanceStore } from '../../governance/store';
import { rateLimitStep, type RateLimiter } from '../../pipeline/05-rate-limit';

/** Lists the active sources an identity holds a grant on, keyed by source id. */
export interface SourceDirectory {
  listVisibleSources(identityId: string): Promise<Record<string, SourceEntry>>;
}

/** A SourceDirectory over the governance store: enabled sources with at least one grant to the identity. */
export class StoreSourceDirectory implements SourceDirectory {
  constructor(private readonly store: GovernanceStore) {}
  async listVisibleSources(identityId: string): Promise<Record<string, SourceEntry>> {
    const evaluator = new AccessEvaluator(await this.store.grantsForIdentity(identityId));
    const out: Record<string, SourceEntry> = {};
    for (const s of (await this.store.listSources()).sort((a, b) => a.id.localeCompare(b.id))) {
      if (!s.enabled || !evaluator.hasGrant(s.id)) continue;
      const e: SourceEntry = { name: s.name, type: s.type };
      if (s.description) e.description = s.description;
      out[s.id] = e;
    }
    return out;
  }
}

/** An in-memory directory: sources and the identities granted on each (transport tests). */
export class StaticSourceDirectory implements SourceDirectory {
  constructor(private readonly sources: Array<SourceEntry & { id: string; active: boolean; grantees: string[] }> = []) {}
  async listVisibleSources(identityId: string): Promise<Record<string, SourceEntry>> {
    const out: Record<string, SourceEntry> = {};
    for (const s of this.sources) {
      if (s.active && s.grantees.includes(identityId)) {
        const e: SourceEntry = { name: s.name, type: s.type };
        if (s.description) e.description = s.description;
        out[s.id] = e;
      }
    }
    return out;
  }
}

/** Builds the interlock_list_sources handler over a SourceDirectory (rate-limited per identity when a limiter is given). */
export function listSourcesHandler(dir: SourceDirectory, rateLimiter?: RateLimiter): ToolHandler {
  return async (_args, ctx) => {
    if (!ctx.identity) return { kind: 'refusal', code: 'identity_required' };
    if (rateLimiter) {
      const limited = await rateLimitStep(rateLimiter, ctx, ctx.identity.id, null);
      if (limited) return limited;
    }
    const sources = await dir.listVisibleSources(ctx.identity.id);
    return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(sources) }], structuredContent: sources as Record<string, unknown> };
  };
}
