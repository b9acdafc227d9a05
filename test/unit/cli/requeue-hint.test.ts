/** The operator's hint after an approved write failed (src/cli/approval.ts requeueHint). */
import { requeueHint } from '../../../src/cli/approval';

test('a row-rule violation or refusal is not sent back to the queue; a missing attribute names the fix; other causes requeue', () => {
  expect(requeueHint('row_rule_violation', 'apr_1')).toBe("(the write breaks the requester's row rules: a requeue fails the same way; the agent reads this outcome with interlock_approval_status)");
  expect(requeueHint('row_rule_unenforceable', 'apr_1')).toBe("(the write breaks the requester's row rules: a requeue fails the same way; the agent reads this outcome with interlock_approval_status)");
  expect(requeueHint('row_rule_attribute_missing', 'apr_2')).toBe('(the requester lacks an identity attribute its row rules need: set it (interlock identity attributes), then: interlock approval requeue apr_2)');
  expect(requeueHint('statement_failed', 'apr_3')).toBe('(fix the cause, then: interlock approval requeue apr_3)');
  expect(requeueHint(undefined, 'apr_4')).toBe('(fix the cause, then: interlock approval requeue apr_4)');
});

test('task hnu4b (a): a revoked or expired key cannot be requeued; the agent must ask again', () => {
  expect(requeueHint('key_revoked', 'apr_5')).toBe('(the API key that queued it is revoked: it cannot be requeued; the agent must send the write again with a valid key)');
  expect(requeueHint('key_expired', 'apr_6')).toBe('(the API key that queued it is expired: it cannot be requeued; the agent must send the write again with a valid key)');
  expect(requeueHint('identity_disabled', 'apr_7')).toBe('(fix the cause, then: interlock approval requeue apr_7)');
});
