/**
 * `interlock approval …`: writes waiting for an operator (issue 3; issue 14 items 4 and 7).
 *
 *   list [--state S] [--source ID] [--identity NAME] [--limit N] [--full]
 *        The statement column is the honest one-line form (src/approvals/statement.ts): comments
 *        removed and flagged in NOTES, shortened only with a visible "…" mark; --full prints it whole.
 *   show ID       everything, the exact statement with its comments, the current row estimate (a
 *                 pending one is planned as the writer, EXPLAIN only), and for a failed approval the
 *                 operator-only cause (SQLSTATE, PostgreSQL's message, detail and hint).
 *   approve ID [--yes]
 *                 prints the statement, its parameters and the current row estimate, asks to confirm
 *                 (y/N) on a terminal unless --yes; without a terminal and without --yes it refuses
 *                 (exit 4, nothing runs). Then executes once with the writer role; on failure prints
 *                 the cause.
 *   reject ID [--reason TEXT]
 *   requeue ID    a new pending approval from a failed one, linked to it.
 *
 * Registered from src/cli/main.ts; runs through the operator backend (direct or --server).
 */
import { userInfo } from 'node:os';
import { Option, type Command } from 'commander';
import YAML from 'yaml';
import type { ApprovalReview, OperatorBackend } from '../admin/backend';
import { APPROVAL_STATES, type ApprovalFailureCause, type ApprovalRecord, type ApprovalState } from '../control/approvals';
import { ControlError } from '../control/errors';
import { hasRightToLeft, initStatementDisplay, paramsForDisplay, RIGHT_TO_LEFT_NOTE, showInvisible, statementForDisplay } from '../approvals/statement';
import { parsePositiveInt } from './args';
import { parseOperatorName } from './context';
import { shortTime, table } from './output';
import type { RequesterProblem } from '../approvals/requester';

/** What the approval commands need from the CLI's session. */
export interface ApprovalCliSession {
  backend(): Promise<OperatorBackend>;
  print(human: string, machine: unknown): void;
  assertLocalOperator(cmd: Command): void;
  readonly remote: boolean;
  readonly opts: { json?: boolean };
  readonly io: { out(text: string): void; err(text: string): void };
  /**
   * Asks `question` on the terminal and resolves true for "y" or "yes" (any case), false for
   * anything else; resolves null at once when there is no terminal to ask on (stdin not a TTY).
   */
  confirm(question: string): Promise<boolean | null>;
}

/** Exit code of `approval approve` when the approval was not confirmed (no terminal and no --yes, or not answered y). */
export const EXIT_NOT_CONFIRMED = 4;

/**
 * `approval approve` did not run the write because nobody confirmed it: no terminal to ask on and no
 * --yes, or the answer was not y. The CLI exits EXIT_NOT_CONFIRMED (src/cli/main.ts exitCodeFor).
 */
export class NotConfirmedError extends Error {
  readonly code = 'approval_not_confirmed';
  constructor(message: string) {
    super(message);
    this.name = 'NotConfirmedError';
  }
}

/**
 * The review lines an operator reads before approving (`approval approve`, and after the record in
 * `approval show`): the statement as it runs (comments listed apart), its parameters, the row
 * estimate of the console's one estimator, whether it deletes, updates or merges rows, and the
 * console's warning when approving cannot run it (the requester's key revoked or expired, or its
 * identity disabled: "warning: Approving will not run this write: …"), and RIGHT_TO_LEFT_NOTE when
 * the statement or its parameters hold right-to-left letters.
 */
export function reviewText(r: ApprovalReview, opts: { statement: boolean }): string {
  const a = r.approval;
  const lines: string[] = [];
  if (opts.statement) {
    const s = statementForDisplay(a.sql);
    lines.push(`approval ${a.id}: ${a.identityName} on ${a.sourceId}, ${a.state}, expires ${shortTime(a.expiresAt)}`);
    lines.push(`statement: ${s.text}`);
    if (s.comments.length) lines.push('comments in the statement (not part of what runs, check they match it):', ...s.comments.map((c) => `  ${c}`));
    lines.push(`parameters: ${paramsForDisplay(a.params).text || '(none)'}`);
  }
  lines.push(`row estimate: ${estimateText(r)}`);
  if (r.destructive) lines.push('destructive: yes (it deletes, updates or merges rows)');
  // The console's warning (an older server's review has no requester member).
  if (r.requester) lines.push(`warning: ${r.requester.message}`);
  if (hasRightToLeft(a.sql) || hasRightToLeft(JSON.stringify(a.params ?? null))) lines.push(RIGHT_TO_LEFT_NOTE);
  // Every character the terminal would apply rather than show is shown as ⟨U+XXXX⟩ (task hnu43 item 2).
  return showInvisible(lines.join('\n')).text;
}

