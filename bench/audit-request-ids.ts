/**
 * Does a random request id cost the control database more than a time-ordered one (issue 28 item 3,
 * h28d)? audit_events keeps a B-tree on request_id (`audit search --request`); a random id lands on
 * a random leaf page of it, a time-ordered one on the rightmost (PostgreSQL's fast path for the
 * rightmost leaf skips the descent). This bench measures the control-database backend's CPU (/proc)
 * per batch of BENCH_BATCH (3) events appended by the events part of the format-3 VALUES statement
 * into three copies of audit_events with its indexes, each prefilled with BENCH_PREFILL (300,000)
 * events: request ids random (the gateway's `req_` + 12 random base64url characters), time-ordered
 * (`req_` + 7 characters of milliseconds in an alphabet ordered as its bytes + 5 random), and a copy
 * without the request_id B-tree (the most any id format could save). BENCH_CHECKPOINT=1 runs a
 * CHECKPOINT before each variant's measured runs, so each page's first change after it writes a
 * full-page image to the WAL, as in production where a checkpoint comes every few minutes.
 * Variants alternate within each of BENCH_ROUNDS (5) rounds of BENCH_OPS (1,000) batches.
 * Run: `npx tsx bench/audit-request-ids.ts`.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { createTempDatabase } from '../test/helpers/pg';
import { measureStatements, valuesInsert } from './audit-parts-lib';
import { envInt, machineLine, runBench } from './lib/stats';

/** 64 characters in byte order: a prefix of them sorts as the number it encodes. */
const ORDERED = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';

const randomId = () => `req_${randomBytes(9).toString('base64url')}`;
const orderedId = () => {
  let t = Date.now();
  let p = '';
  for (let i = 0; i < 7; i++, t = Math.floor(t / 64)) p = ORDERED[t % 64] + p;
  return `req_${p}${randomBytes(4).toString('base64url').slice(0, 5)}`;
};

async function main(): Promise<void> {
  const size = envInt('BENCH_BATCH', 3);
  const ops = envInt('BENCH_OPS', 1000);
  const rounds = envInt('BENCH_ROUNDS', 5);
  const prefill = envInt('BENCH_PREFILL', 300_000);
  const checkpoint = process.env.BENCH_CHECKPOINT === '1';
  console.log(`# audit-request-ids: control-database backend CPU per batch of ${size} events, ${prefill} events prefilled${checkpoint ? ', CHECKPOINT before each variant' : ''}`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_reqids');
  try {
    await runMigrations(db.url);
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    const lo = (await c.query<{ d: string }>(`SELECT date_trunc('month', now())::text AS d`)).rows[0].d;
    const hi = (await c.query<{ d: string }>(`SELECT (date_trunc('month', now()) + interval '1 month')::text AS d`)).rows[0].d;
    for (const t of ['ev_random', 'ev_ordered', 'ev_noreq']) {
      await c.query(`CREATE TABLE ${t} (LIKE audit_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (recorded_at)`);
      await c.query(`CREATE TABLE ${t}_p PARTITION OF ${t} FOR VALUES FROM ('${lo}') TO ('${hi}')`);
      await c.query(`ALTER TABLE ${t} ADD PRIMARY KEY (id, recorded_at)`);
      await c.query(`CREATE INDEX ON ${t} USING brin (time)`);
      await c.query(`CREATE INDEX ON ${t} USING brin (batch_id)`);
      await c.query(`CREATE INDEX ON ${t} (identity_id, id)`);
      await c.query(`CREATE INDEX ON ${t} (approval_id) WHERE approval_id IS NOT NULL`);
      if (t !== 'ev_noreq') await c.query(`CREATE INDEX ON ${t} (request_id) WHERE request_id IS NOT NULL`);
      // Prefill: random ids (md5) or ids ordered by g, as the gateway's would be by time.
      const req = t === 'ev_ordered' ? `'req_' || lpad(to_hex(g), 7, '0') || substr(md5(g::text), 1, 5)` : `'req_' || substr(md5(g::text), 1, 12)`;
      await c.query(`INSERT INTO ${t} (kind, time, request_id, identity_id, key_id, tool, decision, source_id, action, details, batch_id, recorded_at)
        SELECT 'tool_call', now(), ${req}, 'idn_' || (g % 20), 'key_x', 'interlock_query', 'allowed', 'chinook', 'read', '{}'::jsonb, g / 3, now()
          FROM generate_series(1, $1) g`, [prefill]);
      await c.query(`VACUUM ANALYZE ${t}`);
    }
    const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
    const rowValues = (id: () => string) =>
      Array.from({ length: size }, () => ['tool_call', new Date().toISOString(), id(), 'idn_0123456789abcdef0123', 'key_0123456789abcdef0123', 'interlock_query', 'interlock_query', '2025-11-25', '2025-11-25', 'allowed', null, 'chinook', 'read', '5f1c0a3b9d2e7f64', '{public.track}', '1', '1.234', null, null, '{"cached":false}']).flat();
    const run = (name: string, table: string, id: () => string) => async () => {
      await c.query({ name, text: valuesInsert(table, size), values: [new Date().toISOString(), ...rowValues(id)] });
    };
    const variants: Record<string, () => Promise<unknown>> = {
      'random request ids (now)': run('r', 'ev_random', randomId),
      'time-ordered request ids': run('o', 'ev_ordered', orderedId),
      'no request_id B-tree': run('n', 'ev_noreq', randomId),
    };
    if (checkpoint) {
      for (const [k, fn] of Object.entries(variants)) {
        let n = 0;
        variants[k] = async () => {
          if (n++ % (ops + 50) === 0) await c.query('CHECKPOINT');
          return fn();
        };
      }
    }
    await measureStatements(pid, variants, rounds, ops, size);
    for (const t of ['ev_random', 'ev_ordered']) {
      const r = await c.query<{ s: string }>(`SELECT pg_size_pretty(pg_relation_size(i.indexrelid)) AS s FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid WHERE i.indrelid = '${t}_p'::regclass AND x.relname LIKE '%request%'`);
      console.log(`${t}: request_id B-tree ${r.rows[0]?.s}`);
    }
    await c.end();
  } finally {
    await db.drop();
  }
}

runBench(main);
