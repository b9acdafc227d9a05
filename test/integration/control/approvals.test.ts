/** The approval queue: states, immutability, expiry, and exactly one winner among racing approvers. */
import { freshControlDb, type TestControlDb } from './control-db';
import { createIdentity } from '../../../src/control/identities';
import { addSource } from '../../../src/control/sources';
import { createApproval, expireApprovals, getApproval, listApprovals, sweepExpiredApprovals, transitionApproval, type NewApproval } from '../../../src/control/approvals';
import { searchAudit } from '../../../src/audit/writer';
import { openControlDb, type ControlDb } from '../../../src/control/db';

let t: TestControlDb;
let identityId: string;
let request: NewApproval;
beforeAll(async () => {
  t = await freshControlDb('ctl_apr');
  identityId = (await createIdentity(t.db, 'writer-agent')).id;
  await addSource(t.db, { id: 'shop', type: 'postgres', name: 'Shop', settings: { host: 'db.internal', port: 5432, database: 'shop', reader: { user: 'r', password: 'p' }, tls: { mode: 'off' } } });
  request = {
    sourceId: 'shop',
    identityId,
    keyId: 'key_0123456789abcdef0123',
    requestId: 'req_w1',
    sql: 'UPDATE playlist SET name = $1 WHERE playlist_id = $2',
    params: ['Road trip', 3],
    classification: { writes: ['public.playlist'], relations: ['public.playlist'], fingerprint: 'abc123' },
  };
});
afterAll(async () => {
  await t.cleanup();
});

