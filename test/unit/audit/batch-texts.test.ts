/**
 * The chain lane's batch texts (src/audit/chain.ts batchTexts, issue 28 item 3): each row's details
 * serialised once for both the hashed text and the stored column, byte for byte what eventsText and
 * eventColumns give separately; eventColumns' one-pass form gives exactly the column-by-column array
 * literals it replaced (the reference below).
 */
import { arrayLiteral, batchTexts, eventColumns } from '../../../src/audit/chain';
import { canonicalAuditJson } from '../../../src/audit/event-text';
import { eventsText, normalizeAuditRow } from '../../../src/audit/event-text';
import type { AuditRowInput } from '../../../src/audit/types';
import { BASE_AUDIT_ROW } from '../../helpers/audit-events';

const base: AuditRowInput = { ...BASE_AUDIT_ROW, relations: ['public.track', 'public."odd ""name"""'] };

const rows = [
  base,
  { ...base, request_id: 'req_2', details: { z: 1, a: { y: [1, null, 'x'], b: 'quote " and \\ backslash' }, cached: false, masked: ['email'] } },
  { ...base, request_id: null, relations: null, row_count: null, duration_ms: null, details: { 'ü': 'ünïcødé ✓', n: -0, big: 1e21, small: 1.5e-7 } },
  { ...base, request_id: 'a"b\\c', key_id: null, reason_code: 'x"', operator: 'op\\', approval_id: 'apr_1', row_count: 12345678901, duration_ms: 1e-7, relations: [], details: { s: '"\\' } },
].map((r) => normalizeAuditRow(r as AuditRowInput));

/** The columns as the lane built them before: one arrayLiteral per column over a mapped array. */
function referenceColumns(rs: AuditRowInput[]): string[] {
  const col = (f: (r: AuditRowInput) => string | null) => arrayLiteral(rs.map(f));
  const num = (v: number | null) => (v === null ? null : String(v));
  return [
    col((r) => r.kind), col((r) => r.time), col((r) => r.request_id), col((r) => r.identity_id), col((r) => r.key_id),
    col((r) => r.tool), col((r) => r.canonical_tool), col((r) => r.dialect), col((r) => r.protocol_version), col((r) => r.decision),
    col((r) => r.reason_code), col((r) => r.source_id), col((r) => r.action), col((r) => r.fingerprint),
    col((r) => (r.relations === null ? null : arrayLiteral(r.relations))), col((r) => num(r.row_count)), col((r) => num(r.duration_ms)),
    col((r) => r.approval_id), col((r) => r.operator), col((r) => canonicalAuditJson(r.details)),
  ];
}

test('eventColumns gives the column-by-column literals, escapes and NULLs included', () => {
  for (const batch of [rows.slice(0, 1), rows.slice(2), rows, []]) expect(eventColumns(batch)).toEqual(referenceColumns(batch));
  expect(eventColumns(rows.slice(3))[2]).toBe('{"a\\"b\\\\c"}');
  expect(eventColumns(rows.slice(2, 3))[2]).toBe('{NULL}');
});

test('batchTexts gives exactly eventsText and eventColumns, for one row and several', () => {
  for (const batch of [rows.slice(0, 1), rows, []]) {
    expect(batchTexts(batch)).toEqual({ text: eventsText(batch), columns: eventColumns(batch) });
  }
  expect(batchTexts(rows).columns).toHaveLength(20);
  expect(batchTexts(rows).columns[19]).toBe(eventColumns(rows)[19]);
});

test('normalizeAuditRow: a time already in canonical form is kept; every other time is what the Date round trip gives', () => {
  const fixed = new Date('2026-12-06T08:00:00.000Z');
  const timeOf = (time: unknown) => normalizeAuditRow({ ...base, time } as AuditRowInput, () => fixed).time;
  const viaDate = (t: string) => {
    const d = new Date(t);
    const ms = d.getTime();
    return ms >= -62135596800000 && ms <= 253402300799999 ? d.toISOString() : fixed.toISOString();
  };
  const times = [
    '2026-12-06T07:59:59.123Z', '2024-02-29T23:59:59.999Z', '2000-02-29T00:00:00.000Z', '0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z',
    // rolled over by Date, or refused by it: never kept as written
    '2026-02-29T00:00:00.000Z', '1900-02-29T00:00:00.000Z', '2026-04-31T00:00:00.000Z', '2026-12-31T24:00:00.000Z', '2026-12-31T23:59:60.000Z',
    '0000-01-01T00:00:00.000Z', '2026-13-01T00:00:00.000Z', '2026-00-10T00:00:00.000Z', '2026-12-06T07:59:59Z', '2026-12-06 07:59:59.123Z', 'not a time',
  ];
  for (const t of times) expect([t, timeOf(t)]).toEqual([t, viaDate(t)]);
  expect(timeOf('2026-02-29T00:00:00.000Z')).toBe('2026-03-01T00:00:00.000Z');
  expect(timeOf(null)).toBe(fixed.toISOString());
});

test('normalizeAuditRow details: secrets left out at every level, a cycle marked, a shared object copied twice', () => {
  const shared = { a: 1 };
  const loop: Record<string, unknown> = { name: 'x' };
  loop.self = loop;
  const d = normalizeAuditRow({ ...base, details: { token: 't', nested: { password: 'p', keep: 'k' }, loop, left: shared, right: shared } } as AuditRowInput).details;
  expect(JSON.parse(canonicalAuditJson(d))).toEqual({ nested: { keep: 'k' }, loop: { name: 'x', self: '[cycle]' }, left: { a: 1 }, right: { a: 1 } });
});
