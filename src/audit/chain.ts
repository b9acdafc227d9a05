/**
 * Audit chain format 3 (issue 28; migration 20261203160000000_audit-writer-chains_h28.sql): the
 * gateway seals each batch itself and appends it with one plain INSERT statement, on a chain of its
 * own per writer lane, so appending costs the control database what an INSERT costs and no gateway
 * process waits for another.
 *
 * A lane (`ChainLane`) is one chain: a random UUID `chain_id`, batches `seq` 0, 1, 2, … without gaps,
 * at most one batch in flight, so the lane always knows its previous batch's hash. A batch's hash is
 *
 *   SHA-256(prev_hash ‖ UTF8("interlock-audit-v3\n" ‖ chain_id ‖ "\n" ‖ seq ‖ "\n" ‖ committed_at in
 *           UTC with microseconds ‖ "\n" ‖ mark ‖ "\n" ‖ anchors ‖ "\n" ‖ the batch's canonical text))
 *
 * with the canonical text of format 2 (event-text.ts: normalised rows, events in id order) and no
 * prev_hash at seq 0. Seq 0 (the genesis) carries `anchors`, the ids and hashes of the latest
 * format-1/2 batch, of the latest format-4 (config chain) batch and of the latest batch of each
 * chain among the trail's newest 256 batches; a lane closed cleanly ends with a batch of mark `seal` and no events. A batch whose outcome is
 * unknown (the connection failed, so it may have committed) ends the lane's chain: the next batch
 * starts a new chain, whose genesis anchors the old one's head, so a crash or a lost connection
 * leaves an open chain, never a gap. A batch the server refused (an ErrorResponse: rolled back) keeps
 * the chain as it was. `interlock audit verify` checks every chain (verify.ts).
 *
 * Format 5 (red team rt45b F1; migration 20261216100000000_audit-keyed-chain_f1.sql): the same chain
 * with the gateway's audit key (key.ts). Its tag, stored in `hash`, is
 *
 *   HMAC-SHA-256(key, prev_hash ‖ UTF8("interlock-audit-v5\n" ‖ key_id ‖ "\n" ‖ chain_id ‖ "\n" ‖ seq ‖ … as format 3))
 *
 * and the batch records the key's id in `mac_key_id`, so verify picks the key (rotation). A lane
 * given a key writes format 5 only; once the owner keyed the trail (keyed-trail.ts: `interlock audit
 * require-key` registers the key ids; red team rt46b G2), the database refuses format-3 batches and a
 * format-5 genesis under an unregistered key id (the migration's trigger), and verify names a format-3
 * batch as `unkeyed_batch`.
 *
 * The statement: a batch of at most VALUES_MAX_EVENTS events is appended by a multi-row VALUES
 * INSERT of its own size (chainValuesStatement, one named statement per size), a larger one by
 * unnest of twenty array literals (CHAIN_APPEND_STATEMENT); both store the same rows, hashed the same.
 */
import { createHash, createHmac, randomUUID } from 'node:crypto';
import type pg from 'pg';
import { appendAuditBatch, isConnectionError } from './append';
import { canonicalAuditJson, eventsText, normalizeAuditRow } from './event-text';
import type { AuditKey } from './key';
import type { AuditRowInput } from './types';

/** The first line of a format-3 batch's hashed header. */
export const CHAIN_V3_TAG = 'interlock-audit-v3';

/** The first line of a format-5 (keyed) batch's tagged header. */
export const CHAIN_V5_TAG = 'interlock-audit-v5';

/** How many of the trail's newest batches a genesis looks at for the heads of other chains. */
const ANCHOR_WINDOW = 256;

/** A format-3 batch's hash (see the module comment). `committed` is UTC with microseconds (`…T12:00:00.123000Z`). */
export function batchHashV3(prev: Buffer | null, chainId: string, seq: string, committed: string, mark: string, anchors: string, batchText: string): Buffer {
  const h = createHash('sha256');
  if (prev) h.update(prev);
  h.update(`${CHAIN_V3_TAG}\n${chainId}\n${seq}\n${committed}\n${mark}\n${anchors}\n${batchText}`, 'utf8');
  return h.digest();
}

