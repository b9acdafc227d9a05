/**
 * Pipeline step 7, execution: reads run on the source's reader connector (read-only connections,
 * extended protocol, a portal fetching max_rows + 1, a byte cap enforced on the wire before any row
 * is decoded) with the call's AbortSignal, so closing the client's stream cancels the statement in
 * PostgreSQL, and with the caller's identity, whose concurrent statements per source are capped.
 * Connector failures are mapped to the contract's refusals (circuit open, TLS refused, timeout,
 * source busy, concurrency cap, result too large) or to the opaque failure.
 */
import { statementSqlstateInfo, toolErrorReasonForSqlState, type StatementSqlstateInfo } from '../errors/vocabulary';
import { statementErrorObject, type StatementErrorObject } from './statement-errors';
import type { SourceRecord } from '../governance/store';
import type { ToolOutcome } from './types';
import type { ReferencingKey, RelationName, SourceCatalog } from '../sql/catalog-types';
import type { LiveRelationTree } from '../sql/hierarchy';

/** A read as the connector returns it: columns in order, and the rows as arrays. */
export interface ReadRows {
  fields: Array<{ name: string }>;
  rowsArray: unknown[][];
  truncated: boolean;
  /** Why rows were cut when `truncated` (issue 23 item 4): the row cap, or the byte cap / wire budget. Absent: not said. */
  truncatedBy?: TruncatedBy | null;
  /** The read's guard raised: its statement did not run and there are no rows (see QueryConnector.standaloneGuard). */
  guardTripped?: true;
  /** The read's function guard raised (task hf5; QueryConnector.functionGuard): its statement did not run and there are no rows. */
  functionsChanged?: true;
  /** A reader connection opened for the read resolves names on another path than `searchPath` (the source changed since the scan; task flake47): its statement did not run and there are no rows. */
  searchPathChanged?: true;
}

/** What cut a result: `max_rows` (more rows matched than the row cap) or `max_bytes` (the result's byte cap). */
export type TruncatedBy = 'max_rows' | 'max_bytes';

