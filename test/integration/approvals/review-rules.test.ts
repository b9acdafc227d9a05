/**
 * hnu42 finding 2: what an operator reviews before approving a ruled write (src/console/plan.ts
 * reviewApprovalPlan, shown by the console, `GET /admin/v1/approvals/{id}/review` and `interlock
 * approval show`) is the plan of the statement the approved run executes: the requester's row-rule
 * rewrite, with its row views and bound attributes; a write the re-check would refuse has no plan.
 */
import { startGovernedEnv, callTool, playlistOwnerKey, type GovernedEnv } from '../../helpers/governed';
import { setIdentityAttributes } from '../../../src/control/identities';
import { getApproval } from '../../../src/control/approvals';
import { reviewApprovalPlan } from '../../../src/console/plan';
import { estimateText } from '../../../src/cli/approval';

jest.setTimeout(120_000);

let env: GovernedEnv;
let ruledKey: string;
beforeAll(async () => {
  env = await startGovernedEnv();
  ruledKey = await playlistOwnerKey(env, 'music-agent', 'music-only', ['Music']);
});
afterAll(async () => env?.close());

async function reviewOf(key: string, sql: string) {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, key);
  const id = r.body.result.structuredContent.approval_id as string;
  const a = (await getApproval(env.db, id))!;
  return { a, review: await reviewApprovalPlan(env.db, a) };
}

test('a ruled UPDATE is planned through its row view with the bound attribute; the estimate says so', async () => {
  const { a, review } = await reviewOf(ruledKey, "UPDATE playlist SET name = name WHERE name <> 'no such name'");
  expect(review.plan).toMatchObject({ ok: true, rowRules: true });
  const lines = (review.plan as { lines: string[] }).lines;
  // The rule's filter (the attribute read from the transaction's settings) is in the plan of what runs.
  expect(lines.some((l) => /Filter: .*interlock\.attrs?\.names/.test(l))).toBe(true);
  expect(estimateText({ approval: a, ...review } as never)).toBe(`about ${review.estimate} row(s) changed (the planner's estimate now, EXPLAIN as the writer role, of the statement as approving runs it, with the requester's row rules; nothing ran). This is an estimate, not a count: the rows changed may differ${review.estimate! <= 1 ? ' (PostgreSQL never estimates fewer than 1 row, so 1 can mean none).' : '.'}`);
  // The unruled demo agent's same statement: planned as stored, no row rules.
  const plain = await reviewOf(env.apiKey, "UPDATE playlist SET name = name WHERE name <> 'no such name'");
  expect(plain.review.plan).toMatchObject({ ok: true });
  expect((plain.review.plan as { rowRules?: boolean }).rowRules).toBeUndefined();
  expect((plain.review.plan as { lines: string[] }).lines.some((l) => /interlock\.attrs?\./.test(l))).toBe(false);
  // The rule leaves fewer rows to the write than the stored statement reaches.
  expect(review.estimate).toBeLessThan(plain.review.estimate!);
  // Nothing the review made is left behind: the approval is still pending and unchanged.
  expect((await getApproval(env.db, a.id))!.state).toBe('pending');
});

test('a ruled write the re-check would refuse (its attribute gone) has no plan and no estimate: the reason says approving will not run it', async () => {
  const sql = "UPDATE playlist SET name = name WHERE name = 'Music'";
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, ruledKey);
  const a = (await getApproval(env.db, r.body.result.structuredContent.approval_id))!;
  await setIdentityAttributes(env.db, 'music-agent', { names: null });
  try {
    const review = await reviewApprovalPlan(env.db, a);
    expect(review.estimate).toBeNull();
    expect(review.plan).toEqual({ ok: false, reason: 'approving now would not run it (row_rule_attribute_missing): re-checked at approval: a row rule of the requester needs an identity attribute its identity record does not hold (or not as a usable value)' });
  } finally {
    await setIdentityAttributes(env.db, 'music-agent', { names: ['Music'] });
  }
});
