/**
 * Attacks on audit chain format 2 (migration 20261201800000000, src/audit/event-text.ts),
 * written by a red team against its first design (the gateway sent a digest of its own; commit
 * 77fb730) and kept as regressions of the fixes: no false alarm whatever a row holds or the
 * server's float settings; every change to a stored value found, including ids, number spellings
 * that read back as the same double, NaN/−0 durations, and batches cut out of an archive file; the
 * writer cannot seal anything but what is stored; verify goes on past a mismatch, survives hostile
 * nesting and pages its memory; one unreadable event refuses only its own caller.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import pg from 'pg';
import { ADMIN_URL } from '../../helpers/pg';
import { appendFormat1, BASE_AUDIT_ROW, tamperAsSuperuser, toolCallEvent } from '../../helpers/audit-events';
import { freshControlDb, withFreshControlDb, type TestControlDb } from '../control/control-db';
import { appendAuditRows, DbAuditSink, recordApprovalEvent, recordConfigEvent, toolCallRow, type AuditRowInput } from '../../../src/audit/writer';
import { archiveAuditPartitions } from '../../../src/audit/archive';
import { verifyAuditChain } from '../../../src/audit/verify';
import { eventsText, normalizeAuditRow } from '../../../src/audit/event-text';
import { grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';
import type { ToolCallAuditEvent } from '../../../src/audit/types';

const baseRow = BASE_AUDIT_ROW;

/** A tool-call event of the shared test shape, with an identity and `over` applied. */
const event = (requestId: string, over: Partial<ToolCallAuditEvent> = {}): ToolCallAuditEvent => ({ ...toolCallEvent(requestId), identityId: 'idn_0123456789abcdef0123', ...over });

const tamper = (db: ControlDb, sql: string, params: unknown[] = []) => tamperAsSuperuser(db.pool, sql, params);

const v1Append = (db: ControlDb, rows: Partial<AuditRowInput>[]) => appendFormat1(db.pool, rows);

const withDb = withFreshControlDb;

// ---------------------------------------------------------------------------------------------
// 1. False alarms: stored differs from hashed although nobody tampered
// ---------------------------------------------------------------------------------------------

