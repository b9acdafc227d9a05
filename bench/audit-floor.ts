/**
 * Where the fixed cost of one audit batch goes on the control database (issue 13): the backend's CPU
 * (/proc of its pid) per statement for a ladder of statements, each a single round trip with a
 * durable commit unless it is read-only: a prepared SELECT 1; a one-row INSERT into a plain table; the
 * chain lock and nextval with it; one audit row through jsonb_populate_recordset into a plain table
 * with audit_events' columns; the same into the partitioned, indexed audit_events; the writer's whole
 * format-2 append of one event. Two rounds of BENCH_OPS (default 2,000) each.
 * Run: `npx tsx bench/audit-floor.ts`.
 */
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { createTempDatabase } from '../test/helpers/pg';
import { procCpuMs } from './lib/cpu';
import { appendAuditRows, type AuditRowInput } from '../src/audit/writer';
const row = { kind: 'tool_call', time: new Date().toISOString(), request_id: 'req_x', identity_id: 'idn_0123456789abcdef0123', key_id: 'key_0123456789abcdef0123', tool: 'interlock_query', canonical_tool: 'interlock_query', dialect: '2025-11-25', protocol_version: '2025-11-25', decision: 'allowed', reason_code: null, source_id: 'chinook', action: 'read', fingerprint: '5f1c0a3b9d2e7f64', relations: ['public.track'], row_count: 1, duration_ms: 1.234, approval_id: null, operator: null, details: { cached: false } } as AuditRowInput;
async function main() {
  const db = await createTempDatabase('bench_fixed');
  try {
    await runMigrations(db.url);
    const c = new pg.Client({ connectionString: db.url }); await c.connect();
    await c.query('CREATE TABLE scratch (x int)'); await c.query('CREATE SEQUENCE s');
    await c.query(`CREATE TABLE scratch_wide (LIKE audit_events INCLUDING DEFAULTS)`);
    const pid = (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p;
    const json = JSON.stringify([row]);
    const variants: Record<string, () => Promise<unknown>> = {
      select1: () => c.query({ name: 'a', text: 'SELECT 1' }),
      insert_scratch: () => c.query({ name: 'b', text: 'INSERT INTO scratch VALUES (1)' }),
      lock_nextval_insert: () => c.query({ name: 'c', text: 'WITH l AS (SELECT pg_advisory_xact_lock(1), nextval(\'s\') AS n) INSERT INTO scratch SELECT n FROM l' }),
      populate_wide_insert: () => c.query({ name: 'd', text: 'INSERT INTO scratch_wide (kind, time, request_id, decision, details, batch_id, recorded_at) SELECT r.kind, r.time, r.request_id, r.decision, r.details, 1, now() FROM jsonb_populate_recordset(NULL::audit_events, $1::jsonb) r', values: [json] }),
      populate_partitioned_insert: () => c.query({ name: 'e', text: 'INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at) SELECT r.kind, r.time, r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect, r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms, r.approval_id, r.operator, r.details, 1, now() FROM jsonb_populate_recordset(NULL::audit_events, $1::jsonb) r', values: [json] }),
      append_v2: () => appendAuditRows(c, [row], 2000),
    };
    for (const round of [1, 2]) for (const [name, fn] of Object.entries(variants)) {
      for (let i = 0; i < 200; i++) await fn();
      const n = Number(process.env.BENCH_OPS ?? 2000); const c0 = procCpuMs(pid); const t0 = Date.now();
      for (let i = 0; i < n; i++) await fn();
      console.log(round, name.padEnd(30), ((procCpuMs(pid) - c0) * 1000 / n).toFixed(1), 'µs cpu', ((Date.now() - t0) * 1000 / n).toFixed(0), 'µs wall');
    }
    await c.end();
  } finally { await db.drop(); }
}
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
