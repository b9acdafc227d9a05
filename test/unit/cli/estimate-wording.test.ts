/**
 * Task low48 item 2: the console's confirmation says a row estimate is an estimate, not a count, and
 * that PostgreSQL never estimates fewer than 1 row, so 1 can mean none; `interlock approval show`
 * (and the approve prompt) printed "about 1 row(s) changed" without it. Both now say it in the same words.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { approvalShowText, estimateText, reviewText } from '../../../src/cli/approval';
import { initStatementDisplay } from '../../../src/approvals/statement';
import type { ApprovalReview } from '../../../src/admin/backend';
import type { ApprovalRecord } from '../../../src/control/approvals';

beforeAll(() => initStatementDisplay());

const record: ApprovalRecord = {
  id: 'apr_1', sourceId: 'chinook', identityId: 'idn_1', identityName: 'low48', keyId: 'k', requestId: 'req_1', sql: 'DELETE FROM playlist WHERE playlist_id = $1', params: [1],
  classification: {}, state: 'pending', createdAt: '2026-12-06T21:00:00.000Z', expiresAt: '2026-12-07T21:00:00.000Z', decidedBy: null, decidedAt: null,
  executedAt: null, outcome: null, failure: null, requeuedFrom: null, claimAttributes: null,
};
const review = (estimate: number | null) => ({ approval: record, estimate, plan: { ok: true, lines: [] }, destructive: true }) as unknown as ApprovalReview;
const ONE_CAN_MEAN_NONE = '(PostgreSQL never estimates fewer than 1 row, so 1 can mean none)';
const NOT_A_COUNT = 'This is an estimate, not a count: the rows changed may differ';

test('approval show and the approve prompt: an estimate of 1 row says it can mean none', () => {
  const line = "row estimate: about 1 row(s) changed (the planner's estimate now, EXPLAIN as the writer role; nothing ran). This is an estimate, not a count: the rows changed may differ (PostgreSQL never estimates fewer than 1 row, so 1 can mean none).";
  expect(approvalShowText(review(1)).split('\n')).toContain(line);
  expect(reviewText(review(1), { statement: true }).split('\n')).toContain(line);
});

test('a larger estimate is an estimate, not a count, without the clause; no estimate stays as it was', () => {
  expect(estimateText(review(40))).toBe(`about 40 row(s) changed (the planner's estimate now, EXPLAIN as the writer role; nothing ran). ${NOT_A_COUNT}.`);
  expect(estimateText(review(null))).toBe('none (the plan gives no row count)');
});

test("the console's confirmation says it in the same words", () => {
  const js = readFileSync(join(__dirname, '../../../src/console/static/console.js'), 'utf8');
  expect(js).toContain(`'. ${NOT_A_COUNT}' + (n <= 1 ? ' ${ONE_CAN_MEAN_NONE}.' : '.')`);
});
