/**
 * Tamper evidence of the audit trail (issue 11, Build 6): `verifyAuditChain` recomputes every
 * batch's hash and checks each batch links to the one before; given an archive file (archive.ts),
 * batches whose events were archived are recomputed from the file. Names the first batch that does
 * not match. Format 1 (SHA-256 over the previous batch's hash, the batch id and its events'
 * canonical texts) is recomputed in the database with the functions that sealed it; format 2
 * (migration 20261201800000000) here, from the stored rows, with the functions the gateway sealed
 * it with (event-text.ts); format 3 (one chain per writer lane, chain.ts) here too, each chain on
 * its own: links, seq without gaps or repeats, nothing after a seal, every genesis's anchors; format
 * 4 (the config chain of governance changes, migration 20261208220000000) as format 2, linked to
 * the previous format-4 batch. A kind-config event in a format-3 batch (the gateway's writer lanes,
 * which write tool calls only) is named as forged (`misplaced_config`). Format 5 (the keyed chain,
 * chain.ts; red team rt45b F1) as format 3, its tag recomputed with the audit key its mac_key_id
 * names (`unknown_key` when no key given has that id); a format-3 batch after the trail was keyed
 * (audit_keyed_trail.since_batch, written by the owner only) or after the first batch a key given
 * authenticates is named `unkeyed_batch` (a format-5 batch the key does not authenticate moves
 * nothing: the runtime role may insert one; red team rt46b G2). A format-5 batch, or a queued call's tag,
 * under a key id retired before the batch was stored (its id past audit_keyed_trail.retired_after) is
 * named `retired_key` (task ret47). Without any key,
 * keyed batches are checked for their links only and the report says they are not authenticated
 * (`keyed.fault` 'key_needed', ok false).
 *
 * What it proves, and what not, is written in docs/operators.md ("Audit trail").
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { createGunzip } from 'node:zlib';
import type pg from 'pg';
import type { ControlDb } from '../control/db';
import { ControlError, ValidationError } from '../control/errors';
import { batchHashV3, batchTagV5, parseAnchors, type ChainAnchor } from './chain';
import type { AuditKey } from './key';
import { callTagValid } from './call-tag';
import { batchHashV2, batchHashV4, eventsText, rowFromStored, type StoredEventV2 } from './event-text';
import type { AuditRowInput } from './types';
import { PENDING_STALE_MS } from './pending';

/**
 * Why a batch does not match: its events or header changed (`hash_mismatch`; also a format-5 batch under another
 * key id than the batch before it in its chain, which no lane writes: red team rt47b J1); the batch before it in
 * its chain is missing or changed (`broken_link`: deleted); it repeats a place its chain already has,
 * or follows its chain's seal, or holds a queued call whose audit-key tag an earlier event already
 * carries (`inserted_batch`: a copy stored again, call-tag.ts); a genesis names a batch that is missing or changed
 * (`anchor_mismatch`: a chain deleted or cut short); events name a batch that does not exist
 * (`events_without_batch`); a format-3 batch (a writer lane's, tool calls only) holds a kind-config
 * event (`misplaced_config`: a governance change forged by a holder of the runtime role's
 * credential, whose direct INSERTs may store format-3 batches only; red team rtgov finding 4); a
 * format-3 batch after the trail became keyed, or a format-1 batch then holding any tool-call event (red
 * team rt47a H1), or a format-2 batch then holding a tool-call event
 * other than a queued write's whose approval exists for the same identity, or (keys given) a tool-call
 * event without a valid audit-key tag (call-tag.ts, red team rt46b G1) (`unkeyed_batch`: written without the audit key, so by anyone holding
 * the runtime role's credential, through its INSERTs or the append functions; red team rt45b F1); a format-5 batch whose key id
 * names none of the keys given (`unknown_key`: a key forged, or an old key not passed to verify); a
 * format-5 batch under a retired key id, or a format-2 batch holding a tool-call event tagged under one
 * (details.audit_tag.key_id), whose batch id is past the mark recorded when that id was retired
 * (audit_keyed_trail.retired_after, owner only; `retired_key`: stored after the retirement, so not by a
 * gateway of yours: by a holder of the retired key, leaked, and the runtime role's credential; task ret47).
 */
export type ChainFault = 'hash_mismatch' | 'broken_link' | 'inserted_batch' | 'anchor_mismatch' | 'events_without_batch' | 'misplaced_config' | 'unkeyed_batch' | 'unknown_key' | 'retired_key';

/** One batch that does not match. `committedAt` is null for events whose batch does not exist. */
export interface ChainMismatch {
  batchId: string;
  committedAt: string | null;
  fault: ChainFault;
  /** For `unknown_key`: the key id the batch names (16 hex digits), so an operator can tell a key not given from a forged id; for `retired_key`: the retired key id the batch or its tag names. */
  keyId?: string;
}

