/**
 * Metric label values from closed sets only (issue 10, Build 7): a label value is either a member
 * of a set the gateway itself defines, or `other`. The sets are the JSON-RPC methods of
 * spec/protocol-v1.json (requests and notifications), the dialects, the error codes of
 * spec/errors-v1.json (refusals and tool errors), the served tools and the registered sources.
 * Anything a client can choose freely (a notification name, an unknown source id, a tool name)
 * never becomes a label value, so the number of series is bounded by the configuration, not by
 * traffic. Pure functions; no I/O.
 */
import protocol from '../../spec/protocol-v1.json';
import errors from '../../spec/errors-v1.json';

/** The label value for anything outside its closed set. */
export const OTHER_LABEL = 'other';

/** JSON-RPC methods of the protocol table (spec/protocol-v1.json `methods`, both kinds). */
export const PROTOCOL_METHODS: ReadonlySet<string> = new Set(protocol.methods.map((m) => m.method));

/** Refusal and tool-error codes of spec/errors-v1.json. */
export const ERROR_CODES: ReadonlySet<string> = new Set([...errors.refusals.map((r) => r.code), ...errors.toolErrors.map((t) => t.code)]);

const DIALECTS: ReadonlySet<string> = new Set(['modern', 'handshake']);

/** `value` when it is in `set`, else `other`. */
export function closedLabel(value: string, set: ReadonlySet<string>): string {
  return set.has(value) ? value : OTHER_LABEL;
}

/** The JSON-RPC method label: a method of the protocol table, '-' for an unreadable message, else `other`. */
export function methodLabel(method: string): string {
  return method === '-' ? '-' : closedLabel(method, PROTOCOL_METHODS);
}

/** The dialect label: modern, handshake, '-' (not admitted), else `other`. */
export function dialectLabel(dialect: string): string {
  return dialect === '-' ? '-' : closedLabel(dialect, DIALECTS);
}

/** The reason label: '' for none, an error code of spec/errors-v1.json, else `other`. */
export function reasonLabel(code: string | null | undefined): string {
  return !code ? '' : closedLabel(code, ERROR_CODES);
}

/** The HTTP status label: a three-digit status 100–599, else `other`. */
export function statusLabel(status: number): string {
  return Number.isInteger(status) && status >= 100 && status <= 599 ? String(status) : OTHER_LABEL;
}
