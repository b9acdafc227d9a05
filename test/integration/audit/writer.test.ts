/** The audit trail: append-only for everyone, INSERT/SELECT only for the runtime role, column mapping, keyset paging. */
import { Client, Pool } from 'pg';
import { ChainLane } from '../../../src/audit/chain';
import { freshControlDb, withRuntimeRole, type TestControlDb } from '../control/control-db';
import { grantRuntimeRole } from '../../../src/control/db';
import { appendAuditRows, DbAuditSink, recordApprovalEvent, searchAudit, tailAudit, toolCallRow } from '../../../src/audit/writer';
import { verifyAuditChain } from '../../../src/audit/verify';
import type { ToolCallAuditEvent } from '../../../src/audit/types';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('ctl_audit');
});
afterAll(async () => {
  await t.cleanup();
});

function event(over: Partial<ToolCallAuditEvent> = {}): ToolCallAuditEvent {
  return {
    requestId: 'req_1',
    time: '2026-11-29T12:00:00.000Z',
    identityId: 'idn_0123456789abcdef0123',
    keyId: 'key_0123456789abcdef0123',
    tool: 'agentgate_query',
    canonicalTool: 'interlock_query',
    dialect: 'handshake',
    protocolVersion: '2025-06-18',
    decision: 'allowed',
    reasonCode: null,
    durationMs: 12.5,
    details: { source_id: 'chinook', action: 'read', fingerprint: 'fp01', relations: ['public.album', 'public.artist'], row_count: 7, cached: false, api_key: 'ilk_must_not_be_stored' },
    ...over,
  };
}