describe('approvals', () => {
  test('created pending with the exact statement, parameters and classification', async () => {
    const a = await createApproval(t.db, { ...request, ttlSeconds: 3600 });
    expect(a).toEqual({
      id: expect.stringMatching(/^apr_[0-9a-f]{24}$/),
      sourceId: 'shop',
      identityId,
      identityName: 'writer-agent',
      keyId: 'key_0123456789abcdef0123',
      requestId: 'req_w1',
      sql: 'UPDATE playlist SET name = $1 WHERE playlist_id = $2',
      params: ['Road trip', 3],
      classification: { writes: ['public.playlist'], relations: ['public.playlist'], fingerprint: 'abc123' },
      state: 'pending',
      createdAt: expect.any(String),
      expiresAt: expect.any(String),
      decidedBy: null,
      decidedAt: null,
      executedAt: null,
      outcome: null,
      failure: null,
      requeuedFrom: null,
      claimAttributes: null,
    });
    expect(Date.parse(a.expiresAt) - Date.parse(a.createdAt)).toBe(3_600_000);
    expect(await getApproval(t.db, a.id)).toEqual(a);
  });

  test('pending → approved → executed, with decided_by, outcome and timestamps', async () => {
    const a = await createApproval(t.db, request);
    const approved = await transitionApproval(t.db, a.id, ['pending'], 'approved', { decidedBy: 'ops-anna' });
    expect(approved).toMatchObject({ state: 'approved', decidedBy: 'ops-anna', executedAt: null, outcome: null });
    expect(approved!.decidedAt).not.toBeNull();
    const executed = await transitionApproval(t.db, a.id, ['approved'], 'executed', { outcome: { row_count: 1 } });
    expect(executed).toMatchObject({ state: 'executed', decidedBy: 'ops-anna', outcome: { row_count: 1 } });
    expect(executed!.executedAt).not.toBeNull();
    // Final: nothing moves it again.
    expect(await transitionApproval(t.db, a.id, ['pending', 'approved'], 'failed')).toBeNull();
  });

  test('outcomes carry codes only, never driver text', async () => {
    const a = await createApproval(t.db, request);
    await transitionApproval(t.db, a.id, ['pending'], 'approved', { decidedBy: 'ops' });
    await expect(transitionApproval(t.db, a.id, ['approved'], 'failed', { outcome: { error_code: 'duplicate key value violates unique constraint "x"' } })).rejects.toThrow(/snake_case code/);
    await expect(transitionApproval(t.db, a.id, ['approved'], 'failed', { outcome: { message: 'boom' } as never })).rejects.toThrow(/unknown field "message"/);
    const failed = await transitionApproval(t.db, a.id, ['approved'], 'failed', { outcome: { error_code: 'statement_failed', sqlstate: '23505' } });
    expect(failed!.outcome).toEqual({ error_code: 'statement_failed', sqlstate: '23505' });
  });

  test('the database refuses illegal transitions, edits of the request, and deletes', async () => {
    const a = await createApproval(t.db, request);
    await expect(t.db.pool.query("UPDATE approvals SET state = 'executed' WHERE id = $1", [a.id])).rejects.toThrow(`approval ${a.id}: illegal state transition pending -> executed`);
    await expect(t.db.pool.query("UPDATE approvals SET sql = 'DELETE FROM playlist' WHERE id = $1", [a.id])).rejects.toThrow(`approval ${a.id}: the requested statement and its context are immutable`);
    await expect(t.db.pool.query("UPDATE approvals SET state = 'approved', params = '[1]' WHERE id = $1", [a.id])).rejects.toThrow(/immutable/);
    await expect(t.db.pool.query('DELETE FROM approvals WHERE id = $1', [a.id])).rejects.toThrow('approvals are kept as history: DELETE is not allowed');
    expect((await getApproval(t.db, a.id))!.state).toBe('pending');
  });

  test('50 concurrent approvers on separate connections: exactly one wins', async () => {
    const a = await createApproval(t.db, request);
    const dbs: ControlDb[] = await Promise.all(Array.from({ length: 5 }, () => openControlDb(t.temp.url, { migrate: false, poolSize: 10 })));
    try {
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => transitionApproval(dbs[i % dbs.length], a.id, ['pending'], 'approved', { decidedBy: `op-${i}` })),
      );
      const winners = results.filter((r) => r !== null);
      expect(winners).toHaveLength(1);
      const stored = await getApproval(t.db, a.id);
      expect(stored!.state).toBe('approved');
      expect(stored!.decidedBy).toBe(winners[0]!.decidedBy);
      // And then exactly one executes.
      const exec = await Promise.all(Array.from({ length: 50 }, (_, i) => transitionApproval(dbs[i % dbs.length], a.id, ['approved'], 'executed', { outcome: { row_count: 1 } })));
      expect(exec.filter((r) => r !== null)).toHaveLength(1);
    } finally {
      await Promise.all(dbs.map((d) => d.close()));
    }
  });

  test('expiry: pending approvals past expires_at expire; an expired one cannot be approved', async () => {
    const old = await createApproval(t.db, { ...request, requestId: 'req_old', expiresAt: new Date(Date.now() + 200) });
    const fresh = await createApproval(t.db, { ...request, requestId: 'req_fresh', ttlSeconds: 3600 });
    await new Promise((r) => setTimeout(r, 300));
    // Not yet swept, but approving it is refused all the same.
    expect(await transitionApproval(t.db, old.id, ['pending'], 'approved', { decidedBy: 'ops' })).toBeNull();
    const expired = await expireApprovals(t.db);
    expect(expired.map((e) => e.id)).toContain(old.id);
    expect(expired.map((e) => e.id)).not.toContain(fresh.id);
    const after = await getApproval(t.db, old.id);
    expect(after).toMatchObject({ state: 'expired', decidedBy: 'system:expiry' });
    expect((await getApproval(t.db, fresh.id))!.state).toBe('pending');
    expect(await expireApprovals(t.db)).toEqual([]);
  });

  test('sweepExpiredApprovals expires overdue approvals and audits each once', async () => {
    const a = await createApproval(t.db, { ...request, requestId: 'req_sweep', expiresAt: new Date(Date.now() + 100) });
    await new Promise((r) => setTimeout(r, 200));
    const swept = await sweepExpiredApprovals(t.db);
    expect(swept.map((x) => x.id)).toEqual([a.id]);
    expect(await sweepExpiredApprovals(t.db)).toEqual([]);
    const trail = await searchAudit(t.db, { approvalId: a.id });
    expect(trail.events.map((e) => [e.kind, e.decision, e.operator, e.requestId, e.sourceId, e.fingerprint])).toEqual([['approval', 'expired', 'system:expiry', 'req_sweep', 'shop', 'abc123']]);
  });

  test('listing filters by state, source and identity', async () => {
    const pending = await listApprovals(t.db, { state: 'pending' });
    expect(pending.length).toBeGreaterThan(0);
    expect(pending.every((a) => a.state === 'pending')).toBe(true);
    expect((await listApprovals(t.db, { sourceId: 'nope' })).length).toBe(0);
    expect((await listApprovals(t.db, { identityId, limit: 2 })).length).toBe(2);
    await expect(listApprovals(t.db, { state: 'done' as never })).rejects.toThrow('unknown approval state "done"');
  });
});
