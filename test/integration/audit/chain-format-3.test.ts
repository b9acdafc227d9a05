/**
 * Audit chain format 3 (issue 28, src/audit/chain.ts): one chain per writer lane, sealed in the
 * gateway, appended with one INSERT statement. An honest trail verifies whatever the lanes and the
 * crashes (open chains are not faults); verify names the first altered, inserted or deleted batch,
 * a chain cut short before its seal or before another chain's genesis, and format-1/2 batches keep
 * verifying beside the chains.
 */
import pg from 'pg';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { ChainLane, VALUES_MAX_EVENTS } from '../../../src/audit/chain';
import { appendAuditRows, DbAuditSink, recordApprovalEvent } from '../../../src/audit/writer';
import { verifyAuditChain } from '../../../src/audit/verify';
import { BASE_AUDIT_ROW, tamperAsSuperuser, toolCallEvent, appendFormat1, holdChainLock } from '../../helpers/audit-events';

let t: TestControlDb;
beforeEach(async () => {
  t = await freshControlDb('ctl_chain3');
});
afterEach(async () => t.cleanup());

const row = (requestId: string) => ({ ...BASE_AUDIT_ROW, request_id: requestId });

/** The batches of the lane's chain, by seq: id (text), seq, mark. */
async function chainOf(chainId: string): Promise<Array<{ id: string; seq: string; mark: string | null }>> {
  return (await t.db.pool.query("SELECT id::text AS id, seq::text AS seq, mark FROM audit_batches WHERE chain_id = $1 ORDER BY seq", [chainId])).rows;
}

/** Deletes a batch and its events as only a superuser with triggers off can. */
async function deleteBatch(id: string): Promise<void> {
  await tamperAsSuperuser(t.db.pool, 'DELETE FROM audit_events WHERE batch_id = $1', [id]);
  await tamperAsSuperuser(t.db.pool, 'DELETE FROM audit_batches WHERE id = $1', [id]);
}

test('two lanes, 120 concurrent events, format-1/2 and approval batches beside them, then close: every chain sealed, the trail verifies', async () => {
  await appendFormat1(t.db.pool, [{ ...row('f1'), time: undefined } as never]);
  await appendAuditRows(t.db, [row('f2')]);
  const sink = new DbAuditSink(t.db, undefined, { maxBatch: 7 });
  await Promise.all(Array.from({ length: 120 }, (_, i) => sink.record(toolCallEvent(`c3_${i}`))));
  await recordApprovalEvent(t.db, { approvalId: 'apr_0123456789abcdef0123', action: 'queued' });
  await sink.close();
  const b = (await t.db.pool.query("SELECT format, count(*)::int AS n, count(DISTINCT chain_id)::int AS chains, sum(event_count)::int AS events FROM audit_batches GROUP BY format ORDER BY format")).rows;
  expect(b.map((x) => [x.format, x.chains])).toEqual([[1, 0], [2, 0], [3, 2]]);
  expect(b[2].events).toBe(120);
  expect(b[2].n).toBeGreaterThanOrEqual(120 / 7 + 2); // at most 7 a batch, plus two seals
  // The lanes' batches overlap: both chains hold events.
  const perChain = (await t.db.pool.query("SELECT chain_id, sum(event_count)::int AS n FROM audit_batches WHERE format = 3 GROUP BY chain_id")).rows;
  expect(perChain.every((x) => x.n > 0)).toBe(true);
  const v = await verifyAuditChain(t.db);
  expect(v).toMatchObject({ ok: true, firstMismatch: null, chains: 2, openChains: 0, eventsChecked: 123 });
});

