/**
 * Red team rt45b: the audit trail after h28t (migration 20261214100000000_audit-invariant-domains_h28t:
 * the trail's one-column invariants moved from table CHECKs to domains), attacked on real PostgreSQL
 * with the runtime role's credential (what the gateway connects as, grantRuntimeRole), with the
 * migration run down and up over boundary values, and with hostile stored content. Every wait is
 * bounded; nothing leaves loopback.
 *
 * Each test is one attack; its name says whether it is a finding (severity, fixed or open:
 * test.failing while open) or an attack the trail withstands ("held").
 *
 *   F1 medium, fixed (task f1): a format-3 chain the runtime role writes itself verified, lies included;
 *      now the gateway's batches are keyed (format 5) and unkeyed ones refused once the trail is keyed.
 *   F2 low, fixed: a runtime temp table of a trail domain or row type made ALTER DOMAIN / ALTER COLUMN TYPE fail.
 *   F3 low, fixed: verify --archive threw on a file value its column refuses instead of naming the batch.
 */
import { registerAuditKeyIds } from '../../../src/audit/keyed-trail';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import pg from 'pg';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantRuntimeRole, migrationNames, runMigrations } from '../../../src/control/db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { archiveAuditPartitions } from '../../../src/audit/archive';
import { migrateDown } from '../../helpers/migrate-down';
import { BASE_AUDIT_ROW, tamperAsSuperuser } from '../../helpers/audit-events';

jest.setTimeout(180_000);

const DOMAINS_MIGRATION = '20261214100000000_audit-invariant-domains_h28t';

/** The SQLSTATE `sql` fails with on `c` ('ok' when it succeeds). */
const codeOf = (c: { query: (s: string, p?: unknown[]) => Promise<unknown> }, sql: string, params: unknown[] = []) =>
  c.query(sql, params).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));

/**
 * Runs `COPY … FROM STDIN` `sql` on `client`, sending `data` as its one chunk (text or binary
 * format, as `sql` says); resolves with the SQLSTATE it failed with, or 'ok'. A pg Submittable
 * (the driver has no COPY of its own; pg-copy-streams is not a dependency).
 */
function copyIn(client: pg.Client, sql: string, data: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const q = {
      submit(connection: { query: (t: string) => void }) {
        connection.query(sql);
      },
      handleCopyInResponse(connection: { sendCopyFromChunk: (b: Buffer) => void; endCopyFrom: () => void }) {
        connection.sendCopyFromChunk(data);
        connection.endCopyFrom();
      },
      // The driver hands an error to the query and forgets it (no ReadyForQuery follows for it).
      handleError(err: { code?: string }) {
        resolve(err.code ?? String(err));
      },
      handleReadyForQuery() {
        resolve('ok');
      },
      handleRowDescription() {},
      handleDataRow() {},
      handleCommandComplete() {},
      handleEmptyQuery() {},
      handlePortalSuspended() {},
      handleCopyData() {},
    };
    (client as unknown as { query: (q: unknown) => void }).query(q);
  });
}

/** One tuple of binary COPY for (kind text, decision text, details jsonb, batch_id bigint), with the header and trailer. */
function binaryCopy(kind: string, decision: string, details: string, batchId: bigint): Buffer {
  const field = (b: Buffer) => {
    const len = Buffer.alloc(4);
    len.writeInt32BE(b.length);
    return Buffer.concat([len, b]);
  };
  const id = Buffer.alloc(8);
  id.writeBigInt64BE(batchId);
  const count = Buffer.alloc(2);
  count.writeInt16BE(4);
  const trailer = Buffer.alloc(2);
  trailer.writeInt16BE(-1);
  return Buffer.concat([
    Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1'),
    Buffer.alloc(8),
    count,
    field(Buffer.from(kind)),
    field(Buffer.from(decision)),
    field(Buffer.concat([Buffer.from([1]), Buffer.from(details)])),
    field(id),
    trailer,
  ]);
}

