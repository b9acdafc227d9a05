/**
 * Redaction planning (pure), masking and row redaction; plus a property test that a masked column
 * is masked wherever its values flow (aliases, expressions, aggregates, sub-selects, CTEs, UNION,
 * LATERAL, row and JSON constructors), or the plan is refused for opaque outputs when asked.
 */
import fc from 'fast-check';
import { analyzeSql, initSqlParser, OutputColumn } from '../../../src/sql/analyze';
import {
  applyMask,
  applyRedaction,
  FULL_MASK,
  MaskMethod,
  MaskRule,
  planRedaction,
  RedactionMismatchError,
  RedactionPlan,
  strongerMethod,
} from '../../../src/sql/redaction';
import { CATALOG, ok } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const RUNS = Number(process.env.SQL_FC_RUNS ?? 60) * 5;
const EMAIL = { schema: 'public', table: 'customer', column: 'email' };
const rule = (method: MaskMethod, column = EMAIL): MaskRule => ({ column, method });
const methods = (p: RedactionPlan): Array<MaskMethod | null> | string => (p.ok ? p.columns.map((c) => c.method) : p.code);

describe('planRedaction', () => {
  const out = (sql: string): OutputColumn[] => ok(sql).outputs;

  test('passthrough outputs get the rule’s method; derived ones get full (or null for null rules)', () => {
    const o = out("SELECT email AS contact, upper(email), email::text, first_name, 1 FROM customer");
    expect(methods(planRedaction(o, [rule('partial')]))).toEqual(['partial', 'full', 'full', null, null]);
    expect(methods(planRedaction(o, [rule('hash')]))).toEqual(['hash', 'full', 'full', null, null]);
    expect(methods(planRedaction(o, [rule('null')]))).toEqual(['null', 'null', 'null', null, null]);
    expect(methods(planRedaction(o, [rule('full')]))).toEqual(['full', 'full', 'full', null, null]);
  });

  test('opaque outputs over a relation with a masked column: full by default, refusal on request', () => {
    const o = out('SELECT c, row_to_json(c), c.first_name FROM customer c');
    expect(methods(planRedaction(o, [rule('partial')]))).toEqual(['full', 'full', null]);
    expect(methods(planRedaction(o, [rule('null')]))).toEqual(['null', 'null', null]);
    const refused = planRedaction(o, [rule('partial')], { onOpaque: 'refuse' });
    expect(refused).toEqual({
      ok: false,
      code: 'redaction_unprovable',
      message: 'output column "c" embeds whole rows of public.customer, which has masked columns',
    });
    // a rule on another relation does not touch them
    expect(methods(planRedaction(o, [rule('full', { schema: 'public', table: 'employee', column: 'email' })], { onOpaque: 'refuse' }))).toEqual([null, null, null]);
  });

  test('several sources or rules: the strongest method wins', () => {
    const o = out('SELECT coalesce(email, phone), email FROM customer');
    const phone = { schema: 'public', table: 'customer', column: 'phone' };
    expect(methods(planRedaction(o, [rule('partial'), rule('null', phone)]))).toEqual(['null', 'partial']);
    expect(methods(planRedaction(o, [rule('partial'), rule('hash')]))).toEqual(['full', 'hash']);
    expect(strongerMethod('partial', 'hash')).toBe('hash');
    expect(strongerMethod('full', 'hash')).toBe('full');
    expect(strongerMethod('full', 'null')).toBe('null');
    expect(strongerMethod(null, 'partial')).toBe('partial');
    expect(strongerMethod(null, null)).toBeNull();
  });

  test('UNION of two masked columns is not passthrough (full); of the same column it is', () => {
    expect(methods(planRedaction(out('SELECT email FROM customer UNION SELECT email FROM employee'), [rule('partial')]))).toEqual(['full']);
    expect(methods(planRedaction(out('SELECT email FROM customer UNION SELECT email FROM customer'), [rule('partial')]))).toEqual(['partial']);
  });

  test('columns keep index and name', () => {
    expect(planRedaction(out('SELECT email, 1 AS one FROM customer'), [rule('hash')])).toEqual({
      ok: true,
      columns: [
        { index: 0, name: 'email', method: 'hash' },
        { index: 1, name: 'one', method: null },
      ],
    });
  });

  test('filter-only use is not an output (policy uses filterSources for that)', () => {
    const r = ok("SELECT first_name FROM customer WHERE email LIKE 'a%'");
    expect(methods(planRedaction(r.outputs, [rule('full')]))).toEqual([null]);
    expect(r.filterSources).toEqual([EMAIL]);
  });
});

