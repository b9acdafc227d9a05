/**
 * What one audit event costs the control database's backend (issue 13, "control-database CPU ≤ 30 µs
 * per call"): appends BENCH_EVENTS tool-call events of the point read's shape through the audit
 * writer's statement, batch by batch (BENCH_BATCH events each, default 1,3,8), one commit per batch
 * as the group-commit writer does, and prints the backend's CPU (/proc of its pid) per event and per
 * batch. Variants: `literal` (a simple query with the batch's JSON written into the text and SET
 * LOCAL statement_timeout, the writer before issue 13), `prepared` (the writer's named statement,
 * whatever the batch size; format 2), `format3` (issue 28: the batch hashed in the gateway and
 * appended by one INSERT statement on a writer lane's own chain, src/audit/chain.ts), `format3-session`
 * (the same on a pool whose connections start with the statement_timeout, as openAuditPool's do, so no
 * per-batch set_config is sent: append.ts).
 * `format3-runtime` is format3 on a connection of a runtime role (`grantRuntimeRole`: the gateway's own,
 * subject to audit_batches' row-level security, migration 20261208220000000), `format3-runtime-norls`
 * the same with that security disabled for the variant (what the policy costs a batch; alternate them).
 * `format5`, `format5-runtime` (task f1): the same lane with an audit key (chain format 5: HMAC-SHA-256
 * tag, key id on the batch, migration 20261216100000000); before each format-3 variant the trail's
 * keyed mark (audit_keyed_trail, set by the first keyed genesis) is cleared, so format 3 is measured
 * with its trigger's check of that table as it runs on a trail not yet keyed.
 * BENCH_PG_OPTIONS adds startup options to the format-3 pool (e.g. `-c plan_cache_mode=force_generic_plan`);
 * BENCH_DROP_INDEXES drops the named indexes after migrating (what an index costs a batch);
 * BENCH_SQL runs statements after migrating (e.g. an index a later migration would add).
 * Run: `BENCH_VARIANTS=format3,format3-session npx tsx bench/audit-writer.ts`.
 */
import pg from 'pg';
import { appendAuditRows, auditSessionTimeoutMs, type AuditRowInput } from '../src/audit/writer';
import { grantRuntimeRole, openControlDb, runMigrations } from '../src/control/db';
import { ChainLane } from '../src/audit/chain';
import { auditKey } from '../src/audit/key';
import { setSessionStatementTimeout } from '../src/audit/append';
import { ADMIN_URL, createTempDatabase } from '../test/helpers/pg';
import { procCpuMs, procCpuSplitMs } from './lib/cpu';
import { envInt, machineLine, runBench, table } from './lib/stats';

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

/** The audit key of the format-5 variants (a fixed bench value, never a deployment's). */
const benchKey = auditKey('bench-audit-key-'.repeat(3));

async function main(): Promise<void> {
  const events = envInt('BENCH_EVENTS', 3000);
  const sizes = (process.env.BENCH_BATCH ?? '1,3,8').split(',').map(Number);
  const variants = (process.env.BENCH_VARIANTS ?? 'literal,format1,prepared').split(',');
  console.log(`# audit-writer: control-database backend CPU per audit event (${events} events per cell)`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_audit');
  try {
    await runMigrations(db.url);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    for (const ix of (process.env.BENCH_DROP_INDEXES ?? '').split(',').filter(Boolean)) await admin.query(`DROP INDEX ${ix}`);
    if (process.env.BENCH_SQL) await admin.query(process.env.BENCH_SQL);
    // A runtime role for the format3-runtime variants (trust authentication: no password needed).
    const runtimeRole = `bench_rt_${process.pid}`;
    const runtimeUrl = new URL(db.url);
    if (variants.some((v) => v.includes('-runtime'))) {
      await admin.query(`CREATE ROLE ${runtimeRole} LOGIN`);
      const cdb = await openControlDb(db.url, { migrate: false });
      await grantRuntimeRole(cdb, runtimeRole);
      await cdb.close();
      runtimeUrl.username = runtimeRole;
      runtimeUrl.password = '';
    }
    const rows: string[][] = [];
    const roundsN = envInt('BENCH_ROUNDS', 1);
    const cells = new Map<string, { cpu: number[]; wall: number[]; sys: number[] }>();
    for (const size of sizes) {
      for (let round = 0; round < roundsN; round++) for (const variant of variants) {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        // format3: one lane on a pool of one connection, so one backend serves every batch.
        const session = variant === 'format3-session' ? auditSessionTimeoutMs(2000) : undefined;
        const extra = [process.env.BENCH_PG_OPTIONS ?? '', session ? `-c statement_timeout=${session}` : ''].join(' ').trim();
        const runtime = variant.includes('-runtime');
        const keyed = variant.startsWith('format5');
        const chained = variant.startsWith('format3') || keyed;
        if (runtime) await admin.query(`ALTER TABLE audit_batches ${variant === 'format3-runtime-norls' ? 'DISABLE' : 'ENABLE'} ROW LEVEL SECURITY`);
        if (variant.startsWith('format3')) await admin.query('DELETE FROM audit_keyed_trail');
        const lanePool = new pg.Pool({ connectionString: runtime ? runtimeUrl.toString() : db.url, max: 1, ...(extra ? { options: extra } : {}) });
        if (session) setSessionStatementTimeout(lanePool, session);
        const lane = new ChainLane(lanePool, keyed ? benchKey : null);
        try {
          const pid = (await (chained ? lanePool : c).query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
          let n = 0;
          const one = async () => {
            const batch = Array.from({ length: size }, () => event(n++));
            if (variant === 'literal') await literalAppend(c, batch, 2000);
            else if (variant === 'format1') await format1Append(c, batch, 2000);
            else if (chained) await lane.append(batch, 2000);
            else await appendAuditRows(c, batch, 2000);
          };
          for (let i = 0; i < 50; i++) await one();
          n = 0;
          const cpu0 = procCpuMs(pid);
          const sys0 = procCpuSplitMs(pid).system;
          const t0 = process.hrtime.bigint();
          while (n < events) await one();
          const wall = Number(process.hrtime.bigint() - t0) / 1e6;
          const cpu = procCpuMs(pid) - cpu0;
          const sys = procCpuSplitMs(pid).system - sys0;
          const key = `${size}\t${variant}`;
          const cell = cells.get(key) ?? { cpu: [], wall: [], sys: [] };
          cell.cpu.push((cpu * 1000) / n);
          cell.wall.push((wall * 1000) / n);
          cell.sys.push((sys * 1000) / n);
          cells.set(key, cell);
        } finally {
          await c.end();
          await lanePool.end();
        }
      }
    }
    await admin.query('ALTER TABLE audit_batches ENABLE ROW LEVEL SECURITY');
    await admin.end();
    const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    for (const [key, c] of cells) {
      const [size, variant] = key.split('\t');
      const cpu = median(c.cpu);
      rows.push([size, variant, cpu.toFixed(1), median(c.sys).toFixed(1), (cpu * Number(size)).toFixed(1), median(c.wall).toFixed(1), c.cpu.map((x) => x.toFixed(0)).join(' ')]);
    }
    console.log(`rounds: ${roundsN} (variants alternate within each round; medians); ${machineLine()}`);
    console.log(table(['batch', 'variant', 'backend CPU µs/event', 'of which kernel', 'µs/batch', 'wall µs/event', 'rounds µs/event'], rows));
  } finally {
    await db.drop();
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect().then(() => admin.query(`DROP ROLE IF EXISTS bench_rt_${process.pid}`)).catch(() => undefined);
    await admin.end().catch(() => undefined);
  }
}

runBench(main);
