/**
 * The audit trail's read queries on ~100k events (issue 28 item 2: which indexes audit_events needs):
 * fills a fresh control database with BENCH_EVENTS (100,000) tool-call events over BENCH_SOURCES (20)
 * sources and BENCH_IDENTITIES (200) identities, one approval event per 1,000, then prints EXPLAIN
 * (ANALYZE, BUFFERS) of `interlock audit search` (searchAudit's statement) by identity, source, request
 * id, approval and time, tail, the webhook dispatcher's scan and the approval status lookup, with the
 * indexes the migrations leave (less BENCH_DROP_INDEXES, comma-separated). Run: `npx tsx bench/audit-index-plans.ts`.
 */
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { createTempDatabase } from '../test/helpers/pg';
import { envInt, machineLine, runBench } from './lib/stats';

const SEARCH = `SELECT * FROM audit_events
     WHERE ($1::text IS NULL OR identity_id = $1) AND ($2::text IS NULL OR source_id = $2) AND ($3::text IS NULL OR decision = $3)
       AND ($4::text IS NULL OR kind = $4) AND ($5::text IS NULL OR approval_id = $5) AND ($6::text IS NULL OR request_id = $6)
       AND ($7::timestamptz IS NULL OR time >= $7) AND ($8::timestamptz IS NULL OR time < $8)
       AND ($9::bigint IS NULL OR id < $9)
     ORDER BY id DESC LIMIT $10`;

async function main(): Promise<void> {
  const n = envInt('BENCH_EVENTS', 100_000);
  const sources = envInt('BENCH_SOURCES', 20);
  const identities = envInt('BENCH_IDENTITIES', 200);
  console.log(`# audit-index-plans: ${n} events, ${sources} sources, ${identities} identities`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_auditplans');
  try {
    await runMigrations(db.url);
    const c = new pg.Client({ connectionString: db.url });
    c.on('error', () => undefined); // terminated by db.drop() after a failure
    await c.connect();
    await c.query(`INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq)
      SELECT now() - (($1 - g) || ' seconds')::interval, 1, NULL, sha256(g::text::bytea), 3, '00000000-0000-4000-8000-000000000001', g FROM generate_series(1, $1 / 10) g`, [n]);
    await c.query(`INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, decision, source_id, action, approval_id, details, batch_id, recorded_at)
      SELECT CASE WHEN g % 1000 = 0 THEN 'approval' ELSE 'tool_call' END, now() - (($1 - g) / 10.0 || ' seconds')::interval, 'req_' || md5(g::text),
        'idn_' || (g % $2), 'key_x', 'interlock_query', CASE WHEN g % 1000 = 0 THEN 'approved' ELSE 'allowed' END, 'src_' || (g % $3), 'read',
        CASE WHEN g % 1000 = 0 THEN 'apr_' || g END, '{}'::jsonb, (g - 1) / 10 + 1, now()
      FROM generate_series(1, $1) g`, [n, identities, sources]);
    for (const ix of (process.env.BENCH_DROP_INDEXES ?? '').split(',').filter(Boolean)) await c.query(`DROP INDEX ${ix}`);
    await c.query('ANALYZE audit_events');
    await c.query('ANALYZE audit_batches');
    console.log((await c.query("SELECT string_agg(indexrelid::regclass::text, ', ') AS i FROM pg_index WHERE indrelid = 'audit_events'::regclass")).rows[0].i);
    const mid = new Date(Date.now() - (n / 20) * 1000).toISOString();
    const cases: Array<[string, string, unknown[]]> = [
      ['search by identity (1 of N)', SEARCH, ['idn_7', null, null, null, null, null, null, null, null, 101]],
      ['search by source (1 of N)', SEARCH, [null, 'src_7', null, null, null, null, null, null, null, 101]],
      ['search by source, second page', SEARCH, [null, 'src_7', null, null, null, null, null, null, String(n / 2), 101]],
      ['search by request id', SEARCH, [null, null, null, null, null, `req_${'x'}`, null, null, null, 101]],
      ['search by approval id', SEARCH, [null, null, null, null, `apr_${n / 2}`, null, null, null, null, 101]],
      ['search by time window', SEARCH, [null, null, null, null, null, null, mid, new Date(Date.parse(mid) + 60_000).toISOString(), null, 101]],
      ['search by decision (rare)', SEARCH, [null, null, 'approved', null, null, null, null, null, null, 101]],
      ['tail 20', 'SELECT * FROM (SELECT * FROM audit_events ORDER BY id DESC LIMIT $1) t ORDER BY id', [20]],
      ['webhooks scan', "SELECT id::text FROM audit_events WHERE id > $1 AND kind = 'approval' AND approval_id IS NOT NULL ORDER BY audit_events.id LIMIT 200", [String(n - 5000)]],
      ['approval status', "SELECT details->>'reason' AS reason FROM audit_events WHERE approval_id = $1 AND kind = 'approval' AND decision = 'rejected' ORDER BY id DESC LIMIT 1", [`apr_${n / 2}`]],
      ['verify: a batch range', 'SELECT count(*) FROM audit_events WHERE batch_id BETWEEN $1 AND $2', [String(n / 20), String(n / 20 + 100)]],
    ];
    // The request id searched for: an existing one.
    const req = (await c.query<{ r: string }>('SELECT request_id AS r FROM audit_events WHERE id = $1', [Math.floor(n / 3)])).rows[0].r;
    cases[3][2][5] = req;
    for (const [name, sql, values] of cases) {
      const plan = (await c.query({ text: `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${sql}`, values })).rows.map((r) => r['QUERY PLAN'] as string);
      const time = plan.find((l) => l.startsWith('Execution Time'));
      const nodes = plan.filter((l) => /Scan|Append|Sort/.test(l)).map((l) => l.trim().replace(/\s+\(actual.*$/, '')).slice(0, 3);
      console.log(`${name.padEnd(32)} ${time?.padEnd(28)} ${nodes.join(' | ')}`);
    }
    await c.end();
  } finally {
    await db.drop();
  }
}

runBench(main);