describe('a stolen runtime credential against the trail\'s domains', () => {
  let t: TestControlDb;
  let role: string;
  let rt: pg.Client;
  let rtUrl: string;
  let batchId: string;

  beforeAll(async () => {
    t = await freshControlDb('rt45b_dom');
    const granted = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole);
    role = granted.role;
    rtUrl = granted.url;
    rt = new pg.Client({ connectionString: rtUrl });
    await rt.connect();
    // One honest batch the attacks' events point at.
    batchId = await new ChainLane(t.db.pool).append([{ ...BASE_AUDIT_ROW, request_id: 'honest-1' }], 5000);
  });
  afterAll(async () => {
    await rt?.end();
    if (role) await dropLoginRole(t, role);
    await t?.cleanup();
  });

  const events = async () => Number((await t.db.pool.query<{ n: string }>('SELECT count(*)::text AS n FROM audit_events')).rows[0].n);

  test('held: every query route into a domain column refuses a value its check refuses (23514), nothing is stored', async () => {
    const ins = (select: string) => `INSERT INTO audit_events (kind, decision, details, batch_id) ${select}`;
    const b = batchId;
    // audit_events' row type as record_in reads it: id, kind, then every other column empty (NULL).
    const width = (await t.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'audit_events'::regclass AND attnum > 0 AND NOT attisdropped")).rows[0].n;
    const record = `(1,evil${','.repeat(width - 2)})`;
    const routes: Array<[string, string]> = [
      ['cast through the domain', ins(`SELECT 'evil'::text::audit_event_kind, 'allowed', '{}', ${b}`)],
      ['array of the domain, unnested', ins(`SELECT k, 'allowed', '{}', ${b} FROM unnest('{evil}'::audit_event_kind[]) k`)],
      ['json_populate_record of the row type', ins(`SELECT (r).kind, 'allowed', '{}', ${b} FROM (SELECT json_populate_record(NULL::audit_events, '{"kind":"evil"}') r) s`)],
      ['record_in of the row type', ins(`SELECT (r).kind, 'allowed', '{}', ${b} FROM (SELECT '${record}'::audit_events r) s`)],
      ['jsonb_populate_record, details an array', ins(`SELECT (r).kind, 'allowed', (r).details, ${b} FROM (SELECT jsonb_populate_record(NULL::audit_events, '{"kind":"tool_call","details":[1]}') r) s`)],
      ['details JSON null', ins(`SELECT 'tool_call', 'allowed', 'null'::jsonb, ${b}`)],
      ['details a string', ins(`SELECT 'tool_call', 'allowed', '"{}"'::jsonb, ${b}`)],
      ['kind with a trailing space', ins(`SELECT 'config ', 'allowed', '{}', ${b}`)],
      ['kind in capitals', ins(`SELECT 'TOOL_CALL', 'allowed', '{}', ${b}`)],
      ['kind with an explicit collation', ins(`SELECT 'config' COLLATE "C" || ' ', 'allowed', '{}', ${b}`)],
    ];
    const got: Record<string, string> = {};
    for (const [what, sql] of routes) got[what] = await codeOf(rt, sql);
    expect(got).toEqual(Object.fromEntries(routes.map(([w]) => [w, '23514'])));
    expect(await events()).toBe(1);
  });

  // Before F2's fix (migration 20261215100000000) the runtime role could make these functions, and
  // an INSERT of their 'evil' result was refused by the domain's check (23514); now it may not make
  // a function over a trail domain or row type at all.
  test('held: the runtime role cannot make functions of its own (pg_temp) returning a trail domain or row type (SQL, set-returning, PL/pgSQL, a row type: 42501)', async () => {
    const fns = [
      `CREATE FUNCTION pg_temp.k_sql(t text) RETURNS audit_event_kind LANGUAGE sql AS 'SELECT t'`,
      `CREATE FUNCTION pg_temp.k_set(t text) RETURNS SETOF audit_event_kind LANGUAGE sql AS 'SELECT t'`,
      `CREATE FUNCTION pg_temp.k_pl(t text) RETURNS audit_event_kind LANGUAGE plpgsql AS 'BEGIN RETURN t; END'`,
      `CREATE FUNCTION pg_temp.k_tab() RETURNS TABLE (kind audit_event_kind) LANGUAGE sql AS $$ VALUES ('evil') $$`,
      `CREATE FUNCTION pg_temp.k_row() RETURNS audit_events LANGUAGE plpgsql AS $$DECLARE r audit_events; BEGIN r.kind := 'evil'; RETURN r; END$$`,
    ];
    const got: string[] = [];
    for (const sql of fns) got.push(await codeOf(rt, sql));
    expect(got).toEqual(fns.map(() => '42501'));
    expect(await events()).toBe(1);
  });

  test('held: a parameter typed by the domain, sent as text or binary (domain_in, domain_recv), is checked', async () => {
    const sql = `INSERT INTO audit_events (kind, decision, details, batch_id) VALUES ($1, 'allowed', $2, ${batchId})`;
    expect(await codeOf(rt, sql, ['evil', '{}'])).toBe('23514');
    expect(await codeOf(rt, sql, [Buffer.from('evil'), '{}'])).toBe('23514');
    // jsonb's binary form: version 1, then the text.
    expect(await codeOf(rt, sql, ['tool_call', Buffer.concat([Buffer.from([1]), Buffer.from('[]')])])).toBe('23514');
    expect(await events()).toBe(1);
  });

  test('held: COPY into audit_events, text and binary, checks the domains; COPY into audit_batches is refused by its row-level security', async () => {
    const cols = 'audit_events (kind, decision, details, batch_id)';
    expect(await copyIn(rt, `COPY ${cols} FROM STDIN`, Buffer.from(`evil\tallowed\t{}\t${batchId}\n`))).toBe('23514');
    expect(await copyIn(rt, `COPY ${cols} FROM STDIN`, Buffer.from(`tool_call\tallowed\t[]\t${batchId}\n`))).toBe('23514');
    expect(await copyIn(rt, `COPY ${cols} FROM STDIN (FORMAT binary)`, binaryCopy('evil', 'allowed', '{}', BigInt(batchId)))).toBe('23514');
    expect(await copyIn(rt, `COPY ${cols} FROM STDIN (FORMAT binary)`, binaryCopy('tool_call', 'allowed', '"x"', BigInt(batchId)))).toBe('23514');
    // The control: the same binary tuple with valid values is stored (so the refusals are the domains').
    expect(await copyIn(rt, `COPY ${cols} FROM STDIN (FORMAT binary)`, binaryCopy('tool_call', 'copied', '{}', BigInt(batchId)))).toBe('ok');
    const hash = '\\\\x' + '00'.repeat(31);
    expect(await copyIn(rt, 'COPY audit_batches (committed_at, event_count, hash, format, chain_id, seq) FROM STDIN', Buffer.from(`now\t0\t${hash}\t3\t00000000-0000-4000-8000-0000000000aa\t0\n`))).toBe('0A000');
    expect(await events()).toBe(2);
    // The copied event sits in the honest batch: verify names that batch (detected, as any event the runtime role adds to a batch).
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, firstMismatch: { batchId, fault: 'hash_mismatch' } });
  });

  test('held: the runtime role can neither alter, drop, rename nor re-own a domain, nor cast to one (42501)', async () => {
    const ddl = [
      'ALTER DOMAIN audit_event_kind DROP CONSTRAINT audit_event_kind_check',
      "ALTER DOMAIN audit_event_kind ADD CONSTRAINT loose CHECK (true) NOT VALID",
      'ALTER DOMAIN audit_details DROP NOT NULL',
      'ALTER DOMAIN audit_hash RENAME TO audit_hash_old',
      `ALTER DOMAIN audit_mark OWNER TO CURRENT_USER`,
      'ALTER DOMAIN audit_format SET SCHEMA pg_temp',
      'DROP DOMAIN audit_seq',
      'CREATE CAST (integer AS audit_event_count) WITHOUT FUNCTION',
      "COMMENT ON DOMAIN audit_mark IS 'x'",
    ];
    const got = [];
    for (const sql of ddl) got.push(await codeOf(rt, sql));
    expect(got).toEqual(ddl.map(() => '42501'));
    const checks = await t.db.pool.query<{ n: string }>("SELECT conname AS n FROM pg_constraint WHERE contypid IN (SELECT oid FROM pg_type WHERE typname LIKE 'audit\\_%' AND typtype = 'd') ORDER BY 1");
    expect(checks.rows.map((r) => r.n)).toEqual(['audit_details_check', 'audit_event_count_check', 'audit_event_kind_check', 'audit_format_check', 'audit_hash_check', 'audit_key_id_check', 'audit_mark_check', 'audit_seq_check']);
  });

  test('held: the runtime role cannot take a lock an append waits for; with its own batch uncommitted and the one lock it may take held, the gateway\'s append commits', async () => {
    // Its INSERT is granted per column, and LOCK TABLE looks at table privileges: every mode but ACCESS SHARE (SELECT) is refused.
    const modes = ['ROW EXCLUSIVE', 'SHARE', 'SHARE ROW EXCLUSIVE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE'];
    const got: string[] = [];
    for (const table of ['audit_events', 'audit_batches']) {
      for (const mode of modes) {
        await rt.query('BEGIN');
        got.push(await codeOf(rt, `LOCK TABLE ${table} IN ${mode} MODE NOWAIT`));
        await rt.query('ROLLBACK');
      }
      await rt.query('BEGIN');
      got.push(await codeOf(rt, `SELECT 1 FROM ${table} LIMIT 1 FOR KEY SHARE`));
      await rt.query('ROLLBACK');
    }
    expect(got).toEqual(Array(12).fill('42501'));
    // Everything it may do, held open: ACCESS SHARE on both tables, a batch and an event of its own uncommitted.
    await rt.query('BEGIN');
    try {
      await rt.query('LOCK TABLE audit_events, audit_batches IN ACCESS SHARE MODE');
      const own = await rt.query<{ id: string }>("INSERT INTO audit_batches (committed_at, event_count, hash, format, chain_id, seq) VALUES (now(), 1, decode(repeat('ab', 32), 'hex'), 3, gen_random_uuid(), 0) RETURNING id::text");
      await rt.query(`INSERT INTO audit_events (kind, decision, details, batch_id) VALUES ('tool_call', 'allowed', '{}', ${own.rows[0].id})`);
      const lane = new ChainLane(t.db.pool);
      await expect(lane.append([{ ...BASE_AUDIT_ROW, request_id: 'during-hold' }], 5000)).resolves.toMatch(/^[0-9]+$/);
    } finally {
      await rt.query('ROLLBACK');
    }
  });

  // Finding F2 (low, fixed by migration 20261215100000000, task f2x): the domains, like every type,
  // and the trail tables' row types granted USAGE to PUBLIC, so a runtime session could make a temp
  // table with a column of one. While it lived, the owner's ALTER DOMAIN … ADD CONSTRAINT failed
  // (0A000 "cannot access temporary tables of other sessions") and so did any ALTER COLUMN … TYPE of
  // audit_events (0A000 "… uses its row type"), the two kinds of statement h28t's migration runs: a
  // migration like it failed while such a session lived. Now USAGE on the domains and on the row
  // types of the trail's tables and partitions (those that exist and those
  // interlock_audit_ensure_partitions creates) is the owner's: the runtime role cannot make an object
  // depend on them (42501), and the owner's statements succeed while its session lives.
  test('finding F2 (low, fixed): the runtime role cannot make a temp table of a trail domain or row type (42501); the owner alters both while its session lives', async () => {
    // A partition made after the migration, as `audit archive` makes them.
    expect((await t.db.pool.query<{ n: number }>("SELECT interlock_audit_ensure_partitions('2040-01-01', 1) AS n")).rows[0].n).toBe(1);
    const s = new pg.Client({ connectionString: rtUrl });
    await s.connect();
    try {
      const holds = [
        'CREATE TEMP TABLE hold_domain (k audit_event_kind)',
        'CREATE TEMP TABLE hold_domains (h audit_hash, f audit_format, c audit_event_count, q audit_seq, m audit_mark, d audit_details)',
        'CREATE TEMP TABLE hold_array (k audit_event_kind[])',
        'CREATE TEMP TABLE hold_row (r audit_events)',
        'CREATE TEMP TABLE hold_batch (r audit_batches)',
        'CREATE TEMP TABLE hold_default (r audit_events_default)',
        'CREATE TEMP TABLE hold_new (r audit_events_p204001)',
        'CREATE TEMP TABLE hold_like (LIKE audit_events)',
        'CREATE FUNCTION pg_temp.hold(k audit_event_kind) RETURNS int LANGUAGE sql AS $$SELECT 1$$',
      ];
      const refused: string[] = [];
      for (const sql of holds) refused.push(await codeOf(s, sql));
      expect(refused).toEqual(holds.map(() => '42501'));
      const owner = await t.db.pool.connect();
      try {
        const got: string[] = [];
        for (const sql of ["ALTER DOMAIN audit_event_kind ADD CONSTRAINT rt45b CHECK (VALUE <> 'x')", 'ALTER TABLE audit_events ALTER COLUMN kind TYPE audit_event_kind']) {
          await owner.query('BEGIN');
          await owner.query("SET LOCAL lock_timeout = '5s'");
          got.push(await codeOf(owner, sql));
          await owner.query('ROLLBACK');
        }
        expect(got).toEqual(['ok', 'ok']);
      } finally {
        owner.release();
      }
    } finally {
      await s.end();
    }
  });
});