/** The reader side of a source connector. Rejects with an error whose `code` is a SourceErrorCode. */
export interface QueryConnector {
  /** `opts.settings`: custom settings bound (as parameters) on the connection before the statement: row-rule attribute values (issue 27). `opts.searchPath`: the catalogue's lookup path the statement was analysed on; the read runs only on a connection whose path is the same (src/sources/postgres/read.ts, red team rt42 G3), else resolves `searchPathChanged`. `opts.poolWait`: the call's waits for the source (ms; ReadOptions.poolWait, read by admission by capacity, issue 29). */
  read(sql: string, params: unknown[], opts: { maxRows: number; maxBytes: number; signal?: AbortSignal; identityId?: string; settings?: ReadonlyArray<readonly [string, string]>; guard?: { text: string; values: string[] }; functionGuard?: { text: string; values: string[] }; searchPath?: readonly string[]; retryIfLost?: boolean; poolWait?: { poolMs: number; slotMs?: number } }): Promise<ReadRows>;
  /**
   * A guard for `read` that proves, in the read's own round trip and right before the statement,
   * that the functions and operators of every name the analysis `names` looks up (`resolvedNames`),
   * and of every user function it runs (`userFunctions`), are still exactly the ones `catalog`
   * recorded in the schemas PostgreSQL could resolve each from (the reader's pinned search path for
   * an unqualified name, the named schema for a qualified one, a user function's own schema), but
   * pg_catalog (tasks hf5, hg1, hg2; src/sources/postgres/function-guard.ts);
   * when they are not, the statement is not run and the read resolves with `functionsChanged`.
   * `rowShapes` (task hrt42, `SqlAnalysisOk.rowShapes`): the same guard also proves those relations'
   * columns are the scanned ones (src/sources/postgres/shape-guard.ts). `typeUses` (task hcast,
   * `SqlAnalysisOk.typeUses`): and that the casts and domain constraints of those types are the
   * scanned ones (src/sources/postgres/type-guard.ts). `reads`, `viewSources`, `functionReads`
   * (red team rt49 V1): and that every view and materialized view the statement goes through (nested
   * ones included) still has the scanned definition, and every stored generated column it reads its
   * scanned expression (src/sources/postgres/view-guard.ts, rt49 V2). `opts.relationKinds` (rt49 R1):
   * and that every table it reads or goes through is still a table, not a view created under its
   * name. Null for none (nothing sent).
   */
  functionGuard?(
    catalog: SourceCatalog,
    names:
      | {
          userFunctions?: ReadonlyArray<{ schema: string; name: string }>;
          resolvedNames?: { functions: ReadonlyArray<string>; operators: ReadonlyArray<string>; qualifiedFunctions?: ReadonlyArray<{ schema: string; name: string }>; qualifiedOperators?: ReadonlyArray<{ schema: string; name: string }> };
          typeUses?: { oids: ReadonlyArray<number>; names: ReadonlyArray<{ schema: string; name: string }> };
          reads?: ReadonlyArray<{ schema: string; table: string }>;
          viewSources?: ReadonlyArray<{ schema: string; table: string }>;
          functionReads?: ReadonlyArray<{ relations: ReadonlyArray<{ schema: string; table: string }> }>;
        }
      | undefined,
    rowShapes?: ReadonlyArray<{ schema: string; name: string }>,
    opts?: { relationKinds?: boolean },
  ): { text: string; values: string[] } | null;
  /**
   * An approved write's guard (task hhook; src/sources/postgres/hook-guard.ts): `guard` followed by
   * a check, in the write's transaction right before its statement, that each of `relations` (all
   * the write touches) still runs on a write the code the catalogue scan recorded
   * (`CatalogRelation.hookVersion`); `incomplete` makes it always trip. `targets` (the write's
   * targets) are locked before it (`lock`, red team rt44a). Test doubles may lack it.
   */
  hookGuard?(catalog: SourceCatalog, guard: { text: string; values: string[] } | null, relations: readonly RelationName[], incomplete?: boolean, targets?: readonly RelationName[]): { text: string; values: string[]; lock?: string } | null;
  /**
   * A guard for `read` that proves, in the read's own round trip, that `relations` still stand alone
   * (no partition or inheritance parent or child); when it cannot, the statement is not run and
   * the read resolves with `guardTripped` (issue 23, bench 01; src/sources/postgres/hierarchy.ts).
   */
  standaloneGuard?(relations: readonly RelationName[]): { text: string; values: string[] };
  /**
   * The live ancestors and descendants of relations (issue 22 item 1), keyed by
   * `relationKey(schema, name)`; the PostgreSQL connector has it (src/sources/postgres/hierarchy.ts).
   * A connector without it (test doubles) is not re-checked before reads. `probe` true: first let
   * the server prove which relations stand alone (the cheap common case), and walk only the others;
   * false or absent: walk at once (the caller knows some relation sits in a tree).
   */
  relationTrees?(relations: readonly RelationName[], opts: { signal?: AbortSignal; identityId?: string; probe?: boolean }): Promise<Map<string, LiveRelationTree>>;
  /**
   * The foreign keys with a writing referential action as the server has them now, keyed by
   * `relKey` of the referenced relation (src/sources/postgres/referential-keys.ts); an approved
   * write is re-checked with them (src/approvals/execute.ts). Test doubles may lack it.
   */
  referentialKeys?(opts: { signal?: AbortSignal; identityId?: string }): Promise<Map<string, ReferencingKey[]>>;
  /**
   * The printed definitions of the named views as the server has them now, keyed by `relKey`
   * (src/sources/postgres/referential-keys.ts readViewDefinitions); an approved UPDATE through a
   * view keeps its base-column mapping only while they match the scan's (src/approvals/execute.ts).
   * Test doubles may lack it (then the mapping is dropped: every base column counts).
   */
  viewDefinitions?(views: readonly RelationName[], opts: { signal?: AbortSignal; identityId?: string }): Promise<Map<string, string>>;
  /**
   * The server's `server_version_num` now; an approved MERGE into a row-ruled table is planned with
   * it (PostgreSQL 17 or later runs it on the check-option view; src/approvals/execute.ts). Test
   * doubles may lack it (the catalogue's version is used).
   */
  serverVersionNum?(opts: { signal?: AbortSignal; identityId?: string }): Promise<number>;
  /**
   * The write privileges (INSERT, UPDATE, DELETE) the source's writer role lacks on `relations`,
   * keyed by `relKey` (src/sources/postgres/writer-privileges.ts); null without a writer role. A
   * write is refused before it is queued when its writer may not modify its target (task hnu42a).
   * Test doubles may lack it (writes are then queued unchecked).
   */
  writerMissingPrivileges?(relations: readonly RelationName[], opts: { signal?: AbortSignal; identityId?: string }): Promise<Map<string, Array<'INSERT' | 'UPDATE' | 'DELETE'>> | null>;
}

/** Gives the connector of a source (pools are cached by the provider). */
export interface ConnectorProvider {
  reader(source: SourceRecord): QueryConnector;
}

/**
 * insufficient_privilege raised by the source for a governed read: the gateway's reader role lacks a
 * grant (the agent's statement passed the gateway's own authorization), an operator's matter, told
 * as the refusal source_permission_denied (task hnu4a item 2).
 */
export const SQLSTATE_INSUFFICIENT_PRIVILEGE = '42501';

/**
 * The object a 42501 message of the source names ("permission denied for table note", "… for view
 * x", PostgreSQL before 15: "… for relation note"), for the operator's log only; undefined when the
 * message has another shape.
 */