describe('1. false alarms', () => {
  test('a sparse array in details ([1, , 3]) is sealed and stored as [1,null,3]: verify passes', async () => {
    await withDb('rt2_sparse', async (t) => {
      const holes: unknown[] = [1];
      holes[2] = 3; // index 1 is a hole (also what new Array(n), arr.length = n or delete arr[i] make)
      // Through the public writers: scrub() keeps the hole (v.map), normalizeAuditRow's plain() keeps it
      // (v.map), canonicalAuditJson renders it as nothing, JSON.stringify (what is stored) as null.
      await recordConfigEvent(t.db, { decision: 'applied', operator: 'alice', details: { files: holes } });
      const stored = (await t.db.pool.query<{ d: string }>("SELECT details::text AS d FROM audit_events WHERE kind = 'config'")).rows[0].d;
      expect(stored).toBe('{"files": [1, null, 3]}');
      expect(eventsText([normalizeAuditRow({ ...baseRow, details: { files: holes } })])).toContain('"details":{"files":[1,null,3]}');
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
    });
  }, 60_000);

  test('with extra_float_digits = 0 on the database, format-1 and format-2 batches whose duration_ms needs 17 digits verify', async () => {
    await withDb('rt2_efd', async (t) => {
      const dur = 12.345678901234567; // performance.now() differences look like this
      // A legitimate PostgreSQL setting (the pre-12 default), e.g. in postgresql.conf or per database/role.
      await t.db.pool.query(`ALTER DATABASE "${t.temp.name}" SET extra_float_digits = 0`);
      const db2 = await openControlDb(t.temp.url, { migrate: false });
      try {
        const v1 = await v1Append(db2, [{ ...baseRow, request_id: 'v1', duration_ms: dur }]);
        const v1r = await verifyAuditChain(db2);
        expect(v1r).toMatchObject({ ok: true, batchesChecked: 1 }); // format 1 under the setting: fine
        const v2 = await appendAuditRows(db2, [{ ...baseRow, request_id: 'v2', duration_ms: dur }]);
        expect(v1).not.toBe(v2);
        // verify reads float8 with extra_float_digits = 3 whatever the database's setting.
        expect(await verifyAuditChain(db2)).toMatchObject({ ok: true, firstMismatch: null });
      } finally {
        await db2.close();
      }
    });
  }, 60_000);

  test('hostile agent-controlled strings, numbers, keys and objects through toolCallRow → DbAuditSink → verify', async () => {
    await withDb('rt2_hostile', async (t) => {
      const sink = new DbAuditSink(t.db);
      const long = 'x'.repeat(200_000) + '\ud800' + '😀'.repeat(1000) + '\u0000';
      const strings = [
        '\u0000', '\ud800', '\udfff', '\udc00\ud800', '\ud800\ud800\udc00', '😀'.slice(0, 1), '😀'.slice(1), '\ufffe', '\uffff', '\ufeff',
        '\u2028\u2029', '\u001f\u007f\u0085', 'NULL', 'null', '', ' ', ' a ', '{a,b}', '"\\', '\\u0000', '\u200b\u0301', '\uDBFF\uDFFF', long,
      ];
      const nums = [0, -0, 1e21, 1e-7, 5e-324, Number.MAX_VALUE, -Number.MAX_VALUE, 2 ** 53 + 2, 2 ** 64, 0.1 + 0.2, 123456789.12345678, NaN, Infinity, -Infinity];
      const wide: Record<string, number> = {};
      for (let i = 0; i < 5000; i++) wide[`k${i}\ud800`] = i;
      let deep: unknown = 'leaf';
      for (let i = 0; i < 40; i++) deep = i % 2 ? { d: deep } : [deep];
      const withToJSON = { toJSON: () => 'hidden', v: 1 };
      const ta = new Uint8Array([1, 2, 3]);
      const evs: ToolCallAuditEvent[] = strings.map((s, i) =>
        event(s, {
          tool: s,
          reasonCode: s,
          durationMs: nums[i % nums.length],
          details: {
            source_id: s,
            action: s,
            fingerprint: s,
            relations: [s, 'NULL', '', ' x ', 'a,b', '{"}'],
            row_count: nums[i % nums.length],
            [s]: s,
            refusal_message: s,
            n: nums,
            big: 2n ** 70n,
            ...JSON.parse('{"__proto__": {"x": 1}, "constructor": {"prototype": 1}}'),
            wide,
            deep,
            withToJSON,
            ta,
            map: new Map([['a', 1]]),
            set: new Set([1]),
            date: new Date(0),
            und: undefined,
            fn: () => 1,
            sym: Symbol('s'),
            arr: [undefined, () => 1, Symbol('x'), NaN, -0],
          },
        }),
      );
      await Promise.all(evs.map((e) => sink.record(e)));
      const r = await verifyAuditChain(t.db);
      expect(r).toMatchObject({ ok: true, eventsChecked: evs.length, firstMismatch: null });
    });
  }, 120_000);

  test('the same hostile rows through appendAuditRows with and without a timeout, approval and config events, times at the edges', async () => {
    await withDb('rt2_edges', async (t) => {
      for (const time of ['0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z', '0000-12-31T23:59:59.999Z', '+010000-01-01T00:00:00.000Z', '2026-12-01T10:00:00.1234567+05:30', '2026-12-01T10:00:00', 'garbage', '']) {
        await appendAuditRows(t.db, [{ ...baseRow, time, request_id: time }]);
        await appendAuditRows(t.db, [{ ...baseRow, time, request_id: time }], 5000);
      }
      await recordApprovalEvent(t.db, { approvalId: 'apr_\u0000\ud800', action: 'approved', operator: 'op\udfff', details: { reason: ('é😀'.repeat(400) + 'x').slice(0, 1000) }, time: new Date(-62135596800001) });
      await recordConfigEvent(t.db, { decision: 'applied\u0000', operator: '\ud83d', details: { changed: ['a\u0000'], n: 1e300 } });
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
    });
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// 2. Missed tampering
// ---------------------------------------------------------------------------------------------

describe('2. missed tampering', () => {
  let t: TestControlDb;
  beforeEach(async () => {
    t = await freshControlDb('rt2_tamper');
  });
  afterEach(async () => t.cleanup());

  /** Three format-1 batches then three format-2 batches; returns the middle batch of each. */
  async function seed(details: Record<string, unknown> = { n: 1 }, over: Partial<AuditRowInput> = {}) {
    await v1Append(t.db, [{ ...baseRow, request_id: 'a1', details }]);
    const f1 = await v1Append(t.db, [{ ...baseRow, ...over, request_id: 'b1', details }, { ...baseRow, ...over, request_id: 'b1x', details }]);
    await v1Append(t.db, [{ ...baseRow, request_id: 'c1', details }]);
    await appendAuditRows(t.db, [{ ...baseRow, request_id: 'a2', details }]);
    const f2 = await appendAuditRows(t.db, [{ ...baseRow, ...over, request_id: 'b2', details }, { ...baseRow, ...over, request_id: 'b2x', details }]);
    await appendAuditRows(t.db, [{ ...baseRow, request_id: 'c2', details }]);
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, batchesChecked: 6 });
    return { f1, f2 };
  }

  test('renumbering the events of a batch (keeping their order) is found in both formats', async () => {
    const { f1, f2 } = await seed();
    // Format 1: detected (to_jsonb(e) includes id).
    await tamper(t.db, 'UPDATE audit_events SET id = id + 1000000 WHERE batch_id = $1', [f1]);
    expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f1, fault: 'hash_mismatch' });
    await tamper(t.db, 'UPDATE audit_events SET id = id - 1000000 WHERE batch_id = $1', [f1]);
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true });
    // Format 2: the same change (ids now outside first_event_id..last_event_id, even duplicating
    // another batch's ids: the primary key is (id, recorded_at)) is found: the ids are sealed.
    const other = (await t.db.pool.query<{ id: string }>("SELECT id::text FROM audit_events WHERE request_id = 'a2'")).rows[0].id;
    await tamper(t.db, "UPDATE audit_events SET id = CASE WHEN request_id = 'b2' THEN $2::bigint ELSE id + 1000000 END WHERE batch_id = $1", [f2, other]);
    const dup = (await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_events WHERE id = $1', [other])).rows[0].n;
    expect(dup).toBe(2);
    expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f2, fault: 'hash_mismatch' });
  }, 60_000);

  test('a details number changed to another decimal that parses to the same double is found in both formats', async () => {
    const { f1, f2 } = await seed({ amount: 9007199254740992, ratio: 0.1, missing: null });
    const change = "details || '{\"amount\": 9007199254740993, \"ratio\": 0.1000000000000000000001, \"missing\": 1e400}'::jsonb";
    await tamper(t.db, `UPDATE audit_events SET details = ${change} WHERE batch_id = $1`, [f1]);
    expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f1, fault: 'hash_mismatch' });
    await tamper(t.db, "UPDATE audit_events SET details = '{\"amount\": 9007199254740992, \"ratio\": 0.1, \"missing\": null}' WHERE batch_id = $1", [f1]);
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true });
    await tamper(t.db, `UPDATE audit_events SET details = ${change} WHERE batch_id = $1`, [f2]);
    const seen = (await t.db.pool.query<{ d: string }>("SELECT details::text AS d FROM audit_events WHERE request_id = 'b2'")).rows[0].d;
    expect(seen).toContain('9007199254740993'); // what psql, a SIEM export or details->> now show
    expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f2, fault: 'hash_mismatch' });
  }, 60_000);

  test('duration_ms NULL → NaN / Infinity, and 0 → −0, are found', async () => {
    const { f1, f2 } = await seed({}, { duration_ms: null });
    await tamper(t.db, "UPDATE audit_events SET duration_ms = 'NaN' WHERE batch_id = $1", [f1]);
    expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f1, fault: 'hash_mismatch' });
    await tamper(t.db, 'UPDATE audit_events SET duration_ms = NULL WHERE batch_id = $1', [f1]);
    await tamper(t.db, "UPDATE audit_events SET duration_ms = CASE WHEN request_id = 'b2' THEN 'NaN'::float8 ELSE 'Infinity'::float8 END WHERE batch_id = $1", [f2]);
    expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f2, fault: 'hash_mismatch' });
  }, 60_000);

  const held: Array<[string, (f1: string, f2: string) => [string, unknown[]]]> = [
    ['format 2 → 1', (_f1, f2) => ['UPDATE audit_batches SET format = 1 WHERE id = $1', [f2]]],
    ['format 1 → 2', (f1) => ['UPDATE audit_batches SET format = 2 WHERE id = $1', [f1]]],
    ['recorded_at of one event (moves it to the default partition)', (_f1, f2) => ["UPDATE audit_events SET recorded_at = '1990-01-01' WHERE batch_id = $1 AND request_id = 'b2'", [f2]]],
    ['recorded_at and committed_at together', (_f1, f2) => ["UPDATE audit_events SET recorded_at = recorded_at + interval '1 us' WHERE batch_id = $1; UPDATE audit_batches SET committed_at = committed_at + interval '1 us' WHERE id = $1".replace(/\$1/g, f2), []]],
    ['two events of a batch swap ids', (_f1, f2) => [`UPDATE audit_events SET id = id + 10000000 WHERE batch_id = ${f2} AND request_id = 'b2'; UPDATE audit_events SET id = id - 1 WHERE batch_id = ${f2} AND request_id = 'b2x'; UPDATE audit_events SET id = id - 10000000 + 1 WHERE batch_id = ${f2} AND request_id = 'b2'`, []]],
    ['an event moved to the next batch', (_f1, f2) => ["UPDATE audit_events SET batch_id = batch_id + 1 WHERE batch_id = $1 AND request_id = 'b2x'", [f2]]],
    ['batch id of a whole batch (and its events) renumbered', (_f1, f2) => ['UPDATE audit_events SET batch_id = 999 WHERE batch_id = $1; UPDATE audit_batches SET id = 999 WHERE id = $1'.replace(/\$1/g, f2), []]],
    ['an event added with the batch commit time', (_f1, f2) => ["INSERT INTO audit_events (kind, time, decision, details, batch_id, recorded_at) SELECT 'tool_call', now(), 'allowed', '{}', id, committed_at FROM audit_batches WHERE id = $1", [f2]]],
    ['details key order / whitespace (not a change)', (_f1, f2) => ["UPDATE audit_events SET details = '{\"n\" :   1}' WHERE batch_id = $1", [f2]]],
    ['a relation element NULL', (_f1, f2) => ["UPDATE audit_events SET relations = '{public.track,NULL}' WHERE batch_id = $1", [f2]]],
    ['time zone of time', (_f1, f2) => ["UPDATE audit_events SET time = (time AT TIME ZONE 'UTC') AT TIME ZONE 'Europe/Paris' WHERE batch_id = $1", [f2]]],
  ];
  test.each(held)('%s is detected', async (name, change) => {
    const { f1, f2 } = await seed();
    const [sql, params] = change(f1, f2);
    await tamper(t.db, sql, params);
    const r = await verifyAuditChain(t.db);
    if (name.startsWith('details key order')) expect(r.ok).toBe(true);
    else expect(r.ok).toBe(false);
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// 2b. Archives (not specific to format 2, checked for format-2 batches)
// ---------------------------------------------------------------------------------------------

describe('2b. archives', () => {
  let t: TestControlDb;
  let dir: string;
  beforeAll(async () => {
    t = await freshControlDb('rt2_arch');
    dir = mkdtempSync(join(tmpdir(), 'il-rt2-'));
  });
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await t.cleanup();
  });

  test('an archive file with an edited event, or with a batch cut out, does not verify: the batch is named, and the file is not one audit_archives records', async () => {
    const b1 = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'arch1', duration_ms: 12.345678901234567, details: { n: 2 ** 64, s: '\ud800x' } }]);
    const b2 = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'arch2' }, { ...baseRow, request_id: 'arch3' }]);
    const b3 = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'arch4' }]);
    const n = new Date();
    const file = join(dir, 'a.jsonl.gz');
    const res = await archiveAuditPartitions(t.db, { before: new Date(Date.UTC(n.getUTCFullYear(), n.getUTCMonth() + 1, 1)), file, force: true });
    expect(res.events).toBe(4);
    // The untouched archive verifies across the boundary (format-2 events recomputed from the file).
    expect(await verifyAuditChain(t.db, { archiveFile: file })).toMatchObject({ ok: true, batchesChecked: 3, archivedBatchesSkipped: 0 });
    // An edited event in the file is found.
    const lines = gunzipSync(readFileSync(file)).toString('utf8').split('\n').filter(Boolean);
    const edited = join(dir, 'edited.jsonl.gz');
    writeFileSync(edited, gzipSync(lines.map((l) => l.replace('"arch2"', '"archX"')).join('\n') + '\n'));
    expect(await verifyAuditChain(t.db, { archiveFile: edited })).toMatchObject({ ok: false, archive: { recorded: false }, firstMismatch: { batchId: b2, fault: 'hash_mismatch' } });
    // An event made invalid for the trail's domains (task h28t: kind and details are domains on
    // audit_events) is loaded and named as its batch, not a failed load.
    for (const [from, to] of [['"kind":"tool_call"', '"kind":"nope"'], ['"details":{}', '"details":[]']]) {
      const invalid = join(dir, 'invalid.jsonl.gz');
      writeFileSync(invalid, gzipSync(lines.map((l) => (l.includes('"arch2"') ? l.replace(from, to) : l)).join('\n') + '\n'));
      expect(lines.some((l) => l.includes('"arch2"') && l.includes(from))).toBe(true);
      expect(await verifyAuditChain(t.db, { archiveFile: invalid })).toMatchObject({ ok: false, archive: { recorded: false }, firstMismatch: { batchId: b2, fault: 'hash_mismatch' }, mismatchCount: 1 });
    }
    // A batch's lines removed from the file: the batch is named, and the file's digest is not recorded.
    const cut = join(dir, 'cut.jsonl.gz');
    writeFileSync(cut, gzipSync(lines.filter((l) => JSON.parse(l).batch_id !== Number(b2)).join('\n') + '\n'));
    expect([b1, b3]).toHaveLength(2);
    expect(await verifyAuditChain(t.db, { archiveFile: cut })).toMatchObject({ ok: false, archive: { recorded: false }, firstMismatch: { batchId: b2, fault: 'hash_mismatch' }, mismatchCount: 1 });
    expect(await verifyAuditChain(t.db, { archiveFile: file })).toMatchObject({ ok: true, archive: { recorded: true } });
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// 3. Availability
// ---------------------------------------------------------------------------------------------

