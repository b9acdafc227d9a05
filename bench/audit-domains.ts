/**
 * The audit trail's row invariants as CHECK constraints against the same invariants as DOMAINs
 * (issue 28, task h28t). PostgreSQL 15 reads and prepares every CHECK expression of a result
 * relation afresh for each statement (ExecRelCheck: stringToNode, ExecPrepareExpr), while a domain's
 * checks are kept planned in its type cache and only initialised per statement (CoerceToDomain).
 *
 * Copies of audit_batches and audit_events (base column types, partitioned by month, the same indexes, no RLS: the bench
 * connects as their owner) in one schema per variant, each variant on its own connection whose
 * search_path puts that schema first, so every variant runs the gateway's own format-3 VALUES
 * statement (chainValuesStatement) text for text. Variants: `checks` (the tables as migrated before
 * h28t: 7 CHECKs on the batch, 2 on the event), `domains` (every single-column invariant a domain, the
 * one two-column invariant — format 3 ⇔ chain_id and seq — still a CHECK: what migration
 * 20261214100000000 makes), `domains, no CHECK` (that last CHECK dropped too: what it still costs), and
 * `none` (no invariant at all: the floor). Measured: each backend's CPU from /proc/<pid>/schedstat
 * (nanoseconds), per batch of BENCH_BATCH (3) events, BENCH_OPS (2,000) batches per variant per round,
 * variants alternating within each of BENCH_ROUNDS (5) rounds; medians and every round. With
 * BENCH_SYNC=off the connections run synchronous_commit off (the statement alone, no WAL flush).
 * With BENCH_PERF_OPS=n, after the rounds each variant runs n more batches under `perf record -g` of its
 * backend, and the inclusive share of the parts named in PERF_PARTS is printed per variant (perf's
 * children mode: a function's share counts what it calls). Run: `flock /tmp/bench.lock npx tsx bench/audit-domains.ts`.
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { chainValuesStatement, eventValues } from '../src/audit/chain';
import { normalizeAuditRow } from '../src/audit/event-text';
import type { AuditRowInput } from '../src/audit/types';
import { createTempDatabase } from '../test/helpers/pg';
import { envInt, machineLine, runBench, table } from './lib/stats';

const row = (i: number): AuditRowInput => ({ kind: 'tool_call', time: new Date().toISOString(), request_id: `req_${i.toString(16).padStart(24, '0')}`, identity_id: 'idn_0123456789abcdef0123', key_id: 'key_0123456789abcdef0123', tool: 'interlock_query', canonical_tool: 'interlock_query', dialect: '2025-11-25', protocol_version: '2025-11-25', decision: 'allowed', reason_code: null, source_id: 'chinook', action: 'read', fingerprint: '5f1c0a3b9d2e7f64', relations: ['public.track'], row_count: 1, duration_ms: 1.234, approval_id: null, operator: null, details: { cached: false } });

/** A backend's CPU time in nanoseconds (/proc/<pid>/schedstat, first field). */
const cpuNs = (pid: number): number => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);

const BATCH_CHECKS = [
  'CHECK (event_count >= 0)',
  'CHECK (octet_length(hash) = 32)',
  "CHECK (mark IS NULL OR mark = 'seal')",
  'CHECK (prev_hash IS NULL OR octet_length(prev_hash) = 32)',
  'CHECK (seq IS NULL OR seq >= 0)',
  'CHECK ((format = 3) = (chain_id IS NOT NULL AND seq IS NOT NULL))',
  'CHECK (format IN (1, 2, 3, 4))',
];
const EVENT_CHECKS = ["CHECK (jsonb_typeof(details) = 'object')", "CHECK (kind IN ('tool_call', 'approval', 'config'))"];

/** The parts of an append a profile is split into (PostgreSQL 15 function names; inclusive shares). */
const PERF_PARTS: Array<[string, string]> = [
  ['commit (XLogFlush)', 'XLogFlush'],
  ['table CHECKs (ExecConstraints)', 'ExecConstraints'],
  ['  of them: stringToNode', 'stringToNode'],
  ['  of them: ExecPrepareExpr', 'ExecPrepareExpr'],
  ['domain checks (ExecEvalConstraintCheck)', 'ExecEvalConstraintCheck'],
  ['domain setup (InitDomainConstraintRef)', 'InitDomainConstraintRef'],
  ['domain_in (Bind, per value)', 'domain_in'],
  ['index inserts (ExecInsertIndexTuples)', 'ExecInsertIndexTuples'],
  ['executor start (ExecInitModifyTable)', 'ExecInitModifyTable'],
  ['heap_insert', 'heap_insert'],
  ['plan cache (GetCachedPlan)', 'GetCachedPlan'],
  ['nextval', 'nextval_internal'],
  ['partition routing (ExecFindPartition)', 'ExecFindPartition'],
];

