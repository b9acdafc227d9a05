/**
 * Shared by bench/audit-v3-parts.ts and bench/audit-event-parts.ts (issue 28): the audit_events
 * column list, the events-only multi-row VALUES INSERT, and the measuring loop (backend CPU of one
 * connection per statement, variants alternating within rounds).
 */
import { procCpuMs } from './lib/cpu';
import { machineLine, table } from './lib/stats';

/** audit_events' stored columns in the order of the format-3 statements (ids from the sequences). */
export const AUDIT_EVENT_COLS = 'kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at';

/** The events as a multi-row VALUES list of `rows` rows into `table`, batch id 1: $1 recorded_at, twenty parameters per row from $2. */
export const valuesInsert = (table: string, rows: number) =>
  `INSERT INTO ${table} (${AUDIT_EVENT_COLS}) VALUES ${Array.from({ length: rows }, (_, r) => `(${Array.from({ length: 20 }, (_, k) => `$${2 + r * 20 + k}`).join(', ')}, 1, $1::timestamptz)`).join(', ')}`;

/**
 * Runs every variant `ops` times per round (after 50 unmeasured runs), variants alternating within
 * each of `rounds` rounds, and prints the backend `pid`'s CPU per run (µs; /proc, 10 ms ticks, so
 * the resolution is 10,000 / ops µs): median, per event (÷ `size`), and every round's figure; then
 * the machine line (load average after the runs).
 */
export async function measureStatements(pid: number, variants: Record<string, () => Promise<unknown>>, rounds: number, ops: number, size: number): Promise<void> {
  const got = new Map<string, number[]>();
  for (let r = 0; r < rounds; r++) {
    for (const [name, fn] of Object.entries(variants)) {
      for (let i = 0; i < 50; i++) await fn();
      const c0 = procCpuMs(pid);
      for (let i = 0; i < ops; i++) await fn();
      got.set(name, [...(got.get(name) ?? []), ((procCpuMs(pid) - c0) * 1000) / ops]);
    }
  }
  const med = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  console.log(table(['statement', 'µs per batch (median)', 'µs per event', 'rounds'], [...got].map(([k, v]) => [k, med(v).toFixed(1), (med(v) / size).toFixed(1), v.map((x) => x.toFixed(0)).join(' ')])));
  console.log(machineLine());
}
