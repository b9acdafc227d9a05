/**
 * Issue 11, Build 1–3 against the governed gateway: every answer is released only after its audit
 * event committed; when the audit store cannot commit within audit.commit_timeout_ms the call is
 * answered unavailable/audit_unavailable with no rows, and calls succeed again on their own once the
 * store is back; a client that goes away while its event waits is recorded with delivered: false.
 */
import http from 'node:http';
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { searchAudit } from '../../../src/audit/writer';
import { holdChainLock } from '../../helpers/audit-events';

let env: GovernedEnv;
let ctl: pg.Client;
let unlockChain: (() => Promise<void>) | null = null;
/** Holds the audit chain's lock on `ctl` (every append waits) until releaseChain(). */
const lockChain = async () => {
  unlockChain = await holdChainLock(ctl);
};
const releaseChain = async () => {
  const u = unlockChain;
  unlockChain = null;
  await u?.();
};
const read = () => callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT album_id, title FROM album WHERE album_id = 1' }, env.apiKey);

beforeAll(async () => {
  env = await startGovernedEnv({ config: { audit: { commit_timeout_ms: 800 } } });
  ctl = new pg.Client({ connectionString: env.db.url });
  await ctl.connect();
}, 60_000);
afterAll(async () => {
  await ctl?.end();
  await env?.close();
});


test('a read is answered only with its event committed; a stuck audit store fails closed, then recovers on its own', async () => {
  const ok = await read();
  expect(ok.body.result.isError ?? false).toBe(false);
  expect(ok.body.result.structuredContent.rows).toEqual([{ album_id: 1, title: 'For Those About To Rock We Salute You' }]);
  // The event is already there when the answer arrives (no waiting, no flush).
  const all = (await searchAudit(env.db, { kind: 'tool_call', limit: 5 })).events;
  expect(all[0]).toMatchObject({ decision: 'allowed', rowCount: 1, sourceId: 'chinook' });

  // The store stops committing: the chain lock is held elsewhere and the writer's connections die.
  await lockChain();
  await ctl.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'interlock-audit' AND datname = current_database()");
  const count = async () => Number((await ctl.query("SELECT count(*) AS n FROM audit_events WHERE kind = 'tool_call'")).rows[0].n);
  const before = await count();
  const t0 = Date.now();
  const refused = await Promise.all([read(), read(), read()]);
  for (const r of refused) {
    expect(r.status).toBe(200);
    expect(r.body.result.isError).toBe(true);
    expect(r.body.result.structuredContent).toEqual({ status: 'unavailable', code: 'audit_unavailable', message: expect.any(String), request_id: expect.any(String) });
    expect(JSON.stringify(r.body)).not.toContain('For Those About To Rock');
  }
  expect(Date.now() - t0).toBeLessThan(10_000);
  const metrics = await (await fetch(new URL('/metrics', env.url))).text();
  expect(metrics).toMatch(/reason="audit_unavailable"[^\n]*\} 3/);

  // Back: no restart, no operator action.
  await releaseChain();
  let again = await read();
  for (let i = 0; i < 20 && again.body.result.isError; i++) again = await read();
  expect(again.body.result.isError ?? false).toBe(false);
  expect(again.body.result.structuredContent.rows).toHaveLength(1);
  // Calls answered audit_unavailable were never stored afterwards as if they had been answered.
  expect((await count()) - before).toBe(1);
}, 60_000);

test('a queued write commits its approval row with its audit events, or neither: a stuck store answers audit_unavailable and leaves no approval', async () => {
  const write = (id: number) => callTool(env, 'interlock_query', { source_id: 'chinook', sql: `INSERT INTO playlist (playlist_id, name) VALUES (${id}, 'audit trail')` }, env.apiKey);
  const ok = await write(7101);
  expect(ok.body.result.structuredContent).toMatchObject({ status: 'queued', approval_id: expect.any(String) });
  const apr = ok.body.result.structuredContent.approval_id as string;
  const evs = (await searchAudit(env.db, { approvalId: apr })).events;
  expect(evs.map((e) => [e.kind, e.decision]).sort()).toEqual([['approval', 'queued'], ['tool_call', 'queued']]);
  // Both events are in one batch, committed with the approval row.
  const b = await ctl.query('SELECT count(DISTINCT batch_id)::int AS n FROM audit_events WHERE approval_id = $1', [apr]);
  expect(b.rows[0].n).toBe(1);

  await lockChain();
  let stuck;
  try {
    stuck = await write(7102);
  } finally {
    await releaseChain();
  }
  expect(stuck.body.result.structuredContent).toMatchObject({ status: 'unavailable', code: 'audit_unavailable' });
  expect((await ctl.query("SELECT count(*)::int AS n FROM approvals WHERE sql LIKE '%7102%'")).rows[0].n).toBe(0);
}, 30_000);