export function permissionDeniedObject(message: unknown): string | undefined {
  const m = typeof message === 'string' ? /^permission denied for (?:table|relation|view|materialized view|foreign table|sequence|schema|function|column) (.+)$/.exec(message) : null;
  return m ? m[1] : undefined;
}

/** configuration_limit_exceeded: the statement passed a per-statement limit (e.g. the reader role's temp_file_limit). */
const SQLSTATE_CONFIGURATION_LIMIT = '53400';

/**
 * Maps a connector error to an outcome. Only the SourceError code and, for a statement's own errors
 * (the classes of spec/errors-v1.json `statementSqlstates`), the SQLSTATE, its class and condition
 * names and, when `statement` (the agent's own text) wrote it, the column, relation, function or
 * operator the error names (src/pipeline/statement-errors.ts) reach the agent; never the driver's
 * or server's text (it can carry values, hidden names, hosts and addresses). A SQLSTATE that
 * spec/errors-v1.json names as a `statement_failed` reason (55P03 → `lock_timeout`, issue 22 item 6)
 * answers with that reason and its fixed message. 42501 (insufficient_privilege) is the refusal
 * source_permission_denied: a grant the reader role lacks, never "correct the statement".
 */
export function mapConnectorError(err: unknown, statement?: string): ToolOutcome {
  const e = err as { code?: string; sqlState?: string; retryAfterMs?: number; cause?: { message?: unknown } };
  const retry = typeof e?.retryAfterMs === 'number' ? { retry_after_ms: e.retryAfterMs } : undefined;
  switch (e?.code) {
    case 'source_busy':
      return { kind: 'refusal', code: 'source_busy', ...(retry ? { extra: retry } : {}) };
    case 'concurrency_limited':
      return { kind: 'refusal', code: 'concurrency_limited', ...(retry ? { extra: retry } : {}) };
    case 'result_too_large':
      return { kind: 'refusal', code: 'result_too_large' };
    case 'circuit_open':
      return { kind: 'refusal', code: 'circuit_open' };
    case 'source_unavailable':
      return { kind: 'refusal', code: 'source_unavailable' };
    case 'upstream_tls_refused':
      return { kind: 'refusal', code: 'upstream_tls_refused' };
    case 'session_settings_mismatch':
      return { kind: 'refusal', code: 'session_settings_mismatch' };
    case 'statement_timeout':
      return { kind: 'refusal', code: 'statement_timeout' };
    case 'cancelled':
      return { kind: 'tool_error', code: 'cancelled' };
    default: {
      // A cause the agent can act on (lock_timeout, 55P03) has its own reason and fixed message.
      const reason = typeof e?.sqlState === 'string' ? toolErrorReasonForSqlState('statement_failed', e.sqlState) : undefined;
      if (reason) return { kind: 'tool_error', code: 'statement_failed', reason: reason.reason, message: reason.message };
      // Not the statement's fault: the source refused the gateway's reader role (no name, no driver text).
      if (e?.sqlState === SQLSTATE_INSUFFICIENT_PRIVILEGE) return { kind: 'refusal', code: 'source_permission_denied' };
      if (e?.sqlState === SQLSTATE_CONFIGURATION_LIMIT) {
        return { kind: 'tool_error', code: 'statement_failed', message: `The statement failed in the source database: it passed a per-statement limit of the source, such as temp_file_limit (SQLSTATE ${SQLSTATE_CONFIGURATION_LIMIT}).` };
      }
      const info = typeof e?.sqlState === 'string' && /^[0-9A-Z]{5}$/.test(e.sqlState) ? statementSqlstateInfo(e.sqlState) : undefined;
      if (!info) return { kind: 'tool_error', code: 'tool_execution_failed' }; // no SQLSTATE (e.g. connection refused) or not the statement's
      const sqlstate = e.sqlState!;
      // The server's message is read only to find a name, kept only when the agent's own text holds it.
      const object = statement !== undefined ? statementErrorObject(info.objectKinds, e.cause?.message, statement) : undefined;
      return { kind: 'tool_error', code: 'statement_failed', message: statementFailedMessage(sqlstate, info, object), details: { sqlstate, ...(info.condition ? { condition: info.condition } : {}), ...(object ? { object } : {}) } };
    }
  }
}

/**
 * The agent's message for a statement the source refused: "The statement failed in the source
 * database: data exception, invalid_text_representation (SQLSTATE 22P02)." — plus "; column "x""
 * when the error names an object the agent wrote, and what to do.
 */
export function statementFailedMessage(sqlstate: string, info: StatementSqlstateInfo, object?: StatementErrorObject): string {
  const what = `${info.className}${info.condition ? `, ${info.condition}` : ''} (SQLSTATE ${sqlstate})`;
  const named = object ? `; ${object.kind} ${JSON.stringify(object.name)}` : '';
  return `The statement failed in the source database: ${what}${named}. Correct the statement before trying again.`;
}
