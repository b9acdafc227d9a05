/**
 * Admission of one HTTP request at POST /mcp: the ordered checks of spec/protocol-v1.json
 * `checks` (HOST … METHOD-KNOWN), first failure wins. Pure: no I/O, so every combination is unit-
 * and property-testable. What passes is a message for the dispatcher, tagged with its dialect and
 * protocol version (contract: Transport, Protocol versions; decisions 1–3, 8, 11–15).
 */
import protocol from '../../spec/protocol-v1.json';
import { acceptsRequired, corsOrigin, corsPreflightHeaders, decodeMirroredHeader, hostAllowed, mediaType, originAllowed, type OriginPolicy } from './http-headers';
import { classifyMessage, errorResponse, readableId, type InboundMessage, type JsonRpcId } from './jsonrpc';
import { jsonRpcMessage } from '../errors/vocabulary';
import { jsonNestsDeeperThan, TOO_DEEP_MESSAGE } from './json-depth';
import { parseClientJson } from '../pipeline/json-numbers';
import { cutText } from '../errors/cut-text';

/** "modern" = 2026-07-28 per-request dialect; "handshake" = initialize-negotiated 2025 dialect. */
export type Dialect = 'modern' | 'handshake';

/** The HTTP request as admission sees it. Header names are lower-case. */
export interface HttpRequestView {
  method: string;
  headers: Record<string, string | undefined>;
  /** Raw body text (undefined for bodiless methods). */
  body: string | undefined;
  /** "http" or "https": the scheme the client used, for the same-origin rule. */
  scheme: string;
}

/** An immediate HTTP answer (an error, or 202 for an accepted notification/response). */
export interface Reply {
  kind: 'reply';
  status: number;
  headers?: Record<string, string>;
  body?: Record<string, unknown>;
  /** Rule id from spec/protocol-v1.json that produced this answer. */
  rule: string;
}

/** A request or notification admitted for dispatch. */
export interface Admitted {
  kind: 'admitted';
  dialect: Dialect;
  /** Protocol version in force: the header's, 2025-03-26 when absent, or the initialize body's. */
  version: string;
  message: Extract<InboundMessage, { type: 'request' | 'notification' }>;
}

const SUPPORTED = new Set(protocol.versions.supported);
const MODERN = new Set(protocol.versions.modern);
const META = protocol.meta;
/** The request methods of the protocol table by name (the first entry of each name, as a search would find). */
const REQUEST_METHODS = new Map<string, (typeof protocol.methods)[number]>();
for (const m of protocol.methods) if (m.kind === 'request' && !REQUEST_METHODS.has(m.method)) REQUEST_METHODS.set(m.method, m);
const H = {
  version: protocol.headers.protocolVersion.toLowerCase(),
  method: protocol.headers.method.toLowerCase(),
  name: protocol.headers.name.toLowerCase(),
};

function fail(rule: string, status: number, code: number, id: JsonRpcId | null, message?: string, data?: unknown, headers?: Record<string, string>): Reply {
  const error: { code: number; message: string; data?: unknown } = { code, message: message ?? jsonRpcMessage(code) };
  if (data !== undefined) error.data = data;
  return { kind: 'reply', status, body: errorResponse(id, error), rule, headers };
}

/** The data of -32022: every supported version and the requested one (decision 2). */
export function unsupportedVersionData(requested: string): { supported: string[]; requested: string } {
  return { supported: [...protocol.versions.supported], requested };
}

function envelopeOf(params: Record<string, unknown> | undefined): Record<string, unknown> | null {
  const meta = params?._meta;
  return meta && typeof meta === 'object' && !Array.isArray(meta) ? (meta as Record<string, unknown>) : null;
}

/** True when params._meta claims the modern envelope (carries a protocolVersion key). */
function claimsEnvelope(params: Record<string, unknown> | undefined): boolean {
  const meta = envelopeOf(params);
  return meta !== null && META.protocolVersion in meta;
}