describe('applyMask', () => {
  test('full hides every value, including type and nullness', () => {
    for (const v of ['secret', 42, null, undefined, { a: 1 }, true, new Date(0), Buffer.from('x')]) expect(applyMask(v, 'full')).toBe(FULL_MASK);
  });

  test('null always gives null', () => {
    expect(applyMask('x', 'null')).toBeNull();
    expect(applyMask(7, 'null')).toBeNull();
  });

  test('partial keeps a short suffix and never more than 25% of the characters', () => {
    expect(applyMask('john.doe@example.com', 'partial')).toBe('j***@***.com');
    expect(applyMask('a@b.io', 'partial')).toBe('***o');
    expect(applyMask('4111111111111111', 'partial')).toBe('***1111');
    expect(applyMask('+55 (12) 3923-5555', 'partial')).toBe('***5555');
    expect(applyMask(12345678, 'partial')).toBe('***78');
    expect(applyMask('abc', 'partial')).toBe(FULL_MASK);
    expect(applyMask('', 'partial')).toBe(FULL_MASK);
    expect(applyMask(null, 'partial')).toBeNull();
    expect(applyMask({ k: 'v' }, 'partial')).toBe(FULL_MASK);
    expect(applyMask('😀😀😀😀😀😀😀😀', 'partial')).toBe('***😀😀');
  });

  test('property: partial reveals at most 25% of a string, as a suffix (or first char + TLD of an email)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'grapheme', maxLength: 80 }), fc.emailAddress()), (s) => {
        const m = applyMask(s, 'partial') as string;
        const kept = Array.from(m.replace(/\*\*\*/g, '').replace('@', '')).length;
        expect(kept).toBeLessThanOrEqual(Math.floor(Array.from(s).length / 4) + (s.includes('@') && m.includes('@') ? 1 : 0));
        if (!m.includes('@')) expect(s.endsWith(m.slice(3)) || m === FULL_MASK).toBe(true);
      }),
      { numRuns: RUNS },
    );
  });

  test('hash is a keyed, stable, short token; without a secret it falls back to full', () => {
    const a = applyMask('jane@example.com', 'hash', 'k1');
    expect(a).toMatch(/^sha256:[0-9a-f]{16}$/);
    expect(applyMask('jane@example.com', 'hash', 'k1')).toBe(a);
    expect(applyMask('jane@example.com', 'hash', 'k2')).not.toBe(a);
    expect(applyMask('jane@example.org', 'hash', 'k1')).not.toBe(a);
    expect(applyMask(42, 'hash', 'k1')).toBe(applyMask('42', 'hash', 'k1'));
    expect(applyMask(null, 'hash', 'k1')).toBeNull();
    expect(applyMask('jane@example.com', 'hash')).toBe(FULL_MASK);
    expect(applyMask('jane@example.com', 'hash', '')).toBe(FULL_MASK);
  });

  test('an unknown method fails closed', () => {
    expect(applyMask('x', 'bogus' as MaskMethod)).toBe(FULL_MASK);
  });
});

