/**
 * hnu42 (a new user's findings on approved writes), findings 3 and 4, on the governed demo:
 * a write whose target the source's writer role may not modify is refused before it is queued
 * (source_permission_denied), and `source scan` lists what the writer may not modify (`unwritable`)
 * as it lists what the reader may not read; an operator's rejection reason is read by the agent,
 * and the console and the operators' guide say so.
 */
import { readFileSync } from 'node:fs';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { scanSource } from '../../../src/control/scan';
import { rejectApproval } from '../../../src/approvals/execute';
import { unreadableWarning } from '../../../src/cli/source';
import { installPath } from '../../../src/install-root';
import { searchAudit } from '../../../src/audit/writer';

let env: GovernedEnv;
beforeAll(async () => void (env = await startGovernedEnv()), 90_000);
afterAll(async () => env?.close());

/** interlock_query as the demo agent; its structuredContent. */
const ask = async (sql: string) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [] }, env.apiKey)).body.result;
const pendingCount = async () => Number((await env.db.pool.query("SELECT count(*) FROM approvals WHERE state = 'pending'")).rows[0].count);

describe('finding 3: writes the writer role cannot run are not queued', () => {
  beforeAll(async () => sourceQuery(env, `REVOKE DELETE ON public.playlist_track FROM "${env.demo.writerRole}"`));
  afterAll(async () => sourceQuery(env, `GRANT DELETE ON public.playlist_track TO "${env.demo.writerRole}"`));

  test('a DELETE without the writer\'s DELETE privilege is refused source_permission_denied, nothing queued', async () => {
    const before = await pendingCount();
    const r = await ask('DELETE FROM playlist_track WHERE playlist_id = 1');
    expect(r.isError).toBe(true);
    expect(r.structuredContent).toMatchObject({
      status: 'unavailable',
      code: 'source_permission_denied',
      message: "The source's writer role, which runs approved writes, may not DELETE on public.playlist_track, so this write was not queued: approving it would fail (SQLSTATE 42501, insufficient_privilege). The statement is not at fault; do not rewrite it. An operator must grant the writer role that privilege; `interlock source scan` lists what it may not modify.",
    });
    expect(r.structuredContent.approval_id).toBeUndefined();
    expect(await pendingCount()).toBe(before);
    const trail = await searchAudit(env.db, { requestId: r.structuredContent.request_id });
    expect(trail.events.map((e) => [e.decision, e.reasonCode, e.details.writer_missing])).toEqual([['refused', 'source_permission_denied', 'public.playlist_track: DELETE']]);
  });

  test('a data-modifying CTE that deletes there is refused too; an UPDATE the writer may run is still queued', async () => {
    const cte = await ask('WITH gone AS (DELETE FROM playlist_track WHERE playlist_id = 1 RETURNING 1) SELECT count(*) FROM gone');
    expect(cte.structuredContent).toMatchObject({ status: 'unavailable', code: 'source_permission_denied' });
    const upd = await ask('UPDATE playlist_track SET track_id = track_id WHERE playlist_id = 1');
    expect(upd.structuredContent).toMatchObject({ status: 'queued', approval_state: 'pending' });
  });

  test('source scan lists what the writer may not modify (unwritable), and the CLI warns as for the reader', async () => {
    const scan = await scanSource(env.db, 'chinook');
    expect(scan.unwritable).toContainEqual({ relation: 'public.playlist_track', privileges: ['DELETE'] });
    expect(scan.unwritable).toContainEqual({ relation: 'public.album', privileges: ['INSERT', 'UPDATE', 'DELETE'] });
    expect(scan.unwritable!.map((u) => u.relation)).not.toContain('public.playlist');
    const line = unreadableWarning('chinook', { unwritable: [{ relation: 'public.playlist_track', privileges: ['DELETE'] }] });
    expect(line).toBe("note: the writer role of source chinook may not modify 1 table(s) as shown: public.playlist_track (DELETE); agents' writes that need it are refused (source_permission_denied) instead of queued; if agents should write one: GRANT DELETE ON public.playlist_track TO <writer role>");
  });
});

describe('finding 4: the agent reads a rejection\'s reason, and the operator is told so', () => {
  test('the reason is outcome.reason of interlock_approval_status', async () => {
    const q = await ask('INSERT INTO playlist (name) VALUES (\'hnu42 reject\')');
    await rejectApproval(env.db, q.structuredContent.approval_id, { operator: 'ops-alice', reason: 'not this week' });
    const s = await callTool(env, 'interlock_approval_status', { approval_id: q.structuredContent.approval_id }, env.apiKey);
    expect(s.body.result.structuredContent).toMatchObject({ state: 'rejected', outcome: { reason: 'not this week' } });
  });

  test('the console\'s reason field and the operators\' guide say the agent reads it', async () => {
    const page = await (await fetch(new URL('/console', env.url))).text();
    expect(page).toContain('<label for="reason">Reason (recorded in the audit; a rejection\'s reason is shown to the agent)</label>');
    const guide = readFileSync(installPath('docs', 'operators.md'), 'utf8');
    expect(guide).toContain("A rejection's `--reason` is recorded in the audit and shown to the agent that queued the write:");
    expect(guide).toContain("a rejection's reason is also\n  shown to the agent, which reads it as `outcome.reason`");
  });
});