/** Rule ENVELOPE: _meta carries a string protocolVersion and an object clientCapabilities. */
function envelopeValid(params: Record<string, unknown> | undefined): boolean {
  const meta = envelopeOf(params);
  if (!meta) return false;
  const v = meta[META.protocolVersion];
  const caps = meta[META.clientCapabilities];
  return typeof v === 'string' && !!caps && typeof caps === 'object' && !Array.isArray(caps);
}

/**
 * Runs the admission checks. Returns a Reply to send as-is, or the admitted message.
 * The caller has already routed only /mcp requests here.
 */
export function admit(req: HttpRequestView, policy: OriginPolicy): Reply | Admitted {
  const h = req.headers;
  // HOST, ORIGIN (403): before anything else, DNS-rebinding protection.
  if (!hostAllowed(h.host, policy)) return fail('HOST', 403, -32600, null, 'Forbidden: the Host header names a host this server does not serve');
  if (!originAllowed(h.origin, h.host, req.scheme, policy)) return fail('ORIGIN', 403, -32600, null, 'Forbidden: the Origin is not allowed');
  // HTTP-METHOD (405); a CORS preflight from an allow-listed Origin is answered 204 (issue 24 item 7).
  if (req.method === protocol.http.cors.preflightMethod && h['access-control-request-method'] !== undefined) {
    const origin = corsOrigin(h.origin, policy);
    if (origin !== null) return { kind: 'reply', status: protocol.http.cors.preflightStatus, rule: 'HTTP-METHOD', headers: corsPreflightHeaders(origin) };
  }
  if (req.method !== 'POST') return fail('HTTP-METHOD', 405, -32600, null, 'Method not allowed: the MCP endpoint accepts POST only', undefined, { Allow: 'POST' });
  // CONTENT-TYPE (415), ACCEPT (406).
  if (mediaType(h['content-type']) !== protocol.http.requiredContentType) {
    return fail('CONTENT-TYPE', 415, -32600, null, 'Unsupported Media Type: Content-Type must be application/json');
  }
  if (!acceptsRequired(h.accept)) {
    return fail('ACCEPT', 406, -32600, null, 'Not Acceptable: Accept must include application/json and text/event-stream');
  }
  // JSON (400 / -32700). A body nested deeper than MAX_JSON_DEPTH is refused by one linear scan
  // before JSON.parse, which would spend ~1 s on half a million levels (red-team F3).
  if (req.body !== undefined && jsonNestsDeeperThan(req.body)) return fail('JSON', 400, -32700, null, TOO_DEEP_MESSAGE);
  let parsed: unknown;
  try {
    // As JSON.parse; numbers it cannot carry exactly are recorded for interlock_query's params (json-numbers.ts).
    parsed = parseClientJson(req.body ?? '');
  } catch {
    return fail('JSON', 400, -32700, null);
  }
  // NO-BATCH (400 / -32600, id null).
  if (Array.isArray(parsed)) return fail('NO-BATCH', 400, -32600, null, 'Invalid request: batches are not accepted; send one JSON-RPC message per request');
  // JSONRPC-SHAPE.
  if (parsed === null || typeof parsed !== 'object') return fail('JSONRPC-SHAPE', 400, -32600, null);
  const msg = classifyMessage(parsed as Record<string, unknown>);
  if (!msg) return fail('JSONRPC-SHAPE', 400, -32600, readableId(parsed), 'Invalid request: not a JSON-RPC 2.0 request, notification or response');
  const id: JsonRpcId | null = msg.type === 'notification' ? null : msg.id;
  const params = msg.type === 'response' ? undefined : msg.params;

  // VERSION-HEADER and dialect selection.
  const mpvRaw = h[H.version];
  const mpv = mpvRaw === undefined ? undefined : mpvRaw.trim();
  let dialect: Dialect;
  let version: string;
  if (mpv === undefined) {
    dialect = 'handshake';
    version = protocol.versions.assumedWhenHeaderAbsent;
  } else if (MODERN.has(mpv)) {
    dialect = 'modern';
    version = mpv;
  } else if (SUPPORTED.has(mpv)) {
    dialect = 'handshake';
    version = mpv;
  } else {
    // Unsupported header value. A body claiming the modern envelope is checked in modern order.
    if (msg.type === 'request' && claimsEnvelope(params)) {
      if (!envelopeValid(params)) return fail('ENVELOPE', 400, -32602, id, 'Invalid params: _meta must carry io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities');
      const envVersion = envelopeOf(params)![META.protocolVersion] as string;
      if (envVersion !== mpv) return fail('VERSION-MATCH', 400, -32020, id, `Header mismatch: MCP-Protocol-Version '${mpv}' does not match _meta protocolVersion`);
      return fail('VERSION-HEADER', 400, -32022, id, `Unsupported protocol version: ${mpv}`, unsupportedVersionData(mpv));
    }
    if (msg.type === 'request' && msg.method === 'initialize' && params?.protocolVersion === mpv) {
      dialect = 'handshake';
      version = mpv;
    } else {
      // Notifications and posted responses are judged by the header alone: their error carries id null.
      return fail('VERSION-HEADER', 400, -32022, msg.type === 'request' ? id : null, `Unsupported protocol version: ${mpv}`, unsupportedVersionData(mpv));
    }
  }

  if (msg.type === 'response') {
    if (dialect === 'modern') return fail('POSTED-RESPONSE', 400, -32600, msg.id, 'Invalid request: clients must not send JSON-RPC responses in the 2026-07-28 dialect');
    return { kind: 'reply', status: protocol.http.acceptedStatus, rule: 'NOTIFICATION' };
  }
  if (msg.type === 'notification') {
    return { kind: 'admitted', dialect, version, message: msg };
  }

  if (dialect === 'modern') {
    // ENVELOPE (-32602), VERSION-MATCH (-32020).
    if (!envelopeValid(params)) return fail('ENVELOPE', 400, -32602, id, 'Invalid params: _meta must carry io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities');
    const envVersion = envelopeOf(params)![META.protocolVersion] as string;
    if (envVersion !== mpv) return fail('VERSION-MATCH', 400, -32020, id, `Header mismatch: MCP-Protocol-Version '${mpv}' does not match _meta protocolVersion '${cutText(String(envVersion), 64)}'`);
    // MCP-METHOD (-32020).
    const mcpMethod = h[H.method];
    if (mcpMethod === undefined) return fail('MCP-METHOD', 400, -32020, id, 'Header mismatch: Mcp-Method header is required');
    if (mcpMethod.trim() !== msg.method) return fail('MCP-METHOD', 400, -32020, id, 'Header mismatch: Mcp-Method does not match the request method');
    // MCP-NAME (-32020) for tools/call.
    if (msg.method === 'tools/call') {
      const rawName = h[H.name];
      if (rawName === undefined) return fail('MCP-NAME', 400, -32020, id, 'Header mismatch: Mcp-Name header is required for tools/call');
      const decoded = decodeMirroredHeader(rawName);
      if (decoded === null) return fail('MCP-NAME', 400, -32020, id, 'Header mismatch: Mcp-Name is not a valid header value');
      if (decoded !== params?.name) return fail('MCP-NAME', 400, -32020, id, 'Header mismatch: Mcp-Name does not match params.name');
    }
  }
  // METHOD-KNOWN.
  const entry = REQUEST_METHODS.get(msg.method);
  if (!entry || !entry.dialects.includes(dialect)) {
    if (dialect === 'modern') return fail('METHOD-KNOWN', 404, -32601, id, `Method not found: ${cutText(msg.method, 100)}`);
    return fail('METHOD-KNOWN-HANDSHAKE', 200, -32601, id, `Method not found: ${cutText(msg.method, 100)}`);
  }
  return { kind: 'admitted', dialect, version, message: msg };
}