describe('the migration: old CHECKs and domains over boundary values', () => {
  let t: TestControlDb;
  beforeAll(async () => {
    t = await freshControlDb('rt45b_mig');
  });
  afterAll(async () => {
    await t?.cleanup();
  });

  /** What each boundary row's INSERT gives (SQLSTATE or 'ok'), as the superuser, every attempt rolled back. */
  async function verdicts(): Promise<Record<string, string>> {
    const c = await t.db.pool.connect();
    const out: Record<string, string> = {};
    try {
      await c.query('BEGIN');
      const batch = `INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark) VALUES (now(), $1, $2, $3, $4, $5, $6, $7)`;
      const good: unknown[] = [0, null, Buffer.alloc(32, 1), 3, '00000000-0000-4000-8000-000000000001', 0, null];
      const columns = ['event_count', 'prev_hash', 'hash', 'format', 'chain_id', 'seq', 'mark'];
      const bytes = (n: number | null) => (n === null ? null : Buffer.alloc(n, 7));
      const cases: Array<[number, unknown[]]> = [
        [0, [-1, 0, null, 2147483647]],
        [1, [bytes(0), bytes(31), bytes(32), bytes(33)]],
        [2, [null, bytes(0), bytes(31), bytes(33)]],
        [3, [-1, 0, 1, 2, 4, 5, null]],
        [5, [-1, null, '9223372036854775807']],
        [6, ['seal', '', 'Seal', 'seal ', 'open']],
      ];
      const attempt = async (what: string, sql: string, values: unknown[]) => {
        await c.query('SAVEPOINT a');
        out[what] = await c.query(sql, values).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));
        await c.query('ROLLBACK TO SAVEPOINT a');
      };
      for (const [i, vs] of cases) {
        for (const v of vs) {
          const values = [...good];
          values[i] = v;
          await attempt(`batch ${columns[i]} = ${Buffer.isBuffer(v) ? `${v.length} bytes` : JSON.stringify(v)}`, batch, values);
        }
      }
      const event = `INSERT INTO audit_events (kind, decision, details, batch_id) VALUES ($1, 'allowed', $2::jsonb, 1)`;
      for (const k of ['tool_call', 'approval', 'config', '', 'Tool_call', 'tool_call ', 'config\u200b', null]) await attempt(`event kind = ${JSON.stringify(k)}`, event, [k, '{}']);
      for (const d of ['{}', '{"a":null}', '[]', 'null', '"{}"', '1', 'true', null]) await attempt(`event details = ${String(d)}`, event, ['tool_call', d]);
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    return out;
  }

  test('held: every boundary row gets the same verdict before and after the migration (and after its down)', async () => {
    const names = migrationNames();
    const back = names.length - names.indexOf(DOMAINS_MIGRATION);
    const after = await verdicts();
    await migrateDown(t.temp.url, back);
    const before = await verdicts();
    expect(after).toEqual(before);
    expect(await runMigrations(t.temp.url)).toEqual(names.slice(names.indexOf(DOMAINS_MIGRATION)));
    expect(await verdicts()).toEqual(before);
    // What the invariants say, spelled out for a few: 23514 for a check, 23502 for NOT NULL, 22003 out of range.
    expect(before).toMatchObject({
      'batch event_count = -1': '23514',
      'batch event_count = null': '23502',
      'batch prev_hash = 31 bytes': '23514',
      'batch hash = null': '23502',
      'batch format = 5': '23514',
      'batch format = null': '23502',
      'batch format = 2': '23514', // format 2 with a chain: the two-column CHECK
      'batch seq = -1': '23514',
      'batch mark = ""': '23514',
      'batch mark = "seal "': '23514',
      'batch mark = "seal"': 'ok',
      'event kind = "config\u200b"': '23514',
      'event kind = null': '23502',
      'event details = null': '23502',
      'event details = {"a":null}': 'ok',
    });
  });
});

