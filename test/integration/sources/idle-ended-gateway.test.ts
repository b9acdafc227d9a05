/**
 * Task hidle (red team rt42's staging): a pooled source connection the server ended while it sat
 * idle (pg_terminate_backend, idle_session_timeout) never fails an agent's read. Before the fix the
 * next read that took such a connection from the pool (the pool drops it only once it has read the
 * server's FATAL, asynchronously) sent its statement into the closed session, read the FATAL
 * (57P01, 57P05) as its answer and failed `tool_execution_failed`, counted against the circuit. Now
 * a read whose connection was lost before the server answered any of it runs again on another
 * connection (read.ts readFrom); a read whose rows had started is not retried; an approved write
 * whose idle writer connection was ended runs once, from BEGIN, on another (write.ts writeOn).
 * Every answered call has exactly one audit event.
 *
 * The source is reached through a loopback proxy (fakes.ts startProxy) whose `holdIdle` delivers
 * what the server sent on the connections open at that moment (the FATAL, then the socket's end)
 * only once the gateway writes on them again: the order of events of the race the red team saw
 * (a checkout between the server's termination and the gateway's reading of it), made certain.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { ADMIN_URL } from '../../helpers/pg';
import { getSource, putSource } from '../../../src/control/sources';
import { approveAndExecute } from '../../../src/approvals/execute';
import { getApproval } from '../../../src/control/approvals';
import { startProxy, type Proxy } from './fakes';

jest.setTimeout(120_000);

let env: GovernedEnv;
let admin: pg.Client;
let proxy: Proxy;
beforeAll(async () => {
  env = await startGovernedEnv();
  admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  proxy = await startProxy({ host: src.settings.host as string, port: src.settings.port as number });
  // One counted failure opens the circuit: a closed circuit after a call shows nothing of it was counted.
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, port: proxy.port, breaker: { failure_threshold: 1, reset_timeout_ms: 60_000 } } });
  sourceChanged();
});
afterAll(async () => {
  await env?.close();
  await proxy?.close();
  await admin?.end();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/**
 * What the control database's notification of a source change does, now: the gateway's next call
 * reads the new settings (task flake47: the notification reaches the gateway asynchronously, and a
 * loaded machine let the next call run first on the cached settings: the old port, past the proxy,
 * or in (5) the old connector whose circuit (3) opened).
 */
const sourceChanged = () => env.gateway.store.invalidate('sources');
/** structuredContent of a tool call's answer. */
const sc = (r: { body: any }) => r.body.result.structuredContent;
const query = (sql: string) => callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
const circuit = () => env.gateway.connectors.states().chinook ?? 'closed';

