/**
 * `interlock audit verify`'s second line (src/cli/audit.ts unkeyedLine; task nu48fix item 3): on a trail
 * holding keyed batches, what the batches that are not keyed are, naming only the kinds present.
 */
import { unkeyedLine } from '../../../src/cli/audit';

const keyed = (batches: number) => ({ batches, authenticated: batches, unauthenticated: 0, fault: null, keyedSince: null, keyIdsGiven: [] });

test('every kind present, one kind, and nothing without keyed or unkeyed batches', () => {
  expect(unkeyedLine({ keyed: keyed(28), unkeyed: { approvals: 12, config: 3, calls: 2 } })).toBe(
    '\n17 unkeyed batch(es), chained but not keyed: 12 of approvals and sign-ins, 3 of configuration changes, 2 of tool calls written without the audit key (docs/operators.md "The audit key")',
  );
  expect(unkeyedLine({ keyed: keyed(1), unkeyed: { approvals: 0, config: 5, calls: 0 } })).toBe('\n5 unkeyed batch(es), chained but not keyed: 5 of configuration changes, as expected: only tool calls\' batches are keyed (docs/operators.md "The audit key")');
  expect(unkeyedLine({ keyed: keyed(0), unkeyed: { approvals: 4, config: 1, calls: 9 } })).toBe('');
  expect(unkeyedLine({ keyed: keyed(3), unkeyed: { approvals: 0, config: 0, calls: 0 } })).toBe('');
});
