/**
 * Task low48 item 4: an approved write whose source an operator can fix. Disabled source and missing
 * writer already ended `failed` with a code the agent reads (source_disabled, execution_failed). Source
 * settings the connector refuses (a writer without a user: stored before the schema required one,
 * or edited in the control database) made approving throw after the approval had been decided: it
 * stayed `approved` for good and the agent was told "it is running now". Now it ends `failed`
 * execution_failed (spec ApprovalStatus state enum; nothing ran), the operator's cause names the
 * setting, and it can be requeued once the settings are fixed.
 */
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';
import { requeueApproval } from '../../../src/approvals/requeue';
import { getApproval } from '../../../src/control/approvals';
import { approvalLookup, agentApprovalView } from '../../../src/approvals/status';
import errors from '../../../spec/errors-v1.json';

jest.setTimeout(120_000);

let env: GovernedEnv;
let original: Record<string, unknown>;
beforeAll(async () => {
  env = await startGovernedEnv();
  original = (await env.db.pool.query('SELECT settings FROM sources WHERE id = $1', ['chinook'])).rows[0].settings;
});
afterAll(async () => env?.close());
afterEach(async () => {
  await env.db.pool.query('UPDATE sources SET settings = $2, enabled = true WHERE id = $1', ['chinook', original]);
});

const failureMessage = (code: string) => errors.approvalFailures.find((f) => f.code === code)!.message;
const sc = (r: { body: any }) => r.body.result.structuredContent;
async function queue(name: string): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (name) VALUES ($1)', params: [name] }, env.apiKey);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}
/** Writes the source's settings in the control database directly, as an old row or a hand edit holds them. */
const storeSettings = (s: unknown) => env.db.pool.query('UPDATE sources SET settings = $2 WHERE id = $1', ['chinook', s]);
const status = async (id: string) => agentApprovalView((await approvalLookup(env.db)(id))!);
const rows = async (name: string) => (await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist WHERE name = $1', [name]))[0].n;

test('source settings the connector refuses: approving ends failed execution_failed (never stuck approved), the cause names the setting, requeue runs it once fixed', async () => {
  const id = await queue('low48-bad-writer');
  await storeSettings({ ...original, writer: { password: 'x' } });
  const r = await approveAndExecute(env.db, id, { operator: 'ops-low48' });
  expect(r).toEqual({ approvalId: id, state: 'failed', errorCode: 'execution_failed', failure: { message: "not run: the source's settings cannot be used (invalid source settings: writer.user); correct them (interlock source update), then requeue the write" } });
  expect((await getApproval(env.db, id))!.state).toBe('failed');
  expect(await status(id)).toMatchObject({ state: 'failed', outcome: { error_code: 'execution_failed', message: failureMessage('execution_failed') } });
  expect(await rows('low48-bad-writer')).toBe(0);
  // The approval event says so too (the audit trail's approval chain).
  const ev = await env.db.pool.query("SELECT decision, reason_code FROM audit_events WHERE approval_id = $1 AND kind = 'approval' ORDER BY id", [id]);
  expect(ev.rows.map((e) => [e.decision, e.reason_code])).toEqual([['queued', null], ['approved', null], ['failed', 'execution_failed']]);
  // Fixed by the operator: the requeued write runs.
  await storeSettings(original);
  const again = await requeueApproval(env.db, id, { operator: 'ops-low48' });
  expect(await approveAndExecute(env.db, again.id, { operator: 'ops-low48' })).toMatchObject({ state: 'executed', rowCount: 1 });
  expect(await rows('low48-bad-writer')).toBe(1);
});

test('held: a source disabled, or its writer removed, while the write waits ends failed with a code the agent reads', async () => {
  // Both queued first: the gateway's source cache (2 s) would still hold a change made in between.
  const disabled = await queue('low48-disabled');
  const noWriter = await queue('low48-no-writer');
  await env.db.pool.query('UPDATE sources SET enabled = false WHERE id = $1', ['chinook']);
  expect(await status(disabled)).toMatchObject({ state: 'pending' });
  expect(await approveAndExecute(env.db, disabled, { operator: 'ops-low48' })).toMatchObject({ state: 'failed', errorCode: 'source_disabled' });
  expect(await status(disabled)).toMatchObject({ state: 'failed', outcome: { error_code: 'source_disabled', message: failureMessage('source_disabled') } });
  await env.db.pool.query('UPDATE sources SET enabled = true WHERE id = $1', ['chinook']);
  const { writer: _w, ...withoutWriter } = original as { writer?: unknown };
  await storeSettings(withoutWriter);
  expect(await approveAndExecute(env.db, noWriter, { operator: 'ops-low48' })).toMatchObject({ state: 'failed', errorCode: 'execution_failed' });
  expect(await status(noWriter)).toMatchObject({ state: 'failed', outcome: { error_code: 'execution_failed' } });
  expect(await rows('low48-disabled') + (await rows('low48-no-writer'))).toBe(0);
});