/** The newest audit event's id (events after it belong to the calls that follow). */
async function auditMark(): Promise<string> {
  return (await env.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
}

/** Tool-call audit events after `mark`, oldest first. */
async function toolEventsSince(mark: string): Promise<Array<{ tool: string; decision: string; reason_code: string | null; row_count: string | null }>> {
  const r = await env.db.pool.query("SELECT tool, decision, reason_code, row_count::text FROM audit_events WHERE kind = 'tool_call' AND id > $1::bigint ORDER BY id", [mark]);
  return r.rows;
}

/** Ends every idle backend of `role` on the source's server, as an administrator would, and waits until they are gone; returns how many. */
async function terminateIdle(role: string): Promise<number> {
  const r = await admin.query("SELECT count(*)::int AS n FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = $1 AND state = 'idle') t", [role]);
  return r.rows[0].n;
}

/** Backends of `role` on the server now. */
async function backends(role: string): Promise<number> {
  return (await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1', [role])).rows[0].n;
}

test('(1) every idle reader connection terminated by an administrator: the next read is answered with its rows, once in audit, circuit closed', async () => {
  // Three reads at once leave three idle connections in the pool (through the proxy).
  const warm = await Promise.all([1, 2, 3].map((n) => query(`SELECT ${n} AS n`)));
  expect(warm.map((r) => sc(r).rows)).toEqual([[{ n: 1 }], [{ n: 2 }], [{ n: 3 }]]);
  expect(proxy.connections).toBeGreaterThanOrEqual(1);
  proxy.holdIdle();
  expect(await terminateIdle(env.demo.readerRole)).toBeGreaterThanOrEqual(1);
  const mark = await auditMark();
  // Before the fix: {code: 'tool_execution_failed', message: 'tool execution failed'} (the FATAL 57P01 read as the answer).
  const r = await query('SELECT artist_id, name FROM artist WHERE artist_id IN (1, 2) ORDER BY artist_id');
  expect(r.status).toBe(200);
  expect(r.body.result.isError).toBeFalsy();
  expect(sc(r).rows).toEqual([
    { artist_id: 1, name: 'AC/DC' },
    { artist_id: 2, name: 'Accept' },
  ]);
  expect(JSON.stringify(r.body)).not.toMatch(/tool_execution_failed|57P01|terminating/);
  expect(await toolEventsSince(mark)).toEqual([{ tool: 'interlock_query', decision: 'allowed', reason_code: null, row_count: '2' }]);
  expect(circuit()).toBe('closed');
  // And the reads after it, on the connections the pool opened since.
  expect(sc(await query('SELECT 4 AS n')).rows).toEqual([{ n: 4 }]);
});

test('(2) the server ends idle sessions itself (idle_session_timeout on the reader role): the read after the timeout is answered', async () => {
  const reader = env.demo.readerRole;
  await admin.query(`ALTER ROLE "${reader}" SET idle_session_timeout = '200ms'`);
  try {
    // Connections take the role's setting when they start: end the ones open now and let the pool see it.
    await terminateIdle(reader);
    await sleep(300);
    expect(sc(await query('SELECT 5 AS n')).rows).toEqual([{ n: 5 }]);
    proxy.holdIdle();
    // Past the timeout the server has ended every idle reader session itself (FATAL 57P05).
    for (let i = 0; i < 50 && (await backends(reader)) > 0; i++) await sleep(100);
    expect(await backends(reader)).toBe(0);
    const mark = await auditMark();
    // Before the fix: tool_execution_failed (the FATAL 57P05 read as the answer).
    const r = await query('SELECT name FROM genre WHERE genre_id = 1');
    expect(r.body.result.isError).toBeFalsy();
    expect(sc(r).rows).toEqual([{ name: 'Rock' }]);
    expect(await toolEventsSince(mark)).toEqual([{ tool: 'interlock_query', decision: 'allowed', reason_code: null, row_count: '1' }]);
    expect(circuit()).toBe('closed');
  } finally {
    await admin.query(`ALTER ROLE "${reader}" RESET idle_session_timeout`);
    await terminateIdle(reader);
  }
});

test('(4) an approved write whose idle writer connection was terminated runs exactly once, from BEGIN, on another connection', async () => {
  const approve = async (sql: string) => {
    const q = await query(sql);
    expect(sc(q)).toMatchObject({ status: 'queued', approval_state: 'pending' });
    const id = sc(q).approval_id as string;
    return { id, done: await approveAndExecute(env.db, id, { operator: 'ops-alice', connectors: env.gateway.connectors }) };
  };
  // A first approved write leaves a writer connection idle in the gateway's pool.
  expect((await approve("INSERT INTO playlist (name) VALUES ('hidle warm')")).done).toMatchObject({ state: 'executed', rowCount: 1 });
  proxy.holdIdle();
  expect(await terminateIdle(env.demo.writerRole)).toBeGreaterThanOrEqual(1);
  const mark = await auditMark();
  // Before the fix: {state: 'failed', errorCode: 'statement_failed'} (BEGIN read the FATAL 57P01), nothing inserted.
  const { id, done } = await approve("INSERT INTO playlist (name) VALUES ('hidle once')");
  expect(done).toEqual({ approvalId: id, state: 'executed', rowCount: 1, errorCode: undefined });
  expect(await sourceQuery(env, "SELECT count(*)::int AS n FROM playlist WHERE name = 'hidle once'")).toEqual([{ n: 1 }]);
  expect(await getApproval(env.db, id)).toMatchObject({ state: 'executed', outcome: { row_count: 1 } });
  const trail = await env.db.pool.query('SELECT kind, decision, row_count::text FROM audit_events WHERE id > $1::bigint ORDER BY id', [mark]);
  // The queued write (its approval event and the call's one tool-call event), then the decision and its one execution.
  expect(trail.rows).toEqual([
    { kind: 'approval', decision: 'queued', row_count: null },
    { kind: 'tool_call', decision: 'queued', row_count: null },
    { kind: 'approval', decision: 'approved', row_count: null },
    { kind: 'approval', decision: 'executed', row_count: '1' },
  ]);
  expect(circuit()).toBe('closed');
});

test('(3) a connection that dies mid-result, after rows started, is not retried: it fails as before, once in audit', async () => {
  expect(sc(await query('SELECT 6 AS n')).rows).toEqual([{ n: 6 }]);
  const through = proxy.connections;
  proxy.cutAfterFirstRow();
  const mark = await auditMark();
  const r = await query('SELECT track_id FROM track ORDER BY track_id LIMIT 50');
  expect(r.status).toBe(200);
  expect(r.body.result.isError).toBe(true);
  expect(sc(r)).toEqual({ code: 'tool_execution_failed', message: 'tool execution failed', request_id: expect.stringMatching(/^req_/) });
  expect(JSON.stringify(r.body)).not.toMatch(/Connection terminated|ECONNRESET/);
  // Not run again: no connection was opened for it.
  expect(proxy.connections).toBe(through);
  expect(await toolEventsSince(mark)).toEqual([{ tool: 'interlock_query', decision: 'failed', reason_code: 'tool_execution_failed', row_count: null }]);
  // Counted, as before (the threshold is 1).
  expect(circuit()).toBe('open');
});

test('(5) when the connection the read runs on again cannot be had either, the read answers source_unavailable, counted (nothing was run)', async () => {
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  // New settings, new connector: a closed circuit and an empty pool (the previous test opened its circuit).
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, breaker: { failure_threshold: 1, reset_timeout_ms: 59_000 } } });
  sourceChanged();
  const before = proxy.connections;
  expect(sc(await query('SELECT 7 AS n')).rows).toEqual([{ n: 7 }]);
  expect(proxy.connections).toBeGreaterThan(before);
  expect(circuit()).toBe('closed');
  proxy.holdIdle();
  expect(await terminateIdle(env.demo.readerRole)).toBeGreaterThanOrEqual(1);
  // The idle connections stay (their FATAL held back); new ones are closed at once.
  proxy.setDown(true, false);
  try {
    const mark = await auditMark();
    const r = await query('SELECT 8 AS n');
    expect(r.body.result.isError).toBe(true);
    expect(sc(r)).toEqual({
      status: 'unavailable',
      code: 'source_unavailable',
      message:
        "The source database cannot be reached now (its server refuses or drops connections, is shutting down or starting up, does not accept the gateway's credentials, or its database is missing); nothing was run. Try again later; an operator can see why in the gateway log.",
      request_id: expect.stringMatching(/^req_/),
    });
    expect(JSON.stringify(r.body)).not.toMatch(/tool_execution_failed|57P01|terminating|Connection terminated/);
    expect(await toolEventsSince(mark)).toEqual([{ tool: 'interlock_query', decision: 'refused', reason_code: 'source_unavailable', row_count: null }]);
    expect(circuit()).toBe('open');
  } finally {
    proxy.setDown(false);
  }
});