describe('audit trail', () => {
  test('DbAuditSink maps details into columns, keeps the rest, drops secret-named fields', async () => {
    const sink = new DbAuditSink(t.db);
    await sink.record(event({ requestId: 'req_map' }));
    const page = await searchAudit(t.db, { requestId: 'req_map' });
    expect(page.nextCursor).toBeNull();
    expect(page.events).toEqual([
      {
        id: expect.stringMatching(/^[0-9]+$/),
        kind: 'tool_call',
        time: '2026-11-29T12:00:00.000Z',
        requestId: 'req_map',
        identityId: 'idn_0123456789abcdef0123',
        keyId: 'key_0123456789abcdef0123',
        tool: 'agentgate_query',
        canonicalTool: 'interlock_query',
        dialect: 'handshake',
        protocolVersion: '2025-06-18',
        decision: 'allowed',
        reasonCode: null,
        sourceId: 'chinook',
        action: 'read',
        fingerprint: 'fp01',
        relations: ['public.album', 'public.artist'],
        rowCount: 7,
        durationMs: 12.5,
        approvalId: null,
        operator: null,
        details: { cached: false },
      },
    ]);
  });

  test('an event PostgreSQL could not store as given is recorded whole: NUL and lone surrogates as U+FFFD, a bad time as the time of writing', async () => {
    const sink = new DbAuditSink(t.db);
    const before = Date.now();
    await sink.record(event({ requestId: 'req_bad', time: 'not a time', details: { source_id: 'x\u0000y', note: 'a\u0000b', ['k\ud800']: ['\udc00z'] } }));
    const [e] = (await searchAudit(t.db, { requestId: 'req_bad' })).events;
    expect(e.sourceId).toBe('x\ufffdy');
    expect(e.details).toEqual({ note: 'a\ufffdb', 'k\ufffd': ['\ufffdz'] });
    expect(Date.parse(e.time)).toBeGreaterThanOrEqual(before - 1);
    expect(Date.parse(e.time)).toBeLessThanOrEqual(Date.now());
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
  });

  test('UPDATE, DELETE and TRUNCATE raise, even for the owner (superuser)', async () => {
    await new DbAuditSink(t.db).record(event({ requestId: 'req_keep' }));
    await expect(t.db.pool.query("UPDATE audit_events SET decision = 'refused'")).rejects.toThrow('audit_events is append-only: UPDATE is not allowed');
    await expect(t.db.pool.query('DELETE FROM audit_events')).rejects.toThrow('audit_events is append-only: DELETE is not allowed');
    await expect(t.db.pool.query('TRUNCATE audit_events')).rejects.toThrow('audit_events is append-only: TRUNCATE is not allowed');
    // Zero-row statements are refused too (statement-level trigger).
    await expect(t.db.pool.query("DELETE FROM audit_events WHERE request_id = 'none'")).rejects.toThrow(/append-only/);
    expect((await searchAudit(t.db, { requestId: 'req_keep' })).events).toHaveLength(1);
  });

  test('the runtime role appends through the chain function and its own chains, reads the trail, never UPDATE, DELETE, TRUNCATE or DETACH, never an id of its choosing', async () => {
    await withRuntimeRole(t, async (url) => {
      const c = new Client({ connectionString: url });
      await c.connect();
      try {
        await c.query(`SELECT interlock_audit_append('[{"decision": "allowed", "request_id": "req_rt"}]')`);
        await appendAuditRows(c, [{ ...toolCallRow(event()), request_id: 'req_rt2' }]);
        await appendAuditRows(c, [toolCallRow(event({ requestId: 'req_rt3' }))], 2000);
        expect((await c.query("SELECT request_id FROM audit_events WHERE request_id LIKE 'req_rt%' ORDER BY id")).rows).toEqual([{ request_id: 'req_rt' }, { request_id: 'req_rt2' }, { request_id: 'req_rt3' }]);
        // Issue 28: its writer lanes INSERT their own format-3 batches (chain.ts), but never with an id of
        // its choosing (ids come from the sequences), and never UPDATE, DELETE or TRUNCATE.
        const rtPool = new Pool({ connectionString: url, max: 1 });
        try {
          await new ChainLane(rtPool).append([toolCallRow(event({ requestId: 'req_rt4' }))], 2000);
        } finally {
          await rtPool.end();
        }
        expect((await verifyAuditChain(t.db)).ok).toBe(true);
        for (const sql of ["INSERT INTO audit_events (id, decision, batch_id) VALUES (1, 'allowed', 1)", "INSERT INTO audit_batches (id, committed_at, event_count, hash) VALUES (1, now(), 0, sha256(''))", "UPDATE audit_events SET decision = 'x'", 'DELETE FROM audit_events', 'TRUNCATE audit_events']) {
          await expect(c.query(sql)).rejects.toMatchObject({ code: '42501', message: expect.stringMatching(/^permission denied for table audit_(events|batches)$/) });
        }
        // An event it inserts into a sealed batch outside its chains is named by verify.
        const sealed = (await c.query<{ b: string }>("SELECT batch_id::text AS b FROM audit_events WHERE request_id = 'req_rt2'")).rows[0].b;
        await c.query("INSERT INTO audit_events (decision, batch_id, recorded_at) SELECT 'allowed', batch_id, recorded_at FROM audit_events WHERE request_id = 'req_rt2'");
        expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: sealed, fault: 'hash_mismatch' });
        for (const sql of ["UPDATE audit_batches SET hash = hash", 'DELETE FROM audit_batches', `ALTER TABLE audit_events DETACH PARTITION audit_events_default`]) {
          await expect(c.query(sql)).rejects.toMatchObject({ code: '42501' });
        }
        // It may read governance and record last use, and (issue 26) provision token identities, but
        // never re-enable, rename or remove an identity, nor change keys.
        await c.query('SELECT * FROM grants');
        await expect(c.query('UPDATE identities SET disabled = false')).rejects.toMatchObject({ code: '42501' });
        await expect(c.query('DELETE FROM identities')).rejects.toMatchObject({ code: '42501' });
        await expect(c.query('UPDATE api_keys SET revoked_at = now()')).rejects.toMatchObject({ code: '42501' });
        await c.query('UPDATE api_keys SET last_used_at = now() WHERE false');
      } finally {
        await c.end();
      }
    });
  });

  test('grantRuntimeRole names a missing role clearly', async () => {
    await expect(grantRuntimeRole(t.db, 'il_no_such_role_x')).rejects.toMatchObject({ kind: 'not_found' });
  });

  test('approval events, filters, keyset paging and tail', async () => {
    const base = (await tailAudit(t.db, 1000)).length;
    for (let i = 0; i < 7; i++) {
      await recordApprovalEvent(t.db, { approvalId: 'apr_page', action: i % 2 ? 'approved' : 'queued', operator: i % 2 ? 'ops' : null, identityId: 'idn_pager', sourceId: 'src-page', requestId: `req_p${i}` });
    }
    const all: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Awaited<ReturnType<typeof searchAudit>> = await searchAudit(t.db, { identityId: 'idn_pager', limit: 3, cursor });
      all.push(...page.events.map((e) => e.requestId!));
      cursor = page.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(all).toEqual(['req_p6', 'req_p5', 'req_p4', 'req_p3', 'req_p2', 'req_p1', 'req_p0']);
    const approved = await searchAudit(t.db, { approvalId: 'apr_page', decision: 'approved', kind: 'approval' });
    expect(approved.events.map((e) => [e.requestId, e.operator, e.action, e.sourceId])).toEqual([
      ['req_p5', 'ops', 'write', 'src-page'],
      ['req_p3', 'ops', 'write', 'src-page'],
      ['req_p1', 'ops', 'write', 'src-page'],
    ]);
    const tail = await tailAudit(t.db, 2);
    expect(tail.map((e) => e.requestId)).toEqual(['req_p5', 'req_p6']);
    expect((await tailAudit(t.db, 1000)).length).toBe(base + 7);
    const future = await searchAudit(t.db, { since: new Date(Date.now() + 3_600_000) });
    expect(future.events).toEqual([]);
    const window = await searchAudit(t.db, { identityId: 'idn_pager', since: '2000-01-01T00:00:00Z', until: new Date(Date.now() + 60_000) });
    expect(window.events).toHaveLength(7);
    await expect(searchAudit(t.db, { cursor: 'abc' })).rejects.toThrow('invalid cursor "abc"');
    await expect(searchAudit(t.db, { since: 'yesterday' })).rejects.toThrow(/since: not a date\/time/);
    await expect(searchAudit(t.db, { limit: 0 })).rejects.toThrow(/limit must be/);
  });
});
