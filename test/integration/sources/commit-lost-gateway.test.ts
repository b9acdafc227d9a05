/**
 * Task hcommit: an approved write whose connection is lost while its COMMIT is in flight does not
 * say "Nothing was changed" (the server may have committed). write.ts reads the transaction's id
 * with BEGIN and, after a COMMIT that got no answer, asks a new writer connection
 * `txid_status(xid)`: committed → the approval is `executed` (audit details say it was resolved);
 * aborted → the lost connection's failure (nothing changed); unknown (the source unreachable for the
 * question) → `outcome_unknown`, whose agent text says not to queue it again.
 *
 * The source is reached through a loopback proxy (fakes.ts startProxy) whose `cutAtCommit` ends the
 * writer's connection at its COMMIT: after forwarding it (the server commits) or before (it rolls back).
 *
 * Task hfollow, (4)–(6): while the server says the transaction is 'in progress' (its old session is
 * alive and may still commit or abort), the gateway waits and asks again until the status is final.
 * The proxy's `holdAtCommit` cuts the client's side at COMMIT without forwarding it and keeps the
 * server's side open (the session stays idle in its transaction); `onAnswer` releases it once the
 * first status answer has reached the gateway.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { getSource, putSource } from '../../../src/control/sources';
import { approveAndExecute } from '../../../src/approvals/execute';
import { getApproval } from '../../../src/control/approvals';
import errors from '../../../spec/errors-v1.json';
import { startProxy, type HeldCommit, type Proxy } from './fakes';

jest.setTimeout(120_000);

let env: GovernedEnv;
let proxy: Proxy;
beforeAll(async () => {
  env = await startGovernedEnv();
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  proxy = await startProxy({ host: src.settings.host as string, port: src.settings.port as number });
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, port: proxy.port, connect_timeout_ms: 2000, breaker: { failure_threshold: 100, reset_timeout_ms: 60_000 } } });
});
afterAll(async () => {
  await env?.close();
  await proxy?.close();
});

const sc = (r: { body: any }) => r.body.result.structuredContent;
const OUTCOME_UNKNOWN = (errors as unknown as { approvalFailures: Array<{ code: string; message: string }> }).approvalFailures.find((f) => f.code === 'outcome_unknown')?.message;

async function queue(sql: string): Promise<string> {
  const q = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
  expect(sc(q)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(q).approval_id as string;
}
const approve = (id: string) => approveAndExecute(env.db, id, { operator: 'ops-alice', connectors: env.gateway.connectors });
const count = async (name: string) => (await sourceQuery(env, `SELECT count(*)::int AS n FROM playlist WHERE name = '${name}'`))[0];
async function lastApprovalEvent(id: string): Promise<{ decision: string; reason_code: string | null; row_count: string | null; details: any }> {
  return (await env.db.pool.query("SELECT decision, reason_code, row_count::text, details FROM audit_events WHERE kind = 'approval' AND approval_id = $1 ORDER BY id DESC LIMIT 1", [id])).rows[0];
}
async function status(id: string): Promise<any> {
  const r = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
  return JSON.parse(r.body.result.content[0].text);
}

test('(1) the connection is lost after COMMIT reached the server: the server committed, the approval is executed, 1 row once, audit says resolved', async () => {
  await expect(approve(await queue("INSERT INTO playlist (name) VALUES ('hcommit warm')"))).resolves.toMatchObject({ state: 'executed', rowCount: 1 });
  const id = await queue("INSERT INTO playlist (name) VALUES ('hcommit after')");
  proxy.cutAtCommit('after');
  // Before the fix: {state: 'failed', errorCode: 'execution_failed'} ("Nothing was changed") while the row was there.
  expect(await approve(id)).toEqual({ approvalId: id, state: 'executed', rowCount: 1, errorCode: undefined });
  expect(await count('hcommit after')).toEqual({ n: 1 });
  expect(await getApproval(env.db, id)).toMatchObject({ state: 'executed', outcome: { row_count: 1 } });
  expect(await lastApprovalEvent(id)).toMatchObject({ decision: 'executed', reason_code: null, row_count: '1', details: { commit: 'resolved_committed' } });
  expect(await status(id)).toMatchObject({ state: 'executed', outcome: { row_count: 1 } });
});

test('(2) the connection is lost before COMMIT reached the server: it rolled back, the approval fails "Nothing was changed", no row', async () => {
  const id = await queue("INSERT INTO playlist (name) VALUES ('hcommit before')");
  proxy.cutAtCommit('before');
  expect(await approve(id)).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'execution_failed' });
  expect(await count('hcommit before')).toEqual({ n: 0 });
  const s = await status(id);
  expect(s).toMatchObject({ state: 'failed', outcome: { error_code: 'execution_failed', message: 'The write could not be run on the source. Nothing was changed.' } });
});

test('(3) the source cannot be reached to ask: outcome_unknown (code and agent text exact), in the approval, its audit event and the status tool', async () => {
  const id = await queue("INSERT INTO playlist (name) VALUES ('hcommit unknown')");
  proxy.cutAtCommit('after', () => proxy.setDown(true));
  let done;
  try {
    done = await approve(id);
  } finally {
    proxy.setDown(false);
  }
  expect(done).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'outcome_unknown' });
  expect(done!.failure?.message).toMatch(/^the connection to the source was lost while COMMIT was in flight/);
  // The server did commit it: the "unknown" is honest, and an operator checking finds the row.
  expect(await count('hcommit unknown')).toEqual({ n: 1 });
  expect(await getApproval(env.db, id)).toMatchObject({ state: 'failed', outcome: { error_code: 'outcome_unknown' } });
  expect(await lastApprovalEvent(id)).toMatchObject({ decision: 'failed', reason_code: 'outcome_unknown' });
  expect(OUTCOME_UNKNOWN).toBe('The connection to the source was lost while the write was being committed, and the source could not be asked afterwards whether the commit took effect, so it is not known whether the write was applied. Do not queue it again: an operator must check the data on the source first.');
  const s = await status(id);
  expect(s.state).toBe('failed');
  expect(s.outcome).toEqual({ error_code: 'outcome_unknown', message: OUTCOME_UNKNOWN });
});

/**
 * Approves `id` while the proxy holds its COMMIT (holdAtCommit); `onFirst` runs once the first answer
 * to `txid_status` reached the gateway. Returns the approval's result, the status each answer carried
 * in order, and whether the server's side of the held session closed without the proxy closing it
 * (onFirst aside).
 * The held session is closed afterwards in any case.
 */
