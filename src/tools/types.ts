/**
 * The seam between the MCP transport (src/transport, src/protocol) and the tools behind it.
 * A tool handler never sees HTTP or dialects: it returns a ToolOutcome and the protocol layer
 * renders it for the request's dialect (contract: "Tool results for refusals and queued writes").
 */
import type { RefusalCode, ToolErrorCode } from '../errors/vocabulary';

/** An authenticated agent identity (contract: Governance, identity resolution). */
export interface Identity {
  /** Stable identity id (control database primary key, or a configured id). */
  id: string;
  /** Human-readable name, e.g. "demo-agent". */
  name: string;
  /** Id of the API key that authenticated this call (never the key itself); for an access token, "token:<jti>" (or "token" without a jti). */
  keyId: string;
  /** For an identity from an access token (issue 26): issuer, subject and token id (`jti`), never the token. */
  token?: { issuer: string; subject: string; jti: string | null };
  /** Identity attributes from token claims (auth.issuers[].attribute_claims), for policies and row rules. */
  attributes?: Record<string, unknown>;
}

/** Step 1's detailed answer: the identity, or the refusal code (spec/errors-v1.json) and a log-only reason. */
export type IdentityResolution = { identity: Identity } | { refusal: RefusalCode; reason: string };

/**
 * Resolves a presented Bearer API key to an identity. Returns null for an unknown, revoked or
 * expired key or a disabled identity. Must not throw for bad keys; throws only on infrastructure
 * failure (which the caller maps to the opaque tool execution failure).
 */
export interface IdentityResolver {
  resolve(apiKey: string): Promise<Identity | null>;
  /**
   * Optional, synchronous: true when `apiKey` can never resolve, judged by its form alone (e.g. it
   * does not match the API key format). Such a token is charged to the keyless budget before the
   * body is read, like no token at all (client-limits.ts keylessGate; red-team F4).
   */
  rejectsByFormat?(apiKey: string): boolean;
  /**
   * Optional: like resolve, but a refusal says which (invalid_api_key, invalid_token,
   * insufficient_scope, identity_provider_unavailable) and why (for the log, never the client).
   * Step 1 uses it when present (issue 26).
   */
  resolveDetailed?(token: string): Promise<IdentityResolution>;
}

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
 * - `tool_error`: a code from spec/errors-v1.json `toolErrors` (invalid arguments/SQL, or the opaque failure).
 */
export type ToolOutcome =
  | { kind: 'result'; content: ContentBlock[]; structuredContent?: Record<string, unknown>; isError?: boolean }
  | { kind: 'refusal'; code: RefusalCode; message?: string; extra?: { retry_after_ms?: number; [k: string]: unknown } }
  | { kind: 'queued'; approvalId: string; approvalState: string; message?: string }
  | { kind: 'tool_error'; code: ToolErrorCode; message?: string };

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
}

/** A tool implementation bound to a catalogue entry. `args` has already passed the inputSchema. */
export type ToolHandler = (args: Record<string, unknown>, ctx: ToolCallContext) => Promise<ToolOutcome>;

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
