/**
 * normalizeAuditRow's event time (src/audit/event-text.ts storableTime): h28e reads an already
 * canonical `YYYY-MM-DDTHH:MM:SS.mmmZ` character by character instead of with a regex match per
 * event. The stored time must be exactly what the regex form gave, for every input (property test
 * against the former function, below), since it is hashed into the audit chain.
 */
import fc from 'fast-check';
import { normalizeAuditRow } from '../../../src/audit/event-text';
import type { AuditRowInput } from '../../../src/audit/types';
import { BASE_AUDIT_ROW } from '../../helpers/audit-events';

const NOW = new Date('2026-12-06T12:00:00.000Z');
const MIN_TIME = -62135596800000;
const MAX_TIME = 253402300799999;
const CANONICAL_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{3}Z$/;

/** storableTime before h28e (its regex form). */
function formerStorableTime(t: string | null | undefined): string {
  const m = typeof t === 'string' ? CANONICAL_TIME.exec(t) : null;
  if (m) {
    const y = Number(m[1]);
    const mo = Number(m[2]);
    const d = Number(m[3]);
    const ok = !(y < 1 || mo < 1 || mo > 12 || d < 1 || Number(m[4]) > 23 || Number(m[5]) > 59 || Number(m[6]) > 59);
    const days = mo === 2 ? (y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0) ? 29 : 28) : mo === 4 || mo === 6 || mo === 9 || mo === 11 ? 30 : 31;
    if (ok && d <= days) return t!;
  }
  if (t !== null && t !== undefined) {
    const ms = new Date(t).getTime();
    if (ms >= MIN_TIME && ms <= MAX_TIME) return new Date(t).toISOString();
  }
  return NOW.toISOString();
}

const timeOf = (t: string | null | undefined) => normalizeAuditRow({ ...BASE_AUDIT_ROW, time: t } as AuditRowInput, () => NOW).time;

test('edge cases: the stored time is the former one', () => {
  const cases = [
    '2026-12-06T18:00:00.123Z', '0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z', '0000-01-01T00:00:00.000Z',
    '2024-02-29T00:00:00.000Z', '2023-02-29T00:00:00.000Z', '1900-02-29T00:00:00.000Z', '2000-02-29T00:00:00.000Z',
    '2026-04-31T00:00:00.000Z', '2026-12-06T24:00:00.000Z', '2026-12-06T23:60:00.000Z', '2026-12-06T23:59:60.000Z',
    '2026-13-01T00:00:00.000Z', '2026-00-10T00:00:00.000Z', '2026-12-00T00:00:00.000Z', '2026-12-06T18:00:00.123Z\n',
    ' 2026-12-06T18:00:00.123Z', '2026-12-06t18:00:00.123Z', '2026-12-06T18:00:00.123z', '2026-12-06T18:00:00,123Z',
    '2026-12-06T18:00:00.12Z', '2026-12-06T18:00:00.1234Z', '2026-1a-06T18:00:00.123Z', '２０２６-12-06T18:00:00.123Z',
    '2026-12-06T18:00:00.123+00:00', '2026-12-06', '', 'not a time', '+012026-12-06T18:00:00.123Z', null, undefined,
  ];
  for (const t of cases) expect([t, timeOf(t)]).toEqual([t, formerStorableTime(t)]);
});

test('property: any string near the canonical form is stored as before', () => {
  const digit = fc.constantFrom(...'0123456789');
  const near = fc
    .tuple(fc.array(digit, { minLength: 24, maxLength: 24 }), fc.array(fc.tuple(fc.nat(25), fc.constantFrom(...'-T:.Z0129 a/\u0660')), { maxLength: 3 }), fc.boolean())
    .map(([ds, edits, cut]) => {
      const chars = ds.slice();
      for (const [i, c] of [[4, '-'], [7, '-'], [10, 'T'], [13, ':'], [16, ':'], [19, '.'], [23, 'Z']] as const) chars[i] = c;
      for (const [i, c] of edits) chars[i] = c;
      const s = chars.join('');
      return cut ? s.slice(0, 23) : s;
    });
  fc.assert(fc.property(fc.oneof(near, fc.string(), fc.integer({ min: MIN_TIME, max: MAX_TIME }).map((ms) => new Date(ms).toISOString())), (t) => {
    expect(timeOf(t)).toBe(formerStorableTime(t));
  }), { numRuns: 5000 });
});
