/**
 * Why an approved write failed (issue 14, item 4). Pure functions: `failureCause` turns what the
 * execution threw, or the code of a re-check that refused it, into the operator-only cause stored
 * on the approval (approvals.failure: PostgreSQL's SQLSTATE, message, detail and hint);
 * `failureCode` gives the stable code agents see (spec/errors-v1.json `approvalFailures`).
 *
 * Operators see the cause in the CLI, the admin API and the console. Agents never do: they get the
 * code and its fixed message (src/approvals/status.ts), so no driver or server text reaches them.
 */
import type { ApprovalFailureCause } from '../control/approvals';
import { REQUESTER_PROBLEMS } from './requester';
import { cutText } from '../errors/cut-text';

/** Longest stored message, detail or hint, in characters. */
const MAX_TEXT = 2000;

/** What an operator is told when a re-check refused the write at approval time, by code. */
const RECHECK_CAUSES: Record<string, string> = {
  ...REQUESTER_PROBLEMS,
  source_disabled: 'the source is disabled (or no longer exists)',
  source_not_catalogued: 'the source has no catalog snapshot: run interlock source scan',
  classification_changed: 'the statement no longer analyses as the same write against the current catalog',
  source_role_denied: "the requesting identity's source roles no longer allow this write",
  policy_denied: 'a policy now refuses this write',
  row_rule_unenforceable: "the requester's row rules cannot be applied to this write now (a rule is invalid or does not fit the table, MERGE into a ruled table, a view, function or operator on a ruled source, or the partition tree changed since the scan)",
  row_rule_attribute_missing: "a row rule of the requester needs an identity attribute its identity record does not hold (or not as a usable value)",
  row_rules_unavailable: "the source's row views could not be created by the writer role (see the gateway log)",
};

/** What an operator is told for a connector failure that carries no server error, by connector code. */
const CONNECTOR_CAUSES: Record<string, string> = {
  circuit_open: "the source's circuit breaker is open after repeated failures",
  source_unavailable: 'the source database could not be reached (refused or dropped connection, shutting down or starting up, credentials not accepted, or the database does not exist; the gateway log says which)',
  upstream_tls_refused: "the source's TLS was refused",
  session_settings_mismatch: "the source's connections do not hold the session settings InterLock pins (the gateway log names the setting and the server's value)",
  statement_timeout: "the statement ran longer than the source's statement_timeout_ms and was cancelled",
  cancelled: 'the execution was cancelled',
  outcome_unknown: 'the connection to the source was lost while COMMIT was in flight (or the source did not answer it in time), and asked afterwards on a new connection the source could not say whether the transaction committed (in progress, unreachable, or no answer in time): check on the source whether the write was applied before queuing it again',
  execution_failed: 'the source could not run the statement (connection failed, or no writer role is configured)',
};

const clip = (v: unknown): string | undefined => (typeof v === 'string' && v.length > 0 ? cutText(v, MAX_TEXT) : undefined);

/**
 * The operator-only cause of a failed execution. `err` is what the connector threw (a SourceError
 * whose non-enumerable `cause` is the driver's error, with PostgreSQL's code/message/detail/hint).
 * For a server error: {sqlstate, message, detail?, hint?} from PostgreSQL. Otherwise a fixed
 * sentence for the connector code (no host, port or driver text is kept).
 */
export function failureCause(err: unknown): ApprovalFailureCause {
  const e = (err ?? {}) as { code?: string; sqlState?: string; cause?: unknown };
  const server = (e.cause ?? {}) as { code?: unknown; message?: unknown; detail?: unknown; hint?: unknown };
  const sqlstate = typeof server.code === 'string' && /^[0-9A-Z]{5}$/.test(server.code) ? server.code : e.sqlState;
  // The lost session's own error (e.g. FATAL 57P01) is not the story: the commit's outcome is unknown.
  if (e.code === 'outcome_unknown') return { message: CONNECTOR_CAUSES.outcome_unknown, ...(sqlstate ? { sqlstate } : {}) };
  if (sqlstate && typeof server.message === 'string') {
    const c: ApprovalFailureCause = { sqlstate, message: clip(server.message)! };
    const detail = clip(server.detail);
    const hint = clip(server.hint);
    if (detail) c.detail = detail;
    if (hint) c.hint = hint;
    return c;
  }
  const c: ApprovalFailureCause = { message: CONNECTOR_CAUSES[e.code ?? ''] ?? CONNECTOR_CAUSES.execution_failed };
  if (sqlstate) c.sqlstate = sqlstate;
  return c;
}

/**
 * The operator-only cause of an approved write its guard refused at run time (task hw;
 * `catalog_stale`): checked in the write's transaction right before the statement, a function or
 * operator it looks up, or a relation whose whole rows it uses, was not what the catalogue the
 * approval was analysed with recorded. `rescan`: whether the rescan that followed succeeded
 * (undefined: not known when the cause is written).
 */
export function staleCatalogCause(rescan?: boolean): ApprovalFailureCause {
  const after = rescan === undefined ? 'the source is being rescanned' : rescan ? 'the source was rescanned' : 'the source could not be rescanned (see the log; run interlock source scan)';
  return {
    message:
      'checked in the write\'s transaction right before the statement: a function or operator of a name the write looks up (or a user function it runs) was created, replaced, altered, renamed, moved or dropped on the source, or a relation whose whole rows it uses changed its columns, or a relation it writes changed the code its writes run (triggers and their functions, rules, row-level security and policies, defaults, generated columns, constraints, indexes, partitions, column types and domains), since the catalogue this approval was analysed with was scanned, so the code that would have run is not the code that was reviewed. ' +
      `Nothing was written (rolled back); ${after}. Review the write against the new definitions and, to run it, requeue it (interlock approval requeue) and approve it again.`,
  };
}

/** The operator-only cause of a re-check refusal (`code` from recheck, e.g. "policy_denied"). */
export function recheckCause(code: string): ApprovalFailureCause {
  return { message: `re-checked at approval: ${RECHECK_CAUSES[code] ?? code}` };
}

/**
 * The operator-only cause of an approved write that was not run because something threw before it
 * reached the writer (src/approvals/execute.ts approveAndExecute; agents see execution_failed):
 * source settings the connector refuses are named by their field (`invalid source settings
 * (writer.user)`, the connector's fixed text); anything else is a fixed sentence pointing at the
 * gateway log (no driver, host or port text is kept).
 */
export function notRunCause(err: unknown): ApprovalFailureCause {
  const m = /invalid source settings \(([A-Za-z0-9_.]+)\)/.exec(String((err as { message?: unknown } | null)?.message ?? ''));
  if (m) return { message: `not run: the source's settings cannot be used (invalid source settings: ${m[1]}); correct them (interlock source update), then requeue the write` };
  return { message: 'not run: checking the write at approval, or setting up its writer, failed (the gateway log says why); requeue it once that is fixed' };
}

/**
 * The stable failure code agents see for what the connector threw: statement_failed when the
 * server refused the statement (a SQLSTATE), else the connector's code (statement_timeout,
 * circuit_open, source_unavailable, upstream_tls_refused, session_settings_mismatch, cancelled,
 * outcome_unknown, execution_failed).
 */
export function failureCode(err: unknown): string {
  const e = (err ?? {}) as { code?: string; sqlState?: string };
  if (e.code === 'execution_failed' && e.sqlState) return 'statement_failed';
  return e.code && CONNECTOR_CAUSES[e.code] ? e.code : 'execution_failed';
}