describe('applyRedaction', () => {
  let plan: RedactionPlan;
  beforeAll(() => {
    plan = planRedaction(ok('SELECT email, first_name, email AS e2 FROM customer').outputs, [rule('partial')]);
  });

  test('masks object rows by field name, leaves the input untouched', () => {
    const rows = [{ email: 'john.doe@example.com', first_name: 'John', e2: 'x@y.example' }];
    const copy = JSON.parse(JSON.stringify(rows));
    expect(applyRedaction(rows, ['email', 'first_name', 'e2'], plan)).toEqual([{ email: 'j***@***.com', first_name: 'John', e2: '***le' }]);
    expect(rows).toEqual(copy);
  });

  test('masks array rows by position', () => {
    expect(applyRedaction([['john.doe@example.com', 'John', 'abcdefgh']], ['email', 'first_name', 'e2'], plan)).toEqual([['j***@***.com', 'John', '***gh']]);
  });

  test('duplicate field names in object rows get the strongest method of the same-named columns', () => {
    const p = planRedaction(ok('SELECT email, upper(email) AS email, first_name AS email FROM customer').outputs, [rule('partial')]);
    expect(methods(p)).toEqual(['partial', 'full', null]);
    expect(applyRedaction([{ email: 'JOHN@X.COM' }], ['email', 'email', 'email'], p)).toEqual([{ email: FULL_MASK }]);
  });

  test('hash uses the secret', () => {
    const p = planRedaction(ok('SELECT email FROM customer').outputs, [rule('hash')]);
    const [row] = applyRedaction([{ email: 'a@b.c' }], ['email'], p, { secret: 's' });
    expect(row.email).toBe(applyMask('a@b.c', 'hash', 's'));
  });

  test('a result that does not match the analysed shape is refused (fail closed)', () => {
    expect(() => applyRedaction([{ email: 'x' }], ['email', 'first_name'], plan)).toThrow(RedactionMismatchError);
    expect(() => applyRedaction([{ email: 'x' }], ['email', 'first_name', 'e2', 'ssn'], plan)).toThrow(RedactionMismatchError);
    expect(() => applyRedaction([{ email: 'x' }], ['first_name', 'email', 'e2'], plan)).toThrow(RedactionMismatchError);
    expect(() => applyRedaction([], ['a'], { ok: false, code: 'redaction_unprovable', message: 'm' })).toThrow('refused');
  });

  test('nothing masked: rows come back as an equal copy', () => {
    const p = planRedaction(ok('SELECT first_name FROM customer').outputs, [rule('full')]);
    const rows = [{ first_name: 'A' }];
    const outRows = applyRedaction(rows, ['first_name'], p);
    expect(outRows).toEqual(rows);
    expect(outRows).not.toBe(rows);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: a masked column is masked wherever it flows.
// ---------------------------------------------------------------------------------------------
interface Carrier {
  e: string;
  pure?: boolean; // the output is customer.email unchanged
  opaque?: boolean; // the output embeds whole customer rows
}

const CARRIERS: Carrier[] = [
  { e: 'c.email', pure: true },
  { e: '(c).email', pure: true },
  { e: 'c.email COLLATE "C"', pure: true },
  { e: '(SELECT x.email FROM customer x LIMIT 1)', pure: true },
  { e: 'upper(c.email)' },
  { e: "c.email || ''" },
  { e: 'c.email::text' },
  { e: 'left(c.email, 3)' },
  { e: 'md5(c.email)' },
  { e: "coalesce(c.email, 'x')" },
  { e: 'CASE WHEN c.country IS NULL THEN c.email END' },
  { e: "CASE WHEN c.email LIKE 'a%' THEN 1 ELSE 0 END" },
  { e: "c.email IN ('a@b.c')" },
  { e: 'max(c.email)' },
  { e: 'count(c.email)' },
  { e: "string_agg(c.email, ',')" },
  { e: 'array_agg(c.email)' },
  { e: 'ROW(c.email, 1)' },
  { e: 'ARRAY[c.email]' },
  { e: "jsonb_build_object('k', c.email)" },
  { e: "json_build_array(c.first_name, c.email)" },
  { e: '(SELECT max(x.email) FROM customer x)' },
  { e: 'ARRAY(SELECT x.email FROM customer x)' },
  { e: 'row_number() OVER (ORDER BY c.email)' },
  { e: 'c', opaque: true },
  { e: 'row_to_json(c)', opaque: true },
  { e: 'to_jsonb(c.*)', opaque: true },
  { e: 'json_agg(c)', opaque: true },
  { e: '(SELECT x FROM customer x LIMIT 1)', opaque: true },
  { e: '(SELECT row_to_json(s) FROM (SELECT email FROM customer) s LIMIT 1)', opaque: true },
];
const DECOYS = ['1', "'x'", 'c.first_name', 'now()', 'c.customer_id + 1', '(SELECT count(*) FROM customer)'];
const WRAPPERS = ['sub', 'cte', 'star', 'expr', 'union-null', 'union-self', 'lateral', 'distinct'] as const;
type Wrapper = (typeof WRAPPERS)[number];

interface Built {
  sql: string;
  width: number;
  carriers: Map<number, Carrier & { pure: boolean }>;
}

function build(cols: Array<{ carrier?: Carrier; decoy?: string }>, wrappers: Wrapper[]): Built {
  const width = cols.length;
  const names = cols.map((_, i) => `o${i}`);
  const carriers = new Map<number, Carrier & { pure: boolean }>();
  cols.forEach((c, i) => c.carrier && carriers.set(i, { ...c.carrier, pure: !!c.carrier.pure }));
  let sql = `SELECT ${cols.map((c, i) => `${c.carrier ? c.carrier.e : c.decoy} AS o${i}`).join(', ')} FROM customer c`;
  wrappers.forEach((w, k) => {
    const list = names.map((n) => `s.${n}`).join(', ');
    switch (w) {
      case 'sub':
        sql = `SELECT ${list} FROM (${sql}) s`;
        break;
      case 'cte':
        sql = `WITH w${k} AS (${sql}) SELECT ${names.join(', ')} FROM w${k}`;
        break;
      case 'star':
        sql = `SELECT * FROM (${sql}) s`;
        break;
      case 'expr':
        sql = `SELECT ${names.map((n, i) => (carriers.has(i) ? `lower(s.${n}::text) AS ${n}` : `s.${n}`)).join(', ')} FROM (${sql}) s`;
        for (const c of carriers.values()) c.pure = false;
        break;
      case 'union-null':
        sql = `(${sql}) UNION ALL (SELECT ${names.map(() => 'NULL').join(', ')})`;
        for (const c of carriers.values()) c.pure = false;
        break;
      case 'union-self':
        sql = `(${sql}) UNION (${sql})`;
        break;
      case 'lateral':
        sql = `SELECT ${list} FROM customer z, LATERAL (${sql}) s`;
        break;
      case 'distinct':
        sql = `SELECT DISTINCT ${list} FROM (${sql}) s ORDER BY 1`;
        break;
    }
  });
  return { sql, width, carriers };
}

const builtArb: fc.Arbitrary<Built> = fc
  .tuple(
    fc.array(fc.oneof(fc.record({ carrier: fc.constantFrom(...CARRIERS) }), fc.record({ decoy: fc.constantFrom(...DECOYS) })), { minLength: 1, maxLength: 4 }),
    fc.constantFrom(...CARRIERS),
    fc.array(fc.constantFrom(...WRAPPERS), { maxLength: 3 }),
  )
  .map(([cols, forced, wrappers]) => build(cols.some((c) => 'carrier' in c) ? cols : [...cols, { carrier: forced }], wrappers));

describe('property: a masked column is masked wherever it flows', () => {
  test.each(['partial', 'hash', 'full', 'null'] as const)('rule method %s', (m) => {
    fc.assert(
      fc.property(builtArb, (b) => {
        const r = analyzeSql(b.sql, CATALOG);
        if (!r.ok) throw new Error(`refused ${r.code} ${r.message}: ${b.sql}`);
        expect(r.outputs).toHaveLength(b.width);
        const rules = [rule(m), rule('full', { schema: 'public', table: 'employee', column: 'email' })];
        const plan = planRedaction(r.outputs, rules);
        if (!plan.ok) throw new Error('mask mode must not refuse');
        for (let i = 0; i < b.width; i++) {
          const c = b.carriers.get(i);
          const got = plan.columns[i].method;
          if (!c) {
            if (got !== null) throw new Error(`decoy ${i} masked (${got}): ${b.sql}`);
            continue;
          }
          const want = c.pure && !c.opaque ? m : m === 'null' ? 'null' : 'full';
          if (got !== want) throw new Error(`column ${i}: want ${want}, got ${got}: ${b.sql}`);
        }
        const strict = planRedaction(r.outputs, rules, { onOpaque: 'refuse' });
        const anyOpaque = [...b.carriers.values()].some((c) => c.opaque);
        expect(strict.ok).toBe(!anyOpaque);
        if (strict.ok) expect(strict).toEqual(plan);
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
  });
});
