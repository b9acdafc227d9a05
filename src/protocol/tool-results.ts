/**
 * Renders a ToolOutcome for the request's dialect (contract: "Tool results for refusals and queued
 * writes"; decisions 7, 10; spec/errors-v1.json).
 *  - handshake: refusals are tool results with isError true and structuredContent {status, code, message};
 *  - modern: refusals are JSON-RPC errors with the refusal's HTTP status and error.data {status, code, message};
 *  - both: a queued write is a result with isError false; the opaque failure never carries upstream text.
 */
import { randomBytes } from 'node:crypto';
import protocol from '../../spec/protocol-v1.json';
import { refusalInfo, toolErrorInfo } from '../errors/vocabulary';
import type { ToolOutcome } from '../tools/types';
import { complete, completeResult, freezeResultJson, frozenResultJson, frozenResultTail } from './envelopes';
import { serializedRows } from '../pipeline/rows-json';
import { isStoredOutcome } from '../pipeline/cache';
import { jsonText } from '../sources/postgres/raw-json';
import type { Dialect } from '../transport/admission';
import { retryAfterSeconds } from '../transport/http-errors';

/** Either a result (HTTP 200) or a JSON-RPC error with its HTTP status and extra headers. */
export type RenderedOutcome =
  | { kind: 'result'; result: Record<string, unknown> }
  | { kind: 'error'; status: number; error: { code: number; message: string; data?: unknown }; headers?: Record<string, string> };

const TOOL_RESULT_VERSIONS = new Set(protocol.versions.argumentErrorsAsToolResults);

/** The queued-write text: not executed, must not be retried. */
export function queuedText(approvalId: string, state: string): string {
  return `NOT EXECUTED. This write was queued for an operator's approval (approval_id ${approvalId}, state ${state}). Do not retry it: every retry queues another approval. Tell the user the approval_id; the write runs once an operator approves it. To learn the outcome later, call interlock_approval_status with this approval_id.`;
}

/** Renders `o` for `dialect`/`version`; `requestId` goes into refusals, statement_failed and opaque failures for the operator. */
export function renderOutcome(o: ToolOutcome, dialect: Dialect, version: string, requestId: string): RenderedOutcome {
  switch (o.kind) {
    case 'result':
      return { kind: 'result', result: isStoredOutcome(o) ? storedResult(o) : resultOf(o) };
    case 'queued': {
      const info = refusalInfo('approval_required');
      const sc = { status: 'queued', code: 'approval_required', approval_id: o.approvalId, approval_state: o.approvalState, message: o.message ?? info.message, request_id: requestId };
      return { kind: 'result', result: complete({ content: [{ type: 'text', text: queuedText(o.approvalId, o.approvalState) }], structuredContent: sc, isError: false }) };
    }
    case 'refusal': {
      const info = refusalInfo(o.code);
      const message = o.message ?? info.message;
      const sc: Record<string, unknown> = { status: info.status, code: info.code, message, ...(o.extra ?? {}), request_id: requestId };
      if (dialect === 'modern') {
        const headers: Record<string, string> = {};
        if (info.http === 401) headers['WWW-Authenticate'] = 'Bearer realm="interlock"';
        if (typeof o.extra?.retry_after_ms === 'number') headers['Retry-After'] = retryAfterSeconds(o.extra.retry_after_ms);
        return { kind: 'error', status: info.http, error: { code: info.modernCode, message, data: sc }, headers };
      }
      return { kind: 'result', result: complete({ content: [{ type: 'text', text: `Refused (${info.status}, ${info.code}): ${message}` }], structuredContent: sc, isError: true }) };
    }
    case 'tool_error': {
      const info = toolErrorInfo(o.code);
      if (info.class === 'invalid_params') {
        const message = o.message ?? info.message;
        // A statement the source refused ran (and was audited): like every refusal, it names the request for the operator.
        const sc = { code: info.code, message, ...(o.reason ? { reason: o.reason } : {}), ...(o.details ?? {}), ...(info.code === 'statement_failed' ? { request_id: requestId } : {}) };
        if (TOOL_RESULT_VERSIONS.has(version)) {
          return { kind: 'result', result: complete({ content: [{ type: 'text', text: `Invalid call (${info.code}): ${message}` }], structuredContent: sc, isError: true }) };
        }
        return { kind: 'error', status: 200, error: { code: -32602, message: `Invalid params: ${message}`, data: sc } };
      }
      // internal: opaque. Only the code and the request id; never the underlying error's text.
      const message = info.message;
      if (dialect === 'modern') return { kind: 'error', status: 200, error: { code: -32603, message, data: { code: info.code, request_id: requestId } } };
      return { kind: 'result', result: complete({ content: [{ type: 'text', text: `${message} (request ${requestId})` }], structuredContent: { code: info.code, message, request_id: requestId }, isError: true }) };
    }
  }
}

