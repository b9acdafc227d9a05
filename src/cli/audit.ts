/**
 * `interlock audit archive` and `interlock audit verify` (issue 11, Build 5–6): retention and tamper
 * evidence of the audit trail, on the control database directly (never through the admin API).
 * Registered on the `audit` command by src/cli/main.ts.
 */
import type { Command } from 'commander';
import type { ControlDb } from '../control/db';
import { archiveAuditPartitions } from '../audit/archive';
import { verifyAuditChain, type VerifyReport } from '../audit/verify';
import { PENDING_STALE_MS, sealPendingAuditEvents } from '../audit/pending';
import { ConflictError, ValidationError } from '../control/errors';
import { table } from './output';
import type { AuditKeyring } from '../audit/key';
import { registerAuditKeyIds, retireAuditKeyId, retiredAuditKeyIds, type KeyedTrailRegistration } from '../audit/keyed-trail';
import type { ChangeActor } from '../control/change-audit';
import { userInfo } from 'node:os';

/** What these commands need of the CLI's session. */
export interface AuditCommandSession {
  opts: { server?: string; json?: boolean };
  io: { err(text: string): void };
  db(): Promise<ControlDb>;
  /** The resolved configuration (audit.retention_min_days is the archive's retention floor). */
  config(): { audit: { retention_min_days?: number } };
  print(human: string, machine: unknown): void;
  /** The audit keys of the configuration (audit.key, audit.previous_keys; the embedded data dir's key), src/audit/key.ts; after db(). */
  auditKeys(): AuditKeyring;
}

/** A date (2026-11-01) or ISO-8601 time; a bare date means 00:00 UTC. Throws ValidationError. */
function parseDate(text: string, what: string): Date {
  const d = new Date(/^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(text) ? `${text}T00:00:00Z` : text);
  if (Number.isNaN(d.getTime())) throw new ValidationError(`${what}: expected a date (2026-11-01) or an ISO-8601 time, got ${JSON.stringify(text)}`);
  return d;
}

function direct(s: AuditCommandSession, what: string): void {
  if (s.opts.server) throw new ValidationError(`interlock audit ${what} works on the control database directly (as the owner of audit_events): run it without --server`);
}

/**
 * `interlock audit require-key`: marks the trail keyed and registers the ids of the configured audit
 * keys (`keys`: audit.key and audit.previous_keys; registerAuditKeyIds, src/audit/keyed-trail.ts;
 * owner only: 42501 otherwise). From then on the database refuses format-3 batches and keyed
 * batches' chains under an unregistered key, and verify names a format-3 batch after `sinceBatch` as
 * unkeyed_batch. Run again after a rotation to register the new key. A new id is recorded as config
 * event `audit_key_registered` in `actor`'s name. Throws ValidationError when no key is configured.
 */
export async function requireAuditKey(db: ControlDb, keys: AuditKeyring, actor?: ChangeActor): Promise<KeyedTrailRegistration> {
  if (keys.byId.size === 0) throw new ValidationError('interlock audit require-key registers the configured audit keys: set audit.key (INTERLOCK_AUDIT_KEY) first, the keys still in use in audit.previous_keys (INTERLOCK_AUDIT_PREVIOUS_KEYS)');
  return registerAuditKeyIds(db.pool, [...keys.byId.keys()], 'require_key', actor);
}

/**
 * The second line of `audit verify`'s OK and NOT AUTHENTICATED output on a trail holding keyed
 * batches (a new user asked what the others were; task nu48fix item 3): a newline and, e.g.,
 * `17 unkeyed batch(es), chained but not keyed: 15 of approvals and sign-ins, 2 of configuration
 * changes, as expected: only tool calls' batches are keyed (docs/operators.md "The audit key")`, naming
 * only the kinds present (VerifyReport.unkeyed; "as expected" only when no tool call's batch is unkeyed);
 * '' when there are no keyed batches or no unkeyed ones.
 */