/**
 * The row estimate as operator text: the number, or why there is none. A number is said to be an
 * estimate, not a count, in the console's words (src/console/static/console.js estimateText; task
 * low48 item 2): PostgreSQL never estimates fewer than 1 row, so 1 can mean none (a row the
 * requester's row rules hide estimates 1 and then changes 0).
 */
export function estimateText(r: ApprovalReview): string {
  if (r.estimate !== null) {
    const rules = r.plan && r.plan.ok && r.plan.rowRules ? ", of the statement as approving runs it, with the requester's row rules" : '';
    return `about ${r.estimate} row(s) changed (the planner's estimate now, EXPLAIN as the writer role${rules}; nothing ran). ${ESTIMATE_NOT_COUNT}${r.estimate <= 1 ? ` ${ONE_CAN_MEAN_NONE}.` : '.'}`;
  }
  if (!r.plan) return r.approval.state === 'pending' ? 'none (the source is gone)' : `none (only a pending approval is planned; this one is ${r.approval.state})`;
  if (!r.plan.ok) return `none (no plan: ${r.plan.reason})`;
  return 'none (the plan gives no row count)';
}

/** What a row estimate is, as the console says it (src/console/static/console.js estimateText). */
const ESTIMATE_NOT_COUNT = 'This is an estimate, not a count: the rows changed may differ';
/** Why an estimate of 1 row can mean none, as the console says it. */
const ONE_CAN_MEAN_NONE = '(PostgreSQL never estimates fewer than 1 row, so 1 can mean none)';

/** Width of the statement column of `approval list` (without --full). */
export const LIST_STATEMENT_WIDTH = 80;

/** Width of the params column of `approval list` (without --full). */
export const LIST_PARAMS_WIDTH = 40;

// The parameter values as `approval list` and the console's list show them (moved beside the statement's display form).
export { paramsForDisplay } from '../approvals/statement';

/** The cause of a failed approval as operator text: "SQLSTATE 42501: permission denied … (detail: …; hint: …)". */
export function formatFailure(f: ApprovalFailureCause | null | undefined): string {
  if (!f) return '';
  const extra = [f.detail ? `detail: ${f.detail}` : '', f.hint ? `hint: ${f.hint}` : ''].filter(Boolean).join('; ');
  return `${f.sqlstate ? `SQLSTATE ${f.sqlstate}: ` : ''}${f.message}${extra ? ` (${extra})` : ''}`;
}

/** The rows of `approval list` (pure once the scanner is loaded); NOTES flags a pending row's requester problem (`⚠ key_revoked`). */
export function approvalListTable(rows: Array<ApprovalRecord & { requesterProblem?: RequesterProblem | null }>, full: boolean): string {
  let truncated = false;
  const body = rows.map((a) => {
    const s = statementForDisplay(a.sql, full ? undefined : LIST_STATEMENT_WIDTH);
    // The values the write will use, beside its text: an operator approves both (new-user pass).
    const p = paramsForDisplay(a.params, full ? undefined : LIST_PARAMS_WIDTH);
    truncated ||= s.truncated || p.truncated;
    // A pending write its requester can no longer have run (key revoked or expired, identity disabled), flagged as the console does (task hnu41 item 6).
    const warn = a.requesterProblem ? `⚠ ${a.requesterProblem}` : '';
    const rtl = hasRightToLeft(a.sql) || hasRightToLeft(JSON.stringify(a.params ?? null)) ? 'right-to-left text (approval show)' : '';
    const notes = [warn, rtl, s.comments.length ? `${s.comments.length} comment(s) stripped` : '', a.outcome?.error_code ?? '', a.requeuedFrom ? `requeue of ${a.requeuedFrom}` : ''].filter(Boolean).join('; ');
    return [a.id, a.state, a.identityName, a.sourceId, shortTime(a.createdAt), shortTime(a.expiresAt), notes, p.text, s.text];
  });
  const out = table(['id', 'state', 'identity', 'source', 'created', 'expires', 'notes', 'params', 'statement'], body);
  return truncated ? `${out}\n(statements ending in … or params ending in …#digest are shortened: approval list --full, or approval show ID for the exact text with comments)` : out;
}

/**
 * The human form of `approval show`: the record (YAML; `sql` is the exact statement, comments and
 * line breaks kept), then the review's row estimate. Every invisible character (bidirectional
 * overrides such as U+202E, zero-width characters, controls: showInvisible) anywhere in it is shown
 * as `⟨U+XXXX⟩`, as `approval list`, the approve prompt and the console show them, so a reviewer
 * never reads text that differs from what runs (task hnu43 item 2: the YAML printed them raw).
 * `--json` keeps the record's exact values.
 */
