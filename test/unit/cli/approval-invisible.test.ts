/**
 * Task hnu43 item 2: `interlock approval show` printed a queued statement's invisible characters
 * (U+202E, U+200B) raw in its YAML record, while `approval list`, the approve prompt and the console
 * showed them as ⟨U+XXXX⟩: every operator-facing rendering now uses showInvisible.
 */
import { approvalListTable, approvalShowText, reviewText } from '../../../src/cli/approval';
import { initStatementDisplay } from '../../../src/approvals/statement';
import type { ApprovalReview } from '../../../src/admin/backend';
import type { ApprovalRecord } from '../../../src/control/approvals';

beforeAll(() => initStatementDisplay());

const SQL = "DELETE FROM playlist WHERE name = 'a\u202E' -- x\u200By\nAND playlist_id = 1";
const record: ApprovalRecord = {
  id: 'apr_1', sourceId: 'chinook', identityId: 'idn_1', identityName: 'nu43', keyId: 'k', requestId: 'req_1', sql: SQL, params: ['p\u202Eq'],
  classification: {}, state: 'pending', createdAt: '2026-12-06T21:00:00.000Z', expiresAt: '2026-12-07T21:00:00.000Z', decidedBy: null, decidedAt: null,
  executedAt: null, outcome: null, failure: null, requeuedFrom: null, claimAttributes: null,
};
const review = { approval: record, estimate: 1, plan: null, destructive: true } as unknown as ApprovalReview;
const RAW = /[\u202E\u200B]/u;

test('approval show: the statement, its comment and the parameters show ⟨U+202E⟩ and ⟨U+200B⟩, never the raw characters', () => {
  const text = approvalShowText(review);
  // Before: the YAML `sql:` value carried U+202E and U+200B raw.
  expect(RAW.test(text)).toBe(false);
  expect(text).toContain("sql: |-\n  DELETE FROM playlist WHERE name = 'a⟨U+202E⟩' -- x⟨U+200B⟩y\n  AND playlist_id = 1");
  expect(text).toContain('  - p⟨U+202E⟩q');
  expect(text).toContain('  -- x⟨U+200B⟩y');
});

test('the approve prompt and approval list show the same escapes, parameters included', () => {
  const prompt = reviewText(review, { statement: true });
  expect(RAW.test(prompt)).toBe(false);
  expect(prompt).toContain("statement: DELETE FROM playlist WHERE name = 'a⟨U+202E⟩' AND playlist_id = 1");
  expect(prompt).toContain('parameters: ["p⟨U+202E⟩q"]');
  const list = approvalListTable([{ ...record, requesterProblem: null }], true);
  expect(RAW.test(list)).toBe(false);
  expect(list).toContain('["p⟨U+202E⟩q"]');
});

test('right-to-left letters (rt48a K7, terminals): show, the approve prompt and list say so; none without them', () => {
  const rtl = { ...review, approval: { ...record, sql: "SELECT 'א' || 777 || 12 || 'ב'", params: [] } } as unknown as ApprovalReview;
  const inParams = { ...review, approval: { ...record, sql: 'INSERT INTO t VALUES ($1, 99999, 5)', params: ['مرحبا'] } } as unknown as ApprovalReview;
  const NOTE = 'note: right-to-left letters in the statement or its parameters: a terminal or chat client that lays out bidirectional text may draw the digits and punctuation between them out of order; check the values with --json (exact) or in the console';
  for (const r of [rtl, inParams]) {
    expect(reviewText(r, { statement: true }).split('\n')).toContain(NOTE);
    expect(approvalShowText(r).split('\n')).toContain(NOTE);
    expect(approvalListTable([{ ...r.approval, requesterProblem: null }], true)).toContain('right-to-left text (approval show)');
  }
  expect(reviewText(review, { statement: true })).not.toContain('right-to-left');
  expect(approvalListTable([{ ...record, requesterProblem: null }], true)).not.toContain('right-to-left');
});