describe('what a stolen runtime credential can still write', () => {
  let t: TestControlDb;
  let role: string;
  let pool: pg.Pool;
  beforeAll(async () => {
    t = await freshControlDb('rt45b_forge');
    const granted = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole);
    role = granted.role;
    pool = new pg.Pool({ connectionString: granted.url, max: 1 });
  });
  afterAll(async () => {
    await pool?.end();
    if (role) await dropLoginRole(t, role);
    await t?.cleanup();
  });

  // Finding F1 (medium, fixed by task f1): the batch hash was an unkeyed SHA-256 the runtime role can
  // compute, and its INSERTs may start format-3 chains of their own (the writer lanes'), so a chain
  // written with the stolen credential verified like the gateway's: an event for a call never made,
  // or a second event for an answered call naming another identity and another outcome. Shown failing
  // on main (this test with the gateway's lane unkeyed: verify said ok). Now the gateway, given its
  // audit key (kept outside the database), writes format 5 (HMAC-SHA-256 under the key, its key id on
  // the batch); once the owner keyed the trail (require-key) the database refuses unkeyed batches, and verify with the
  // key names a guessed tag (hash_mismatch); a keyed chain under another key is refused (unregistered key id).
  test('finding F1 (medium, fixed): a chain the runtime role writes itself, lying about an answered call\'s identity and outcome, fails verify', async () => {
    const key = auditKey(randomBytes(32).toString('base64'));
    const keys = new Map([[key.id, key]]);
    // The owner keys the trail (`interlock audit require-key`; red team rt46b G2: no batch does).
    await registerAuditKeyIds(t.db.pool, [key.id], 'require_key');
    const honest = new ChainLane(t.db.pool, key);
    await honest.append([{ ...BASE_AUDIT_ROW, request_id: 'req_answered', identity_id: 'idn_alice000000000000000', decision: 'allowed' }], 5000);
    const lie = { ...BASE_AUDIT_ROW, request_id: 'req_answered', identity_id: 'idn_mallory0000000000000', decision: 'denied', reason_code: 'policy_denied' };
    // An unkeyed chain of its own: refused by the database (the owner's trigger; audit_keyed_trail).
    const unkeyed = await new ChainLane(pool).append([lie], 5000).then(() => 'ok', (e: { code?: string }) => e.code);
    expect(unkeyed).toBe('42501');
    // A keyed chain under a key of its own: its genesis is refused, the key id is not registered.
    const own = new ChainLane(pool, auditKey(randomBytes(32).toString('base64')));
    expect(await own.append([lie], 5000).then(() => 'ok', (e: { code?: string }) => e.code)).toBe('42501');
    // Under the gateway's key id (not secret) with a guessed key: stored, and named.
    const guessed = new ChainLane(pool, { id: key.id, secret: randomBytes(32) });
    const g0 = await guessed.append([lie], 5000);
    const n = await t.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE request_id = 'req_answered'");
    expect(n.rows[0].n).toBe(2);
    const r = await verifyAuditChain(t.db, { keys });
    expect(r).toMatchObject({ ok: false, batchesChecked: 2, mismatchCount: 1, keyed: { batches: 2, authenticated: 1 } }); // (one batch: the config event audit_key_registered)
    expect(r.mismatches.map((m) => [m.batchId, m.fault])).toEqual([[g0, 'hash_mismatch']]);
    // Without the key, verify does not say ok either.
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, firstMismatch: null, keyed: { unauthenticated: 2, fault: 'key_needed' } });
  });
});