/**
 * A format-5 batch's tag (see the module comment): HMAC-SHA-256 under `key` over the format-3 input
 * with the key's id in the header. `committed` as for batchHashV3.
 */
export function batchTagV5(key: AuditKey, prev: Buffer | null, chainId: string, seq: string, committed: string, mark: string, anchors: string, batchText: string): Buffer {
  const h = createHmac('sha256', key.secret);
  if (prev) h.update(prev);
  h.update(`${CHAIN_V5_TAG}\n${key.id}\n${chainId}\n${seq}\n${committed}\n${mark}\n${anchors}\n${batchText}`, 'utf8');
  return h.digest();
}

/** One anchor of a genesis: a batch id (decimal string) and its hash (hex). */
export interface ChainAnchor {
  batch: string;
  hash: string;
}

/** The text of a genesis's anchors: a JSON array of {batch, hash}, batch ids ascending. */
export function anchorsText(anchors: ChainAnchor[]): string {
  const sorted = [...anchors].sort((a, b) => (BigInt(a.batch) < BigInt(b.batch) ? -1 : BigInt(a.batch) > BigInt(b.batch) ? 1 : 0));
  return JSON.stringify(sorted.map((a) => ({ batch: a.batch, hash: a.hash })));
}

/** Parses a stored anchors text; null when it is not one anchorsText wrote. */
export function parseAnchors(text: string): ChainAnchor[] | null {
  try {
    const v = JSON.parse(text) as unknown;
    if (!Array.isArray(v)) return null;
    const out: ChainAnchor[] = [];
    for (const a of v) {
      if (!a || typeof a !== 'object' || typeof a.batch !== 'string' || !/^[0-9]{1,19}$/.test(a.batch) || typeof a.hash !== 'string' || !/^[0-9a-f]{64}$/.test(a.hash)) return null;
      out.push({ batch: a.batch, hash: a.hash });
    }
    return anchorsText(out) === text ? out : null;
  } catch {
    return null;
  }
}

/**
 * The anchors of a new chain: the latest format-1/2 batch, the latest format-4 batch (the config
 * chain, migration 20261208220000000) and the head of each chain among the newest batches.
 */
export async function readAnchors(pool: pg.Pool): Promise<ChainAnchor[]> {
  const r = await pool.query<ChainAnchor>(
    `(SELECT id::text AS batch, encode(hash, 'hex') AS hash FROM audit_batches WHERE format < 3 ORDER BY id DESC LIMIT 1)
     UNION
     (SELECT id::text, encode(hash, 'hex') FROM audit_batches WHERE format = 4 ORDER BY id DESC LIMIT 1)
     UNION
     (SELECT DISTINCT ON (n.chain_id) n.id::text, encode(n.hash, 'hex')
        FROM (SELECT id, hash, chain_id FROM audit_batches ORDER BY id DESC LIMIT ${ANCHOR_WINDOW}) n
       WHERE n.chain_id IS NOT NULL ORDER BY n.chain_id, n.id DESC)`,
  );
  return r.rows;
}

/** The batch row of an append: format 3, or format 5 with the key id in parameter `$keyParam` (chain.ts module comment). */
function batchInsert(keyParam: number | null): string {
  return keyParam === null
    ? `WITH b AS (
  INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors)
  VALUES ($1::timestamptz, $2::integer, $3::bytea, $4::bytea, 3, $5::uuid, $6::bigint, $7::text, $8::text) RETURNING id
)`
    : `WITH b AS (
  INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors, mac_key_id)
  VALUES ($1::timestamptz, $2::integer, $3::bytea, $4::bytea, 5, $5::uuid, $6::bigint, $7::text, $8::text, $${keyParam}::text) RETURNING id
)`;
}

