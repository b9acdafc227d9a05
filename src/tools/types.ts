/**
 * The seam between the MCP transport (src/transport, src/protocol) and the tools behind it.
 * A tool handler never sees HTTP or dialects: it returns a ToolOutcome and the protocol layer
 * renders it for the request's dialect (contract: "Tool results for refusals and queued writes").
 * The types every step shares are defined below the tools, so the layers beneath import no
 * higher one (issue 25, item 3): Identity and IdentityResolver in src/control/identities.ts, the
 * ToolOutcome, its ContentBlocks, the ToolCallContext and the ToolHandler signature in
 * src/pipeline/types.ts; they are re-exported here for the layers above.
 */
import type { ToolHandler } from '../pipeline/types';

export type { Identity, IdentityResolution, IdentityResolver } from '../control/identities';
export type { ContentBlock, ToolCallContext, ToolHandler, ToolOutcome } from '../pipeline/types';

/** A tool offered by the server: a catalogue entry (served by tools/list) plus its handler. */
export interface ToolBinding {
  name: string;
  title?: string;
  description: string;
  inputSchema: Record<string, unknown>;
  /** Governed tools require an authenticated identity (contract: tools/call, Authentication). */
  governed: boolean;
  /** Canonical tool name (differs for deprecated aliases). */
  canonical: string;
  deprecated: boolean;
  /**
   * Client capabilities the tool needs (modern dialect: refused with -32021 when the request's
   * _meta clientCapabilities lacks one). No InterLock data tool sets it.
   */
  requiredClientCapabilities?: Record<string, Record<string, unknown>>;
  /** Validates arguments against inputSchema; returns an error text or null. */
  validate(args: unknown): string | null;
  handler: ToolHandler;
}
