/**
 * Differential property test of row rules (issue 27, "Must show"): random rules over `customer`
 * and random caller attributes are written twice — as InterLock row rules granted to an identity,
 * and as PostgreSQL row-level security policies (permissive, so OR; the attribute values written in
 * as constants) on a twin database queried as a per-identity role with SET ROLE. Random agent
 * queries must give the same multiset of rows through interlock_query as through the twin, or
 * InterLock must refuse. The oracle is PostgreSQL's own RLS, not InterLock's renderer.
 */
import fc from 'fast-check';
import pg from 'pg';
import { startRlsTwin, startRowFixture, type RlsTwin, type RowFixture } from '../../helpers/row-rules';
import type { ToolOutcome } from '../../../src/pipeline/types';
import type { SourceRole } from '../../../src/control/roles';

let fx: RowFixture;
let twin: RlsTwin;
let tc: pg.Client;
let twinRole: string;

beforeAll(async () => {
  fx = await startRowFixture();
  twin = await startRlsTwin('rows_twin', '', () => 'ALTER TABLE customer ENABLE ROW LEVEL SECURITY');
  tc = twin.client;
  twinRole = twin.role;
}, 60_000);

afterAll(async () => {
  await twin?.close();
  await fx?.close();
});

/** The caller's attributes. */
interface Attrs {
  employee_id: number;
  countries: string[];
  lc: string;
}

/** One atom of a rule: InterLock's text, and the oracle's text for given attributes. */
type Atom = { il: string; rls: (a: Attrs) => string };
const lit = (s: string) => `'${s.replace(/'/g, "''")}'`;

const atom: fc.Arbitrary<Atom> = fc.oneof(
  fc.constant<Atom>({ il: 'support_rep_id = identity.employee_id', rls: (a) => `support_rep_id = ${a.employee_id}` }),
  fc.constant<Atom>({ il: 'country = ANY(identity.countries)', rls: (a) => `country = ANY(ARRAY[${a.countries.map(lit).join(',')}]::text[])` }),
  fc.constant<Atom>({ il: 'lower(country) = identity.lc', rls: (a) => `lower(country) = ${lit(a.lc)}` }),
  fc.integer({ min: -20, max: 80 }).map((k): Atom => ({ il: `credit > ${k}`, rls: () => `credit > ${k}` })),
  fc.constantFrom('aa', 'bb').map((c): Atom => ({ il: `code = '${c}'`, rls: () => `code = '${c}'` })),
  fc.constant<Atom>({ il: 'support_rep_id IS NULL', rls: () => 'support_rep_id IS NULL' }),
  fc.uniqueArray(fc.integer({ min: 1, max: 60 }), { minLength: 1, maxLength: 4 }).map((ks): Atom => ({ il: `customer_id IN (${ks.join(', ')})`, rls: () => `customer_id IN (${ks.join(', ')})` })),
);

const predicate: fc.Arbitrary<Atom> = fc.oneof(
  { weight: 3, arbitrary: atom },
  { weight: 1, arbitrary: fc.tuple(atom, atom, fc.constantFrom('AND', 'OR')).map(([x, y, op]): Atom => ({ il: `(${x.il}) ${op} (${y.il})`, rls: (a) => `(${x.rls(a)}) ${op} (${y.rls(a)})` })) },
  { weight: 1, arbitrary: atom.map((x): Atom => ({ il: `NOT (${x.il})`, rls: (a) => `NOT (${x.rls(a)})` })) },
);

/** A rule: 1–3 allows on customer, each with a predicate or (rarely) none (every row). */
const rule = fc.array(fc.option(predicate, { freq: 8, nil: null }), { minLength: 1, maxLength: 3 });

const attrs: fc.Arbitrary<Attrs> = fc.record({
  employee_id: fc.integer({ min: 1, max: 7 }),
  countries: fc.subarray(['DE', 'US', 'JP', 'FR', 'XX']),
  lc: fc.constantFrom('de', 'us', 'jp', 'zz'),
});