// Stands for the rows while the rest of the message is serialised. The per-process random part
// cannot be guessed by a client, so no value it controls can be mistaken for it.
const ROWS_TOKEN = `\u0000interlock-rows-${randomBytes(16).toString('hex')}`;
const ROWS_SLOT = `"rows":${JSON.stringify(ROWS_TOKEN)}`;

/**
 * Serialises a JSON-RPC message for the wire: JSON.stringify, except that a result whose
 * structuredContent.rows went through rowsText() (src/pipeline/rows-json.ts) reuses that text (one
 * serialisation of the rows per result), and a result from toolsListResult() is serialised once per
 * process. Returns the same text as jsonText(message) (JSON.stringify, with RawJson values verbatim).
 */
export function serializeMessage(message: unknown): string {
  const m = message as { jsonrpc?: unknown; id?: unknown; result?: { structuredContent?: { rows?: unknown } } } | null;
  const frozen = m && typeof m.result === 'object' && m.result !== null ? frozenResultJson(m.result) : undefined;
  // A response {jsonrpc, id, result} whose result was serialised once (tools/list): splice it in.
  if (frozen !== undefined && m!.jsonrpc === '2.0' && Object.keys(m!).length === 3) return `{"jsonrpc":"2.0","id":${JSON.stringify(m!.id)},"result":${frozen}}`;
  const sc = m?.result?.structuredContent;
  const rows = sc && typeof sc === 'object' ? sc.rows : undefined;
  const json = rows && typeof rows === 'object' ? serializedRows(rows) : undefined;
  if (json === undefined) return jsonText(message);
  // No placeholder in the text (a toJSON replaced the object that held it): serialised in full (h28l).
  return withRows(jsonText({ ...m, result: { ...m!.result, structuredContent: { ...sc, rows: ROWS_TOKEN } } }), json) ?? jsonText(message);
}

/** The complete envelope of a result outcome (the same in every dialect and version). */
function resultOf(o: Extract<ToolOutcome, { kind: 'result' }>): Record<string, unknown> {
  return completeResult(o.content, o.structuredContent, o.isError);
}

const storedResults = new WeakMap<ToolOutcome, Record<string, unknown>>();

/**
 * The envelope of a cached read's stored answer (isStoredOutcome: one outcome object per cache
 * entry), built and serialised on its first hit only: later hits write the same bytes with only
 * their id encoded (serializeMessageForWire's pair, as for tools/list; issue 28). Held weakly, so it
 * goes with the entry.
 */
function storedResult(o: Extract<ToolOutcome, { kind: 'result' }>): Record<string, unknown> {
  let r = storedResults.get(o);
  if (!r) {
    r = resultOf(o);
    const sc = r.structuredContent as { rows?: unknown } | undefined;
    const rows = sc && typeof sc.rows === 'object' && sc.rows !== null ? serializedRows(sc.rows) : undefined;
    freezeResultJson(r, (rows === undefined ? undefined : withRows(jsonText({ ...r, structuredContent: { ...sc, rows: ROWS_TOKEN } }), rows)) ?? jsonText(r));
    storedResults.set(o, r);
  }
  return r;
}

/** `s` (a serialisation with ROWS_TOKEN standing for structuredContent.rows) with the rows' text `rows` in its place; undefined when `s` holds no placeholder (a toJSON replaced the object that held it). */
function withRows(s: string, rows: string): string | undefined {
  const i = s.indexOf(ROWS_SLOT);
  if (i < 0) return undefined;
  return `${s.slice(0, i)}"rows":${rows}${s.slice(i + ROWS_SLOT.length)}`;
}

/** Texts this long or longer are encoded once into a Buffer for the wire (Express's threshold). */
const BUFFER_FROM_CHARS = 1000;

/** An answer in two parts written back to back: a short text (encoded per call) and bytes made once. */
export type WirePair = readonly [head: string, tail: Buffer];

/**
 * The message as what to write: the UTF-8 of serializeMessage(message), as a Buffer when it is
 * long, else as the string. A tools/list response is the pair (`{"jsonrpc":"2.0","id":…`, the
 * catalogue's bytes made once by frozenResultTail), so only the id is encoded per call; a long
 * text is encoded once, so neither the Content-Length nor the socket write measures or encodes it
 * again.
 */
export function serializeMessageForWire(message: unknown): string | Buffer | WirePair {
  const m = message as { jsonrpc?: unknown; id?: unknown; result?: unknown } | null;
  const tail = m && m.jsonrpc === '2.0' && typeof m.result === 'object' && m.result !== null && Object.keys(m).length === 3 ? frozenResultTail(m.result) : undefined;
  if (tail) return [`{"jsonrpc":"2.0","id":${JSON.stringify(m!.id)}`, tail];
  const text = serializeMessage(message);
  return text.length < BUFFER_FROM_CHARS ? text : Buffer.from(text, 'utf8');
}
