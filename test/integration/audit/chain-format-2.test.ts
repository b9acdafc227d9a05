/**
 * Audit chain format 2 on real PostgreSQL (migration 20261201800000000, src/audit/event-text.ts):
 * whatever a row holds, the text the database sealed is the text verify rebuilds from what it stored,
 * a change to any stored value of an event or batch is found, format-1 and format-2 batches verify in
 * one chain, numbers are printed by PostgreSQL as verify expects, and the migration carries the
 * format-1 grant over. (More attacks: audit-chain-attacks.test.ts.)
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import { ADMIN_URL, createTempDatabase } from '../../helpers/pg';
import { BASE_AUDIT_ROW, tamperAsSuperuser } from '../../helpers/audit-events';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { appendAuditRows, type AuditRowInput } from '../../../src/audit/writer';
import { verifyAuditChain } from '../../../src/audit/verify';
import { normalizeAuditRow, plainDecimal } from '../../../src/audit/event-text';
import { MIGRATIONS_DIR, MIGRATIONS_TABLE, migrationNames, runMigrations } from '../../../src/control/db';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('ctl_chainv2');
});
afterAll(async () => t.cleanup());

/** Strings with every hazard the normaliser handles: NUL, lone surrogates, non-BMP, quotes, backslashes. */
const hazardString = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ unit: fc.constantFrom('\u0000', '\ud800', '\udfff', '😀', '"', '\\', 'é', '\n', 'a'), maxLength: 8 }),
);
const jsonish: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    hazardString,
    fc.double(),
    fc.integer(),
    fc.constantFrom(0, -0, 1e21, 5e-324, Number.MAX_VALUE, 0.1, NaN, Infinity),
    fc.boolean(),
    fc.constant(null),
    fc.constant(undefined),
    fc.bigInt(),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(hazardString, tie('value'), { maxKeys: 4 }),
  ),
})).value;
const nullableText = fc.option(hazardString, { nil: null });
const row: fc.Arbitrary<AuditRowInput> = fc.record({
  kind: fc.constantFrom('tool_call', 'approval', 'config') as fc.Arbitrary<AuditRowInput['kind']>,
  time: fc.oneof(
    fc.constant(null),
    fc.date({ min: new Date(-62135596800000 - 5), max: new Date(253402300799999 + 5), noInvalidDate: true }).map((d) => d.toISOString()),
    fc.constantFrom('not a time', '2026-13-45', ''),
  ),
  request_id: nullableText,
  identity_id: nullableText,
  key_id: nullableText,
  tool: nullableText,
  canonical_tool: nullableText,
  dialect: nullableText,
  protocol_version: nullableText,
  decision: hazardString,
  reason_code: nullableText,
  source_id: nullableText,
  action: nullableText,
  fingerprint: nullableText,
  relations: fc.option(fc.array(hazardString, { maxLength: 3 }), { nil: null }),
  row_count: fc.option(fc.oneof(fc.integer(), fc.double(), fc.constant(2 ** 60)), { nil: null }),
  duration_ms: fc.option(fc.oneof(fc.double(), fc.constant(-0)), { nil: null }),
  approval_id: nullableText,
  operator: nullableText,
  details: fc.dictionary(hazardString, jsonish, { maxKeys: 5 }) as fc.Arbitrary<Record<string, unknown>>,
});

interface StoredRow extends Omit<AuditRowInput, 'time' | 'row_count'> {
  time: Date;
  row_count: string | null;
}

const COLUMNS =
  'kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details';