describe('3. availability', () => {
  test('a (tampered) deeply nested details value is reported as that batch, not a crash', async () => {
    await withDb('rt2_deep', async (t) => {
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'deep0' }]);
      const b = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'deep1' }]);
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'deep2' }]);
      const depth = 11000; // PostgreSQL's jsonb accepts ~12000 levels under the default max_stack_depth
      await tamper(t.db, `UPDATE audit_events SET details = ('{"x":' || repeat('[', ${depth}) || repeat(']', ${depth}) || '}')::jsonb WHERE batch_id = $1`, [b]);
      await expect(verifyAuditChain(t.db)).resolves.toMatchObject({ ok: false, firstMismatch: { batchId: b, fault: 'hash_mismatch' } });
    });
  }, 60_000);

  test('one event whose details throw when read refuses only its own caller, not the others of its batch', async () => {
    await withDb('rt2_throw', async (t) => {
      const sink = new DbAuditSink(t.db);
      const bad = event('bad', { details: Object.defineProperty({}, 'x', { enumerable: true, get: () => { throw new Error('boom'); } }) });
      // Queue a good event behind one that is being written, then the bad one in the same batch.
      const first = sink.record(event('first'));
      const good = sink.record(event('good'));
      const badP = sink.record(bad);
      await first;
      await expect(badP).rejects.toBeDefined();
      await expect(good).resolves.toBeUndefined();
    });
  }, 60_000);

  test('a large hostile event is normalised and stored (an indexed column cut to 512 units), and verifies', async () => {
    await withDb('rt2_large', async (t) => {
      const wide: Record<string, string> = {};
      for (let i = 0; i < 5_000; i++) wide[`key_${i}`] = `v\ud800${i}`;
      const big = { ...baseRow, request_id: 'x'.repeat(500_000) + '\ud800', details: { wide, s: '\u0000'.repeat(100_000), surr: '\udc00\ud800'.repeat(50_000) } };
      const b = await appendAuditRows(t.db, [big]);
      const stored = (await t.db.pool.query<{ n: number; len: number }>("SELECT (SELECT count(*) FROM jsonb_object_keys(details->'wide'))::int AS n, length(request_id) AS len FROM audit_events WHERE batch_id = $1", [b])).rows[0];
      // The indexed request_id is cut (a B-tree entry must stay under 2,704 bytes); everything else is whole.
      expect(stored).toEqual({ n: 5_000, len: 512 });
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, eventsChecked: 1 });
    });
  }, 60_000);

  test('cyclic and shared details are bounded: a cycle becomes "[cycle]", and past 10,000 values the rest "[truncated]"', () => {
    const o: Record<string, unknown> = { n: 1 };
    o.a = o;
    o.b = o;
    o.c = o;
    const n = normalizeAuditRow({ ...baseRow, details: o });
    expect(JSON.parse(JSON.stringify(n.details))).toEqual({ n: 1, a: '[cycle]', b: '[cycle]', c: '[cycle]' });
    // A shared (not cyclic) subtree three wide and 20 deep would be 3^20 values copied in full.
    let shared: unknown = 'leaf';
    for (let i = 0; i < 20; i++) shared = { x: shared, y: shared, z: shared };
    const text = eventsText([normalizeAuditRow({ ...baseRow, details: { shared } })]);
    expect(text.length).toBeLessThan(400_000);
    expect(text).toContain('"[truncated]"');
  });
});