export function approvalShowText(r: ApprovalReview): string {
  const a = r.approval;
  const s = statementForDisplay(a.sql);
  const lines = [YAML.stringify({ ...a, failure: undefined, claimAttributes: undefined }).trimEnd()];
  // Issue 27: kept when a token identity queued the write; the identity record's values win at approval.
  if (a.claimAttributes) lines.push(`attributes from token claims (kept with the write; the identity record's values win at approval): ${Object.keys(a.claimAttributes).sort().map((k) => `${k}=${JSON.stringify(a.claimAttributes![k])}`).join(' ')}`);
  if (s.comments.length) lines.push(`comments in the statement (not part of what runs, check they match it):`, ...s.comments.map((c) => `  ${c}`));
  if (a.failure) lines.push(`cause (operators only): ${formatFailure(a.failure)}`);
  lines.push(reviewText(r, { statement: false }));
  return showInvisible(lines.join('\n')).text;
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
    .description('show one approval with its statement, parameters and current row estimate (a pending one is planned as the writer role: EXPLAIN only, nothing runs)')
    .argument('<id>')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).reviewApproval(id);
      await initStatementDisplay();
      // --json: the record as before, with the review beside it.
      s.print(approvalShowText(r), { ...r.approval, review: { destructive: r.destructive, estimate: r.estimate, plan: r.plan } });
    });
  const operatorOpt = () => new Option('--operator <name>', 'who decides (recorded in the audit; default: your OS user name)').default(userInfo().username).argParser(parseOperatorName);
  apr
    .command('approve')
    .description(`approve a pending write and execute it once with the source writer role; first prints the statement, its parameters and the current row estimate and asks to confirm (y/N) on a terminal. Without a terminal (scripts, CI) pass --yes, else it refuses and exits ${EXIT_NOT_CONFIRMED}`)
    .argument('<id>')
    .addOption(operatorOpt())
    .option('-y, --yes', 'approve without asking (after printing the statement, parameters and row estimate); needed when there is no terminal')
    .action(async (id: string, o: { operator: string; yes?: boolean }, cmd: Command) => {
      const s = session(cmd);
      s.assertLocalOperator(cmd);
      const backend = await s.backend();
      const review = await backend.reviewApproval(id);
      const a = review.approval;
      // Not pending, or (directly) the requester itself: the backend refuses before anything is asked.
      if (a.state === 'pending' && !(!s.remote && a.identityName === o.operator)) {
        await initStatementDisplay();
        const text = reviewText(review, { statement: true });
        // --json keeps stdout for the decision: the review goes to stderr when someone is asked.
        if (!s.opts.json) s.io.out(text);
        if (!o.yes) {
          if (s.opts.json) s.io.err(text);
          const answer = await s.confirm(`Approve ${a.id} and run it once as the writer role? [y/N] `);
          if (answer === null) throw new NotConfirmedError(`approval ${a.id} not approved: no terminal to confirm on; review it (interlock approval show ${a.id}), then run interlock approval approve ${a.id} --yes`);
          if (!answer) throw new NotConfirmedError(`approval ${a.id} not approved: not confirmed (it stays pending)`);
        }
      }
      const r = await backend.approve(id, { operator: o.operator });
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
    .option('--reason <text>', 'why (recorded in the audit and shown to the agent as outcome.reason of interlock_approval_status)')
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
 * requeue would fail again, and so would one queued by a revoked or expired key (which
 * `approval requeue` refuses); other causes (a lock, the source down) may pass on a requeue.
 */
export function requeueHint(code: string | undefined, id: string): string {
  if (code === 'key_revoked' || code === 'key_expired') return `(the API key that queued it is ${code === 'key_revoked' ? 'revoked' : 'expired'}: it cannot be requeued; the agent must send the write again with a valid key)`;
  if (code === 'row_rule_violation' || code === 'row_rule_unenforceable') return "(the write breaks the requester's row rules: a requeue fails the same way; the agent reads this outcome with interlock_approval_status)";
  if (code === 'outcome_unknown') return `(the connection was lost while the write was committing and the source could not say whether it committed: check on the source whether it was applied before anything else; only if it was not: interlock approval requeue ${id})`;
  if (code === 'row_rule_attribute_missing') return `(the requester lacks an identity attribute its row rules need: set it (interlock identity attributes), then: interlock approval requeue ${id})`;
  return `(fix the cause, then: interlock approval requeue ${id})`;
}
