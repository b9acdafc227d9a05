/**
 * hnu42 (a new user's findings on approved writes), finding 1: an approved write made of a
 * data-modifying CTE records the rows it changed (not the outer SELECT's count) in the execution
 * result, the approval's outcome, interlock_approval_status and the audit trail.
 */
import { startGovernedEnv, callTool, sourceQuery as sourceQueryOn, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';
import { getApproval } from '../../../src/control/approvals';
import { searchAudit } from '../../../src/audit/writer';

let env: GovernedEnv;
beforeAll(async () => void (env = await startGovernedEnv()), 90_000);
afterAll(async () => env?.close());

/** A tool call's structuredContent. */
const sc = (r: { body: any }) => r.body.result.structuredContent;
/** interlock_query on the demo source, as the demo agent (a write is queued). */
const query = (sql: string) => callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [] }, env.apiKey);

/** Queues `sql`, approves it, and returns what every surface recorded. */
async function approved(sql: string) {
  const q = await query(sql);
  expect(sc(q)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  const id = sc(q).approval_id as string;
  const done = await approveAndExecute(env.db, id, { operator: 'ops-alice' });
  const status = sc(await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey));
  const stored = await getApproval(env.db, id);
  const trail = await searchAudit(env.db, { approvalId: id });
  const executed = trail.events.filter((e) => e.decision === 'executed').map((e) => e.rowCount);
  return { done, status, stored, executed };
}

describe('hnu42 finding 1: rows changed by data-modifying CTEs are counted', () => {
  test('WITH x AS (UPDATE … RETURNING 1) SELECT 1 WHERE false: 2 rows changed, 2 recorded everywhere (not 0)', async () => {
    const r = await approved("WITH x AS (UPDATE playlist SET name = name || '' WHERE playlist_id IN (1, 2) RETURNING 1) SELECT 1 WHERE false");
    expect(r.done).toMatchObject({ state: 'executed', rowCount: 2 });
    expect(r.stored!.outcome).toEqual({ row_count: 2 });
    expect(r.status).toMatchObject({ state: 'executed', outcome: { row_count: 2 }, message: 'An operator approved it and it ran once. 2 row(s) changed.' });
    expect(r.executed).toEqual([2]);
  });

  test('WITH x AS (UPDATE … RETURNING …) SELECT 1: 2, not the outer SELECT\'s 1', async () => {
    const r = await approved("WITH x AS (UPDATE playlist SET name = name || '' WHERE playlist_id IN (3, 4) RETURNING playlist_id) SELECT 1");
    expect(r.done).toMatchObject({ state: 'executed', rowCount: 2 });
    expect(r.executed).toEqual([2]);
  });

  test('a modifying CTE under a top-level write: both statements\' rows (1 deleted + 1 inserted)', async () => {
    const [{ id }] = await sourceQueryOn<{ id: number }>(env, "INSERT INTO playlist (name) VALUES ('hnu42 move') RETURNING playlist_id AS id");
    const r = await approved(`WITH gone AS (DELETE FROM playlist WHERE playlist_id = ${id} RETURNING name) INSERT INTO playlist (name) SELECT name || ' moved' FROM gone`);
    expect(r.done).toMatchObject({ state: 'executed', rowCount: 2 });
    expect(r.executed).toEqual([2]);
  });

  test('a plain write keeps its command tag\'s count', async () => {
    const r = await approved("UPDATE playlist SET name = name || '' WHERE playlist_id IN (5, 6, 7)");
    expect(r.done).toMatchObject({ state: 'executed', rowCount: 3 });
    expect(r.executed).toEqual([3]);
  });
});
