/**
 * Scenario 4: governance cost, in-process, per statement, over the 100 analytical queries of
 * bench/lib/corpus.ts: parse + classify + resolve + lineage (analyzeSql), the statement
 * fingerprint the audit records (a second parse), authorization (a fresh AccessEvaluator over the
 * demo role, as every request builds one, and every relation/column check), and policy with the
 * redaction plan (policyStep: the demo masks customer e-mail and phone). The catalogue is the
 * scanned PostgreSQL 15 Chinook catalogue of the SQL tests; grants and policies are the demo's.
 * Baseline: a bare libpg-query parseSync of the same statement, timed alternately with it.
 * No database is needed, unless BENCH_VERIFY_CORPUS=1 (then every statement is also executed
 * once on a provisioned Chinook as the reader role, to prove the corpus is real SQL).
 * Run: `npx tsx bench/04-governance.ts`.
 */
import { parseSync } from 'libpg-query';
import pg from 'pg';
import { analyzeSql, initSqlParser, type SqlAnalysis } from '../src/sql/analyze';
import type { SourceCatalog } from '../src/sql/catalog-types';
import { AccessEvaluator } from '../src/governance/evaluator';
import { authorizeStatement } from '../src/pipeline/03-authorize';
import { policyStep } from '../src/pipeline/04-policy';
import { DEMO_ROLE, demoPolicies } from '../src/demo/provision';
import type { Policy } from '../generated/policy-v1';
import fixture from '../test/unit/sql/fixtures/pg15-chinook-catalog.json';
import { ANALYTICAL_QUERIES } from './lib/corpus';
import { emitResult, envInt, machineLine, round, summarize, table, type Summary } from './lib/stats';
import { withBenchEnv } from './lib/env';

type Ok = Extract<SqlAnalysis, { ok: true }>;

const CATALOG = fixture as unknown as SourceCatalog;
const GRANTS = [{ sourceId: 'chinook', role: DEMO_ROLE }];
const POLICIES = demoPolicies('chinook') as Policy[];
const SUBJECT = { identityId: 'idn_bench', identityName: 'demo-agent', roles: ['demo-analyst'], sourceId: 'chinook' };

/** Nanoseconds now (monotonic). */
const now = (): bigint => process.hrtime.bigint();

/** Per-step times of one governed statement, in microseconds. */
interface StepTimes {
  analyze: number;
  fingerprint: number;
  authorize: number;
  policy: number;
  total: number;
  redaction: boolean;
}

/** Runs the governance steps as the query pipeline does (src/pipeline/query.ts) and times each. Throws if the statement is not allowed. */
export function governStatement(sql: string, nParams: number, at: Date): StepTimes {
  const t0 = now();
  const a = analyzeSql(sql, CATALOG);
  const t1 = now();
  if (!a.ok) throw new Error(`refused (${a.code}): ${sql}`);
  const fp = (a as Ok).fingerprint;
  const t2 = now();
  if (a.paramCount !== nParams || fp.length === 0) throw new Error(`parameter count or fingerprint wrong: ${sql}`);
  const evaluator = new AccessEvaluator(GRANTS);
  const denied = authorizeStatement(evaluator, 'chinook', a, CATALOG);
  const t3 = now();
  if (denied) throw new Error(`denied: ${sql}`);
  const pol = policyStep(POLICIES, { ...SUBJECT, roles: evaluator.roleNames('chinook') }, a, CATALOG, at);
  const t4 = now();
  if (!pol.ok) throw new Error(`policy refused: ${sql}`);
  const us = (x: bigint, y: bigint) => Number(y - x) / 1000;
  return { analyze: us(t0, t1), fingerprint: us(t1, t2), authorize: us(t2, t3), policy: us(t3, t4), total: us(t0, t4), redaction: pol.restrictions.redaction !== null };
}

/** Times a bare parse, in microseconds. */
export function bareParse(sql: string): number {
  const t0 = now();
  parseSync(sql);
  return Number(now() - t0) / 1000;
}

async function verifyCorpus(): Promise<void> {
  await withBenchEnv({}, async (env) => {
    const c = new pg.Client(env.reader);
    await c.connect();
    try {
      for (const q of ANALYTICAL_QUERIES) await c.query(q.sql, q.params ?? []);
    } finally {
      await c.end();
    }
  });
  console.log(`corpus verified: all ${ANALYTICAL_QUERIES.length} statements ran on PostgreSQL as the demo reader role`);
}

