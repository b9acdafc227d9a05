/**
 * The floor of any Node.js MCP gateway built on the design's own parts (node:http and `pg`), run as
 * a bench child for scenario 8 (issue 13): POST /mcp answers `tools/call` of one point-read tool
 * with the bench's point read ($1 = `track_id`, a named statement on a pool of the reader role) as
 * a JSON-RPC result whose text item and structuredContent carry the rows. Nothing else: no API key,
 * no dialect or header checks, no schema validation, no SQL analysis, no policy, no rate limit, no
 * redaction, no metrics.
 *
 * With BENCH_FLOOR_AUDIT_URL set, every answer also waits for its audit row to be committed on that
 * database (one writer, group commit: one multi-row INSERT per batch of waiting calls into an
 * unindexed, unchained table), the least a durable audit-before-answer can cost.
 *
 * With BENCH_FLOOR_GOVERNED set (issue 28, task h28f: the governed floor, side `node-floor-governed`),
 * still no governance JavaScript, but exactly the I/O InterLock does for the bench's point read:
 * - on the source, the preludes InterLock sends before the statement (BENCH_FLOOR_GOVERNED's
 *   `preludes`: the function guard, the hierarchy guard, the settings binding — whatever the
 *   gateway's PortalRead sends for that agent and policy, as named statements each with its own
 *   Bind/Execute), then the statement (Bind, Describe only until the connection knows its columns,
 *   Execute), then Sync: one round trip, on connections started with the reader's startup options
 *   (`options`: read-only, timeouts, the pinned lookup path);
 * - on the control database, InterLock's own trail (the bench's control database, migrated by
 *   InterLock): every answer waits for its tool_call event, built from `event` (a stored
 *   interlock_query event of the gateway: same columns, same details), committed by InterLock's own
 *   writer (src/audit/writer.ts GroupCommitAuditSink on openAuditPool: format-3 batches, the chain hash
 *   per batch, `lanes` commits in flight with the gateway's overlap policy; 1: one commit in flight).
 *
 * With BENCH_FLOOR_WORKERS = N > 1 (issue 28, the multi-process comparison) this process is a
 * node:cluster primary that creates the audit table, forks N workers serving the above on one shared
 * port (round-robin hand-out of connections by the primary), and prints "READY <url>" once all
 * listen, then "WORKERS <pid,pid,…>"; each worker has its own pools and its own group commit.
 *
 * Environment: BENCH_FLOOR_READER (JSON `pg.ClientConfig` of the reader role), BENCH_FLOOR_SQL (the
 * statement), BENCH_FLOOR_POOL (reader connections per process, default 5), BENCH_FLOOR_AUDIT_URL
 * (optional), BENCH_FLOOR_WORKERS (default 1). Prints "READY <url>" when listening.
 */
import cluster from 'node:cluster';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import type { ToolCallAuditEvent } from '../../src/audit/types';
import { GroupCommitAuditSink, openAuditPool } from '../../src/audit/writer';
import type { WireConnection } from '../../src/sources/postgres/wire';

/** The tool name the floor serves. */
export const FLOOR_TOOL = 'point_read';

interface AuditRow {
  tool: string;
  trackId: number;
  rows: number;
  ms: number;
}

/** One writer that commits every waiting row in one INSERT and then releases their answers. */
class GroupCommit {
  private queue: Array<{ row: AuditRow; done: (err?: Error) => void }> = [];
  private busy = false;

  constructor(private readonly pool: pg.Pool) {}

  /** Resolves once `row` is committed (synchronous_commit as the server sets it: on by default). */
  append(row: AuditRow): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ row, done: (err) => (err ? reject(err) : resolve()) });
      if (!this.busy) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.busy = true;
    while (this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      try {
        await this.pool.query({
          name: 'floor-audit',
          text: 'INSERT INTO bench_floor_audit (tool, track_id, row_count, duration_ms) SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::float8[])',
          values: [batch.map((b) => b.row.tool), batch.map((b) => b.row.trackId), batch.map((b) => b.row.rows), batch.map((b) => b.row.ms)],
        });
        for (const b of batch) b.done();
      } catch (err) {
        for (const b of batch) b.done(err as Error);
      }
    }
    this.busy = false;
  }
}