/** The result of verifyAuditChain. `firstMismatch` is null when every checked batch matches. */
export interface VerifyReport {
  ok: boolean;
  /** Batches whose hash was recomputed and matched (from the table or the archive file). */
  batchesChecked: number;
  eventsChecked: number;
  /** Batches of archived partitions whose events were not available (no --archive, or another file). */
  archivedBatchesSkipped: number;
  /** Events read from the archive file. */
  archiveEvents: number;
  /** The archive file given: its SHA-256 (hex) and whether audit_archives records a file with that digest (false: not written by `interlock audit archive` here, or changed since; then ok is false). */
  archive: { sha256: string; recorded: boolean } | null;
  /** Format-3 chains seen (one per writer lane and start, chain.ts). */
  chains: number;
  /** Chains without a seal: a writer still running, or one that stopped without closing (a crash); not a fault. */
  openChains: number;
  /** Batches that do not match, in chain order: the first MAX_LISTED of them. */
  mismatches: ChainMismatch[];
  /** How many batches do not match in all (verify goes on past the first, checking each link against the stored hash). */
  mismatchCount: number;
  firstMismatch: ChainMismatch | null;
  /**
   * Events recorded but not chained yet (audit_pending_events, task hchain: a token sign-in's events
   * while another transaction held the format-2 chain's lock; the next append or the gateway's seal
   * chains them): not tampering. `oldest` is the oldest one's time (ISO, null when none); `stale`
   * counts those older than PENDING_STALE_MS (60 s), and when there are any `fault` is
   * 'pending_stale' and `ok` is false: the chain's lock was held that long, or no gateway seals them.
   */
  pending: { events: number; oldest: string | null; stale: number; fault: 'pending_stale' | null };
  /**
   * Keyed (format-5) batches (red team rt45b F1): `batches` seen; `authenticated` whose tag matched
   * under a key given; `unauthenticated` not authenticated because no key was given (their links were
   * checked). When there are any, `fault` is 'key_needed' and `ok` is false: without the key, verify
   * cannot tell the gateway's batches from forged ones. `keyedSince` is the batch id from which an
   * unkeyed batch is a fault (audit_keyed_trail's since_batch, else the first keyed batch a key given authenticates), or null.
   * `keyIdsGiven`: the ids of the keys verify was given, sorted (not secret).
   */
  keyed: { batches: number; authenticated: number; unauthenticated: number; fault: 'key_needed' | null; keyedSince: string | null; keyIdsGiven: string[] };
  /**
   * Batches checked (they matched) that are chained but not keyed, by what they hold (task nu48fix
   * item 3; docs/operators.md "The audit key"): `approvals`, the approval events' chain (formats 1
   * and 2: approvals, token sign-ins with the identities and grants they make, queued writes'
   * tool-call events, older config events), sealed by the database's functions and never keyed;
   * `config`, governance changes (format 4), likewise; `calls`, tool calls of writer lanes without
   * the audit key (format 3; past `keyed.keyedSince` they are `unkeyed_batch` faults instead).
   */
  unkeyed: { approvals: number; config: number; calls: number };
}

/** Batches read per page (fewer when they hold more than PAGE_EVENTS events together). */
const PAGE = 1000;
const PAGE_EVENTS = 20_000;
/** Most mismatches a report lists. */
const MAX_LISTED = 20;

/** A PostgreSQL error for a value its column refuses: SQLSTATE class 22 (data exception) or 23 (integrity constraint violation). */
function isRefusedValue(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^2[23][0-9A-Z]{3}$/.test(code);
}

/** Loads a file written by archiveAuditPartitions into the temporary table audit_archive_events; returns its event count and the SHA-256 (hex) of its bytes. */
async function loadArchive(c: pg.ClientBase, file: string): Promise<{ events: number; sha256: string }> {
  if (!existsSync(file)) throw new ValidationError(`archive file not found: ${file}`);
  await c.query('CREATE TEMP TABLE audit_archive_events (LIKE audit_events) ON COMMIT PRESERVE ROWS');
  // kind and details are domains on audit_events (migration 20261214100000000, task h28t): here they
  // take their base types, so an archived row an attacker made invalid is loaded and reported as an
  // altered batch instead of failing the load with the domain's check.
  await c.query('ALTER TABLE audit_archive_events ALTER COLUMN kind TYPE text, ALTER COLUMN details TYPE jsonb');
  const digest = createHash('sha256');
  const input = createReadStream(file);
  input.on('data', (b) => digest.update(b));
  const lines = createInterface({ input: input.pipe(createGunzip()), crlfDelay: Infinity });
  let chunk: unknown[] = [];
  let n = 0;
  /** Lines left out: a value its column refuses (see flush). */
  let refused = 0;
  const insert = (rows: unknown[]) => c.query('INSERT INTO audit_archive_events SELECT * FROM jsonb_populate_recordset(NULL::audit_archive_events, $1::jsonb)', [JSON.stringify(rows)]);
  const flush = async () => {
    if (!chunk.length) return;
    try {
      await insert(chunk);
      n += chunk.length;
    } catch (err) {
      if (!isRefusedValue(err)) throw err;
      // An edited file: a value its column refuses (NULL where the trail has NOT NULL, a time, number or
      // array that does not parse). Row by row (each INSERT its own transaction), such a line is left
      // out, so its batch is recomputed without it and named, as for any other edit (red team rt45b
      // F3); the file's SHA-256 no longer matches audit_archives either, so verify cannot pass.
      for (const row of chunk) {
        try {
          await insert([row]);
          n++;
        } catch (e) {
          if (!isRefusedValue(e)) throw e;
          refused++;
        }
      }
    }
    chunk = [];
  };
  try {
    for await (const line of lines) {
      if (!line.trim()) continue;
      try {
        chunk.push(JSON.parse(line));
      } catch {
        throw new ValidationError(`${file}: line ${n + refused + chunk.length + 1} is not JSON (not an audit archive?)`);
      }
      if (chunk.length >= 2000) await flush();
    }
  } catch (err) {
    if (err instanceof ControlError) throw err;
    throw new ValidationError(`${file} is not a gzip audit archive: ${(err as Error).message}`);
  }
  await flush();
  await c.query('CREATE INDEX ON audit_archive_events (batch_id)');
  return { events: n, sha256: digest.digest('hex') };
}

