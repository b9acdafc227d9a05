/**
 * Where a format-3 audit batch's control-database CPU goes (issue 28): the backend's CPU (/proc of its
 * pid) per batch of BENCH_BATCH (default 3) point-read events, for a ladder of statements, each one
 * round trip and one durable commit: a one-row INSERT into a plain table (the commit's floor); the
 * events alone through the format-3 unnest INSERT into audit_events (as indexed by the migrations),
 * into the current month's partition directly, into partitioned copies with audit_events' indexes
 * with and without the (source_id, id) B-tree (migration 20261205100000000), with the primary key and
 * BRIN only, and with BRIN only; the whole format-3 statement (batch row + events) without and with
 * the per-batch set_config; the VALUES form of the whole statement (chainValuesStatement). Variants alternate within each of BENCH_ROUNDS (5) rounds of BENCH_OPS
 * (1,000) batches; medians, with every round's figure. Run: `npx tsx bench/audit-v3-parts.ts`.
 */
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { appendAuditBatch } from '../src/audit/append';
import { CHAIN_APPEND_STATEMENT, chainValuesStatement, eventColumns, eventValues } from '../src/audit/chain';
import { normalizeAuditRow } from '../src/audit/event-text';
import type { AuditRowInput } from '../src/audit/types';
import { createTempDatabase } from '../test/helpers/pg';
import { measureStatements, valuesInsert, AUDIT_EVENT_COLS as COLS } from './audit-parts-lib';
import { envInt, machineLine, runBench } from './lib/stats';

const row = (i: number): AuditRowInput => ({ kind: 'tool_call', time: new Date().toISOString(), request_id: `req_${i.toString(16).padStart(24, '0')}`, identity_id: 'idn_0123456789abcdef0123', key_id: 'key_0123456789abcdef0123', tool: 'interlock_query', canonical_tool: 'interlock_query', dialect: '2025-11-25', protocol_version: '2025-11-25', decision: 'allowed', reason_code: null, source_id: 'chinook', action: 'read', fingerprint: '5f1c0a3b9d2e7f64', relations: ['public.track'], row_count: 1, duration_ms: 1.234, approval_id: null, operator: null, details: { cached: false } });

/** The events part of CHAIN_APPEND_STATEMENT into `table`, batch id 1; $1 recorded_at, $2–$21 the columns. */
const eventsInsert = (table: string) => `INSERT INTO ${table} (${COLS})
  SELECT u.kind, u.time, u.request_id, u.identity_id, u.key_id, u.tool, u.canonical_tool, u.dialect, u.protocol_version, u.decision,
      u.reason_code, u.source_id, u.action, u.fingerprint, u.relations::text[], u.row_count, u.duration_ms, u.approval_id, u.operator, u.details::jsonb, 1, $1::timestamptz
    FROM unnest($2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
      $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::bigint[], $18::float8[], $19::text[], $20::text[], $21::text[])
      WITH ORDINALITY AS u(kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
        reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, ord) ORDER BY u.ord`;


