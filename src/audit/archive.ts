/**
 * Retention of the audit trail (issue 11, Build 5): `archiveAuditPartitions` exports whole monthly
 * partitions of audit_events (every row, as gzip JSON lines in id order), then DETACHes and DROPs
 * them and records the archive in audit_archives, in one transaction. Only the owner of
 * audit_events (or a superuser) can: no row-level DELETE is ever used, so the append-only triggers
 * keep holding on the rows that stay. `verifyAuditChain` (verify.ts) reads such a file back.
 *
 * What it proves, and what not, is written in docs/operators.md ("Audit trail").
 */
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, promises as fsp } from 'node:fs';
import { createGzip } from 'node:zlib';
import type pg from 'pg';
import type { ControlDb } from '../control/db';
import { ControlError, ValidationError } from '../control/errors';

/** One archived partition. Times are ISO-8601 UTC. */
export interface ArchivedPartition {
  partition: string;
  rangeFrom: string;
  rangeTo: string;
  events: number;
  firstBatchId: string | null;
  lastBatchId: string | null;
}

/** What `archiveAuditPartitions` did. `sha256` is the hex digest of the file as written ('' and `planned: true` for a plan: nothing written or dropped). */
export interface ArchiveResult {
  file: string;
  sha256: string;
  events: number;
  partitions: ArchivedPartition[];
  planned?: boolean;
}

/** A partition an archive run will export and drop, with its event count (said before it happens). */
export interface PlannedPartition {
  partition: string;
  rangeFrom: string;
  rangeTo: string;
  events: number;
}

const PARTITION = /^audit_events_p([0-9]{4})([0-9]{2})$/;

/** [from, to) of a monthly partition named audit_events_pYYYYMM (UTC months). */
function monthRange(name: string): { from: Date; to: Date } | null {
  const m = PARTITION.exec(name);
  if (!m) return null;
  const y = Number(m[1]);
  const mo = Number(m[2]) - 1;
  return { from: new Date(Date.UTC(y, mo, 1)), to: new Date(Date.UTC(y, mo + 1, 1)) };
}

/** Throws ControlError('forbidden') unless the connected role owns audit_events (or is a superuser). */
async function assertOwner(c: pg.ClientBase): Promise<void> {
  const r = await c.query<{ owner: string; me: string; ok: boolean }>(
    `SELECT pg_get_userbyid(c.relowner) AS owner, current_user AS me,
            (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR pg_has_role(current_user, c.relowner, 'USAGE') AS ok
     FROM pg_class c WHERE c.oid = 'audit_events'::regclass`,
  );
  const row = r.rows[0];
  if (!row?.ok) throw new ControlError('forbidden', `only the owner of audit_events (role ${row?.owner ?? '?'}) can archive the audit trail; connected as ${row?.me ?? '?'}`);
}

/** Monthly partitions of audit_events, oldest first, with their UTC ranges. */
async function monthlyPartitions(c: pg.ClientBase): Promise<Array<{ name: string; from: Date; to: Date }>> {
  const r = await c.query<{ name: string }>("SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'audit_events'::regclass");
  return r.rows
    .map((x) => ({ name: x.name, range: monthRange(x.name) }))
    .filter((x): x is { name: string; range: { from: Date; to: Date } } => x.range !== null)
    .map((x) => ({ name: x.name, ...x.range }))
    .sort((a, b) => a.from.getTime() - b.from.getTime());
}

/**
 * Archives every monthly partition of audit_events that ends at or before `before` (so only whole
 * months go): writes their events to `file` (gzip; one JSON object per line, every column, times in
 * UTC, in id order), flushes it to disk, then detaches and drops those partitions and records each
 * in audit_archives, all in one transaction (a failure before COMMIT drops nothing). Afterwards it
 * makes sure the next twelve months have partitions. Returns what was archived (no partitions: an
 * empty file and nothing dropped).
 * `onPlan` hears the partitions and event counts before anything is written or dropped; `plan`
 * stops there (rolled back, no file). Without `force`, `before` may not reach into the open month
 * or past the retention floor (`retentionMinDays`, audit.retention_min_days).
 * Throws ValidationError for a bad date, an existing file or a refused `before`, ControlError('forbidden') when the
 * connected role does not own audit_events.
 */
