/**
 * What every step of the pipeline shares with the tools and the protocol above it (contract: "Tool
 * results for refusals and queued writes"; issue 25, item 3): the ToolOutcome a step or handler
 * returns, its MCP ContentBlocks, the per-call ToolCallContext, the ToolHandler signature, and the
 * catalogue defaults that steps apply (TOOL_DEFAULTS, from generated/tool-catalogue.json). Defined
 * here, below the tools, so that no step imports a higher layer; src/tools/types.ts re-exports them.
 */
import catalogue from '../../generated/tool-catalogue.json';
import type { Identity } from '../control/identities';
import type { RefusalCode, ToolErrorCode } from '../errors/vocabulary';

/** MCP content blocks InterLock emits (a subset of the MCP ContentBlock union). */
export type ContentBlock =
  | { type: 'text'; text: string }
  | { type: 'image'; data: string; mimeType: string }
  | { type: 'audio'; data: string; mimeType: string }
  | { type: 'resource'; resource: { uri: string; mimeType?: string; text?: string; blob?: string } };

/**
 * What a tool handler returns.
 * - `result`: a successful (or tool-level error, isError) MCP result.
 * - `refusal`: a governed refusal with a code from spec/errors-v1.json `refusals` (401/403/404/429/503).
 * - `queued`: a write held for approval (never an error; must not be retried).
 * - `tool_error`: a code from spec/errors-v1.json `toolErrors` (invalid arguments/SQL, or the opaque failure);
 *   `reason`, for an invalid_params code, is one of that code's `reasons` (e.g. statement_failed → lock_timeout).
 */
export type ToolOutcome =
  | { kind: 'result'; content: ContentBlock[]; structuredContent?: Record<string, unknown>; isError?: boolean }
  | { kind: 'refusal'; code: RefusalCode; message?: string; extra?: { retry_after_ms?: number; [k: string]: unknown } }
  | { kind: 'queued'; approvalId: string; approvalState: string; message?: string }
  | { kind: 'tool_error'; code: ToolErrorCode; message?: string; reason?: string; details?: StatementFailureDetails };

/**
 * What a `statement_failed` tells the agent beside its message (spec/errors-v1.json
 * `statementSqlstates`): the SQLSTATE, PostgreSQL's condition name, and the object the error names
 * when the agent's own statement wrote that name. Rendered into structuredContent / error.data.
 */
export interface StatementFailureDetails {
  sqlstate: string;
  condition?: string;
  object?: { kind: 'column' | 'relation' | 'function' | 'operator'; name: string };
}

/** Per-call context handed to every tool handler. */
export interface ToolCallContext {
  /** Gateway request id (also in logs and audit), e.g. "req_3f2a…". */
  requestId: string;
  /** The Bearer token presented, or null. Only the identity step reads it. */
  apiKey: string | null;
  /** Identity resolved by the pipeline's identity step; null before it (or for ungoverned tools). */
  identity: Identity | null;
  /** Dialect and protocol version of the request. */
  dialect: 'modern' | 'handshake';
  protocolVersion: string;
  /** The tool name as called (may be a deprecated alias) and its canonical successor. */
  toolName: string;
  canonicalTool: string;
  /** Aborted when the client closes the request's stream (or the server shuts down). */
  signal: AbortSignal;
  /** progressToken from params._meta, if the client sent one. */
  progressToken?: string | number;
  /**
   * Sends a JSON-RPC notification to the client on this request's SSE stream (switches the
   * response to text/event-stream if it was not already). Used for notifications/progress.
   */
  notify(method: string, params: Record<string, unknown>): void;
  /**
   * Whether this call has consumed its rate-limit point (pipeline step 5): rateLimitStep sets
   * `charged`, and the dispatcher charges a call that ended without reaching step 5 afterwards
   * (issue 10, Build 6; src/protocol/call-limits.ts). Absent outside the dispatcher (tests).
   */
  rateLimitCharge?: { charged: boolean };
  /**
   * Milliseconds this call spent in source reads: `ms` the whole reads (its identity's slot wait,
   * the shared pool's checkout, statement, rows), accumulated by the query pipeline around each read;
   * `poolMs` the part of it spent waiting for a connection of a source's shared pool after the
   * identity's slot was granted (ReadOptions.poolWait). Admission by capacity
   * (src/transport/capacity.ts) leaves `ms − poolMs` out of its latency sample: a slow source, or an
   * identity sending slow statements or flooding its own share, must not lower the gateway's limit
   * for every caller (the source's fair share bounds those); a queue for the shared pool is the
   * replica's and counts (issue 29). `slotMs`: the part of `ms` spent waiting for the identity's own
   * slots of a source (fair-share.ts), which the per-identity limit (admission.identity_limit)
   * samples for that identity alone (issue 29, h29i). Absent outside the dispatcher (tests).
   */
  sourceWait?: { ms: number; poolMs: number; slotMs: number };
}

/** A tool implementation bound to a catalogue entry. `args` has already passed the inputSchema. */
export type ToolHandler = (args: Record<string, unknown>, ctx: ToolCallContext) => Promise<ToolOutcome>;

/** Argument defaults of the catalogue (spec/mcp-tools-v1.json `defaults`): rows per query, results per discover / related call. */
export const TOOL_DEFAULTS = catalogue.defaults as { max_rows: number; discover_limit: number; related_limit: number };