async function approveHeld(id: string, onFirst?: (h: HeldCommit) => void): Promise<{ done: Awaited<ReturnType<typeof approve>>; answers: string[]; endedBefore: boolean }> {
  const h = proxy.holdAtCommit();
  const answers: string[] = [];
  let ended = false;
  void h.ended.then(() => (ended = true));
  const w = proxy.onAnswer('txid_status', (a) => {
    answers.push(['in progress', 'committed', 'aborted'].find((x) => a.includes(x)) ?? 'other');
    if (answers.length === 1) onFirst?.(h);
  });
  try {
    const done = await approve(id);
    // Whether the held session's server side closed by then (or within 5 s more: its close and the
    // status answer travel on different sockets) while the proxy itself kept it open.
    const endedBefore = ended || (await Promise.race([h.ended.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5000).unref())]));
    return { done, answers, endedBefore };
  } finally {
    w.off();
    h.abort();
  }
}

test('(4) the old session still holds the transaction (in progress): asked again until it ended (rolled back), then failed "nothing changed", never executed', async () => {
  const id = await queue("INSERT INTO playlist (name) VALUES ('hfollow held')");
  // The gateway has read 'in progress'; only then does the old session end (the server rolls back).
  const { done, answers, endedBefore } = await approveHeld(id, (h) => h.abort());
  // Before the fix: {state: 'failed', errorCode: 'outcome_unknown'} after the one 'in progress' answer.
  expect(done).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'execution_failed' });
  expect(endedBefore).toBe(true);
  expect(answers[0]).toBe('in progress');
  expect(answers[answers.length - 1]).toBe('aborted');
  expect(answers.length).toBeGreaterThanOrEqual(2);
  expect(await count('hfollow held')).toEqual({ n: 0 });
  expect(await getApproval(env.db, id)).toMatchObject({ state: 'failed', outcome: { error_code: 'execution_failed' } });
  expect(await lastApprovalEvent(id)).toMatchObject({ decision: 'failed', reason_code: 'execution_failed' });
  expect(await status(id)).toMatchObject({ state: 'failed', outcome: { error_code: 'execution_failed', message: 'The write could not be run on the source. Nothing was changed.' } });
});

test('(5) the old session forwards its COMMIT late (after an "in progress" answer): the server commits, the approval is executed, 1 row, audit says resolved', async () => {
  const id = await queue("INSERT INTO playlist (name) VALUES ('hfollow late')");
  const { done, answers } = await approveHeld(id, (h) => h.commit());
  // Before the fix: {state: 'failed', errorCode: 'outcome_unknown'} while the row was committed.
  expect(done).toEqual({ approvalId: id, state: 'executed', rowCount: 1, errorCode: undefined });
  expect(answers[0]).toBe('in progress');
  expect(answers[answers.length - 1]).toBe('committed');
  expect(await count('hfollow late')).toEqual({ n: 1 });
  expect(await lastApprovalEvent(id)).toMatchObject({ decision: 'executed', reason_code: null, row_count: '1', details: { commit: 'resolved_committed' } });
  expect(await status(id)).toMatchObject({ state: 'executed', outcome: { row_count: 1 } });
});

test('(6) the old session never lets go: the gateway ends it itself (pg_terminate_backend, allowed to the (non-superuser) writer role for its own sessions), then failed "nothing changed"', async () => {
  const id = await queue("INSERT INTO playlist (name) VALUES ('hfollow stuck')");
  const { done, answers, endedBefore } = await approveHeld(id);
  expect(done).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'execution_failed' });
  // The server closed the held session (the proxy never did: the gateway terminated it).
  expect(endedBefore).toBe(true);
  expect(answers.filter((a) => a === 'in progress').length).toBeGreaterThanOrEqual(2);
  expect(answers[answers.length - 1]).toBe('aborted');
  expect(await count('hfollow stuck')).toEqual({ n: 0 });
});