test('a client that goes away while its event waits: the outcome is recorded with delivered: false', async () => {
  await read(); // warm the cache so the second call's execution is instant
  await lockChain();
  try {
    // Calls 1 and 2 occupy the writer's two lanes (issue 28; each batch waits on the lock) ...
    const first = read();
    await new Promise((r) => setTimeout(r, 150));
    const second = read();
    await new Promise((r) => setTimeout(r, 150));
    // ... call 3 executes, queues its event, and its client disconnects while it waits.
    const body = JSON.stringify({ jsonrpc: '2.0', id: 'gone', method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT album_id FROM album WHERE album_id = 2' } } });
    const u = new URL(env.url);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${env.apiKey}`, 'content-length': Buffer.byteLength(body) } });
    req.on('error', () => undefined);
    req.end(body);
    await new Promise((r) => setTimeout(r, 300));
    req.destroy();
    await new Promise((r) => setTimeout(r, 100));
    await releaseChain();
    await Promise.all([first, second]);
  } finally {
    await releaseChain();
  }
  let ev: Awaited<ReturnType<typeof searchAudit>>['events'][number] | undefined;
  for (let i = 0; i < 40 && !ev; i++) {
    ev = (await searchAudit(env.db, { kind: 'tool_call', limit: 20 })).events.find((e) => e.details.delivered === false);
    if (!ev) await new Promise((r) => setTimeout(r, 50));
  }
  expect(ev).toMatchObject({ decision: 'allowed', rowCount: 1, sourceId: 'chinook', details: expect.objectContaining({ delivered: false }) });
}, 30_000);

test('refusals at parse and classification time record the statement fingerprint, reason and detail; unparsable text only as a keyed hash', async () => {
  const q = (sql: string) => callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
  const eventOf = async (r: { body: any }) => {
    const rid = r.body.result.structuredContent.request_id as string;
    const [e] = (await searchAudit(env.db, { requestId: rid, kind: 'tool_call' })).events;
    return e;
  };
  const cases: Array<[string, string, string]> = [
    ['SELECT pg_sleep(1)', 'forbidden', 'function_not_allowed'],
    ["SELECT 1; SELECT 'x'", 'forbidden', 'statement_not_allowed'],
    ['SELECT no_such_column FROM album WHERE album_id = 7', 'forbidden', 'unknown_column'],
  ];
  for (const [sql, status, detail] of cases) {
    const r = await q(sql);
    expect(r.body.result.structuredContent.status).toBe(status);
    const e = await eventOf(r);
    expect(e).toMatchObject({ decision: 'refused', reasonCode: r.body.result.structuredContent.code, fingerprint: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(e.details).toMatchObject({ reason_detail: detail, refusal_message: expect.any(String) });
    // Quoted names in the analyser's message are withheld (a value typed as an identifier is not stored).
    expect((String(e.details.refusal_message).match(/"(?:[^"]|"")*"/g) ?? []).every((x) => x === '"…"')).toBe(true);
  }
  // A value typed where an identifier goes (red-team F6) reaches no stored field.
  const typed = await eventOf(await q('SELECT * FROM album WHERE title = "SECRET-VALUE-4111"'));
  expect(typed.details).toMatchObject({ reason_detail: 'unknown_column' });
  expect(JSON.stringify(typed)).not.toContain('SECRET-VALUE-4111');
  // Constants removed: the same statement with another value has the same fingerprint.
  const a = await eventOf(await q('SELECT no_such_column FROM album WHERE album_id = 7'));
  const b = await eventOf(await q('SELECT no_such_column FROM album WHERE album_id = 99'));
  expect(a.fingerprint).toBe(b.fingerprint);

  // Text that does not parse may hold values: only an HMAC is kept, stable for equal texts.
  const secretText = "SELEC email FROM customer WHERE password = 'hunter2-s3cr3t'";
  const u1 = await eventOf(await q(secretText));
  const u2 = await eventOf(await q(secretText));
  expect(u1).toMatchObject({ decision: 'invalid', reasonCode: 'invalid_sql', fingerprint: expect.stringMatching(/^hmac:[0-9a-f]{64}$/) });
  expect(u1.details).toMatchObject({ statement_unparsed: true, reason_detail: 'invalid_sql' });
  expect(u2.fingerprint).toBe(u1.fingerprint);
  expect(JSON.stringify(u1)).not.toContain('hunter2');
  expect(JSON.stringify(u1)).not.toContain('SELEC');
}, 30_000);