async function main(): Promise<void> {
  const size = envInt('BENCH_BATCH', 3);
  const ops = envInt('BENCH_OPS', 1000);
  const rounds = envInt('BENCH_ROUNDS', 5);
  console.log(`# audit-v3-parts: control-database backend CPU per batch of ${size} events`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_v3parts');
  try {
    await runMigrations(db.url);
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    const month = (await c.query<{ p: string }>("SELECT 'audit_events_p' || to_char(now(), 'YYYYMM') AS p")).rows[0].p;
    const from = "date_trunc('month', now())";
    await c.query('CREATE TABLE scratch (x int)');
    for (const [t, pk] of [['ev_lean', true], ['ev_brin', false], ['ev_src', true], ['ev_nosrc', true]] as const) {
      await c.query(`CREATE TABLE ${t} (LIKE audit_events INCLUDING DEFAULTS) PARTITION BY RANGE (recorded_at)`);
      const lo = (await c.query<{ d: string }>(`SELECT ${from}::text AS d`)).rows[0].d;
      const hi = (await c.query<{ d: string }>(`SELECT (${from} + interval '1 month')::text AS d`)).rows[0].d;
      await c.query(`CREATE TABLE ${t}_p PARTITION OF ${t} FOR VALUES FROM ('${lo}') TO ('${hi}')`);
      if (pk) await c.query(`ALTER TABLE ${t} ADD PRIMARY KEY (id, recorded_at)`);
      await c.query(`CREATE INDEX ON ${t} USING brin (time)`);
      await c.query(`CREATE INDEX ON ${t} USING brin (batch_id)`);
      if (t === 'ev_src' || t === 'ev_nosrc') {
        await c.query(`CREATE INDEX ON ${t} (identity_id, id)`);
        await c.query(`CREATE INDEX ON ${t} (approval_id) WHERE approval_id IS NOT NULL`);
        await c.query(`CREATE INDEX ON ${t} (request_id) WHERE request_id IS NOT NULL`);
      }
      if (t === 'ev_src') await c.query(`CREATE INDEX ON ${t} (source_id, id)`);
    }
    const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
    let n = 0;
    const columns = () => {
      const now = new Date();
      return eventColumns(Array.from({ length: size }, () => normalizeAuditRow(row(n++), () => now)));
    };
    const rowValues = () => {
      const now = new Date();
      return Array.from({ length: size }, () => normalizeAuditRow(row(n++), () => now)).flatMap((r) => [r.kind, r.time, r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect, r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms, r.approval_id, r.operator, JSON.stringify(r.details)]);
    };
    const v3 = () => {
      const cols = columns();
      return [new Date().toISOString(), String(size), Buffer.alloc(32, 1), Buffer.alloc(32, 2), '00000000-0000-4000-8000-000000000001', '7', null, null, ...cols];
    };
    const variants: Record<string, () => Promise<unknown>> = {
      'insert one row, plain table': () => c.query({ name: 'a', text: 'INSERT INTO scratch VALUES (1)' }),
      'events only → audit_events': () => c.query({ name: 'b', text: eventsInsert('audit_events'), values: [new Date().toISOString(), ...columns()] }),
      'events only → month partition': () => c.query({ name: 'c', text: eventsInsert(month), values: [new Date().toISOString(), ...columns()] }),
      'events only → with source B-tree (before)': () => c.query({ name: 'g', text: eventsInsert('ev_src'), values: [new Date().toISOString(), ...columns()] }),
      'events only → without it (after)': () => c.query({ name: 'h', text: eventsInsert('ev_nosrc'), values: [new Date().toISOString(), ...columns()] }),
      'events only → pkey + BRIN': () => c.query({ name: 'd', text: eventsInsert('ev_lean'), values: [new Date().toISOString(), ...columns()] }),
      'events only → BRIN only': () => c.query({ name: 'e', text: eventsInsert('ev_brin'), values: [new Date().toISOString(), ...columns()] }),
      'events only, VALUES → audit_events': () => c.query({ name: 'f', text: valuesInsert('audit_events', size), values: [new Date().toISOString(), ...rowValues()] }),
      'format 3, no set_config': () => c.query({ name: CHAIN_APPEND_STATEMENT.name + '_x', text: CHAIN_APPEND_STATEMENT.text, values: v3() }),
      'format 3 VALUES, no set_config (after)': () => {
        const now = new Date();
        const ev = eventValues(Array.from({ length: size }, () => normalizeAuditRow(row(n++), () => now)));
        const st = chainValuesStatement(size);
        return c.query({ name: st.name, text: st.text, values: [...v3().slice(0, 8), ...ev] });
      },
      'format 3 + set_config (before)': () => appendAuditBatch(c, { statement: CHAIN_APPEND_STATEMENT, values: v3() }, 2000),
    };
    await measureStatements(pid, variants, rounds, ops, size);
    await c.end();
  } finally {
    await db.drop();
  }
}

runBench(main);