const UNNEST_EVENTS = `e AS (
  INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
      reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
  SELECT u.kind, u.time, u.request_id, u.identity_id, u.key_id, u.tool, u.canonical_tool, u.dialect, u.protocol_version, u.decision,
      u.reason_code, u.source_id, u.action, u.fingerprint, u.relations::text[], u.row_count, u.duration_ms, u.approval_id, u.operator,
      u.details::jsonb, b.id, $1::timestamptz
    FROM b, unnest($9::text[], $10::timestamptz[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[],
      $18::text[], $19::text[], $20::text[], $21::text[], $22::text[], $23::text[], $24::bigint[], $25::float8[], $26::text[], $27::text[], $28::text[])
      WITH ORDINALITY AS u(kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
        reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, ord)
   ORDER BY u.ord
)
SELECT id AS b FROM b`;

/** The append statement of format 3: the batch row and its events, one statement, one commit; returns the batch id. */
export const CHAIN_APPEND_STATEMENT = { name: 'interlock_audit_append_v3', text: `${batchInsert(null)}, ${UNNEST_EVENTS}` };

/** CHAIN_APPEND_STATEMENT of format 5: the same, with the key id (mac_key_id) as $29. */
export const CHAIN_APPEND_STATEMENT_V5 = { name: 'interlock_audit_append_v5', text: `${batchInsert(29)}, ${UNNEST_EVENTS}` };