/**
 * The governed floor's configuration (BENCH_FLOOR_GOVERNED, JSON): the source preludes (text and text
 * parameters, in the order InterLock sends them), the reader's startup options, the template of the
 * gateway's audit event (`details` as the gateway stored them, mapped columns included) and the
 * writer lanes (default the gateway's, 2).
 */
export interface GovernedFloorConfig {
  preludes: Array<{ text: string; values: string[] }>;
  options?: string;
  event: Omit<ToolCallAuditEvent, 'requestId' | 'time' | 'durationMs'>;
  lanes?: number;
}

/** Per connection: the names parsed (by text) and the statement's columns once described. */
const governedConnections = new WeakMap<object, { names: Map<string, string>; fields: Array<{ name: string; parse: (v: string) => unknown }> | null }>();

/**
 * The governed floor's read as a pg Submittable: each prelude Parse (first time on the connection)
 * / Bind / Execute, then the statement's Parse / Bind / Describe (until known) / Execute, and Sync,
 * written in one go (one round trip, one implicit transaction), as src/sources/postgres/portal-read.ts
 * sends them. Rows are parsed with pg's own type parsers.
 */
class GovernedRead {
  private pending: number;
  rows: Record<string, unknown>[] = [];
  private err: unknown = null;
  private conn: { names: Map<string, string>; fields: Array<{ name: string; parse: (v: string) => unknown }> | null } | null = null;

  constructor(
    private readonly preludes: GovernedFloorConfig['preludes'],
    private readonly text: string,
    private readonly values: string[],
    private readonly done: (err: unknown, rows: Record<string, unknown>[]) => void,
  ) {
    this.pending = preludes.length;
  }

