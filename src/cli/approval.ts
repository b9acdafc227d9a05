/**
 * `interlock approval …`: writes waiting for an operator (issue 3; issue 14 items 4 and 7).
 *
 *   list [--state S] [--source ID] [--identity NAME] [--limit N] [--full]
 *        The statement column is the honest one-line form (src/approvals/statement.ts): comments
 *        removed and flagged in NOTES, shortened only with a visible "…" mark; --full prints it whole.
 *   show ID       everything, the exact statement with its comments, and for a failed approval the
 *                 operator-only cause (SQLSTATE, PostgreSQL's message, detail and hint).
 *   approve ID    executes once with the writer role; on failure prints the cause.
 *   reject ID [--reason TEXT]
 *   requeue ID    a new pending approval from a failed one, linked to it.
 *
 * Registered from src/cli/main.ts; runs through the operator backend (direct or --server).
 */
import { userInfo } from 'node:os';
import { Option, type Command } from 'commander';
import YAML from 'yaml';
import type { OperatorBackend } from '../admin/backend';
import { APPROVAL_STATES, type ApprovalFailureCause, type ApprovalRecord, type ApprovalState } from '../control/approvals';
import { ControlError } from '../control/errors';
import { initStatementDisplay, statementForDisplay } from '../approvals/statement';
import { parsePositiveInt } from './args';
import { parseOperatorName } from './context';
import { shortTime, table } from './output';
import { cutText } from '../errors/cut-text';

/** What the approval commands need from the CLI's session. */
export interface ApprovalCliSession {
  backend(): Promise<OperatorBackend>;
  print(human: string, machine: unknown): void;
  assertLocalOperator(cmd: Command): void;
}

/** Width of the statement column of `approval list` (without --full). */
export const LIST_STATEMENT_WIDTH = 80;

/** Width of the params column of `approval list` (without --full). */
export const LIST_PARAMS_WIDTH = 40;

/** The parameter values of an approval as the list shows them: JSON, shortened with … past `width` characters; '' when there are none. */
export function paramsForDisplay(params: unknown[] | null | undefined, width?: number): { text: string; truncated: boolean } {
  if (!params || params.length === 0) return { text: '', truncated: false };
  const text = JSON.stringify(params);
  if (width === undefined || text.length <= width) return { text, truncated: false };
  return { text: `${cutText(text, width - 1)}…`, truncated: true };
}

/** The cause of a failed approval as operator text: "SQLSTATE 42501: permission denied … (detail: …; hint: …)". */
export function formatFailure(f: ApprovalFailureCause | null | undefined): string {
  if (!f) return '';
  const extra = [f.detail ? `detail: ${f.detail}` : '', f.hint ? `hint: ${f.hint}` : ''].filter(Boolean).join('; ');
  return `${f.sqlstate ? `SQLSTATE ${f.sqlstate}: ` : ''}${f.message}${extra ? ` (${extra})` : ''}`;
}

/** The rows of `approval list` (pure once the scanner is loaded). */
export function approvalListTable(rows: ApprovalRecord[], full: boolean): string {
  let truncated = false;
  const body = rows.map((a) => {
    const s = statementForDisplay(a.sql, full ? undefined : LIST_STATEMENT_WIDTH);
    // The values the write will use, beside its text: an operator approves both (new-user pass).
    const p = paramsForDisplay(a.params, full ? undefined : LIST_PARAMS_WIDTH);
    truncated ||= s.truncated || p.truncated;
    const notes = [s.comments.length ? `${s.comments.length} comment(s) stripped` : '', a.outcome?.error_code ?? '', a.requeuedFrom ? `requeue of ${a.requeuedFrom}` : ''].filter(Boolean).join('; ');
    return [a.id, a.state, a.identityName, a.sourceId, shortTime(a.createdAt), shortTime(a.expiresAt), notes, p.text, s.text];
  });
  const out = table(['id', 'state', 'identity', 'source', 'created', 'expires', 'notes', 'params', 'statement'], body);
  return truncated ? `${out}\n(statements or params ending in … are shortened: approval list --full, or approval show ID for the exact text with comments)` : out;
}

