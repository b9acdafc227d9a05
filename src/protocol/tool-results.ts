/**
 * Renders a ToolOutcome for the request's dialect (contract: "Tool results for refusals and queued
 * writes"; decisions 7, 10; spec/errors-v1.json).
 *  - handshake: refusals are tool results with isError true and structuredContent {status, code, message};
 *  - modern: refusals are JSON-RPC errors with the refusal's HTTP status and error.data {status, code, message};
 *  - both: a queued write is a result with isError false; the opaque failure never carries upstream text.
 */
import protocol from '../../spec/protocol-v1.json';
import { refusalInfo, toolErrorInfo } from '../errors/vocabulary';
import type { ToolOutcome } from '../tools/types';
import { complete } from './envelopes';
import type { Dialect } from '../transport/admission';

/** Either a result (HTTP 200) or a JSON-RPC error with its HTTP status and extra headers. */
export type RenderedOutcome =
  | { kind: 'result'; result: Record<string, unknown> }
  | { kind: 'error'; status: number; error: { code: number; message: string; data?: unknown }; headers?: Record<string, string> };

const TOOL_RESULT_VERSIONS = new Set(protocol.versions.argumentErrorsAsToolResults);

/** The queued-write text: not executed, must not be retried. */
export function queuedText(approvalId: string, state: string): string {
  return `NOT EXECUTED. This write was queued for an operator's approval (approval_id ${approvalId}, state ${state}). Do not retry it: every retry queues another approval. Tell the user the approval_id; the write runs once an operator approves it. To learn the outcome later, call interlock_approval_status with this approval_id.`;
}

/** Renders `o` for `dialect`/`version`; `requestId` goes into refusals and opaque failures for the operator. */
export function renderOutcome(o: ToolOutcome, dialect: Dialect, version: string, requestId: string): RenderedOutcome {
  switch (o.kind) {
    case 'result': {
      const r: Record<string, unknown> = { content: o.content };
      if (o.structuredContent !== undefined) r.structuredContent = o.structuredContent;
      if (o.isError) r.isError = true;
      return { kind: 'result', result: complete(r) };
    }
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
        if (typeof o.extra?.retry_after_ms === 'number') headers['Retry-After'] = String(Math.ceil(o.extra.retry_after_ms / 1000));
        return { kind: 'error', status: info.http, error: { code: info.modernCode, message, data: sc }, headers };
      }
      return { kind: 'result', result: complete({ content: [{ type: 'text', text: `Refused (${info.status}, ${info.code}): ${message}` }], structuredContent: sc, isError: true }) };
    }
    case 'tool_error': {
      const info = toolErrorInfo(o.code);
      if (info.class === 'invalid_params') {
        const message = o.message ?? info.message;
        if (TOOL_RESULT_VERSIONS.has(version)) {
          return { kind: 'result', result: complete({ content: [{ type: 'text', text: `Invalid call (${info.code}): ${message}` }], structuredContent: { code: info.code, message }, isError: true }) };
        }
        return { kind: 'error', status: 200, error: { code: -32602, message: `Invalid params: ${message}`, data: { code: info.code, message } } };
      }
      // internal: opaque. Only the code and the request id; never the underlying error's text.
      const message = info.message;
      if (dialect === 'modern') return { kind: 'error', status: 200, error: { code: -32603, message, data: { code: info.code, request_id: requestId } } };
      return { kind: 'result', result: complete({ content: [{ type: 'text', text: `${message} (request ${requestId})` }], structuredContent: { code: info.code, message, request_id: requestId }, isError: true }) };
    }
  }
}
