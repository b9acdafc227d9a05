/**
 * The chain lane's batch texts (src/audit/chain.ts batchTexts, issue 28 item 3): each row's details
 * serialised once for both the hashed text and the stored column, byte for byte what eventsText and
 * eventColumns give separately.
 */
import { batchTexts, eventColumns } from '../../../src/audit/chain';
import { eventsText, normalizeAuditRow } from '../../../src/audit/event-text';
import type { AuditRowInput } from '../../../src/audit/types';
import { BASE_AUDIT_ROW } from '../../helpers/audit-events';

const base: AuditRowInput = { ...BASE_AUDIT_ROW, relations: ['public.track', 'public."odd ""name"""'] };

const rows = [
  base,
  { ...base, request_id: 'req_2', details: { z: 1, a: { y: [1, null, 'x'], b: 'quote " and \\ backslash' }, cached: false, masked: ['email'] } },
  { ...base, request_id: null, relations: null, row_count: null, duration_ms: null, details: { 'ü': 'ünïcødé ✓', n: -0, big: 1e21, small: 1.5e-7 } },
].map((r) => normalizeAuditRow(r as AuditRowInput));

test('batchTexts gives exactly eventsText and eventColumns, for one row and several', () => {
  for (const batch of [rows.slice(0, 1), rows, []]) {
    expect(batchTexts(batch)).toEqual({ text: eventsText(batch), columns: eventColumns(batch) });
  }
  expect(batchTexts(rows).columns).toHaveLength(20);
  expect(batchTexts(rows).columns[19]).toBe(eventColumns(rows)[19]);
});
