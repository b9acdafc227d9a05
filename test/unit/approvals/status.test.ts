/**
 * The agent-safe approval status (src/approvals/status.ts; spec/mcp-tools-v1.json $defs ApprovalStatus):
 * a failed write's message says once that nothing was changed, whatever the failure code.
 */
import errors from '../../../spec/errors-v1.json';
import { agentApprovalView } from '../../../src/approvals/status';
import type { ApprovalRecord } from '../../../src/control/approvals';

const codes = (errors as unknown as { approvalFailures: Array<{ code: string; message: string }> }).approvalFailures;

function failed(code: string): ApprovalRecord {
  return {
    id: 'apr_0123456789abcdef01234567', sourceId: 'src_demo', state: 'failed', createdAt: '2026-12-03T10:00:00.000Z',
    expiresAt: '2026-12-04T10:00:00.000Z', decidedAt: '2026-12-03T10:05:00.000Z', executedAt: null,
    outcome: { error_code: code },
  } as unknown as ApprovalRecord;
}

describe('agentApprovalView for a failed write', () => {
  it.each(codes.map((c) => [c.code, c.message]))('%s: one sentence from the state, then the code message, no repetition', (code, message) => {
    const v = agentApprovalView({ approval: failed(code), rejectionReason: null });
    expect(v.state).toBe('failed');
    expect(v.outcome).toEqual({ error_code: code, message });
    expect(v.message).toBe(`An operator approved it but it did not complete. ${message}`);
    expect((v.message.match(/nothing was changed/gi) ?? []).length).toBeLessThanOrEqual(1);
  });

  it('an unlisted stored code is reported as execution_failed', () => {
    const v = agentApprovalView({ approval: failed('XX000'), rejectionReason: null });
    expect(v.outcome).toEqual({ error_code: 'execution_failed', message: codes.find((c) => c.code === 'execution_failed')!.message });
  });
});

describe('agentApprovalView for a pending write its requester can no longer have run (task nu47fix item 1)', () => {
  const pending = { ...failed('x'), state: 'pending', decidedAt: null, outcome: null } as unknown as ApprovalRecord;
  it('identity_disabled: cannot_run and a message that it runs only if the identity is enabled again', () => {
    expect(agentApprovalView({ approval: pending, rejectionReason: null, requesterProblem: 'identity_disabled' })).toEqual({
      approval_id: 'apr_0123456789abcdef01234567', source_id: 'src_demo', state: 'pending', requested_at: '2026-12-03T10:00:00.000Z', expires_at: '2026-12-04T10:00:00.000Z',
      decided_at: null, executed_at: null, outcome: null, cannot_run: 'identity_disabled',
      message: 'It cannot run as queued: your identity is disabled, so approving it would not run it (it would end failed, identity_disabled). Nothing has run. It can run only if an operator enables your identity before deciding it.',
    });
  });
  it('a decided write never carries cannot_run, whatever the lookup says', () => {
    const v = agentApprovalView({ approval: failed('key_revoked'), rejectionReason: null, requesterProblem: 'key_revoked' });
    expect(v).not.toHaveProperty('cannot_run');
    expect(v.outcome).toEqual({ error_code: 'key_revoked', message: codes.find((c) => c.code === 'key_revoked')!.message });
  });
  it('no problem: the waiting message', () => {
    expect(agentApprovalView({ approval: pending, rejectionReason: null, requesterProblem: null }).message).toBe('Waiting for an operator to approve or reject it. Nothing has run yet; do not queue it again.');
  });
});