test('verify pages by events: 40 batches of 500 events (more than one page of 20,000) all verify, format 1 and 2', async () => {
  await withDb('rt2_pages', async (t) => {
    const detail = { note: 'y'.repeat(300), list: Array.from({ length: 10 }, (_, i) => ({ i, s: `v${i}` })) };
    for (let b = 0; b < 20; b++) await v1Append(t.db, Array.from({ length: 500 }, (_, i) => ({ ...baseRow, request_id: `m1_${b}_${i}`, details: detail })));
    for (let b = 0; b < 25; b++) await appendAuditRows(t.db, Array.from({ length: 500 }, (_, i) => ({ ...baseRow, request_id: `m2_${b}_${i}`, details: detail })));
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, batchesChecked: 45, eventsChecked: 22_500 });
  });
}, 300_000);

// ---------------------------------------------------------------------------------------------
// 4. Privileges of the runtime role
// ---------------------------------------------------------------------------------------------

describe('4. runtime role', () => {
  let t: TestControlDb;
  let role: string;
  let admin: pg.Client;
  let rt: pg.Client;
  beforeAll(async () => {
    t = await freshControlDb('rt2_role');
    role = `il_rt2_${randomBytes(4).toString('hex')}`;
    admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'rt-${role}'`);
    await grantRuntimeRole(t.db, role);
    const u = new URL(t.temp.url);
    u.username = role;
    u.password = `rt-${role}`;
    rt = new pg.Client({ connectionString: u.toString() });
    await rt.connect();
  }, 60_000);
  afterAll(async () => {
    await rt.end();
    await t.db.pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON SCHEMA public FROM ${role}`);
    await admin.query(`REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${role}`);
    await t.cleanup();
    await admin.query(`DROP ROLE ${role}`);
    await admin.end();
  });

  test('the runtime role cannot seal anything but what is stored: a text that is not canonical never verifies, whatever is later done to its rows', async () => {
    await appendAuditRows(rt, [{ ...baseRow, request_id: 'rt_before' }]);
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true });
    // Sealed text: "refused", then a duplicate key saying "allowed" (jsonb keeps the last one).
    const storedRow = normalizeAuditRow({ ...baseRow, request_id: 'rt_lie', decision: 'refused', reason_code: 'policy_denied' });
    const lie = eventsText([storedRow]).replace('"decision":"refused"', '"decision":"refused","decision":"allowed"');
    const b = (await rt.query<{ b: string }>('SELECT interlock_audit_append_v2($1)::text AS b', [lie])).rows[0].b;
    expect((await t.db.pool.query("SELECT decision FROM audit_events WHERE request_id = 'rt_lie'")).rows).toEqual([{ decision: 'allowed' }]);
    const after = await appendAuditRows(rt, [{ ...baseRow, request_id: 'rt_after' }]);
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, mismatchCount: 1, firstMismatch: { batchId: b, fault: 'hash_mismatch' } });
    for (const decision of ['refused', 'allowed']) {
      await tamper(t.db, 'UPDATE audit_events SET decision = $2 WHERE batch_id = $1', [b, decision]);
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, mismatchCount: 1, firstMismatch: { batchId: b } });
    }
    expect(after).not.toBe(b);
  }, 60_000);

  test('verify goes on past a batch that does not match: every faulty batch is listed, the rest checked', async () => {
    const own = await freshControlDb('rt2_blind');
    try {
      await appendAuditRows(own.db, [{ ...baseRow, request_id: 'ok' }]);
      const first = await appendAuditRows(own.db, [{ ...baseRow, request_id: 'first' }]);
      await appendAuditRows(own.db, [{ ...baseRow, request_id: 'between' }]);
      const later = await appendAuditRows(own.db, [{ ...baseRow, request_id: 'later' }]);
      await tamper(own.db, "UPDATE audit_events SET decision = 'refused' WHERE batch_id IN ($1, $2)", [first, later]);
      const r = await verifyAuditChain(own.db);
      expect(r).toMatchObject({ ok: false, batchesChecked: 2, mismatchCount: 2, firstMismatch: { batchId: first, fault: 'hash_mismatch' } });
      expect(r.mismatches.map((m) => [m.batchId, m.fault])).toEqual([
        [first, 'hash_mismatch'],
        [later, 'hash_mismatch'],
      ]);
    } finally {
      await own.cleanup();
    }
  }, 60_000);

  test('the runtime role cannot choose id, batch_id or recorded_at through interlock_audit_append_v2, nor write directly', async () => {
    const text = eventsText([normalizeAuditRow({ ...baseRow, request_id: 'rt_cols' })]).replace('{"kind"', '{"id":1,"batch_id":1,"recorded_at":"2000-01-01T00:00:00Z","kind"');
    const b = (await rt.query<{ b: string }>('SELECT interlock_audit_append_v2($1)::text AS b', [text])).rows[0].b;
    const s = (await t.db.pool.query("SELECT id::text, batch_id::text, recorded_at = (SELECT committed_at FROM audit_batches WHERE id = $1) AS same FROM audit_events WHERE request_id = 'rt_cols'", [b])).rows[0];
    expect(s).toMatchObject({ batch_id: b, same: true });
    expect(s.id).not.toBe('1');
    await expect(rt.query('SELECT interlock_audit_append_v2(NULL)')).rejects.toMatchObject({ code: '22004' });
    await expect(rt.query('UPDATE audit_batches SET format = 1')).rejects.toMatchObject({ code: '42501' });
    await expect(rt.query("INSERT INTO audit_batches (id, committed_at, event_count, hash) VALUES (1, now(), 0, '\\x00')")).rejects.toMatchObject({ code: '42501' });
  }, 60_000);

  test('grant-runtime-role grants format 2 to the role, never to PUBLIC', async () => {
    const p = (await t.db.pool.query<{ pub: boolean; rt: boolean }>(
      "SELECT has_function_privilege('public', 'interlock_audit_append_v2(text)', 'EXECUTE') AS pub, has_function_privilege($1, 'interlock_audit_append_v2(text)', 'EXECUTE') AS rt",
      [role],
    )).rows[0];
    expect(p).toEqual({ pub: false, rt: true });
  });
});