test('a writer that stops without a seal (a crash) leaves an open chain, not a fault; a lost connection starts a new chain', async () => {
  const pool = new pg.Pool({ connectionString: t.temp.url, max: 1, application_name: 'il-lane-test' });
  const holder = new pg.Client({ connectionString: t.temp.url });
  await holder.connect();
  try {
    const lane = new ChainLane(pool);
    await lane.append([row('a1')], 2000);
    await lane.append([row('a2')], 2000);
    const first = lane.position.chainId;
    // The connection dies while the batch waits: its outcome is unknown to the lane, so it starts a new chain.
    const release = await holdChainLock(holder);
    const lost = lane.append([row('a3')], 5000);
    await new Promise((r) => setTimeout(r, 200));
    await t.db.pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'il-lane-test' AND datname = current_database()");
    await expect(lost).rejects.toBeDefined();
    await release();
    await lane.append([row('a4')], 2000);
    expect(lane.position.chainId).not.toBe(first);
    expect(lane.position.seq).toBe('1');
    const v = await verifyAuditChain(t.db);
    expect(v).toMatchObject({ ok: true, firstMismatch: null, chains: 2, openChains: 2 });
    // A server error (rolled back) keeps the chain: the next batch takes the same place.
    const before = lane.position;
    await expect(lane.append([{ ...row('bad'), kind: 'nope' as never }], 2000)).rejects.toMatchObject({ code: '23514' });
    expect(lane.position).toEqual(before);
    await lane.append([row('a5')], 2000);
    expect((await verifyAuditChain(t.db)).ok).toBe(true);
  } finally {
    await holder.end();
    await pool.end();
  }
});

test('verify names the first altered, deleted or inserted batch of a chain', async () => {
  const lane = new ChainLane(t.db.pool);
  for (let i = 0; i < 5; i++) await lane.append([row(`x${i}`), row(`y${i}`)], 2000);
  await lane.append([], 2000, 'seal');
  const c = await chainOf((await t.db.pool.query("SELECT chain_id::text AS c FROM audit_batches WHERE format = 3 LIMIT 1")).rows[0].c);
  expect(c.map((x) => x.seq)).toEqual(['0', '1', '2', '3', '4', '5']);
  expect(c[5].mark).toBe('seal');
  expect((await verifyAuditChain(t.db)).ok).toBe(true);

  // Altered: one event's decision.
  await tamperAsSuperuser(t.db.pool, "UPDATE audit_events SET decision = 'refused' WHERE request_id = 'y2'");
  expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: c[2].id, fault: 'hash_mismatch' });
  await tamperAsSuperuser(t.db.pool, "UPDATE audit_events SET decision = 'allowed' WHERE request_id = 'y2'");
  expect((await verifyAuditChain(t.db)).ok).toBe(true);

  // Inserted: a copy of batch 3 in the same place, and a batch after the seal.
  const copy = (await t.db.pool.query(
    `INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq) SELECT committed_at, 0, prev_hash, hash, 3, chain_id, seq FROM audit_batches WHERE id = $1 RETURNING id::text AS id`,
    [c[3].id],
  )).rows[0].id;
  const r1 = await verifyAuditChain(t.db);
  expect(r1.firstMismatch).toMatchObject({ batchId: copy, fault: 'inserted_batch' });
  expect(r1.mismatchCount).toBe(1);
  await tamperAsSuperuser(t.db.pool, 'DELETE FROM audit_batches WHERE id = $1', [copy]);
  const after = (await t.db.pool.query(
    `INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq) SELECT committed_at, 0, hash, hash, 3, chain_id, seq + 1 FROM audit_batches WHERE id = $1 RETURNING id::text AS id`,
    [c[5].id],
  )).rows[0].id;
  expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: after, fault: 'inserted_batch' });
  await tamperAsSuperuser(t.db.pool, 'DELETE FROM audit_batches WHERE id = $1', [after]);

  // Deleted: batch 1 and its events; batch 2 no longer links.
  await deleteBatch(c[1].id);
  const r2 = await verifyAuditChain(t.db);
  expect(r2.firstMismatch).toMatchObject({ batchId: c[2].id, fault: 'broken_link' });
  expect(r2.mismatchCount).toBe(1);
});

