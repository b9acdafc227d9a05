/**
 * Pipeline step 8 builds the answer's row objects: masks by column position, a later duplicate name
 * wins, a column named __proto__ is an own key (never the prototype), and the rows are plain objects
 * in V8's fast layout (issue 10: a prototype-less dictionary object took about 4× the memory per row).
 */
import { redactRows } from '../../../src/pipeline/08-redact';
import type { PolicyRestrictions } from '../../../src/pipeline/04-policy';
import type { SqlAnalysis } from '../../../src/sql/analyze';

const analysis = {} as Extract<SqlAnalysis, { ok: true }>;
const noMasks: PolicyRestrictions = { maxRows: null, masks: [], redaction: null, fingerprint: '' };

describe('redactRows', () => {
  test('a column named __proto__ is an own key and pollutes nothing; a later duplicate name wins', () => {
    const r = redactRows({ fields: [{ name: 'a' }, { name: 'a' }, { name: '__proto__' }, { name: 'constructor' }], rowsArray: [[1, 2, { polluted: true }, 'c']], truncated: false }, analysis, noMasks, 's');
    if (!r.ok) throw new Error('refused');
    const row = r.rows[0];
    expect(Object.getPrototypeOf(row)).toBe(Object.prototype);
    expect(Object.keys(row)).toEqual(['a', '__proto__', 'constructor']);
    expect(Object.getOwnPropertyDescriptor(row, '__proto__')).toEqual({ value: { polluted: true }, enumerable: true, writable: true, configurable: true });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.stringify(r.rows)).toBe('[{"a":2,"__proto__":{"polluted":true},"constructor":"c"}]');
    expect(r.maskedColumns).toEqual([]);
  });

  test('masks apply by column position, __proto__ included', () => {
    const restrictions: PolicyRestrictions = {
      ...noMasks,
      redaction: {
        ok: true,
        columns: [
          { index: 0, name: 'id', method: null },
          { index: 1, name: '__proto__', method: 'null' },
          { index: 2, name: 'email', method: 'full' },
        ],
      },
    };
    const r = redactRows({ fields: [{ name: 'id' }, { name: '__proto__' }, { name: 'email' }], rowsArray: [[7, 'secret', 'a@b.c']], truncated: false }, analysis, restrictions, 's');
    if (!r.ok) throw new Error('refused');
    expect(r.maskedColumns).toEqual(['__proto__', 'email']);
    expect(Object.getPrototypeOf(r.rows[0])).toBe(Object.prototype);
    expect(JSON.parse(JSON.stringify(r.rows[0]))).toEqual({ id: 7, ['__proto__']: null, email: expect.not.stringContaining('a@b.c') });
    expect(r.rows[0].email).not.toBe('a@b.c');
  });

  test('rows of one result share one fast object layout (not hash dictionaries)', () => {
    const names = ['track_id', 'name', 'album_id', 'milliseconds', 'unit_price', 'copy'];
    const r = redactRows({ fields: names.map((name) => ({ name })), rowsArray: Array.from({ length: 100 }, (_, i) => [i, `t${i}`, 1, 2, '0.99', 3]), truncated: false }, analysis, noMasks, 's');
    if (!r.ok) throw new Error('refused');
    // %HasFastProperties needs --allow-natives-syntax; the V8 heap statistics are what it costs:
    // dictionary-mode rows took ≈ 490 bytes each, fast ones ≈ 110 (6 columns, 64-bit, no pointer compression).
    const v8 = require('node:v8') as typeof import('node:v8');
    v8.setFlagsFromString('--allow-natives-syntax');
    const hasFast = new Function('o', 'return %HasFastProperties(o)') as (o: object) => boolean;
    v8.setFlagsFromString('--no-allow-natives-syntax');
    expect(r.rows.every((row) => hasFast(row))).toBe(true);
    expect(hasFast(Object.create(null) as object)).toBe(false); // the probe can tell the two apart
  });
});
