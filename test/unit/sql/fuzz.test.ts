/**
 * Token-level fuzzing around the corpus: delete, insert, replace and duplicate tokens of every
 * sample and legitimate statement. The analyser must never throw, and whenever it accepts a
 * statement the structural oracle must agree: no DML in a read, no SELECT INTO / FOR UPDATE in a
 * read, and every function call in the tree went through the function policy.
 */
import fc from 'fast-check';
import { parseSync, scanSync } from 'libpg-query';
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import { CALL_CONTEXTS, CORPUS, HIDDEN_WRITES, LEGIT, WRITE_CONTEXTS } from './corpus';
import { CATALOG, genericScan } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const RUNS = Number(process.env.SQL_FC_RUNS ?? 60) * 50;

test('mutated statements never crash the analyser and never slip past the oracle', () => {
  const seeds = [
    ...CORPUS.map((s) => s.sql),
    ...LEGIT,
    ...CALL_CONTEXTS.map((c) => c.split('%C%').join('lower(b)')),
    ...WRITE_CONTEXTS.map(([c]) => c.split('%W%').join(HIDDEN_WRITES[0])),
  ];
  const tokens = (s: string): string[] => scanSync(s).tokens.map((t) => s.slice(t.start, t.end));
  const pool = [...new Set(seeds.flatMap(tokens))];
  const stats = { parsed: 0, accepted: 0 };
  fc.assert(
    fc.property(
      fc.constantFrom(...seeds),
      fc.array(fc.tuple(fc.nat(200), fc.integer({ min: 0, max: 3 }), fc.constantFrom(...pool)), { minLength: 1, maxLength: 4 }),
      (seed, mutations) => {
        const t = tokens(seed);
        for (const [i, op, tok] of mutations) {
          const k = i % (t.length + 1);
          if (op === 0) t.splice(k, 1);
          else if (op === 1) t.splice(k, 0, tok);
          else if (op === 2) t[k] = tok;
          else t.splice(k, 0, ...t.slice(k, k + 3));
        }
        const sql = t.join(' ');
        const r = analyzeSql(sql, CATALOG); // must not throw
        let tree: unknown;
        try {
          tree = parseSync(sql);
          stats.parsed++;
        } catch {
          expect(r.ok).toBe(false);
          return;
        }
        if (!r.ok) return;
        stats.accepted++;
        const { types, functions } = genericScan(tree);
        if (r.kind === 'read') {
          expect([sql, ['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt', 'IntoClause', 'LockingClause'].filter((x) => types.has(x))]).toEqual([sql, []]);
        }
        expect([sql, [...functions].filter((f) => !r.functions.some((x) => x.name === f))]).toEqual([sql, []]);
      },
    ),
    { numRuns: RUNS, endOnFailure: true },
  );
  // not vacuous: many mutants still parse, and many are accepted
  expect(stats.parsed).toBeGreaterThan(RUNS / 25);
  expect(stats.accepted).toBeGreaterThan(RUNS / 100);
});