async function main(): Promise<void> {
  const passes = envInt('BENCH_PASSES', 60);
  const warm = envInt('BENCH_WARMUP_PASSES', 30);
  console.log('# 4-governance: parse + classify + authorize + lineage + redaction plan per statement, in-process');
  console.log(machineLine());
  if (ANALYTICAL_QUERIES.length !== 100) throw new Error(`the corpus must hold 100 statements, it holds ${ANALYTICAL_QUERIES.length}`);
  if (process.env.BENCH_VERIFY_CORPUS === '1') await verifyCorpus();
  await initSqlParser();
  const at = new Date();
  for (let p = 0; p < warm; p++) for (const q of ANALYTICAL_QUERIES) {
    bareParse(q.sql);
    governStatement(q.sql, q.params?.length ?? 0, at);
  }
  const steps: Record<'analyze' | 'fingerprint' | 'authorize' | 'policy' | 'total' | 'totalNoFp' | 'parse', number[]> = { analyze: [], fingerprint: [], authorize: [], policy: [], total: [], totalNoFp: [], parse: [] };
  const perStatement = ANALYTICAL_QUERIES.map(() => [] as number[]);
  const redactionTotals: number[] = [];
  for (let p = 0; p < passes; p++) {
    for (let i = 0; i < ANALYTICAL_QUERIES.length; i++) {
      const q = ANALYTICAL_QUERIES[i];
      // Alternate which goes first so neither always runs on a cache warmed by the other.
      let parse: number;
      let g: StepTimes;
      if ((p + i) % 2 === 0) {
        parse = bareParse(q.sql);
        g = governStatement(q.sql, q.params?.length ?? 0, at);
      } else {
        g = governStatement(q.sql, q.params?.length ?? 0, at);
        parse = bareParse(q.sql);
      }
      steps.parse.push(parse);
      steps.analyze.push(g.analyze);
      steps.fingerprint.push(g.fingerprint);
      steps.authorize.push(g.authorize);
      steps.policy.push(g.policy);
      steps.total.push(g.total);
      steps.totalNoFp.push(g.total - g.fingerprint);
      perStatement[i].push(g.total);
      if (g.redaction) redactionTotals.push(g.total);
    }
  }
  const s: Record<string, Summary> = Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, summarize(v)]));
  const us = (x: number) => `${x.toFixed(1)} µs`;
  const rows: Array<[string, Summary]> = [
    ['bare parseSync (baseline)', s.parse],
    ['analyzeSql: parse + classify + resolve + lineage', s.analyze],
    ['fingerprint (second parse, recorded in the audit)', s.fingerprint],
    ['authorize: evaluator + relation/column checks', s.authorize],
    ['policy + masks + redaction plan', s.policy],
    ['governance total', s.total],
    ['governance total without the fingerprint', s.totalNoFp],
  ];
  console.log(`${passes} passes × ${ANALYTICAL_QUERIES.length} statements after ${warm} warm-up passes (${s.total.n} samples per row)\n`);
  console.log(table(['step', 'p50', 'p90', 'p99', 'mean'], rows.map(([k, v]) => [k, us(v.p50), us(v.p90), us(v.p99), us(v.mean)])));
  const red = summarize(redactionTotals);
  console.log(`\nstatements with a redaction plan: ${redactionTotals.length / passes} of ${ANALYTICAL_QUERIES.length} (total p50 ${us(red.p50)}, p99 ${us(red.p99)})`);
  console.log(`ratio governance total / bare parse: p50 ${(s.total.p50 / s.parse.p50).toFixed(2)}×, p99 ${(s.total.p99 / s.parse.p99).toFixed(2)}×`);
  const slowest = perStatement.map((v, i) => ({ i, p50: summarize(v).p50 })).sort((a, b) => b.p50 - a.p50).slice(0, 5);
  console.log('slowest statements (median total):');
  for (const x of slowest) console.log(`  ${us(x.p50)}  #${x.i + 1} ${ANALYTICAL_QUERIES[x.i].sql.slice(0, 110)}`);
  console.log(`target governance p50 ≤ 150 µs: ${us(s.total.p50)} → ${s.total.p50 <= 150 ? 'MET' : 'MISSED'}`);
  emitResult('4-governance', {
    passes,
    statements: ANALYTICAL_QUERIES.length,
    us: Object.fromEntries(Object.entries(s).map(([k, v]) => [k, { p50: round(v.p50, 1), p90: round(v.p90, 1), p99: round(v.p99, 1), mean: round(v.mean, 1) }])),
    ratioP50: round(s.total.p50 / s.parse.p50, 2),
    redactionStatements: redactionTotals.length / passes,
  });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