interface BatchCheck {
  id: string;
  committed_at: Date;
  /** committed_at in UTC with microseconds (format 2 hashes it). */
  committed_text: string;
  format: number;
  event_count: number;
  prev_hash: Buffer | null;
  hash: Buffer;
  /** Format 1 only: the hash recomputed in the database. */
  recomputed: Buffer | null;
  events: number;
  archived: boolean;
  /** A stored value no writer produces: a time before year 1 or infinite, a relations array not 1-based and one-dimensional. */
  unwritable: boolean;
  /**
   * The batch holds a tool-call event other than a queued write's (decision queued, with the id of an
   * approval of the same identity, which queueApproval stores in the same transaction): what only the
   * writer lanes store. An approval id that names no approval, or another identity's, is a forgery
   * (red team rt46b G1; a thief who also inserts an approval row is not caught, docs/operators.md).
   */
  loose_calls: boolean;
  /**
   * The batch holds a tool-call event. On a keyed trail a format-1 batch must not (red team rt47a H1):
   * no gateway since format 2 appends through interlock_audit_append, which the runtime role may still
   * run, and its events carry no audit-key tag verify could check.
   */
  has_calls: boolean;
  /** Format 3 and 5: the chain, the place in it, 'seal' or null, the genesis's anchors text. */
  chain_id: string | null;
  seq: string | null;
  mark: string | null;
  anchors: string | null;
  /** Format 5: the id of the audit key that tagged it. */
  mac_key_id: string | null;
}

/** A stored event of a format-2 batch, as verify reads it. */
interface StoredV2Row extends StoredEventV2 {
  batch_id: string;
  recorded_text: string;
}