const queries: Array<(k: number) => string> = [
  (k) => `SELECT customer_id, country FROM customer WHERE credit > ${k - 20}`,
  () => 'SELECT country, count(*)::int AS n, sum(credit)::text AS s FROM customer GROUP BY country',
  (k) => `SELECT c.customer_id, i.invoice_id FROM customer c JOIN invoice i ON i.customer_id = c.customer_id WHERE i.total > ${k % 50}`,
  () => "SELECT invoice_id FROM invoice i WHERE EXISTS (SELECT 1 FROM customer c WHERE c.customer_id = i.customer_id AND c.country = 'DE')",
  (k) => `SELECT customer_id FROM customer UNION ALL SELECT customer_id FROM customer WHERE support_rep_id = ${(k % 6) + 1}`,
  () => 'SELECT customer_id, rank() OVER (PARTITION BY country ORDER BY credit, customer_id)::int AS r FROM customer',
  (k) => `WITH x AS (SELECT * FROM customer WHERE credit < ${k}) SELECT count(*)::int AS n FROM x`,
  () => 'SELECT (SELECT count(*) FROM customer c2 WHERE c2.country = c.country)::int AS n, c.customer_id FROM customer c',
  () => 'SELECT e.employee_id, count(c.customer_id)::int AS n FROM employee e LEFT JOIN customer c ON c.support_rep_id = e.employee_id GROUP BY e.employee_id',
  (k) => `SELECT customer_id, email FROM customer WHERE customer_id = ${k % 61}`,
  () => 'TABLE customer',
  (k) => `SELECT x.customer_id FROM invoice i, LATERAL (SELECT customer_id FROM customer c WHERE c.customer_id = i.customer_id LIMIT 1) x WHERE i.invoice_id <= ${k * 3}`,
  () => 'SELECT customer_id FROM customer INTERSECT SELECT customer_id FROM invoice',
  () => 'SELECT count(*)::int AS n FROM invoice WHERE customer_id NOT IN (SELECT customer_id FROM customer)',
];

const query = fc.tuple(fc.integer({ min: 0, max: queries.length - 1 }), fc.integer({ min: 0, max: 100 })).map(([i, k]) => queries[i](k));

/** Rows as a sorted list of canonical texts (a multiset). */
function multiset(rows: Array<Record<string, unknown>>): string[] {
  return rows.map((r) => JSON.stringify(Object.keys(r).sort().map((k) => [k, r[k] === null ? null : String(r[k])]))).sort();
}

function resultRows(o: ToolOutcome): Array<Record<string, unknown>> | null {
  if (o.kind !== 'result') return null;
  return (o.structuredContent as { rows: Array<Record<string, unknown>> }).rows;
}

let run = 0;
test('interlock_query under random row rules returns the rows of PostgreSQL RLS as a per-identity role, or refuses', async () => {
  let compared = 0;
  await fc.assert(
    fc.asyncProperty(rule, attrs, fc.array(query, { minLength: 3, maxLength: 5 }), async (terms, a, qs) => {
      const id = `diff${++run}`;
      fx.grant(id, [
        { name: 'base', statements: [{ effect: 'allow', action: 'read', resource: 'public.invoice' }, { effect: 'allow', action: 'read', resource: 'public.employee' }] },
        ...terms.map((t, i): SourceRole => ({ name: `r${i}`, statements: [{ effect: 'allow', action: 'read', resource: 'public.customer', ...(t ? { rows: t.il } : {}) }] })),
      ]);
      await tc.query('BEGIN');
      try {
        for (const [i, t] of terms.entries()) await tc.query(`CREATE POLICY p${i} ON customer AS PERMISSIVE FOR SELECT TO "${twinRole}" USING (${t ? t.rls(a) : 'true'})`);
        for (const sql of qs) {
          const o = await fx.call(id, { ...a }, sql);
          const mine = resultRows(o);
          if (mine === null) {
            // A refusal is allowed; a failure of the statement is not (the twin would answer).
            expect(o.kind).toBe('refusal');
            continue;
          }
          await tc.query(`SET ROLE "${twinRole}"`);
          const theirs = (await tc.query(sql)).rows;
          await tc.query('RESET ROLE');
          expect({ sql, rule: terms.map((t) => t?.il ?? null), attrs: a, rows: multiset(mine) }).toEqual({ sql, rule: terms.map((t) => t?.il ?? null), attrs: a, rows: multiset(theirs) });
          compared++;
        }
      } finally {
        await tc.query('ROLLBACK');
      }
    }),
    { numRuns: Number(process.env.ROW_RULES_RUNS ?? 25), seed: Number(process.env.ROW_RULES_SEED ?? 2727), endOnFailure: true },
  );
  // The property compared real answers, not only refusals.
  expect(compared).toBeGreaterThan(40);
}, 120_000);