export async function archiveAuditPartitions(
  db: ControlDb,
  opts: { before: Date; file: string; force?: boolean; retentionMinDays?: number; plan?: boolean; onPlan?: (parts: PlannedPartition[]) => void },
): Promise<ArchiveResult> {
  if (Number.isNaN(opts.before.getTime())) throw new ValidationError('--before: not a date');
  // The open month (and anything newer) is still being written and read (the console's approval
  // history), and months inside the configured retention floor must stay: archiving either needs
  // --force (issue 24 item 6).
  const now = new Date();
  const openMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  if (opts.before.getTime() > openMonth.getTime() && !opts.force) {
    throw new ValidationError(`--before ${opts.before.toISOString().slice(0, 10)} would archive and drop the open month (${openMonth.toISOString().slice(0, 7)}) or later, whose events are still in use: use --before ${openMonth.toISOString().slice(0, 10)} or earlier, or add --force`);
  }
  const floorDays = opts.retentionMinDays ?? 0;
  const floor = new Date(now.getTime() - floorDays * 86_400_000);
  if (floorDays > 0 && opts.before.getTime() > floor.getTime() && !opts.force) {
    throw new ValidationError(`--before ${opts.before.toISOString().slice(0, 10)} is inside the retention floor (audit.retention_min_days = ${floorDays}: nothing newer than ${floor.toISOString().slice(0, 10)} is archived): use an earlier --before, or add --force`);
  }
  if (!opts.plan && existsSync(opts.file)) throw new ValidationError(`${opts.file} already exists: choose a new file (an archive is never overwritten)`);
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query("SET LOCAL TimeZone = 'UTC'");
    // Every float8 printed exactly (shortest round-trip digits), whatever the server's default: format 2 rebuilds texts from them.
    await c.query('SET LOCAL extra_float_digits = 3');
    await assertOwner(c);
    const parts = (await monthlyPartitions(c)).filter((p) => p.to.getTime() <= opts.before.getTime());
    // What will be dropped, said before anything is written or dropped (issue 24 item 6); with
    // `plan`, only that: the transaction is rolled back and no file is made.
    const planned: PlannedPartition[] = [];
    for (const p of parts) {
      const n = await c.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${c.escapeIdentifier(p.name)}`);
      planned.push({ partition: p.name, rangeFrom: p.from.toISOString(), rangeTo: p.to.toISOString(), events: Number(n.rows[0].n) });
    }
    opts.onPlan?.(planned);
    if (opts.plan) {
      await c.query('ROLLBACK');
      return { file: opts.file, sha256: '', events: planned.reduce((a, p) => a + p.events, 0), partitions: planned.map((p) => ({ ...p, firstBatchId: null, lastBatchId: null })), planned: true };
    }
    const out = createWriteStream(opts.file, { flags: 'wx' });
    const gz = createGzip();
    const hash = createHash('sha256');
    gz.on('data', (b: Buffer) => hash.update(b));
    gz.pipe(out);
    const done = new Promise<void>((resolve, reject) => {
      out.on('finish', resolve);
      out.on('error', reject);
      gz.on('error', reject);
    });
    const write = (s: string) => (gz.write(s) ? Promise.resolve() : new Promise<void>((r) => gz.once('drain', () => r())));
    const archived: ArchivedPartition[] = [];
    let total = 0;
    for (const p of parts) {
      await c.query(`LOCK TABLE ${c.escapeIdentifier(p.name)} IN SHARE MODE`);
      await c.query(`DECLARE audit_export NO SCROLL CURSOR FOR SELECT row_to_json(e)::text AS j, e.batch_id FROM ${c.escapeIdentifier(p.name)} e ORDER BY e.id`);
      let n = 0;
      let first: string | null = null;
      let last: string | null = null;
      for (;;) {
        const r = await c.query<{ j: string; batch_id: string }>('FETCH 2000 FROM audit_export');
        if (r.rows.length === 0) break;
        for (const row of r.rows) {
          await write(row.j + '\n');
          if (first === null || BigInt(row.batch_id) < BigInt(first)) first = row.batch_id;
          if (last === null || BigInt(row.batch_id) > BigInt(last)) last = row.batch_id;
        }
        n += r.rows.length;
      }
      await c.query('CLOSE audit_export');
      archived.push({ partition: p.name, rangeFrom: p.from.toISOString(), rangeTo: p.to.toISOString(), events: n, firstBatchId: first, lastBatchId: last });
      total += n;
    }
    gz.end();
    await done;
    const fh = await fsp.open(opts.file, 'r+');
    await fh.sync();
    await fh.close();
    const sha256 = hash.digest('hex');
    for (const a of archived) {
      await c.query(`ALTER TABLE audit_events DETACH PARTITION ${c.escapeIdentifier(a.partition)}`);
      await c.query(`DROP TABLE ${c.escapeIdentifier(a.partition)}`);
      await c.query('INSERT INTO audit_archives (partition, range_from, range_to, event_count, first_batch_id, last_batch_id, file_sha256) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
        a.partition,
        a.rangeFrom,
        a.rangeTo,
        a.events,
        a.firstBatchId,
        a.lastBatchId,
        sha256,
      ]);
    }
    await c.query("SELECT interlock_audit_ensure_partitions((now() AT TIME ZONE 'UTC')::date, 13)");
    await c.query('COMMIT');
    return { file: opts.file, sha256, events: total, partitions: archived };
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
}