export function unkeyedLine(r: Pick<VerifyReport, 'keyed' | 'unkeyed'>): string {
  const u = r.unkeyed;
  const n = u.approvals + u.config + u.calls;
  if (!r.keyed.batches || !n) return '';
  const kinds = [
    u.approvals ? `${u.approvals} of approvals and sign-ins` : '',
    u.config ? `${u.config} of configuration changes` : '',
    u.calls ? `${u.calls} of tool calls written without the audit key` : '',
  ].filter(Boolean);
  // Approvals, sign-ins and configuration changes are never keyed (only tool calls' batches are): on a
  // fresh demo that line read like a warning (task nu49), so it says they are expected.
  const expected = u.calls ? '' : ', as expected: only tool calls\' batches are keyed';
  return `\n${n} unkeyed batch(es), chained but not keyed: ${kinds.join(', ')}${expected} (docs/operators.md "The audit key")`;
}

/** Adds `archive`, `verify`, `require-key`, `retire-key` and `seal` to the `audit` command. Exit codes as main's: verify exits 1 when the chain does not match. */
export function registerAuditChainCommands(aud: Command, session: (cmd: Command) => AuditCommandSession): void {
  aud
    .command('archive')
    .description('export whole monthly partitions older than DATE to FILE (gzip JSON lines), then detach and drop them (owner of audit_events only)')
    .requiredOption('--before <date>', 'archive every month that ends at or before this date (e.g. 2026-10-01)')
    .requiredOption('--to <file>', 'archive file to create (never overwritten)')
    .option('--force', 'also archive the open month (or later) and months inside the retention floor (audit.retention_min_days): refused without it')
    .option('--plan', 'only say which partitions (and how many events) would be archived and dropped; change nothing')
    .action(async (o: { before: string; to: string; force?: boolean; plan?: boolean }, cmd: Command) => {
      const s = session(cmd);
      direct(s, 'archive');
      const parts = (ps: Array<{ partition: string; rangeFrom: string; rangeTo: string; events: number }>) => table(['partition', 'from', 'to', 'events'], ps.map((p) => [p.partition, p.rangeFrom, p.rangeTo, p.events]));
      // What will be dropped is said before it is (issue 24 item 6); --json keeps stderr for errors.
      const onPlan = (ps: Array<{ partition: string; rangeFrom: string; rangeTo: string; events: number }>) => {
        if (!o.plan && !s.opts.json && ps.length) s.io.err(`archiving to ${o.to}, then detaching and dropping ${ps.length} partition(s), ${ps.reduce((a, p) => a + p.events, 0)} event(s):\n${parts(ps)}`);
      };
      const r = await archiveAuditPartitions(await s.db(), { before: parseDate(o.before, '--before'), file: o.to, force: o.force, plan: o.plan, retentionMinDays: s.config().audit.retention_min_days, onPlan });
      if (r.planned) {
        s.print(r.partitions.length ? `${parts(r.partitions)}\nwould archive ${r.events} event(s) to ${o.to}, then detach and drop these partitions (plan only: nothing was changed)` : `no whole month ends at or before ${o.before}: nothing would be archived (plan only)`, r);
        return;
      }
      const human = r.partitions.length
        ? `${table(['partition', 'from', 'to', 'events'], r.partitions.map((p) => [p.partition, p.rangeFrom, p.rangeTo, p.events]))}\narchived ${r.events} event(s) to ${r.file} (sha256 ${r.sha256}); partitions detached and dropped`
        : `no whole month ends at or before ${o.before}: nothing archived (${r.file} is empty)`;
      s.print(human, r);
    });
  aud
    .command('verify')
    .description('recompute the hash chain of the audit trail and name the batches that do not match')
    .option('--since <date>', 'start at the first batch committed at or after this date (its link to earlier batches is trusted)')
    .option('--archive <file>', 'an archive written by `interlock audit archive`: recompute the archived batches too')
    .action(async (o: { since?: string; archive?: string }, cmd: Command) => {
      const s = session(cmd);
      direct(s, 'verify');
      const db = await s.db();
      const r = await verifyAuditChain(db, { since: o.since ? parseDate(o.since, '--since') : undefined, archiveFile: o.archive, keys: s.auditKeys().byId });
      const summary = `${r.batchesChecked} batch(es), ${r.eventsChecked} event(s) checked${r.archiveEvents ? ` (${r.archiveEvents} from the archive)` : ''}${r.archivedBatchesSkipped ? `; ${r.archivedBatchesSkipped} archived batch(es) not checked (pass --archive FILE)` : ''}${r.chains ? `; ${r.chains} writer chain(s), ${r.openChains} open${r.openChains ? ' (a gateway running, or stopped without closing)' : ''}` : ''}`;
      // Pending events (task hchain): recorded, not chained yet; a warning, a fault past 60 s.
      const pending = r.pending.events ? `; ${r.pending.events} pending event(s) not chained yet (oldest ${r.pending.oldest})${r.pending.stale ? `, ${r.pending.stale} older than ${PENDING_STALE_MS / 1000} s: pending_stale (the approval events' chain is held, or no gateway chains them)` : ''}` : '';
      // Keyed batches (format 5, red team rt45b F1): authenticated with the audit key, or not without it.
      const keyed = r.keyed.batches ? `; ${r.keyed.authenticated} keyed batch(es) authenticated${r.keyed.unauthenticated ? `, ${r.keyed.unauthenticated} NOT authenticated (no audit key given)` : ''}` : '';
      const unkeyed = unkeyedLine(r);
      if (r.ok) s.print(`audit chain OK: ${summary}${keyed}${pending}${unkeyed}`, r);
      else if (!r.firstMismatch && r.keyed.fault && !r.pending.fault && (!r.archive || r.archive.recorded)) {
        s.print(`audit chain NOT AUTHENTICATED: keyed batches present; give the audit key (audit.key / INTERLOCK_AUDIT_KEY, older keys in audit.previous_keys / INTERLOCK_AUDIT_PREVIOUS_KEYS) to authenticate them; ${summary}${keyed}${pending}${unkeyed}`, r);
        throw Object.assign(new Error(`${r.keyed.unauthenticated} keyed audit batch(es) not authenticated: no audit key given (key_needed)`), { code: 'audit_chain_mismatch' });
      }
      else if (!r.firstMismatch && r.pending.fault && (!r.archive || r.archive.recorded)) {
        s.print(`audit chain NOT SEALED: ${summary}${pending}`, r);
        throw Object.assign(new Error(`${r.pending.stale} pending audit event(s) older than ${PENDING_STALE_MS / 1000} s (pending_stale)`), { code: 'audit_chain_mismatch' });
      } else if (!r.firstMismatch) {
        s.print(`audit chain NOT VERIFIED: ${o.archive} (sha256 ${r.archive!.sha256}) is not an archive \`interlock audit archive\` wrote for this database, or it was changed since; ${summary}`, r);
        throw Object.assign(new Error(`archive ${o.archive} is not recorded in audit_archives`), { code: 'audit_chain_mismatch' });
      } else {
        const m = r.firstMismatch;
        const more = r.mismatchCount > 1 ? `; ${r.mismatchCount} batch(es) do not match in all (${r.mismatches.map((x) => x.batchId).join(', ')}${r.mismatchCount > r.mismatches.length ? ', …' : ''})` : '';
        const archive = r.archive && !r.archive.recorded ? `; the archive file is not one audit_archives records` : '';
        // unknown_key: name the batch's key id and the ids given, so a key left out (rotation) is told apart from a forged id (nu46).
        // retired_key (task ret47): stored after its key id was retired, so by a holder of that key (leaked) and the runtime role's credential, or a gateway still running it.
        const key =
          m.fault === 'unknown_key' ? ` (the batch names audit key id ${m.keyId}; the keys given have id(s) ${r.keyed.keyIdsGiven.join(', ') || 'none'}: give that key, e.g. in INTERLOCK_AUDIT_PREVIOUS_KEYS, or the batch was not written by a gateway of yours)`
          : m.fault === 'retired_key' ? ` (the batch, or a queued call's tag in it, names audit key id ${m.keyId}, stored after that id was retired (\`interlock audit retire-key\`): written with the retired key, by whoever holds it, not by a gateway running a key in use)`
          : '';
        // Every batch that does not match only names a key not given (nu47: after a rotation without the old key, BROKEN read as tampering): NOT AUTHENTICATED, still exit 1.
        const keysOnly = r.mismatchCount === r.mismatches.length && r.mismatches.every((x) => x.fault === 'unknown_key') && !archive;
        s.print(`audit chain ${keysOnly ? 'NOT AUTHENTICATED' : 'BROKEN'} at batch ${m.batchId}${m.committedAt ? ` (committed ${m.committedAt})` : ''}: ${m.fault}${key}${more}${archive}; ${summary}${keyed}${pending}`, r);
        throw Object.assign(new Error(`audit chain does not match at batch ${m.batchId} (${m.fault})`), { code: 'audit_chain_mismatch' });
      }
    });
  aud
    .command('require-key')
    .description('key the audit trail (owner only): register the ids of the configured audit keys (audit.key, audit.previous_keys); from then on the database refuses unkeyed batches (format 3) and keyed chains under another key, and verify names unkeyed batches (unkeyed_batch). Run again after a rotation')
    .action(async (_o: unknown, cmd: Command) => {
      const s = session(cmd);
      direct(s, 'require-key');
      const db = await s.db();
      const keys = s.auditKeys();
      // Direct mode: a new id is recorded (config event audit_key_registered) in the OS user's name.
      const r = await requireAuditKey(db, keys, { operator: userInfo().username });
      // Registering never lifts a retirement (task low47): say so when the key configured to sign is retired.
      const signing = keys.signing?.id;
      if (signing && (await retiredAuditKeyIds(db.pool)).includes(signing)) s.io.err(`warning: audit key id ${signing} (audit.key) is retired (\`interlock audit retire-key\`): the database refuses every batch under it; configure a registered key that is not retired as audit.key`);
      const ids = `registered key id(s): ${r.keyIds.join(', ')}${r.added.length ? ` (new: ${r.added.join(', ')})` : ' (none new)'}`;
      s.print(r.already ? `the audit trail is keyed (since batch ${r.sinceBatch}, ${r.setBy}); ${ids}` : `the audit trail is keyed from batch ${r.sinceBatch} on: unkeyed batches and keys not registered are refused; ${ids}`, r);
    });
  aud
    .command('retire-key')
    .description('retire a registered audit key id (owner only), e.g. a key known stolen, after the rotation away from it: the database refuses every new batch under it; verify still authenticates its batches stored before with the key given (audit.previous_keys), and names anything under it stored after (retired_key). Not the key configured now, nor the last registered id not retired')
    .argument('<key-id>', 'the key id (16 hex digits, as require-key and the gateway\'s start log print it)')
    .action(async (keyId: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      direct(s, 'retire-key');
      const db = await s.db();
      // Direct mode: recorded (config event audit_key_retired) in the OS user's name, as other governance changes.
      const r = await retireAuditKeyId(db, keyId, s.auditKeys().signing?.id ?? null, { operator: userInfo().username });
      const still = `registered key id(s) in use: ${r.active.join(', ')}; retired: ${r.retired.join(', ')}`;
      s.print(r.already ? `audit key id ${keyId} was already retired; ${still}` : `audit key id ${keyId} is retired: the database refuses every new batch under it (a gateway still configured with it goes not ready, audit_key_refused); its batches still verify with the key in audit.previous_keys; ${still}`, r);
    });
  aud
    .command('seal')
    .description("chain the pending audit events now (what a running gateway does every 2 s); never waits for the approval events' chain")
    .action(async (_o: unknown, cmd: Command) => {
      const s = session(cmd);
      direct(s, 'seal');
      // interlock_audit_seal_pending(): null when another transaction holds the chain's lock (task hchain).
      const chained = await sealPendingAuditEvents(await s.db());
      if (chained === null) {
        s.print("pending audit events not chained: another transaction holds the approval events' chain (audit_chain_lock); they stay pending", { chained: null, busy: true });
        throw new ConflictError("the approval events' chain is held by another transaction: pending events not chained (retry, or end that transaction)");
      }
      s.print(chained ? `${chained} pending audit event(s) chained` : 'no pending audit events', { chained, busy: false });
    });
}