describe('verify of an archive file with hostile values', () => {
  let t: TestControlDb;
  let dir: string;
  beforeAll(async () => {
    t = await freshControlDb('rt45b_arch');
    dir = mkdtempSync(join(tmpdir(), 'il-rt45b-'));
  });
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await t?.cleanup();
  });

  // Finding F3 (low, fixed): h28t made an archived event whose kind or details its domains refuse load
  // and be named as its batch; any other value its column refuses (NULL in a NOT NULL column, a time,
  // number or array that does not parse) still failed the load, so `audit verify --archive` threw the
  // database's error (23502, 22007, 22P02) instead of naming the altered batch (never a false OK: the
  // file's SHA-256 no longer matches audit_archives). Fixed in verify.ts loadArchive: a chunk refused
  // for a value is loaded row by row and the refused lines left out, so their batch is recomputed
  // without them and named. Shown failing without the fix (each edit threw its SQLSTATE).
  test('finding F3 (low, fixed): an archived event edited to a value its column refuses is named as its batch, not a thrown load error', async () => {
    const lane = new ChainLane(t.db.pool);
    await lane.append([{ ...BASE_AUDIT_ROW, request_id: 'arch-a', time: new Date().toISOString() }], 5000);
    const b2 = await lane.append([{ ...BASE_AUDIT_ROW, request_id: 'arch-b', time: new Date().toISOString() }, { ...BASE_AUDIT_ROW, request_id: 'arch-c', time: new Date().toISOString() }], 5000);
    await lane.append([{ ...BASE_AUDIT_ROW, request_id: 'arch-d', time: new Date().toISOString() }], 5000);
    await lane.append([], 5000, 'seal');
    const n = new Date();
    const file = join(dir, 'a.jsonl.gz');
    await archiveAuditPartitions(t.db, { before: new Date(Date.UTC(n.getUTCFullYear(), n.getUTCMonth() + 1, 1)), file, force: true });
    expect(await verifyAuditChain(t.db, { archiveFile: file })).toMatchObject({ ok: true });
    const lines = gunzipSync(readFileSync(file)).toString('utf8').split('\n').filter(Boolean);
    expect(lines.filter((l) => l.includes('"arch-b"'))).toHaveLength(1);
    const edits: Array<[string, (o: Record<string, unknown>) => Record<string, unknown>]> = [
      ['request_id of 100,000 characters', (o) => ({ ...o, request_id: 'x'.repeat(100_000) })],
      ['decision null', (o) => ({ ...o, decision: null })],
      ['time not a time', (o) => ({ ...o, time: 'yesterday-ish' })],
      ['row_count a word', (o) => ({ ...o, row_count: 'many' })],
      ['relations not an array', (o) => ({ ...o, relations: '{' })],
    ];
    const got: Record<string, unknown> = {};
    for (const [what, edit] of edits) {
      const f = join(dir, 'edited.jsonl.gz');
      writeFileSync(f, gzipSync(lines.map((l) => (l.includes('"arch-b"') ? JSON.stringify(edit(JSON.parse(l) as Record<string, unknown>)) : l)).join('\n') + '\n'));
      got[what] = await verifyAuditChain(t.db, { archiveFile: f }).then(
        (r) => ({ ok: r.ok, recorded: r.archive?.recorded, batch: r.firstMismatch?.batchId, fault: r.firstMismatch?.fault, mismatches: r.mismatchCount }),
        (e: { code?: string }) => ({ threw: e.code }),
      );
    }
    expect(got).toEqual(Object.fromEntries(edits.map(([w]) => [w, { ok: false, recorded: false, batch: b2, fault: 'hash_mismatch', mismatches: 1 }])));
  });
});
