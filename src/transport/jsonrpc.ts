/**
 * JSON-RPC 2.0 message shapes as MCP tightens them (contract: "Requests are JSON objects, not
 * JSON-RPC batches"; decisions 11, 12): ids are strings or integers, never null.
 */

/** A request or notification id: a string or an integer (MCP forbids null and fractions). */
export type JsonRpcId = string | number;

/** A classified inbound message. */
export type InboundMessage =
  | { type: 'request'; id: JsonRpcId; method: string; params: Record<string, unknown> | undefined }
  | { type: 'notification'; method: string; params: Record<string, unknown> | undefined }
  | { type: 'response'; id: JsonRpcId };

/** A JSON-RPC error object. */
export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/** True for a valid MCP request id: a string or a safe integer. */
export function isValidId(id: unknown): id is JsonRpcId {
  return typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id));
}

/**
 * Rule JSONRPC-SHAPE: classifies a parsed JSON object as request, notification or response, or
 * returns null when it is none of them (→ 400 / -32600).
 */
export function classifyMessage(body: Record<string, unknown>): InboundMessage | null {
  if (body.jsonrpc !== '2.0') return null;
  const hasId = Object.prototype.hasOwnProperty.call(body, 'id');
  const hasMethod = Object.prototype.hasOwnProperty.call(body, 'method');
  if (hasMethod) {
    if (typeof body.method !== 'string' || body.method.length === 0) return null;
    if ('result' in body || 'error' in body) return null;
    const params = body.params;
    if (params !== undefined && (params === null || typeof params !== 'object' || Array.isArray(params))) return null;
    const p = params as Record<string, unknown> | undefined;
    if (!hasId) return { type: 'notification', method: body.method, params: p };
    if (!isValidId(body.id)) return null;
    return { type: 'request', id: body.id, method: body.method, params: p };
  }
  if (hasId && isValidId(body.id)) {
    const hasResult = Object.prototype.hasOwnProperty.call(body, 'result');
    const hasError = Object.prototype.hasOwnProperty.call(body, 'error');
    if (hasResult !== hasError) return { type: 'response', id: body.id };
  }
  return null;
}

/** The id to echo in an error answer to an unclassifiable object: its id when valid, else null. */
export function readableId(body: unknown): JsonRpcId | null {
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const id = (body as Record<string, unknown>).id;
    if (isValidId(id)) return id;
  }
  return null;
}

/** Builds a JSON-RPC error response. */
export function errorResponse(id: JsonRpcId | null, error: JsonRpcErrorObject): Record<string, unknown> {
  return { jsonrpc: '2.0', id, error };
}

/** Builds a JSON-RPC success response. */
export function resultResponse(id: JsonRpcId, result: unknown): Record<string, unknown> {
  return { jsonrpc: '2.0', id, result };
}