/** Runs `work` while perf records `pid`'s call graphs; returns each PERF_PARTS symbol's inclusive share (%). */
async function profile(pid: number, work: () => Promise<void>): Promise<Map<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), 'h28t-perf-'));
  const out = join(dir, 'perf.data');
  try {
    const rec = spawn('perf', ['record', '-q', '-g', '-F', '2999', '-p', String(pid), '-o', out], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 300));
    await work();
    const done = new Promise((r) => rec.on('exit', r));
    rec.kill('SIGINT');
    await done;
    const report = execFileSync('perf', ['report', '-i', out, '--children', '--stdio', '--sort', 'symbol', '-g', 'none', '--percent-limit', '0.3'], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const shares = new Map<string, number>();
    for (const line of report.split('\n')) {
      const m = /^\s*([\d.]+)%\s+[\d.]+%\s+\[\.\]\s+(\S+)/.exec(line);
      if (m && !shares.has(m[2])) shares.set(m[2], Number(m[1]));
    }
    return shares;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function makeTables(c: pg.Client, s: string, variant: 'checks' | 'domains' | 'nochain' | 'none'): Promise<void> {
  await c.query(`CREATE SCHEMA ${s}`);
  await c.query(`CREATE TABLE ${s}.audit_batches (LIKE public.audit_batches INCLUDING DEFAULTS INCLUDING INDEXES)`);
  await c.query(`CREATE TABLE ${s}.audit_events (LIKE public.audit_events INCLUDING DEFAULTS) PARTITION BY RANGE (recorded_at)`);
  // Base types first (the migrated tables' columns are domains since 20261214100000000), then the variant's invariants.
  await c.query(`ALTER TABLE ${s}.audit_batches ALTER COLUMN event_count TYPE integer, ALTER COLUMN hash TYPE bytea, ALTER COLUMN prev_hash TYPE bytea, ALTER COLUMN seq TYPE bigint, ALTER COLUMN mark TYPE text, ALTER COLUMN format TYPE smallint`);
  await c.query(`ALTER TABLE ${s}.audit_events ALTER COLUMN kind TYPE text, ALTER COLUMN details TYPE jsonb`);
  await c.query(`CREATE TABLE ${s}.ev_now PARTITION OF ${s}.audit_events FOR VALUES FROM (date_trunc('month', now())) TO (date_trunc('month', now()) + interval '1 month')`);
  await c.query(`CREATE TABLE ${s}.ev_default PARTITION OF ${s}.audit_events DEFAULT`);
  await c.query(`ALTER TABLE ${s}.audit_events ADD PRIMARY KEY (id, recorded_at)`);
  await c.query(`CREATE INDEX ON ${s}.audit_events (identity_id, id)`);
  await c.query(`CREATE INDEX ON ${s}.audit_events (request_id) WHERE request_id IS NOT NULL`);
  await c.query(`CREATE INDEX ON ${s}.audit_events (approval_id) WHERE approval_id IS NOT NULL`);
  await c.query(`CREATE INDEX ON ${s}.audit_events USING brin (time)`);
  await c.query(`CREATE INDEX ON ${s}.audit_events USING brin (batch_id)`);
  if (variant === 'checks') {
    for (const k of BATCH_CHECKS) await c.query(`ALTER TABLE ${s}.audit_batches ADD ${k}`);
    for (const k of EVENT_CHECKS) await c.query(`ALTER TABLE ${s}.audit_events ADD ${k}`);
  } else if (variant !== 'none') {
    for (const [col, dom] of [['event_count', 'count'], ['hash', 'hash'], ['prev_hash', 'hash'], ['mark', 'mark'], ['seq', 'seq'], ['format', 'format']]) {
      await c.query(`ALTER TABLE ${s}.audit_batches ALTER COLUMN ${col} TYPE dom.${dom}`);
    }
    await c.query(`ALTER TABLE ${s}.audit_events ALTER COLUMN kind TYPE dom.kind, ALTER COLUMN details TYPE dom.details`);
    if (variant === 'domains') await c.query(`ALTER TABLE ${s}.audit_batches ADD ${BATCH_CHECKS[5]}`);
  }
}

async function main(): Promise<void> {
  const size = envInt('BENCH_BATCH', 3);
  const ops = envInt('BENCH_OPS', 2000);
  const rounds = envInt('BENCH_ROUNDS', 5);
  const sync = process.env.BENCH_SYNC === 'off' ? 'off' : 'on';
  console.log(`# audit-domains: control-database backend CPU per format-3 batch of ${size} events (synchronous_commit ${sync})`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_h28t_dom');
  const clients: pg.Client[] = [];
  try {
    await runMigrations(db.url);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    clients.push(admin);
    await admin.query('CREATE SCHEMA dom');
    await admin.query('CREATE DOMAIN dom.count AS integer CHECK (VALUE >= 0)');
    await admin.query('CREATE DOMAIN dom.hash AS bytea CHECK (octet_length(VALUE) = 32)');
    await admin.query("CREATE DOMAIN dom.mark AS text CHECK (VALUE = 'seal')");
    await admin.query('CREATE DOMAIN dom.seq AS bigint CHECK (VALUE >= 0)');
    await admin.query('CREATE DOMAIN dom.format AS smallint CHECK (VALUE IN (1, 2, 3, 4))');
    await admin.query("CREATE DOMAIN dom.kind AS text CHECK (VALUE IN ('tool_call', 'approval', 'config'))");
    await admin.query("CREATE DOMAIN dom.details AS jsonb CHECK (jsonb_typeof(VALUE) = 'object')");
    const variants = { checks: 'checks', domains: 'domains', 'domains, no CHECK': 'nochain', none: 'none' } as const;
    const conns: Array<{ name: string; c: pg.Client; pid: number; seq: number }> = [];
    for (const [name, v] of Object.entries(variants)) {
      const s = `v_${v}`;
      await makeTables(admin, s, v);
      const c = new pg.Client({ connectionString: db.url, options: `-c search_path=${s},public -c synchronous_commit=${sync} -c plan_cache_mode=force_generic_plan` });
      await c.connect();
      clients.push(c);
      conns.push({ name, c, pid: (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p, seq: 0 });
    }
    let n = 0;
    const st = chainValuesStatement(size);
    const run = (x: (typeof conns)[number]) => {
      const now = new Date();
      const values: unknown[] = [now.toISOString(), String(size), x.seq ? Buffer.alloc(32, 1) : null, Buffer.alloc(32, 2), '00000000-0000-4000-8000-000000000001', String(x.seq++), null, null];
      eventValues(Array.from({ length: size }, () => normalizeAuditRow(row(n++), () => now)), undefined, values);
      return x.c.query({ name: st.name, text: st.text, values });
    };
    const got = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const x of conns) {
        for (let i = 0; i < 50; i++) await run(x);
        const c0 = cpuNs(x.pid);
        for (let i = 0; i < ops; i++) await run(x);
        got.set(x.name, [...(got.get(x.name) ?? []), (cpuNs(x.pid) - c0) / 1000 / ops]);
      }
    }
    const med = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    const base = med(got.get('checks')!);
    console.log(table(['invariants', 'µs per batch (median)', '÷ checks', 'rounds'], [...got].map(([k, v]) => [k, med(v).toFixed(1), (med(v) / base).toFixed(3), v.map((x) => x.toFixed(0)).join(' ')])));
    console.log(machineLine());
    const perfOps = envInt('BENCH_PERF_OPS', 0);
    if (perfOps > 0) {
      const shares: Array<Map<string, number>> = [];
      for (const x of conns) shares.push(await profile(x.pid, async () => { for (let i = 0; i < perfOps; i++) await run(x); }));
      console.log(`\nperf record -g of each backend over ${perfOps} batches, inclusive share of its samples (%):`);
      console.log(table(['part', ...conns.map((x) => x.name)], PERF_PARTS.map(([label, sym]) => [label, ...shares.map((m) => (m.get(sym) ?? 0).toFixed(1))])));
      console.log(machineLine());
    }
  } finally {
    for (const c of clients) await c.end().catch(() => undefined);
    await db.drop();
  }
}

runBench(main);
