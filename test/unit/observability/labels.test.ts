/** Issue 10, Build 7: label values come only from closed sets (src/observability/labels.ts). */
import { closedLabel, dialectLabel, methodLabel, OTHER_LABEL, reasonLabel, statusLabel } from '../../../src/observability/labels';

test('methods of the protocol table keep their name; anything else is other', () => {
  for (const m of ['tools/call', 'tools/list', 'initialize', 'ping', 'server/discover', 'notifications/initialized', 'notifications/cancelled']) expect(methodLabel(m)).toBe(m);
  expect(methodLabel('-')).toBe('-');
  for (const m of ['notifications/x', 'TOOLS/CALL', 'resources/list', 'x'.repeat(65_536), '']) expect(methodLabel(m)).toBe(OTHER_LABEL);
});

test('reasons are codes of spec/errors-v1.json or other; dialects and statuses are bounded', () => {
  expect(reasonLabel(null)).toBe('');
  expect(reasonLabel('unknown_source')).toBe('unknown_source');
  expect(reasonLabel('tool_execution_failed')).toBe('tool_execution_failed');
  expect(reasonLabel('made_up_code')).toBe(OTHER_LABEL);
  expect([dialectLabel('modern'), dialectLabel('handshake'), dialectLabel('-'), dialectLabel('2099')]).toEqual(['modern', 'handshake', '-', OTHER_LABEL]);
  expect([statusLabel(202), statusLabel(99), statusLabel(600), statusLabel(2.5)]).toEqual(['202', OTHER_LABEL, OTHER_LABEL, OTHER_LABEL]);
  expect(closedLabel('chinook', new Set(['chinook']))).toBe('chinook');
  expect(closedLabel('nope', new Set(['chinook']))).toBe(OTHER_LABEL);
});