test('any rows: stored exactly as normalised, and the chain verifies (through the pool and through the group-commit statement)', async () => {
  // A batch holds config events only (the config chain, format 4, migration 20261208220000000) or none.
  const batch = fc.tuple(fc.array(row, { minLength: 1, maxLength: 4 }), fc.boolean()).map(([rs, config]) =>
    rs.map((r): AuditRowInput => ({ ...r, kind: config ? 'config' : r.kind === 'config' ? 'approval' : r.kind })),
  );
  await fc.assert(
    fc.asyncProperty(batch, fc.boolean(), async (rows, withTimeout) => {
      const at = new Date();
      const id = await appendAuditRows(t.db, rows, withTimeout ? 5000 : undefined);
      const stored = (await t.db.pool.query<StoredRow>(`SELECT ${COLUMNS} FROM audit_events WHERE batch_id = $1 ORDER BY id`, [id])).rows;
      const expected = rows.map((r) => normalizeAuditRow(r, () => at));
      expect(stored.length).toBe(expected.length);
      stored.forEach((s, i) => {
        const e = expected[i];
        const { time, row_count, ...rest } = s;
        const { time: eTime, row_count: eCount, ...eRest } = e;
        expect(rest).toEqual(JSON.parse(JSON.stringify(eRest)));
        expect(row_count === null ? null : Number(row_count)).toBe(eCount);
        // A row without a valid time gets the time it was written (within this test's few seconds).
        if (rows[i].time !== null && !Number.isNaN(Date.parse(rows[i].time!)) && eTime === new Date(rows[i].time!).toISOString()) expect(time.toISOString()).toBe(eTime);
        else expect(Math.abs(time.getTime() - at.getTime())).toBeLessThan(10_000);
      });
    }),
    { numRuns: 60 },
  );
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
}, 120_000);

test('every finite double, written as JSON.stringify writes it, is printed by jsonb as plainDecimal says (what verify checks stored numbers against)', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.integer(), fc.constantFrom(5e-324, 1e21, 1.5e-7, 123e300, -2.5e-8, 0)), { minLength: 1, maxLength: 50 }), async (xs) => {
      const r = await t.db.pool.query<{ s: string }>('SELECT (x::jsonb)::text AS s FROM unnest($1::text[]) WITH ORDINALITY AS u(x, o) ORDER BY o', [xs.map((x) => JSON.stringify(x))]);
      expect(r.rows.map((x) => x.s)).toEqual(xs.map(plainDecimal));
    }),
    { numRuns: 40 },
  );
});

const tamper = (sql: string, params: unknown[] = []) => tamperAsSuperuser(t.db.pool, sql, params);

describe('a change to a format-2 batch is found at that batch', () => {
  const cases: Array<[string, (batch: string, eventId: string) => [string, unknown[]]]> = [
    ['a details value', (_b, e) => ["UPDATE audit_events SET details = jsonb_set(details, '{n}', '2') WHERE id = $1", [e]]],
    ['a column', (_b, e) => ["UPDATE audit_events SET reason_code = 'x' WHERE id = $1", [e]]],
    ['the time by one microsecond', (_b, e) => ["UPDATE audit_events SET time = time + interval '1 microsecond' WHERE id = $1", [e]]],
    ['a relation', (_b, e) => ["UPDATE audit_events SET relations = '{public.other}' WHERE id = $1", [e]]],
    ['an event removed', (_b, e) => ['DELETE FROM audit_events WHERE id = $1', [e]]],
    ['an event moved to the batch before', (b, e) => ['UPDATE audit_events SET batch_id = $2 WHERE id = $1', [e, String(BigInt(b) - 1n)]]],
    ['an event added', (b) => [`INSERT INTO audit_events (kind, time, decision, details, batch_id, recorded_at) SELECT 'tool_call', now(), 'allowed', '{}', id, committed_at FROM audit_batches WHERE id = $1`, [b]]],
    ['the commit time', (b) => ["UPDATE audit_batches SET committed_at = committed_at + interval '1 second' WHERE id = $1", [b]]],
  ];
  test.each(cases)('%s', async (_name, change) => {
    const own = await freshControlDb('ctl_chainv2_t');
    const saved = t;
    t = own;
    try {
      const ev = (n: number): AuditRowInput => normalizeAuditRow({ ...baseRow, request_id: `req_${n}`, details: { n } });
      await appendAuditRows(t.db, [ev(1)]);
      const b = await appendAuditRows(t.db, [ev(2), ev(3)]);
      await appendAuditRows(t.db, [ev(4)]);
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true });
      const e = (await t.db.pool.query<{ id: string }>("SELECT id::text FROM audit_events WHERE request_id = 'req_3'")).rows[0].id;
      const [sql, params] = change(b, e);
      await tamper(sql, params);
      const report = await verifyAuditChain(t.db);
      expect(report.ok).toBe(false);
      // Moving an event into the batch before breaks that one first.
      const at = _name === 'an event moved to the batch before' ? String(BigInt(b) - 1n) : b;
      expect(report.firstMismatch).toMatchObject({ batchId: at, fault: 'hash_mismatch' });
    } finally {
      t = saved;
      await own.cleanup();
    }
  }, 60_000);
});

