/**
 * interlock_list_sources (contract: "Returns a JSON object keyed by source ID. Only active sources
 * visible through the caller's current source-role grants are included.")
 */
import type { ToolHandler } from '../types';
import type { SourceEntry } from '../../../generated/mcp-tools-v1';

/** Lists the active sources an identity holds a grant on, keyed by source id. */
export interface SourceDirectory {
  listVisibleSources(identityId: string): Promise<Record<string, SourceEntry>>;
}

/** An in-memory directory: sources and the identities granted on each (tests, single-file setups). */
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

/** Builds the interlock_list_sources handler over a SourceDirectory. */
export function listSourcesHandler(dir: SourceDirectory): ToolHandler {
  return async (_args, ctx) => {
    if (!ctx.identity) return { kind: 'refusal', code: 'identity_required' };
    const sources = await dir.listVisibleSources(ctx.identity.id);
    return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(sources) }], structuredContent: sources as Record<string, unknown> };
  };
}