  submit(connection: WireConnection): void {
    let st = governedConnections.get(connection);
    if (!st) governedConnections.set(connection, (st = { names: new Map(), fields: null }));
    this.conn = st;
    const s = connection.stream;
    s.cork?.();
    try {
      const name = (text: string): string => {
        let n = st.names.get(text);
        if (n === undefined) {
          st.names.set(text, (n = `floor_g${st.names.size + 1}`));
          connection.parse({ name: n, text });
        }
        return n;
      };
      for (const p of this.preludes) {
        connection.bind({ portal: '', statement: name(p.text), values: p.values });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.bind({ portal: '', statement: name(this.text), values: this.values });
      if (!st.fields) connection.describe({ type: 'P', name: '' });
      connection.execute({ portal: '', rows: 0 });
      connection.sync();
    } finally {
      s.uncork?.();
    }
  }

  handleRowDescription(msg: { fields: Array<{ name: string; dataTypeID: number }> }): void {
    if (this.conn && !this.conn.fields) this.conn.fields = msg.fields.map((f) => ({ name: f.name, parse: pg.types.getTypeParser(f.dataTypeID, 'text') as (v: string) => unknown }));
  }

  handleDataRow(msg: { fields: Array<string | null> }): void {
    if (this.pending > 0 || !this.conn?.fields) return;
    const row: Record<string, unknown> = {};
    this.conn.fields.forEach((f, i) => (row[f.name] = msg.fields[i] === null ? null : f.parse(msg.fields[i] as string)));
    this.rows.push(row);
  }

  handleCommandComplete(): void {
    this.pending--;
  }

  handlePortalSuspended(): void {}
  handleEmptyQuery(): void {}

  handleError(err: unknown): void {
    this.err ??= err;
  }

  handleReadyForQuery(): void {
    this.done(this.err, this.rows);
  }
}

const AUDIT_TABLE_DDL = 'CREATE TABLE IF NOT EXISTS bench_floor_audit (occurred_at timestamptz NOT NULL DEFAULT now(), tool text NOT NULL, track_id int, row_count int NOT NULL, duration_ms float8 NOT NULL)';

/** The cluster primary of BENCH_FLOOR_WORKERS > 1: the audit table once, then N workers on one port. */
async function primary(n: number): Promise<void> {
  if (process.env.BENCH_FLOOR_AUDIT_URL) {
    const c = new pg.Client({ connectionString: process.env.BENCH_FLOOR_AUDIT_URL });
    await c.connect();
    await c.query(AUDIT_TABLE_DDL);
    await c.end();
  }
  cluster.setupPrimary({ execArgv: process.execArgv });
  let listening = 0;
  cluster.on('listening', (_w, address) => {
    if (++listening === n) process.stdout.write(`READY http://127.0.0.1:${address.port}/mcp\nWORKERS ${Object.values(cluster.workers ?? {}).map((w) => w!.process.pid).join(',')}\n`);
  });
  cluster.on('exit', () => Object.keys(cluster.workers ?? {}).length === 0 && process.exit(0));
  for (let i = 0; i < n; i++) cluster.fork();
  const stop = () => {
    for (const w of Object.values(cluster.workers ?? {})) w!.process.kill('SIGTERM');
  };
  process.on('SIGTERM', stop);
  process.on('disconnect', stop);
}

async function main(): Promise<void> {
  const workers = Number(process.env.BENCH_FLOOR_WORKERS ?? 1);
  if (cluster.isPrimary && workers > 1) return primary(workers);
  const governed = process.env.BENCH_FLOOR_GOVERNED ? (JSON.parse(process.env.BENCH_FLOOR_GOVERNED) as GovernedFloorConfig) : null;
  const reader = new pg.Pool({ ...(JSON.parse(process.env.BENCH_FLOOR_READER ?? '{}') as pg.PoolConfig), ...(governed?.options ? { options: governed.options } : {}), max: Number(process.env.BENCH_FLOOR_POOL ?? 5) });
  const sql = process.env.BENCH_FLOOR_SQL ?? '';
  let audit: { append(row: AuditRow): Promise<void> } | null = null;
  if (governed && process.env.BENCH_FLOOR_AUDIT_URL) {
    // InterLock's own writer on InterLock's own trail: the gateway's pool settings and commit policy.
    const sink = new GroupCommitAuditSink(openAuditPool(process.env.BENCH_FLOOR_AUDIT_URL, 2000), undefined, { commitTimeoutMs: 2000, lanes: governed.lanes ?? 2 });
    const ev = governed.event;
    audit = {
      append: (row) => sink.record({ ...ev, requestId: randomUUID(), time: new Date().toISOString(), durationMs: row.ms, details: { ...ev.details, row_count: row.rows } }),
    };
  } else if (process.env.BENCH_FLOOR_AUDIT_URL) {
    const control = new pg.Pool({ connectionString: process.env.BENCH_FLOOR_AUDIT_URL, max: 1 });
    if (cluster.isPrimary) await control.query(AUDIT_TABLE_DDL);
    audit = new GroupCommit(control);
  }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const started = performance.now();
      let id: unknown = null;
      const fail = (status: number, message: string) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id, error: { code: -32603, message } }));
      };
      let msg: { id?: unknown; method?: string; params?: { name?: string; arguments?: { track_id?: number } } };
      try {
        msg = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof msg;
      } catch {
        return fail(400, 'parse error');
      }
      id = msg.id ?? null;
      if (req.method !== 'POST' || msg.method !== 'tools/call' || msg.params?.name !== FLOOR_TOOL) return fail(400, 'only tools/call of point_read');
      const trackId = Number(msg.params.arguments?.track_id);
      const read: Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }> = governed
        ? reader.connect().then(
            (client) =>
              new Promise((resolve, reject) => {
                void client.query(
                  new GovernedRead(governed.preludes, sql, [String(trackId)], (err, rows) => {
                    client.release(err ? true : undefined);
                    if (err) reject(err);
                    else resolve({ rows, rowCount: rows.length });
                  }) as unknown as pg.QueryConfig,
                );
              }),
          )
        : reader.query({ name: 'floor-point', text: sql, values: [trackId] });
      read.then(
        async (r) => {
          if (audit) await audit.append({ tool: FLOOR_TOOL, trackId, rows: r.rowCount ?? 0, ms: performance.now() - started });
          const text = JSON.stringify(r.rows);
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text }], structuredContent: { rows: r.rows, row_count: r.rowCount } } }));
        },
        () => fail(500, 'query failed'),
      );
    });
  });
  server.keepAliveTimeout = 65_000;
  server.listen(0, '127.0.0.1', () => {
    if (cluster.isPrimary) process.stdout.write(`READY http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp\n`);
  });
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
  process.on('disconnect', () => process.exit(0));
}

if (require.main === module) void main();