const baseRow = BASE_AUDIT_ROW;

test('format-1 batches (a gateway not yet upgraded) and format-2 batches verify in one chain; a change to either is found', async () => {
  const own = await freshControlDb('ctl_chainv2_mix');
  try {
    const v1 = async (rid: string) =>
      (await own.db.pool.query<{ b: string }>('SELECT interlock_audit_append($1::jsonb)::text AS b', [JSON.stringify([{ ...baseRow, request_id: rid }])])).rows[0].b;
    const b1 = await v1('req_v1a');
    const b2 = await appendAuditRows(own.db, [{ ...baseRow, request_id: 'req_v2a' }]);
    const b3 = await v1('req_v1b');
    const b4 = await appendAuditRows(own.db, [{ ...baseRow, request_id: 'req_v2b' }], 2000);
    const formats = (await own.db.pool.query<{ id: string; format: number }>('SELECT id::text, format FROM audit_batches ORDER BY id')).rows;
    expect(formats).toEqual([
      { id: b1, format: 1 },
      { id: b2, format: 2 },
      { id: b3, format: 1 },
      { id: b4, format: 2 },
    ]);
    expect(await verifyAuditChain(own.db)).toEqual({ ok: true, batchesChecked: 4, eventsChecked: 4, archivedBatchesSkipped: 0, archiveEvents: 0, archive: null, chains: 0, openChains: 0, mismatches: [], mismatchCount: 0, firstMismatch: null, pending: { events: 0, oldest: null, stale: 0, fault: null }, keyed: { batches: 0, authenticated: 0, unauthenticated: 0, fault: null, keyedSince: null, keyIdsGiven: [] }, unkeyed: { approvals: 4, config: 0, calls: 0 } });
    const saved = t;
    t = own;
    try {
      await tamper("UPDATE audit_events SET decision = 'refused' WHERE request_id = 'req_v1b'");
    } finally {
      t = saved;
    }
    expect((await verifyAuditChain(own.db)).firstMismatch).toMatchObject({ batchId: b3, fault: 'hash_mismatch' });
  } finally {
    await own.cleanup();
  }
}, 60_000);

test('the migration lets every role that could append through format 1 append through format 2', async () => {
  const temp = await createTempDatabase('ctl_chainv2_mig');
  const role = `il_rt_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const client = new pg.Client({ connectionString: temp.url });
  await client.connect();
  try {
    await admin.query(`CREATE ROLE ${role} LOGIN`);
    const names = migrationNames();
    const before = names.indexOf('20261201800000000_audit-chain-format-2');
    expect(before).toBeGreaterThan(0);
    await runner({ dbClient: client, dir: MIGRATIONS_DIR, migrationsTable: MIGRATIONS_TABLE, direction: 'up', count: before, checkOrder: true, singleTransaction: true, log: () => undefined });
    await client.query(`GRANT EXECUTE ON FUNCTION interlock_audit_append(jsonb) TO ${role}`);
    expect(await runMigrations(temp.url)).toContain('20261201800000000_audit-chain-format-2');
    const can = (await client.query<{ v1: boolean; v2: boolean; pub: boolean }>(
      `SELECT has_function_privilege($1, 'interlock_audit_append(jsonb)', 'EXECUTE') AS v1,
              has_function_privilege($1, 'interlock_audit_append_v2(text)', 'EXECUTE') AS v2,
              has_function_privilege('public', 'interlock_audit_append_v2(text)', 'EXECUTE') AS pub`,
      [role],
    )).rows[0];
    expect(can).toEqual({ v1: true, v2: true, pub: false });
  } finally {
    await client.query(`REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${role}`).catch(() => undefined);
    await client.end();
    await temp.drop();
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.end();
  }
}, 60_000);
