/**
 * A lock wait that gives up (issue 22 item 6): an agent read blocked by another session's lock past
 * the source's lock_timeout answers statement_failed with reason lock_timeout (not the opaque
 * "tool execution failed"), and the audit event records the cause.
 */
import pg from 'pg';
import { searchAudit } from '../../../src/audit/writer';
import { callTool, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';

let env: GovernedEnv;
beforeAll(async () => {
  env = await startGovernedEnv();
}, 60_000);
afterAll(async () => env?.close());

test('a read waiting on an ACCESS EXCLUSIVE lock past lock_timeout: statement_failed, reason lock_timeout, audited cause', async () => {
  const holder = new pg.Client({ connectionString: env.sourceUrl });
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE album IN ACCESS EXCLUSIVE MODE');
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT count(*) AS n FROM album' }, env.apiKey);
    expect(r.status).toBe(200);
    expect(r.body.result.isError).toBe(true);
    expect(r.body.result.structuredContent).toEqual({
      code: 'statement_failed',
      reason: 'lock_timeout',
      message: "The statement waited longer than the source's lock_timeout for a lock held by another session and was cancelled; nothing was changed. Retry later.",
      request_id: expect.stringMatching(/^req_/),
    });
    // The only failed call of this environment: its event names the cause.
    const page = await searchAudit(env.db, { sourceId: 'chinook', decision: 'invalid' });
    expect(page.events.map((e) => [e.reasonCode, e.details.cause, e.details.sqlstate])).toEqual([['statement_failed', 'lock_timeout', '55P03']]);
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    await holder.end();
  }
}, 30_000);