const UTC_US = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`;

/** The first instant no writer precedes (to_char prints no era: a time moved to the same date BC would render alike). */
const YEAR_ONE = `'0001-01-01 00:00:00+00'::timestamptz`;

/**
 * The audit_archives records that can stand for events no longer in audit_events, as
 * `interlock audit archive` writes them: each covers one whole UTC month, starts at that month's
 * first batch (an archive takes a month's partition whole), and none of its batches
 * (first_batch_id..last_batch_id) still has an event in that month. A record made up, narrowed or
 * widened to hide deleted events of a live month is no such record, and those batches fail as
 * hash_mismatch. (What this cannot tell apart: a month's first batches deleted by someone with the
 * owner's rights who also records them as archived; docs/operators.md.)
 */
const VALID_ARCHIVES = `SELECT a.* FROM audit_archives a
  WHERE a.first_batch_id IS NOT NULL
    AND date_trunc('month', a.range_from AT TIME ZONE 'UTC') = a.range_from AT TIME ZONE 'UTC'
    AND a.range_to AT TIME ZONE 'UTC' = (a.range_from AT TIME ZONE 'UTC') + interval '1 month'
    AND NOT EXISTS (SELECT 1 FROM audit_batches y WHERE y.committed_at >= a.range_from AND y.committed_at < a.range_to AND y.id < a.first_batch_id)
    AND NOT EXISTS (SELECT 1 FROM audit_events x WHERE x.recorded_at >= a.range_from AND x.recorded_at < a.range_to AND x.batch_id BETWEEN a.first_batch_id AND a.last_batch_id)`;

/** ISO-8601 of a stored time, or null for one a Date cannot hold (±infinity, out of range). */
function safeIso(d: Date | null): string | null {
  return d instanceof Date && !Number.isNaN(d.getTime()) ? d.toISOString() : null;
}

/**
 * Recomputes a format-2 batch's hash from its stored events (id order), as interlock_audit_append_v2
 * computed it from the text it stored; null when an event cannot be one format 2 wrote (its
 * recorded_at is not the batch's commit time, or rowFromStored refuses a value).
 */
function recomputeV2(b: BatchCheck, rows: StoredV2Row[]): Buffer | null {
  const input = storedRows(b, rows);
  return input && batchHashV2(b.prev_hash, b.id, b.committed_text, rows.map((r) => r.id), eventsText(input));
}

/** Recomputes a format-4 (config chain) batch's hash as recomputeV2; null also when an event is not of kind config. */
function recomputeV4(b: BatchCheck, rows: StoredV2Row[]): Buffer | null {
  if (rows.some((r) => r.kind !== 'config')) return null;
  const input = storedRows(b, rows);
  return input && batchHashV4(b.prev_hash, b.id, b.committed_text, rows.map((r) => r.id), eventsText(input));
}

/** The audit-key tags (call-tag.ts: details.audit_tag.tag) of the tool-call events among stored events `rows`. */
function callTagsOf(rows: StoredV2Row[]): string[] {
  const tags: string[] = [];
  for (const r of rows) {
    if (r.kind !== 'tool_call') continue;
    try {
      const tag = (JSON.parse(r.details) as { audit_tag?: { tag?: unknown } } | null)?.audit_tag?.tag;
      if (typeof tag === 'string') tags.push(tag);
    } catch {
      // details no writer produced: the batch's hash does not match anyway
    }
  }
  return tags;
}

/**
 * The first retired key id (a key of `retiredAfter`, audit_keyed_trail.retired_after: id → the batch id
 * mark recorded at its retirement) that a batch with id `batchId` names past its mark: `macKeyId` (format
 * 5) or the key_id of a tool-call event's tag among `rows` (format 2); null when none. Task ret47.
 */
function retiredKeyOf(retiredAfter: ReadonlyMap<string, bigint>, batchId: string, macKeyId: string | null, rows: StoredV2Row[]): string | null {
  if (retiredAfter.size === 0) return null;
  const id = BigInt(batchId);
  const past = (k: unknown): k is string => typeof k === 'string' && retiredAfter.has(k) && id > retiredAfter.get(k)!;
  if (past(macKeyId)) return macKeyId;
  for (const r of rows) {
    if (r.kind !== 'tool_call') continue;
    let k: unknown;
    try {
      k = (JSON.parse(r.details) as { audit_tag?: { key_id?: unknown } } | null)?.audit_tag?.key_id;
    } catch {
      continue; // details no writer produced: the batch's hash does not match anyway
    }
    if (past(k)) return k;
  }
  return null;
}

/** Whether stored events `rows` hold a tool-call event without a valid tag under `keys` (call-tag.ts). */
function untaggedCall(keys: ReadonlyMap<string, AuditKey>, rows: StoredV2Row[]): boolean {
  return rows.some((r) => r.kind === 'tool_call' && !callTagValid(keys, rowFromStored(r)));
}

/** The rows of a format-2 or format-3 batch as the writer normalised them, or null (see recomputeV2). */
function storedRows(b: BatchCheck, rows: StoredV2Row[]): AuditRowInput[] | null {
  const input: AuditRowInput[] = [];
  for (const r of rows) {
    if (r.recorded_text !== b.committed_text) return null;
    const row = rowFromStored(r);
    if (!row) return null;
    input.push(row);
  }
  return input;
}

/** Recomputes a format-3 batch's hash (chain.ts) from its header and stored events (id order); null as recomputeV2. */
function recomputeV3(b: BatchCheck, rows: StoredV2Row[]): Buffer | null {
  const input = storedRows(b, rows);
  if (!input || b.chain_id === null || b.seq === null) return null;
  if (b.seq === '0' ? b.anchors === null || parseAnchors(b.anchors) === null : b.anchors !== null) return null;
  return batchHashV3(b.prev_hash, b.chain_id, b.seq, b.committed_text, b.mark ?? '', b.anchors ?? '', eventsText(input));
}

/** Recomputes a format-5 batch's tag under `key` (chain.ts batchTagV5); null as recomputeV3. */
function recomputeV5(b: BatchCheck, rows: StoredV2Row[], key: AuditKey): Buffer | null {
  const input = storedRows(b, rows);
  if (!input || b.chain_id === null || b.seq === null || b.mac_key_id !== key.id) return null;
  if (b.seq === '0' ? b.anchors === null || parseAnchors(b.anchors) === null : b.anchors !== null) return null;
  return batchTagV5(key, b.prev_hash, b.chain_id, b.seq, b.committed_text, b.mark ?? '', b.anchors ?? '', eventsText(input));
}

/** Where verify stands in one format-3 chain. */
interface ChainState {
  seq: bigint;
  hash: Buffer;
  sealed: boolean;
  /** The key id (mac_key_id) of the chain's last batch; null for a format-3 batch. */
  keyId: string | null;
}

/**
 * Recomputes the audit chain, oldest batch first (from the first batch committed at or after
 * `since`, whose link to its predecessor is then taken on trust). A batch does not match when its
 * stored hash differs from the one recomputed from its events (`hash_mismatch`: an event was
 * changed, added or removed), or its prev_hash is not the stored hash of the batch before it
 * (`broken_link`); events that name a batch that does not exist are `events_without_batch`. Verify
 * goes on past a batch that does not match (each link is checked against the stored hash) and
 * lists the first 20. Batches of archived partitions are recomputed from `archiveFile` when given
 * (its events are loaded into a temporary table, and its SHA-256 must be one audit_archives
 * recorded, and a batch committed within the span of the file's events must have its events in it),
 * else skipped and counted. Format-1 batches are recomputed in the database, format-2
 * batches here (event-text.ts). Memory is bounded by pages of at most 1,000 batches and about
 * 20,000 events. Throws ValidationError for an unreadable archive file.
 */
export async function verifyAuditChain(db: ControlDb, opts: { since?: Date; archiveFile?: string; keys?: ReadonlyMap<string, AuditKey> } = {}): Promise<VerifyReport> {
  const keys = opts.keys ?? new Map<string, AuditKey>();
  const c = await db.pool.connect();
  try {
    // Times read in a form the driver parses whatever the database's or role's defaults (format-1
    // texts render their times with to_char in UTC, format-2 texts are rebuilt from UTC text).
    await c.query("SET DateStyle = 'ISO, YMD'");
    await c.query("SET TimeZone = 'UTC'");
    const loaded = opts.archiveFile ? await loadArchive(c, opts.archiveFile) : null;
    const evSource = opts.archiveFile
      ? '(SELECT * FROM audit_events WHERE batch_id BETWEEN $1 AND $2 UNION ALL SELECT * FROM audit_archive_events WHERE batch_id BETWEEN $1 AND $2)'
      : '(SELECT * FROM audit_events WHERE batch_id BETWEEN $1 AND $2)';
    const report: VerifyReport = {
      ok: true,
      batchesChecked: 0,
      eventsChecked: 0,
      archivedBatchesSkipped: 0,
      archiveEvents: loaded?.events ?? 0,
      archive: null,
      chains: 0,
      openChains: 0,
      mismatches: [],
      mismatchCount: 0,
      firstMismatch: null,
      pending: { events: 0, oldest: null, stale: 0, fault: null },
      keyed: { batches: 0, authenticated: 0, unauthenticated: 0, fault: null, keyedSince: null, keyIdsGiven: [...keys.keys()].sort() },
      unkeyed: { approvals: 0, config: 0, calls: 0 },
    };
    // From which batch id an unkeyed (format-3) batch is a fault: the owner's audit_keyed_trail, else the first keyed batch a key given authenticates below.
    // A trail not migrated to format 5 yet (migration 20261216100000000) has neither that table nor mac_key_id.
    const keyedSchema = (await c.query<{ k: boolean }>("SELECT to_regclass('audit_keyed_trail') IS NOT NULL AS k")).rows[0].k;
    // to_jsonb: a control database migrated to format 5 but not to the key retirement (migration 20261216110000000) has no retired_after.
    const latch = keyedSchema
      ? await c.query<{ since: string; retired: Record<string, unknown> | null }>("SELECT since_batch::text AS since, to_jsonb(t) -> 'retired_after' AS retired FROM audit_keyed_trail t")
      : { rows: [] };
    let keyedSince: bigint | null = latch.rows.length ? BigInt(latch.rows[0].since) : null;
    // Each retired key id's mark (task ret47): a batch under it, or a queued call tagged under it, with a greater batch id was stored after its retirement.
    const retiredAfter = new Map<string, bigint>();
    for (const [k, v] of Object.entries(latch.rows[0]?.retired ?? {})) if (typeof v === 'string' && /^-?[0-9]{1,19}$/.test(v)) retiredAfter.set(k, BigInt(v));
    // Tags of the queued calls already verified: a tagged event stored again (a copy of a genuine one) is named.
    const seenCallTags = new Set<string>();
    const pend = await c.query<{ n: number; oldest: Date | null; stale: number }>(
      'SELECT count(*)::int AS n, min(time) AS oldest, count(*) FILTER (WHERE time < clock_timestamp() - make_interval(secs => $1::float8 / 1000))::int AS stale FROM audit_pending_events',
      [PENDING_STALE_MS],
    );
    report.pending = { events: pend.rows[0].n, oldest: pend.rows[0].oldest ? safeIso(pend.rows[0].oldest) : null, stale: pend.rows[0].stale, fault: pend.rows[0].stale > 0 ? 'pending_stale' : null };
    if (report.pending.fault) report.ok = false;
    const chains = new Map<string, ChainState>();
    const anchored: Array<{ batch: BatchCheck; anchors: ChainAnchor[] }> = [];
    // The span of commit times the archive file holds: a batch inside it whose events are not in the file was cut out of it.
    let fileSpan: { from: Date; to: Date } | null = null;
    if (loaded) {
      const rec = await c.query('SELECT 1 FROM audit_archives WHERE file_sha256 = $1 LIMIT 1', [loaded.sha256]);
      report.archive = { sha256: loaded.sha256, recorded: (rec.rowCount ?? 0) > 0 };
      if (!report.archive.recorded) report.ok = false;
      const span = await c.query<{ from: Date | null; to: Date | null }>('SELECT min(recorded_at) AS from, max(recorded_at) AS to FROM audit_archive_events');
      if (span.rows[0].from && span.rows[0].to) fileSpan = { from: span.rows[0].from, to: span.rows[0].to };
    }
    const fault = (m: ChainMismatch) => {
      report.ok = false;
      report.mismatchCount++;
      report.firstMismatch ??= m;
      if (report.mismatches.length < MAX_LISTED) report.mismatches.push(m);
    };
    const orphan = await c.query<{ b: string }>(
      `SELECT min(e.batch_id)::text AS b FROM ${opts.archiveFile ? '(SELECT batch_id FROM audit_events UNION ALL SELECT batch_id FROM audit_archive_events)' : 'audit_events'} e
       WHERE NOT EXISTS (SELECT 1 FROM audit_batches b WHERE b.id = e.batch_id)`,
    );
    const startRow = await c.query<{ id: string | null }>('SELECT min(id)::text AS id FROM audit_batches WHERE ($1::timestamptz IS NULL OR committed_at >= $1)', [opts.since ?? null]);
    let prevHash: Buffer | null | undefined = opts.since ? undefined : null; // undefined: trust the first link
    let prevConfigHash: Buffer | null | undefined = opts.since ? undefined : null; // the config chain's (format 4)
    let from = startRow.rows[0].id;
    while (from !== null) {
      // Ordered by the bigint column: `ORDER BY id` would sort the text output column ('10' < '9') and skip batches.
      const page = await c.query<{ id: string; n: number }>('SELECT b.id::text AS id, b.event_count AS n FROM audit_batches b WHERE b.id >= $1 ORDER BY b.id LIMIT $2', [from, PAGE]);
      if (page.rows.length === 0) break;
      let last = 0;
      for (let events = page.rows[0].n; last + 1 < page.rows.length && events + page.rows[last + 1].n <= PAGE_EVENTS; ) events += page.rows[++last].n;
      const lo = page.rows[0].id;
      const hi = page.rows[last].id;
      const r = await c.query<BatchCheck>(
        `WITH valid_archives AS (${VALID_ARCHIVES})
         SELECT b.id::text AS id, b.committed_at, to_char(b.committed_at AT TIME ZONE 'UTC', ${UTC_US}) AS committed_text, b.format, b.event_count,
                b.prev_hash, b.hash, count(e.id)::int AS events, b.chain_id::text AS chain_id, b.seq::text AS seq, b.mark, b.anchors, ${keyedSchema ? 'b.mac_key_id' : 'NULL::text AS mac_key_id'},
                CASE WHEN b.format = 1 THEN
                  interlock_audit_batch_hash(b.prev_hash, b.id, string_agg(interlock_audit_event_text(to_jsonb(e), e.time, e.recorded_at), E'\\n' ORDER BY e.id))
                END AS recomputed,
                EXISTS (SELECT 1 FROM valid_archives a WHERE b.committed_at >= a.range_from AND b.committed_at < a.range_to AND b.id BETWEEN a.first_batch_id AND a.last_batch_id) AS archived,
                NOT isfinite(b.committed_at) OR b.committed_at < ${YEAR_ONE}
                  OR coalesce(bool_or(NOT isfinite(e.time) OR e.time < ${YEAR_ONE} OR NOT isfinite(e.recorded_at) OR e.recorded_at < ${YEAR_ONE}
                    OR (cardinality(e.relations) > 0 AND (array_lower(e.relations, 1) <> 1 OR array_ndims(e.relations) <> 1))), false) AS unwritable,
                coalesce(bool_or(e.kind = 'tool_call' AND (e.decision IS DISTINCT FROM 'queued' OR e.approval_id IS NULL
                  OR NOT EXISTS (SELECT 1 FROM approvals p WHERE p.id = e.approval_id AND p.identity_id = e.identity_id))), false) AS loose_calls,
                coalesce(bool_or(e.kind = 'tool_call'), false) AS has_calls
         FROM audit_batches b LEFT JOIN ${evSource} e ON e.batch_id = b.id
         WHERE b.id BETWEEN $1 AND $2
         GROUP BY b.id ORDER BY b.id`,
        [lo, hi],
      );
      const v2 = new Map<string, StoredV2Row[]>();
      if (r.rows.some((b) => b.format >= 2 && b.events > 0)) {
        // Format-2 texts hold every float8 exactly (shortest round-trip digits): read them so whatever the
        // server's or role's default; format-1 texts were sealed under the default, so only this query.
        await c.query('SET extra_float_digits = 3');
        const ev = await c.query<StoredV2Row>(
          `SELECT e.batch_id::text AS batch_id, e.id::text AS id, to_char(e.recorded_at AT TIME ZONE 'UTC', ${UTC_US}) AS recorded_text,
                  e.kind, to_char(e.time AT TIME ZONE 'UTC', ${UTC_US}) AS time, e.request_id, e.identity_id, e.key_id, e.tool, e.canonical_tool,
                  e.dialect, e.protocol_version, e.decision, e.reason_code, e.source_id, e.action, e.fingerprint, e.relations,
                  e.row_count::text AS row_count, e.duration_ms::text AS duration_ms, e.approval_id, e.operator, e.details::text AS details
           FROM ${evSource} e JOIN audit_batches b ON b.id = e.batch_id AND b.format >= 2
           ORDER BY e.batch_id, e.id`,
          [lo, hi],
        );
        await c.query('RESET extra_float_digits');
        for (const row of ev.rows) {
          let list = v2.get(row.batch_id);
          if (!list) v2.set(row.batch_id, (list = []));
          list.push(row);
        }
      }
      for (const b of r.rows) {
        const m = (f: ChainFault) => fault({ batchId: b.id, committedAt: safeIso(b.committed_at), fault: f });
        let tags: string[] = [];
        let linked = true;
        let retired: string | null = null;
        /** A format-5 batch under another key id than the batch before it in its chain (red team rt47b J1). */
        let keySwitched = false;
        if (b.format === 5) report.keyed.batches++;
        if (b.format === 3 || b.format === 5) {
          const key = b.chain_id ?? '';
          const st = chains.get(key);
          const seq = BigInt(b.seq ?? '-1');
          if (!st) {
            // A chain starts at its genesis (seq 0, no prev_hash); with --since its first batch is trusted.
            if (!opts.since && (seq !== 0n || b.prev_hash !== null)) {
              m('broken_link');
              linked = false;
            }
          } else if (st.sealed || seq <= st.seq) {
            m('inserted_batch');
            continue; // the chain goes on from the batches it had
          } else if (seq !== st.seq + 1n || !bufEq(b.prev_hash, st.hash)) {
            m('broken_link');
            linked = false;
          }
          // A lane tags every batch of its chain with its one key (ChainLane's key is fixed): a batch under
          // another key id than the one before it was not written by that lane, whatever keys are given.
          if (linked && st && b.format === 5 && (st.keyId ?? '') !== (b.mac_key_id ?? '')) keySwitched = true;
          chains.set(key, { seq, hash: b.hash, sealed: b.mark === 'seal', keyId: b.format === 5 ? (b.mac_key_id ?? '') : null });
          if (seq === 0n && b.anchors !== null) {
            const a = parseAnchors(b.anchors);
            if (a) anchored.push({ batch: b, anchors: a });
          }
        } else if (b.format === 4 ? prevConfigHash !== undefined && !bufEq(b.prev_hash, prevConfigHash) : prevHash !== undefined && !bufEq(b.prev_hash, prevHash)) {
          m('broken_link');
          linked = false;
        }
        if (!linked) {
          // One fault per batch: a batch whose link is broken is named for that.
        } else if (b.unwritable || keySwitched) m('hash_mismatch');
        else if (b.archived && b.events === 0 && b.event_count > 0 && fileSpan && b.committed_at >= fileSpan.from && b.committed_at <= fileSpan.to) m('hash_mismatch');
        else if (b.archived && b.events === 0) report.archivedBatchesSkipped++;
        // Under a retired key id past its retirement's mark (task ret47): named whether or not that key is given (the id is on the batch).
        else if (b.format === 5 && (retired = retiredKeyOf(retiredAfter, b.id, b.mac_key_id, [])) !== null) fault({ batchId: b.id, committedAt: safeIso(b.committed_at), fault: 'retired_key', keyId: retired });
        else if (b.format === 5 && keys.size === 0) {
          // No key: its links were checked above, its tag cannot be (ok is false: key_needed).
          // It does not move keyedSince: anyone may insert a format-5 batch (red team rt46b G2).
          report.keyed.unauthenticated++;
        } else if (b.format === 5 && !keys.has(b.mac_key_id ?? '')) fault({ batchId: b.id, committedAt: safeIso(b.committed_at), fault: 'unknown_key', keyId: b.mac_key_id ?? '' });
        else {
          let recomputed: Buffer | null;
          try {
            recomputed =
              b.format === 5 ? recomputeV5(b, v2.get(b.id) ?? [], keys.get(b.mac_key_id ?? '')!)
              : b.format === 3 ? recomputeV3(b, v2.get(b.id) ?? [])
              : b.format === 4 ? recomputeV4(b, v2.get(b.id) ?? [])
              : b.format === 2 ? recomputeV2(b, v2.get(b.id) ?? [])
              : b.recomputed;
          } catch {
            recomputed = null; // a stored value no writer produces (e.g. nested past any limit)
          }
          if (!bufEq(recomputed, b.hash)) m('hash_mismatch');
          else if ((b.format === 3 || b.format === 5) && (v2.get(b.id) ?? []).some((e) => e.kind === 'config')) m('misplaced_config');
          // A queued call tagged under a retired key id, stored after its retirement (task ret47): its tag may well verify (the thief holds the
          // leaked key), so it is named before the tags are checked, whether or not that key is given.
          else if (b.format === 2 && (retired = retiredKeyOf(retiredAfter, b.id, null, v2.get(b.id) ?? [])) !== null) fault({ batchId: b.id, committedAt: safeIso(b.committed_at), fault: 'retired_key', keyId: retired });
          // After the trail became keyed, tool calls come from the keyed lanes; a format-1/2 batch (the
          // database's append functions, which the runtime role may call) holds only a queued write's.
          // Given the keys, a queued write's tool-call event there carries the key's tag (call-tag.ts, red team rt46b G1).
          // A format-1 batch (interlock_audit_append, kept for gateways not yet upgraded) holds no tool call once keyed: its
          // events are not read here, so their tags are not checked (red team rt47a H1).
          else if ((b.format === 3 || (b.format === 1 && b.has_calls) || (b.format === 2 && b.loose_calls) || (b.format === 2 && keys.size > 0 && untaggedCall(keys, v2.get(b.id) ?? []))) && keyedSince !== null && BigInt(b.id) > keyedSince) m('unkeyed_batch');
          // A queued call's tag is bound to the event, not its batch: a second event with the same tag is a copy
          // stored again through the format-2 append (red team rt46b G1's rest), a place its chain already has.
          else if ((tags = b.format === 2 ? callTagsOf(v2.get(b.id) ?? []) : []).some((tag, i, all) => seenCallTags.has(tag) || all.indexOf(tag) !== i)) m('inserted_batch');
          else {
            for (const tag of tags) seenCallTags.add(tag);
            report.batchesChecked++;
            report.eventsChecked += b.events;
            if (b.format === 5) {
              report.keyed.authenticated++;
              keyedSince ??= BigInt(b.id);
            } else if (b.format === 4) report.unkeyed.config++;
            else if (b.format === 3) report.unkeyed.calls++;
            else report.unkeyed.approvals++;
          }
        }
        if (b.format < 3) prevHash = b.hash;
        else if (b.format === 4) prevConfigHash = b.hash;
      }
      from = (BigInt(hi) + 1n).toString();
    }
    // Every genesis's anchors: each named batch still holds the hash it had when that chain started.
    if (anchored.length) {
      const ids = [...new Set(anchored.flatMap((g) => g.anchors.map((a) => a.batch)))];
      const got = await c.query<{ id: string; hash: string }>("SELECT id::text AS id, encode(hash, 'hex') AS hash FROM audit_batches WHERE id = ANY($1::bigint[])", [ids]);
      const have = new Map(got.rows.map((x) => [x.id, x.hash]));
      const late: ChainMismatch[] = [];
      for (const g of anchored) {
        if (g.anchors.some((a) => have.get(a.batch) !== a.hash)) late.push({ batchId: g.batch.id, committedAt: safeIso(g.batch.committed_at), fault: 'anchor_mismatch' });
      }
      if (late.length) {
        report.ok = false;
        report.mismatchCount += late.length;
        report.mismatches.push(...late);
        report.mismatches.sort((a, b) => (BigInt(a.batchId) < BigInt(b.batchId) ? -1 : BigInt(a.batchId) > BigInt(b.batchId) ? 1 : 0));
        report.mismatches.length = Math.min(report.mismatches.length, MAX_LISTED);
        report.firstMismatch = report.mismatches[0];
      }
    }
    report.keyed.keyedSince = keyedSince === null ? null : keyedSince.toString();
    if (report.keyed.unauthenticated > 0) {
      report.keyed.fault = 'key_needed';
      report.ok = false;
    }
    report.chains = chains.size;
    report.openChains = [...chains.values()].filter((x) => !x.sealed).length;
    const o = orphan.rows[0].b;
    if (o !== null) {
      // In chain order: events of a missing batch come before the batches after it, even in a full list.
      report.ok = false;
      report.mismatchCount++;
      report.mismatches.push({ batchId: o, committedAt: null, fault: 'events_without_batch' });
      report.mismatches.sort((a, b) => (BigInt(a.batchId) < BigInt(b.batchId) ? -1 : BigInt(a.batchId) > BigInt(b.batchId) ? 1 : 0));
      report.mismatches.length = Math.min(report.mismatches.length, MAX_LISTED);
      report.firstMismatch = report.mismatches[0];
    }
    return report;
  } finally {
    await c.query('DROP TABLE IF EXISTS audit_archive_events').catch(() => undefined);
    await c.query('RESET extra_float_digits; RESET DateStyle; RESET TimeZone').catch(() => undefined);
    c.release();
  }
}

function bufEq(a: Buffer | null, b: Buffer | null): boolean {
  if (a === null || b === null) return a === b;
  return a.equals(b);
}
