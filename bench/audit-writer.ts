/**
 * What one audit event costs the control database's backend (issue 13, "control-database CPU ≤ 30 µs
 * per call"): appends BENCH_EVENTS tool-call events of the point read's shape through the audit
 * writer's statement, batch by batch (BENCH_BATCH events each, default 1,3,8), one commit per batch
 * as the group-commit writer does, and prints the backend's CPU (/proc of its pid) per event and per
 * batch. Variants: `literal` (a simple query with the batch's JSON written into the text and SET
 * LOCAL statement_timeout, the writer before issue 13), `prepared` (the writer's named statement,
 * whatever the batch size; format 2), `format3` (issue 28: the batch hashed in the gateway and
 * appended by one INSERT statement on a writer lane's own chain, src/audit/chain.ts).
 * Run: `BENCH_VARIANTS=prepared,format3 npx tsx bench/audit-writer.ts`.
 */
import pg from 'pg';
import { appendAuditRows, type AuditRowInput } from '../src/audit/writer';
import { runMigrations } from '../src/control/db';
import { ChainLane } from '../src/audit/chain';
import { createTempDatabase } from '../test/helpers/pg';
import { procCpuMs } from './lib/cpu';
import { envInt, machineLine, table } from './lib/stats';

function event(i: number): AuditRowInput {
  return {
    kind: 'tool_call',
    time: new Date().toISOString(),
    request_id: `req_${i.toString(16).padStart(24, '0')}`,
    identity_id: 'idn_0123456789abcdef0123',
    key_id: 'key_0123456789abcdef0123',
    tool: 'interlock_query',
    canonical_tool: 'interlock_query',
    dialect: '2025-11-25',
    protocol_version: '2025-11-25',
    decision: 'allowed',
    reason_code: null,
    source_id: 'chinook',
    action: 'read',
    fingerprint: '5f1c0a3b9d2e7f64',
    relations: ['public.track'],
    row_count: 1,
    duration_ms: 1.234,
    approval_id: null,
    operator: null,
    details: { cached: false },
  };
}

/** Chain format 1 through one named statement (the writer between migrations 20261201700000000 and 20261201800000000, minus its second statement). */
async function format1Append(c: pg.Client, rows: AuditRowInput[], ms: number): Promise<void> {
  await c.query({ name: 'bench_format1', text: "SELECT set_config('statement_timeout', $2, true), interlock_audit_append($1::jsonb) AS b", values: [JSON.stringify(rows), String(ms)] });
}

/** The writer before issue 13: SET LOCAL and the batch's JSON written into one simple query's text. */
async function literalAppend(c: pg.Client, rows: AuditRowInput[], ms: number): Promise<void> {
  await c.query(`SET LOCAL statement_timeout = ${ms}; SELECT interlock_audit_append(${c.escapeLiteral(JSON.stringify(rows))}::jsonb) AS b`);
}

async function main(): Promise<void> {
  const events = envInt('BENCH_EVENTS', 3000);
  const sizes = (process.env.BENCH_BATCH ?? '1,3,8').split(',').map(Number);
  const variants = (process.env.BENCH_VARIANTS ?? 'literal,format1,prepared').split(',');
  console.log(`# audit-writer: control-database backend CPU per audit event (${events} events per cell)`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_audit');
  try {
    await runMigrations(db.url);
    const rows: string[][] = [];
    for (const size of sizes) {
      for (const variant of variants) {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        // format3: one lane on a pool of one connection, so one backend serves every batch.
        const lanePool = new pg.Pool({ connectionString: db.url, max: 1 });
        const lane = new ChainLane(lanePool);
        try {
          const pid = (await (variant === 'format3' ? lanePool : c).query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
          let n = 0;
          const one = async () => {
            const batch = Array.from({ length: size }, () => event(n++));
            if (variant === 'literal') await literalAppend(c, batch, 2000);
            else if (variant === 'format1') await format1Append(c, batch, 2000);
            else if (variant === 'format3') await lane.append(batch, 2000);
            else await appendAuditRows(c, batch, 2000);
          };
          for (let i = 0; i < 50; i++) await one();
          n = 0;
          const cpu0 = procCpuMs(pid);
          const t0 = process.hrtime.bigint();
          while (n < events) await one();
          const wall = Number(process.hrtime.bigint() - t0) / 1e6;
          const cpu = procCpuMs(pid) - cpu0;
          rows.push([String(size), variant, ((cpu * 1000) / n).toFixed(1), ((cpu * 1000 * size) / n).toFixed(1), ((wall * 1000) / n).toFixed(1)]);
        } finally {
          await c.end();
          await lanePool.end();
        }
      }
    }
    console.log(table(['batch', 'variant', 'backend CPU µs/event', 'µs/batch', 'wall µs/event'], rows));
  } finally {
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
