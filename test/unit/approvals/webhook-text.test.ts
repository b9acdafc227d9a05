/**
 * The chat text of a queued write (src/approvals/webhooks.ts webhookText; red team rt48a K7 in chat
 * clients): a statement holding right-to-left letters carries a note that a chat client may draw the
 * digits between them out of order; one without carries none.
 */
import { webhookText, type WebhookApproval } from '../../../src/approvals/webhooks';
import { initStatementDisplay } from '../../../src/approvals/statement';

beforeAll(() => initStatementDisplay());

const approval = (statement: string): WebhookApproval =>
  ({ id: 'apr_1', state: 'pending', source_id: 'chinook', identity: 'agent', operator: null, row_count: null, error_code: null, reason: null, statement }) as unknown as WebhookApproval;

test('right-to-left letters in a queued statement are noted; none otherwise', () => {
  expect(webhookText('approval.queued', 'queued', approval("INSERT INTO t VALUES ('א' || 777 || 12 || 'ב')"))).toBe(
    "A write by agent on chinook is waiting for approval (apr_1): ```INSERT INTO t VALUES ('א' || 777 || 12 || 'ב')``` (right-to-left letters in it: a chat client may draw the digits between them out of order; check it in the console)",
  );
  expect(webhookText('approval.queued', 'queued', approval('INSERT INTO t VALUES (1)'))).toBe('A write by agent on chinook is waiting for approval (apr_1): ```INSERT INTO t VALUES (1)```');
});
