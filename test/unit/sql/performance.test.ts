/**
 * Governance budget: analysing a statement (parse, walk, lineage, fingerprint) should take about
 * 150 µs at the median. Measured over the legitimate corpus after warm-up, on a prepared catalogue.
 */
import { analyzeSql, initSqlParser, prepareCatalog } from '../../../src/sql/analyze';
import { LEGIT } from './corpus';
import { CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

test('median analysis time including the fingerprint is within the 150 µs budget', () => {
  const cat = prepareCatalog(CATALOG);
  const run = (sql: string): void => {
    const r = analyzeSql(sql, cat);
    if (r.ok && r.fingerprint.length === 0) throw new Error('no fingerprint');
  };
  for (let i = 0; i < 20; i++) for (const sql of LEGIT) run(sql);
  const times: number[] = [];
  for (let i = 0; i < 10; i++) {
    for (const sql of LEGIT) {
      const t0 = process.hrtime.bigint();
      run(sql);
      times.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  }
  times.sort((a, b) => a - b);
  const p50 = times[Math.floor(times.length / 2)];
  expect(p50).toBeLessThan(150);
});