/** Backslash or double quote: what an array literal's quoted element must escape. */
const ESCAPED = /[\\"]/;

/**
 * Most events a batch appends through a VALUES statement of its own size (chainValuesStatement); a
 * larger batch uses CHAIN_APPEND_STATEMENT's unnest. 32 (h28b, was 8): with the 'auto' lane overlap
 * (writer.ts) batches at c=32 hold ~10 events, where VALUES cost the backend 0.85–0.92× of unnest
 * (bench/audit-v3-parts.ts, BENCH_BATCH 12 and 24); at most 33 named statements per connection.
 */
export const VALUES_MAX_EVENTS = 32;

const EVENT_COLUMN_LIST = `kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
    reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at`;

const valuesStatements: Array<{ name: string; text: string }> = [];
const valuesStatementsV5: Array<{ name: string; text: string }> = [];

/**
 * The append statement of format 3 for a batch of exactly `n` events (0 ≤ n ≤ VALUES_MAX_EVENTS):
 * the same batch row ($1–$8 as in CHAIN_APPEND_STATEMENT) and a multi-row VALUES list, twenty
 * parameters per event from $9 on in eventColumns' column order (eventValues), each typed by its
 * target column. Issue 28: on the backend it costs ~65 µs less per batch of three than unnest of
 * twenty array literals (bench/audit-v3-parts.ts). Ids follow the VALUES order, so the events' id
 * order is the batch's order. One named statement per size (`interlock_audit_append_v3_<n>`),
 * prepared once per connection on first use; returns the batch id. With `keyed`, the format-5
 * statement (`interlock_audit_append_v5_<n>`): the key id (mac_key_id) is the last parameter,
 * $(9 + 20n). Throws RangeError outside 0–VALUES_MAX_EVENTS.
 */
export function chainValuesStatement(n: number, keyed = false): { name: string; text: string } {
  if (!Number.isInteger(n) || n < 0 || n > VALUES_MAX_EVENTS) throw new RangeError(`a VALUES append holds 0–${VALUES_MAX_EVENTS} events, not ${n}`);
  const cache = keyed ? valuesStatementsV5 : valuesStatements;
  const cached = cache[n];
  if (cached) return cached;
  const batch = batchInsert(keyed ? 9 + 20 * n : null);
  // kind ($9) and details ($28) typed by their base types: their columns are domains (migration
  // 20261214100000000), and a parameter typed by a domain is read by domain_in, which sets up the
  // domain's checks afresh for every value; cast, the plan's CoerceToDomain checks them with the
  // expressions the type cache keeps planned (task h28t).
  const param = (k: number, c: number) => `$${9 + k * 20 + c}${c === 0 ? '::text' : c === 19 ? '::jsonb' : ''}`;
  const row = (k: number) => `(${Array.from({ length: 20 }, (_, c) => param(k, c)).join(', ')}, (SELECT id FROM b), $1::timestamptz)`;
  const text =
    n === 0
      ? `${batch}\nSELECT id AS b FROM b`
      : `${batch}, e AS (\n  INSERT INTO audit_events (${EVENT_COLUMN_LIST})\n  VALUES ${Array.from({ length: n }, (_, k) => row(k)).join(',\n    ')}\n)\nSELECT id AS b FROM b`;
  return (cache[n] = { name: `interlock_audit_append_v${keyed ? 5 : 3}_${n}`, text });
}

/** `s` as an element of a PostgreSQL array literal (always quoted; backslash and quote escaped). */
const element = (s: string | null): string => (s === null ? 'NULL' : ESCAPED.test(s) ? `"${s.replace(/[\\"]/g, '\\$&')}"` : `"${s}"`);

/** A PostgreSQL one-dimensional array literal of `values` (null elements as NULL). */
export function arrayLiteral(values: ReadonlyArray<string | null>): string {
  return `{${values.map(element).join(',')}}`;
}

/** The number as float8 input reads it back to the same double (JavaScript's shortest round-trip digits). */
const num = (v: number | null): string | null => (v === null ? null : String(v));

/** Columns of an event row in CHAIN_APPEND_STATEMENT ($9–$28). */
const EVENT_COLUMNS = 20;

/**
 * The parameters $9–$28 of CHAIN_APPEND_STATEMENT for normalised rows, column by column: one array
 * literal per column (arrayLiteral's text), built in one pass over the rows without a closure or an
 * intermediate array per column (issue 28 item 3). `detailsTexts[i]`, when given, is
 * canonicalAuditJson(rows[i].details) already computed (the lane hashes the same text: one
 * serialisation per event).
 */
export function eventColumns(rows: AuditRowInput[], detailsTexts?: readonly string[]): string[] {
  const c: string[] = [];
  for (let k = 0; k < EVENT_COLUMNS; k++) c.push('{');
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    const sep = i ? ',' : '';
    c[0] += sep + element(r.kind);
    c[1] += sep + element(r.time);
    c[2] += sep + element(r.request_id);
    c[3] += sep + element(r.identity_id);
    c[4] += sep + element(r.key_id);
    c[5] += sep + element(r.tool);
    c[6] += sep + element(r.canonical_tool);
    c[7] += sep + element(r.dialect);
    c[8] += sep + element(r.protocol_version);
    c[9] += sep + element(r.decision);
    c[10] += sep + element(r.reason_code);
    c[11] += sep + element(r.source_id);
    c[12] += sep + element(r.action);
    c[13] += sep + element(r.fingerprint);
    c[14] += sep + element(r.relations === null ? null : arrayLiteral(r.relations));
    c[15] += sep + element(num(r.row_count));
    c[16] += sep + element(num(r.duration_ms));
    c[17] += sep + element(r.approval_id);
    c[18] += sep + element(r.operator);
    c[19] += sep + element(detailsTexts ? detailsTexts[i] : canonicalAuditJson(r.details));
  }
  for (let k = 0; k < EVENT_COLUMNS; k++) c[k] += '}';
  return c;
}

/**
 * A batch of normalised rows as the lane sends it: `text`, the canonical text its hash covers
 * (eventsText), and `columns`, the parameters $9–$28 (eventColumns), byte for byte what the two
 * give, with each row's details serialised once for both (issue 28 item 3).
 */
export function batchTexts(rows: AuditRowInput[]): { text: string; columns: string[] } {
  const details = rows.map((r) => canonicalAuditJson(r.details));
  return { text: eventsText(rows, details), columns: eventColumns(rows, details) };
}

/**
 * The parameters from $9 on of chainValuesStatement(rows.length) for normalised rows: twenty per row,
 * in eventColumns' column order. `detailsTexts[i]`, when given, is canonicalAuditJson(rows[i].details)
 * already computed (as for eventColumns). With `out`, the parameters are pushed onto it (after what
 * it holds) and `out` is returned: the lane's statement values without a spread copy (h28e).
 */
