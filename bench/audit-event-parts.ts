/**
 * What one audit event costs the control database inside a format-3 batch (issue 28, h28b): the
 * backend's CPU (/proc of its pid) per batch of BENCH_BATCH (default 12: c=32's batch under the
 * 'auto' lane overlap) point-read events, stored by the multi-row VALUES form of the format-3
 * statement's events part (twenty parameters per event, one round trip, one durable commit), into
 * partitioned copies of audit_events that differ by one thing each: every index of audit_events
 * (as the migrations leave it), without the partial request_id B-tree, without the (identity_id, id)
 * B-tree, without both, unpartitioned with every index, details stored as text instead of jsonb (and
 * without the jsonb_typeof CHECK), and the whole format-3 VALUES statement (batch row + events) into
 * audit_events itself. Request ids are random, as the gateway's (`req_` + 12 random characters).
 * Variants alternate within each of BENCH_ROUNDS (3) rounds of BENCH_OPS (2,000) batches; medians,
 * with every round's figure. Run: `npx tsx bench/audit-event-parts.ts`.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { chainValuesStatement, eventValues } from '../src/audit/chain';
import { normalizeAuditRow } from '../src/audit/event-text';
import type { AuditRowInput } from '../src/audit/types';
import { createTempDatabase } from '../test/helpers/pg';
import { measureStatements, valuesInsert } from './audit-parts-lib';
import { envInt, machineLine, runBench } from './lib/stats';

const row = (i: number): AuditRowInput => ({ kind: 'tool_call', time: new Date().toISOString(), request_id: `req_${randomBytes(9).toString('base64url')}`, identity_id: `idn_${(i % 4).toString().padStart(20, '0')}`, key_id: 'key_0123456789abcdef0123', tool: 'interlock_query', canonical_tool: 'interlock_query', dialect: '2025-11-25', protocol_version: '2025-11-25', decision: 'allowed', reason_code: null, source_id: 'chinook', action: 'read', fingerprint: '5f1c0a3b9d2e7f64', relations: ['public.track'], row_count: 1, duration_ms: 1.234, approval_id: null, operator: null, details: { cached: false } });


async function main(): Promise<void> {
  const size = envInt('BENCH_BATCH', 12);
  const ops = envInt('BENCH_OPS', 2000);
  const rounds = envInt('BENCH_ROUNDS', 3);
  console.log(`# audit-event-parts: control-database backend CPU per batch of ${size} events, VALUES form`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_evparts');
  try {
    await runMigrations(db.url);
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    const lo = (await c.query<{ d: string }>("SELECT date_trunc('month', now())::text AS d")).rows[0].d;
    const hi = (await c.query<{ d: string }>("SELECT (date_trunc('month', now()) + interval '1 month')::text AS d")).rows[0].d;
    const copies: Record<string, { request: boolean; identity: boolean; partitioned: boolean; text: boolean }> = {
      ev_all: { request: true, identity: true, partitioned: true, text: false },
      ev_noreq: { request: false, identity: true, partitioned: true, text: false },
      ev_noident: { request: true, identity: false, partitioned: true, text: false },
      ev_neither: { request: false, identity: false, partitioned: true, text: false },
      ev_flat: { request: true, identity: true, partitioned: false, text: false },
      ev_text: { request: true, identity: true, partitioned: true, text: true },
    };
    for (const [t, o] of Object.entries(copies)) {
      await c.query(`CREATE TABLE ${t} (LIKE audit_events INCLUDING DEFAULTS${o.text ? '' : ' INCLUDING CONSTRAINTS'})${o.partitioned ? ' PARTITION BY RANGE (recorded_at)' : ''}`);
      if (o.text) await c.query(`ALTER TABLE ${t} ALTER COLUMN details DROP DEFAULT, ALTER COLUMN details TYPE text, ALTER COLUMN details SET DEFAULT '{}'`);
      if (o.partitioned) await c.query(`CREATE TABLE ${t}_p PARTITION OF ${t} FOR VALUES FROM ('${lo}') TO ('${hi}')`);
      await c.query(`ALTER TABLE ${t} ADD PRIMARY KEY (id, recorded_at)`);
      await c.query(`CREATE INDEX ON ${t} USING brin (time)`);
      await c.query(`CREATE INDEX ON ${t} USING brin (batch_id)`);
      await c.query(`CREATE INDEX ON ${t} (approval_id) WHERE approval_id IS NOT NULL`);
      if (o.identity) await c.query(`CREATE INDEX ON ${t} (identity_id, id)`);
      if (o.request) await c.query(`CREATE INDEX ON ${t} (request_id) WHERE request_id IS NOT NULL`);
    }
    const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
    let n = 0;
    const events = () => {
      const now = new Date();
      return eventValues(Array.from({ length: size }, () => normalizeAuditRow(row(n++), () => now)));
    };
    const variants: Record<string, () => Promise<unknown>> = {};
    for (const t of Object.keys(copies)) variants[`events → ${t}`] = () => c.query({ name: t, text: valuesInsert(t, size), values: [new Date().toISOString(), ...events()] });
    const st = chainValuesStatement(size);
    variants['whole format-3 VALUES → audit_events'] = () => c.query({ name: st.name, text: st.text, values: [new Date().toISOString(), String(size), Buffer.alloc(32, 1), Buffer.alloc(32, 2), '00000000-0000-4000-8000-000000000001', '7', null, null, ...events()] });
    variants['events → audit_events'] = () => c.query({ name: 'ae', text: valuesInsert('audit_events', size), values: [new Date().toISOString(), ...events()] });
    await measureStatements(pid, variants, rounds, ops, size);
    await c.end();
  } finally {
    await db.drop();
  }
}

runBench(main);
