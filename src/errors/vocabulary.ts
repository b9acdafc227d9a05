/**
 * The refusal vocabulary and tool-error table, read from spec/errors-v1.json (never duplicated here).
 * Contract: "Tool results for refusals and queued writes"; decisions.md "Refusal vocabulary".
 */
import errors from '../../spec/errors-v1.json';

/** A refusal code from spec/errors-v1.json `refusals` (e.g. "missing_api_key"). */
export type RefusalCode = string;
/** A tool-error code from spec/errors-v1.json `toolErrors` (e.g. "invalid_sql", "tool_execution_failed"). */
export type ToolErrorCode = string;

/** One refusal status with its HTTP status and modern-dialect JSON-RPC code. */
export interface StatusInfo {
  status: string;
  http: number;
  modernCode: number | null;
  isError: boolean;
}

/** A refusal's status (unauthorized, forbidden, …) and default message. */
export interface RefusalInfo {
  code: string;
  status: string;
  message: string;
  retryable: boolean;
  http: number;
  modernCode: number;
}

/**
 * A cause a tool error can name (spec/errors-v1.json `toolErrors[].reasons`, issue 22 item 6): the
 * machine key agents read in `reason`, the SQLSTATE it stands for, and its fixed message.
 */
export interface ToolErrorReason {
  reason: string;
  sqlstate?: string;
  message: string;
}

/** A tool error's class (invalid_params or internal), default message, and the reasons it can carry. */
export interface ToolErrorInfo {
  code: string;
  class: 'invalid_params' | 'internal';
  message: string;
  retryable: boolean;
  reasons?: ToolErrorReason[];
}

const statusByName = new Map<string, StatusInfo>(errors.statuses.map((s) => [s.status, s as StatusInfo]));
const refusalByCode = new Map<string, RefusalInfo>();
for (const r of errors.refusals) {
  const s = statusByName.get(r.status);
  if (!s) throw new Error(`spec/errors-v1.json: refusal ${r.code} has unknown status ${r.status}`);
  refusalByCode.set(r.code, { ...r, http: s.http, modernCode: s.modernCode ?? -32602 });
}
const toolErrorByCode = new Map<string, ToolErrorInfo>(errors.toolErrors.map((t) => [t.code, t as ToolErrorInfo]));

/** Looks up a refusal code; throws for a code that is not in spec/errors-v1.json (a programming error). */
export function refusalInfo(code: RefusalCode): RefusalInfo {
  const r = refusalByCode.get(code);
  if (!r) throw new Error(`refusal code not in spec/errors-v1.json: ${code}`);
  return r;
}

/**
 * The message of refusal `code` for one of its causes (spec/errors-v1.json `refusals[].causes`, e.g.
 * audit_unavailable's `audit_key_refused`): the code, status and HTTP status stay the code's. Throws
 * for a code or cause not in the table (a programming error).
 */
export function refusalCauseMessage(code: RefusalCode, cause: string): string {
  const entry = (errors.refusals as ReadonlyArray<{ code: string; causes?: ReadonlyArray<{ cause: string; message: string }> }>).find((r) => r.code === code);
  const found = entry?.causes?.find((c) => c.cause === cause);
  if (!found) throw new Error(`refusal cause not in spec/errors-v1.json: ${code} ${cause}`);
  return found.message;
}

/** Looks up a tool-error code; throws for a code that is not in spec/errors-v1.json. */
export function toolErrorInfo(code: ToolErrorCode): ToolErrorInfo {
  const t = toolErrorByCode.get(code);
  if (!t) throw new Error(`tool error code not in spec/errors-v1.json: ${code}`);
  return t;
}

/**
 * The reason of tool error `code` that stands for SQLSTATE `sqlState` (e.g. statement_failed and
 * 55P03 → lock_timeout), or undefined when the table names none.
 */
export function toolErrorReasonForSqlState(code: ToolErrorCode, sqlState: string): ToolErrorReason | undefined {
  return toolErrorInfo(code).reasons?.find((r) => r.sqlstate === sqlState);
}

/** JSON-RPC error codes of the contract by name (ParseError → -32700, …). */
export const JSONRPC: Record<string, number> = Object.fromEntries(errors.jsonrpc.map((e) => [e.name, e.code]));

/** Default message for a JSON-RPC code, from the table. */
export function jsonRpcMessage(code: number): string {
  return errors.jsonrpc.find((e) => e.code === code)?.message ?? 'Error';
}

/** What spec/errors-v1.json `statementSqlstates` says about one SQLSTATE of a statement the source refused. */
export interface StatementSqlstateInfo {
  /** The readable name of the SQLSTATE's class, e.g. "data exception". */
  className: string;
  /** PostgreSQL's condition name, e.g. "invalid_text_representation"; absent when the table has none. */
  condition?: string;
  /** The kinds of object the SQLSTATE's message may name (column, relation, function, operator); empty: none. */
  objectKinds: readonly string[];
}

const statementSqlstates = (errors as unknown as { statementSqlstates: { classes: Record<string, string>; conditions: Record<string, string>; objectNames: Record<string, string[]> } }).statementSqlstates;

/**
 * The class name, condition name and object kinds of SQLSTATE `sqlState` when its class is one an
 * agent is told (spec/errors-v1.json `statementSqlstates.classes`: the statement's own data,
 * constraint, syntax or access errors); undefined for any other class (the opaque failure).
 */
export function statementSqlstateInfo(sqlState: string): StatementSqlstateInfo | undefined {
  const code = sqlState.toUpperCase();
  const className = statementSqlstates.classes[code.slice(0, 2)];
  if (!className) return undefined;
  const condition = statementSqlstates.conditions[code];
  return { className, ...(condition ? { condition } : {}), objectKinds: statementSqlstates.objectNames[code] ?? [] };
}