test('a chain cut short is found: before its seal by the seal, before a later genesis by that genesis, its genesis by its first batch', async () => {
  const a = new ChainLane(t.db.pool);
  for (let i = 0; i < 3; i++) await a.append([row(`a${i}`)], 2000);
  const chainA = a.position.chainId;
  const b = new ChainLane(t.db.pool);
  await b.append([row('b0')], 2000); // b's genesis anchors a's head (seq 2)
  await a.append([], 2000, 'seal');
  const ca = await chainOf(chainA);
  expect(ca.map((x) => [x.seq, x.mark])).toEqual([['0', null], ['1', null], ['2', null], ['3', 'seal']]);
  expect((await verifyAuditChain(t.db)).ok).toBe(true);

  // The seal's predecessor (a's seq 2) deleted: the seal no longer links, and b's genesis anchor is gone.
  await deleteBatch(ca[2].id);
  const r = await verifyAuditChain(t.db);
  expect(r.mismatches.map((m) => m.fault).sort()).toEqual(['anchor_mismatch', 'broken_link']);
  expect(r.mismatches.find((m) => m.fault === 'broken_link')!.batchId).toBe(ca[3].id);
  // Its genesis deleted as well: the chain's first remaining batch does not start a chain.
  await deleteBatch(ca[0].id);
  expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: ca[1].id, fault: 'broken_link' });
});

test('a tail cut off a chain another genesis anchored is found even without a seal', async () => {
  const a = new ChainLane(t.db.pool);
  for (let i = 0; i < 3; i++) await a.append([row(`a${i}`)], 2000);
  const ca = await chainOf(a.position.chainId);
  await new ChainLane(t.db.pool).append([row('late')], 2000);
  const genesis = (await t.db.pool.query("SELECT id::text AS id FROM audit_batches WHERE format = 3 AND chain_id <> $1", [a.position.chainId])).rows[0].id;
  await deleteBatch(ca[2].id);
  const r = await verifyAuditChain(t.db);
  expect(r.firstMismatch).toMatchObject({ batchId: genesis, fault: 'anchor_mismatch' });
  expect(r.openChains).toBe(2);
});

test('batches of 1–VALUES_MAX_EVENTS (32) events go through the VALUES statement of their size, more through unnest: same rows, in order, and the trail verifies', async () => {
  const pool = new pg.Pool({ connectionString: t.db.url, max: 1 });
  try {
    const lane = new ChainLane(pool);
    const odd = { note: 'quote " backslash \\ brace { } comma , "NULL" ünï 💡', n: 1.5, nested: [null, true, 'x'] };
    expect(VALUES_MAX_EVENTS).toBe(32);
    for (const n of [1, 3, 8, 20, 32, 33, 40]) {
      const rows = Array.from({ length: n }, (_, i) => ({ ...row(`req_v${n}_${i}`), relations: i % 2 ? ['public."Odd, name"', 'a\\b'] : null, row_count: i % 3 ? i : null, duration_ms: i % 2 ? 0.1 + i : null, details: odd }));
      const id = await lane.append(rows, 5000);
      const stored = await t.db.pool.query('SELECT request_id, relations, row_count::int AS row_count, duration_ms, details, batch_id::text AS b FROM audit_events WHERE batch_id = $1 ORDER BY id', [id]);
      expect(stored.rows).toEqual(rows.map((r) => ({ request_id: r.request_id, relations: r.relations, row_count: r.row_count, duration_ms: r.duration_ms, details: odd, b: id })));
    }
    await lane.append([], 5000, 'seal');
    const c = await pool.connect();
    try {
      const names = (await c.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')).rows.map((r) => r.name);
      expect(names).toEqual(['interlock_audit_append_v3', 'interlock_audit_append_v3_0', 'interlock_audit_append_v3_1', 'interlock_audit_append_v3_20', 'interlock_audit_append_v3_3', 'interlock_audit_append_v3_32', 'interlock_audit_append_v3_8', 'interlock_audit_timeout']);
    } finally {
      c.release();
    }
  } finally {
    await pool.end();
  }
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
});
