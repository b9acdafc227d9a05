/**
 * The audit commit's own latency tail, without a gateway (issue 29, h29x: why U, the p99 at one
 * connection, is ~11× its p50): on a temporary migrated control database, one client at a time,
 * BENCH_ROUNDS (default 3) rounds of BENCH_OPS (default 2,000) operations of each kind in turn: a
 * prepared `SELECT 1` (a round trip), a one-row INSERT into a plain table with a durable commit
 * (round trip + WAL flush), and the writer lane's append of one point-read event
 * (`ChainLane.append` on a pool like openAuditPool's: hash in Node, the VALUES statement, its
 * indexes, the durable commit). Prints per kind and round p50 / p90 / p99 / max (ms) and the
 * 1-minute load. Not a timed test. Run: `flock /tmp/bench.lock npx tsx bench/append-tail.ts`.
 */
import pg from 'pg';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { ChainLane } from '../src/audit/chain';
import { openAuditPool, type AuditRowInput } from '../src/audit/writer';
import { runMigrations } from '../src/control/db';
import { createTempDatabase } from '../test/helpers/pg';
import { envInt } from './lib/stats';

const ROW = { kind: 'tool_call', request_id: 'req_x', identity_id: 'idn_0123456789abcdef0123', key_id: 'key_0123456789abcdef0123', tool: 'interlock_query', canonical_tool: 'interlock_query', dialect: '2026-07-28', protocol_version: '2026-07-28', decision: 'allowed', reason_code: null, source_id: 'chinook', action: 'read', fingerprint: '5f1c0a3b9d2e7f64', relations: ['public.track'], row_count: 1, duration_ms: 1.234, approval_id: null, operator: null, details: { cached: false } } satisfies Omit<AuditRowInput, 'time'>;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];

async function main(): Promise<void> {
  const ops = envInt('BENCH_OPS', 2000);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const db = await createTempDatabase('bench_append_tail');
  const c = new pg.Client({ connectionString: db.url });
  const pool = openAuditPool(db.url, 2000, undefined, 1);
  try {
    await runMigrations(db.url);
    await c.connect();
    await c.query('CREATE TABLE plain (id bigserial PRIMARY KEY, v text)');
    const lane = new ChainLane(pool);
    const kinds: Array<[string, () => Promise<unknown>]> = [
      ['SELECT 1', () => c.query({ name: 's1', text: 'SELECT 1' })],
      ['INSERT + commit', () => c.query({ name: 'ins', text: 'INSERT INTO plain (v) VALUES ($1)', values: ['x'.repeat(300)] })],
      ['lane append (1 event)', () => lane.append([{ ...ROW, time: new Date().toISOString() }], 2000)],
    ];
    for (let r = 1; r <= rounds; r++) {
      for (const [name, op] of kinds) {
        const xs: number[] = [];
        for (let i = 0; i < ops; i++) {
          const t = performance.now();
          await op();
          xs.push(performance.now() - t);
        }
        console.log(`round ${r} ${name.padEnd(22)} p50 ${pct(xs, 0.5).toFixed(2)} p90 ${pct(xs, 0.9).toFixed(2)} p99 ${pct(xs, 0.99).toFixed(2)} max ${Math.max(...xs).toFixed(2)} ms, load ${loadavg()[0].toFixed(2)}`);
      }
    }
  } finally {
    await c.end().catch(() => undefined);
    await pool.end();
    await db.drop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