// ---------------------------------------------------------------------------------------------
// 5. Concurrency: format-1 and format-2 writers at once
// ---------------------------------------------------------------------------------------------

test('format-1 and format-2 writers appending concurrently keep one linear, verifiable chain', async () => {
  await withDb('rt2_conc', async (t) => {
    const db = await openControlDb(t.temp.url, { migrate: false, poolSize: 8 });
    try {
      const sink = new DbAuditSink(db);
      const jobs: Array<Promise<unknown>> = [];
      for (let w = 0; w < 4; w++) {
        jobs.push(
          (async () => {
            for (let i = 0; i < 25; i++) {
              if (w % 2) await v1Append(db, [{ ...baseRow, request_id: `v1_${w}_${i}` }, { ...baseRow, request_id: `v1b_${w}_${i}` }]);
              else await appendAuditRows(db, [{ ...baseRow, request_id: `v2_${w}_${i}` }], i % 2 ? 5000 : undefined);
            }
          })(),
        );
      }
      for (let i = 0; i < 50; i++) jobs.push(sink.record(event(`sink_${i}`)));
      const tx = (async () => {
        for (let i = 0; i < 10; i++) {
          const c = await db.pool.connect();
          try {
            await c.query('BEGIN');
            await appendAuditRows(c, [{ ...baseRow, request_id: `tx_${i}` }]);
            await new Promise((r) => setTimeout(r, 5));
            await c.query('COMMIT');
          } finally {
            c.release();
          }
        }
      })();
      jobs.push(tx);
      await Promise.all(jobs);
      // Formats 1 and 2 form one linear chain; the sink's format-3 batches (issue 28) form chains of
      // their own, each linear from one genesis (seq 0) without a repeated place.
      const links = (await db.pool.query<{ forks: number; roots: number }>(
        'SELECT (SELECT count(*) FROM (SELECT prev_hash FROM audit_batches WHERE format < 3 GROUP BY prev_hash HAVING count(*) > 1) x)::int AS forks, (SELECT count(*) FROM audit_batches WHERE format < 3 AND prev_hash IS NULL)::int AS roots',
      )).rows[0];
      expect(links).toEqual({ forks: 0, roots: 1 });
      const lanes = (await db.pool.query<{ repeats: number; bad_roots: number; chains: number; geneses: number }>(
        `SELECT (SELECT count(*) FROM (SELECT 1 FROM audit_batches WHERE format = 3 GROUP BY chain_id, seq HAVING count(*) > 1) x)::int AS repeats,
                (SELECT count(*) FROM audit_batches WHERE format = 3 AND (prev_hash IS NULL) <> (seq = 0))::int AS bad_roots,
                (SELECT count(DISTINCT chain_id) FROM audit_batches WHERE format = 3)::int AS chains,
                (SELECT count(*) FROM audit_batches WHERE format = 3 AND seq = 0)::int AS geneses`,
      )).rows[0];
      expect(lanes).toMatchObject({ repeats: 0, bad_roots: 0, geneses: lanes.chains });
      expect(lanes.chains).toBeGreaterThanOrEqual(1);
      const r = await verifyAuditChain(db);
      expect(r).toMatchObject({ ok: true, firstMismatch: null, eventsChecked: 4 * 25 + 2 * 25 + 50 + 10 });
    } finally {
      await db.close();
    }
  });
}, 120_000);