/** The human form of `approval show`. */
function showText(a: ApprovalRecord): string {
  const s = statementForDisplay(a.sql);
  const lines = [YAML.stringify({ ...a, failure: undefined, claimAttributes: undefined }).trimEnd()];
  // Issue 27: kept when a token identity queued the write; the identity record's values win at approval.
  if (a.claimAttributes) lines.push(`attributes from token claims (kept with the write; the identity record's values win at approval): ${Object.keys(a.claimAttributes).sort().map((k) => `${k}=${JSON.stringify(a.claimAttributes![k])}`).join(' ')}`);
  if (s.comments.length) lines.push(`comments in the statement (not part of what runs, check they match it):`, ...s.comments.map((c) => `  ${c}`));
  if (a.failure) lines.push(`cause (operators only): ${formatFailure(a.failure)}`);
  return lines.join('\n');
}

/** Registers `approval …` on `program`. */
export function registerApprovalCommands(program: Command, session: (cmd: Command) => ApprovalCliSession): void {
  const apr = program.command('approval').description('writes waiting for an operator');
  apr
    .command('list')
    .description('list approvals (newest first)')
    .addOption(new Option('--state <state>', 'only this state').choices([...APPROVAL_STATES]))
    .option('--source <id>')
    .option('--identity <name>')
    .option('--limit <n>', 'most to show (default 100)', '100')
    .option('--full', 'print every statement whole (no shortening)')
    .action(async (o: { state?: ApprovalState; source?: string; identity?: string; limit: string; full?: boolean }, cmd: Command) => {
      const s = session(cmd);
      const rows = await (await s.backend()).listApprovals({ state: o.state, source: o.source, identity: o.identity, limit: parsePositiveInt(o.limit, '--limit', 1000) });
      await initStatementDisplay();
      s.print(approvalListTable(rows, !!o.full), rows);
    });
  apr
    .command('show')
    .description('show one approval with its statement')
    .argument('<id>')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const a = await (await s.backend()).getApproval(id);
      await initStatementDisplay();
      s.print(showText(a), a);
    });
  const operatorOpt = () => new Option('--operator <name>', 'who decides (recorded in the audit; default: your OS user name)').default(userInfo().username).argParser(parseOperatorName);
  apr
    .command('approve')
    .description('approve a pending write and execute it once with the source writer role')
    .argument('<id>')
    .addOption(operatorOpt())
    .action(async (id: string, o: { operator: string }, cmd: Command) => {
      const s = session(cmd);
      s.assertLocalOperator(cmd);
      const r = await (await s.backend()).approve(id, { operator: o.operator });
      if (r.state === 'failed') {
        s.print(`approved ${id}, but the write failed: ${r.errorCode ?? 'unknown error'}${r.failure ? `\ncause: ${formatFailure(r.failure)}` : ''}\n${requeueHint(r.errorCode, id)}`, r);
        throw new ControlError('unavailable', `approval ${id}: execution failed (${r.errorCode ?? 'unknown error'})`);
      }
      s.print(`approved and executed ${id}: ${r.rowCount ?? 0} row(s) affected`, r);
    });
  apr
    .command('reject')
    .description('reject a pending write')
    .argument('<id>')
    .addOption(operatorOpt())
    .option('--reason <text>', 'why (recorded in the audit)')
    .action(async (id: string, o: { operator: string; reason?: string }, cmd: Command) => {
      const s = session(cmd);
      s.assertLocalOperator(cmd);
      await (await s.backend()).reject(id, { operator: o.operator, reason: o.reason });
      s.print(`rejected ${id}`, { id, state: 'rejected' });
    });
  apr
    .command('requeue')
    .description('make a new pending approval from a failed one (same statement and parameters), linked to it')
    .argument('<id>')
    .addOption(operatorOpt())
    .action(async (id: string, o: { operator: string }, cmd: Command) => {
      const s = session(cmd);
      s.assertLocalOperator(cmd);
      const a = await (await s.backend()).requeue(id, { operator: o.operator });
      s.print(`requeued ${id} as ${a.id} (pending): approve it with interlock approval approve ${a.id}`, a);
    });
}

/**
 * What an operator can do after an approved write failed with `code` (spec/errors-v1.json approval
 * failures): a row-rule violation or refusal is the requester's statement against its rules, so a
 * requeue would fail again; other causes (a lock, the source down) may pass on a requeue.
 */
export function requeueHint(code: string | undefined, id: string): string {
  if (code === 'row_rule_violation' || code === 'row_rule_unenforceable') return "(the write breaks the requester's row rules: a requeue fails the same way; the agent reads this outcome with interlock_approval_status)";
  if (code === 'row_rule_attribute_missing') return `(the requester lacks an identity attribute its row rules need: set it (interlock identity attributes), then: interlock approval requeue ${id})`;
  return `(fix the cause, then: interlock approval requeue ${id})`;
}