export function eventValues(rows: AuditRowInput[], detailsTexts?: readonly string[], out: unknown[] = []): Array<string | null> {
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    out.push(r.kind, r.time, r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect, r.protocol_version, r.decision, r.reason_code,
      r.source_id, r.action, r.fingerprint, r.relations === null ? null : arrayLiteral(r.relations), num(r.row_count), num(r.duration_ms), r.approval_id,
      r.operator, detailsTexts ? detailsTexts[i] : canonicalAuditJson(r.details));
  }
  return out as Array<string | null>;
}

/**
 * One writer lane's chain (see the module comment). `append` stores rows as the lane's next batch
 * and resolves with the batch id once committed; it must not be called again before it settles.
 */
export class ChainLane {
  private chainId = randomUUID();
  private seq = 0n;
  private prevHash: Buffer | null = null;
  /** Batches this lane committed (all chains). */
  committed = 0;

  /**
   * `key`: the audit key (key.ts) every batch of this lane is tagged with (format 5); null or absent:
   * format 3, unkeyed.
   */
  constructor(
    private readonly pool: pg.Pool,
    private readonly key: AuditKey | null = null,
  ) {}

  /** The lane's chain id and next seq (tests, logs). */
  get position(): { chainId: string; seq: string } {
    return { chainId: this.chainId, seq: this.seq.toString() };
  }

  /** Whether the lane has a chain with at least one committed batch (a seal would end it). */
  get started(): boolean {
    return this.seq > 0n;
  }

  /**
   * Stores `rows` (AuditRowInput, normalised here; a row without a valid time gets the current time)
   * as the lane's next batch under statement_timeout `timeoutMs`; `mark` 'seal' ends the chain (no
   * rows). Resolves with the batch id (decimal string). Rejects with the driver's error: a server
   * error (SQLSTATE, rolled back) keeps the chain; any other failure starts a new chain next time.
   */
  async append(rows: AuditRowInput[], timeoutMs: number, mark: '' | 'seal' = ''): Promise<string> {
    const started = Date.now();
    const anchors = this.seq === 0n ? anchorsText(await readAnchors(this.pool)) : '';
    const now = new Date();
    const committedIso = now.toISOString();
    const committed = `${committedIso.slice(0, 23)}000Z`;
    const nowFn = () => now;
    const normal = rows.map((r) => normalizeAuditRow(r, nowFn));
    const seq = this.seq.toString();
    // Each event's details serialised once, for the hashed text and the stored rows (issue 28 item 3).
    const details = normal.map((r) => canonicalAuditJson(r.details));
    const key = this.key;
    const text = eventsText(normal, details);
    const hash = key ? batchTagV5(key, this.prevHash, this.chainId, seq, committed, mark, anchors, text) : batchHashV3(this.prevHash, this.chainId, seq, committed, mark, anchors, text);
    const small = normal.length <= VALUES_MAX_EVENTS;
    // $1–$8, then the events' parameters pushed in place (no spread through the array iterator: h28e).
    const values: unknown[] = [committedIso, String(normal.length), this.prevHash, hash, this.chainId, seq, mark || null, anchors || null];
    if (small) eventValues(normal, details, values);
    else for (const col of eventColumns(normal, details)) values.push(col);
    if (key) values.push(key.id);
    const statement = small ? chainValuesStatement(normal.length, key !== null) : key ? CHAIN_APPEND_STATEMENT_V5 : CHAIN_APPEND_STATEMENT;
    try {
      const id = await appendAuditBatch(this.pool, { statement, values }, timeoutMs - (Date.now() - started));
      this.prevHash = hash;
      this.seq++;
      this.committed++;
      if (mark === 'seal') this.restart();
      return id;
    } catch (err) {
      if (isConnectionError(err)) this.restart();
      throw err;
    }
  }

  /** Ends this lane's chain where it stands (left open) and starts a new one with the next batch. */
  restart(): void {
    this.chainId = randomUUID();
    this.seq = 0n;
    this.prevHash = null;
  }
}
