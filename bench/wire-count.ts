/**
 * What one uncached point read sends to the source and the control database, message by message
 * (issue 28, h28x): a counting TCP relay sits between the compiled gateway and PostgreSQL for each
 * of the two databases; after a warm-up, BENCH_CALLS interlock_query point reads run at
 * BENCH_CONCURRENCY (default 8) and the relay's tallies of PostgreSQL protocol messages (frontend:
 * Parse, Bind, Describe, Execute, Sync, Query, Close…; backend: ParseComplete, RowDescription,
 * DataRow, CommandComplete, ReadyForQuery…) and bytes are printed per call. Background traffic in the
 * window (reloads, LISTEN notifications, rate-limit blocks, the audit writer) is counted with the
 * calls: it is part of what a call costs. The Node floor needs no relay: a named `pg` statement is
 * Bind, Describe, Execute, Sync (pg/lib/query.js). `WIRE_ROOT`
 * selects the checkout whose gateway runs. Run: `npm run -s build && npx tsx bench/wire-count.ts`.
 */
import net from 'node:net';
import path from 'node:path';
import { McpHttpClient, structuredResult } from './lib/http';
import { envInt, machineLine, table } from './lib/stats';
import { gatewayVars, ROOT, startServe, withBenchEnv } from './lib/env';
import { POINT_SQL, runGatewayPointReads } from './lib/point-read';

const FRONTEND: Record<string, string> = { P: 'Parse', B: 'Bind', D: 'Describe', E: 'Execute', S: 'Sync', Q: 'Query', C: 'Close', H: 'Flush', X: 'Terminate', p: 'Password', d: 'CopyData', c: 'CopyDone', f: 'CopyFail', F: 'FunctionCall' };
const BACKEND: Record<string, string> = { '1': 'ParseComplete', '2': 'BindComplete', '3': 'CloseComplete', T: 'RowDescription', D: 'DataRow', C: 'CommandComplete', Z: 'ReadyForQuery', n: 'NoData', t: 'ParameterDescription', s: 'PortalSuspended', E: 'ErrorResponse', N: 'NoticeResponse', A: 'Notification', S: 'ParameterStatus', K: 'BackendKeyData', R: 'Authentication', I: 'EmptyQuery' };

/** Message and byte tallies of one direction of a relay; `on` false while not counting. */
class Tally {
  counts = new Map<string, number>();
  bytes = 0;
  on = false;
  add(name: string, len: number): void {
    if (!this.on) return;
    this.counts.set(name, (this.counts.get(name) ?? 0) + 1);
    this.bytes += len;
  }
}

/** Splits a byte stream into PostgreSQL messages; the first frontend message of a connection (startup or SSLRequest) has no type byte. */
function messageReader(tally: Tally, names: Record<string, string>, untypedFirst: boolean): (b: Buffer) => void {
  let buf: Buffer = Buffer.alloc(0);
  let untyped = untypedFirst;
  return (chunk) => {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    for (;;) {
      if (untyped) {
        if (buf.length < 4) return;
        const len = buf.readInt32BE(0);
        if (buf.length < len) return;
        untyped = buf.readInt32BE(4) === 80877103; // an SSLRequest is followed by the startup message
        buf = buf.subarray(len);
        continue;
      }
      if (buf.length < 5) return;
      const len = buf.readInt32BE(1) + 1;
      if (buf.length < len) return;
      const t = String.fromCharCode(buf[0]);
      tally.add(names[t] ?? `?${t}`, len);
      buf = buf.subarray(len);
    }
  };
}

/** A relay on 127.0.0.1 to `port`, counting both directions. */
async function relay(port: number): Promise<{ port: number; fe: Tally; be: Tally; close(): void }> {
  const fe = new Tally();
  const be = new Tally();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    sockets.add(client).add(upstream);
    const readFe = messageReader(fe, FRONTEND, true);
    const readBe = messageReader(be, BACKEND, false);
    client.on('data', (b: Buffer) => {
      readFe(b);
      upstream.write(b);
    });
    upstream.on('data', (b: Buffer) => {
      readBe(b);
      client.write(b);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    fe,
    be,
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

function perCall(t: Tally, calls: number): string[][] {
  return [...t.counts].sort((a, b) => b[1] - a[1]).map(([n, c]) => [n, String(c), (c / calls).toFixed(3)]);
}

async function main(): Promise<void> {
  const root = path.resolve(process.env.WIRE_ROOT ?? ROOT);
  const c = envInt('BENCH_CONCURRENCY', 8);
  const seconds = envInt('BENCH_SECONDS', 3);
  console.log(`# wire-count: uncached point read, c=${c}, ${seconds} s, gateway from ${root}`);
  console.log(machineLine());
  const pgPort = 5432;
  const src = await relay(pgPort);
  const ctl = await relay(pgPort);
  try {
    await withBenchEnv({ sourceSettings: { port: src.port } }, async (env) => {
      const controlUrl = new URL(env.controlUrl);
      controlUrl.port = String(ctl.port);
      const sides: Array<{ label: string; start(): Promise<{ url: string; stop(): Promise<void> }> }> = [
        { label: 'interlock', start: () => startServe(gatewayVars(controlUrl.toString(), { cacheTtlMs: 1 }), [], root) },
      ];
      for (const side of sides) {
        const g = await side.start();
        const warm = new McpHttpClient(g.url, { apiKey: env.apiKey, maxSockets: 1 });
        for (let id = 1; id <= 64; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
        warm.close();
        await runGatewayPointReads([g.url], env.apiKey, c, { durationMs: 1000, warmupMs: 500 });
        for (const t of [src.fe, src.be, ctl.fe, ctl.be]) {
          t.counts.clear();
          t.bytes = 0;
          t.on = true;
        }
        const run = await runGatewayPointReads([g.url], env.apiKey, c, { durationMs: seconds * 1000, warmupMs: 0 });
        for (const t of [src.fe, src.be, ctl.fe, ctl.be]) t.on = false;
        const calls = run.allOps;
        console.log(`\n## ${side.label}: ${calls} calls counted (${run.errors} errors), ${((run.ops * 1000) / run.elapsedMs).toFixed(0)} calls/s`);
        for (const [db, r] of [['source', src], ['control', ctl]] as const) {
          console.log(`\n${db}: frontend ${(r.fe.bytes / calls).toFixed(0)} B/call, backend ${(r.be.bytes / calls).toFixed(0)} B/call`);
          console.log(table(['frontend message', 'count', 'per call'], perCall(r.fe, calls)));
          console.log(table(['backend message', 'count', 'per call'], perCall(r.be, calls)));
        }
        await g.stop();
      }
    });
  } finally {
    src.close();
    ctl.close();
  }
}

const exitWith = (code: number, err?: unknown) => {
  if (err) console.error(err);
  process.exit(code);
};
if (require.main === module) main().then(() => exitWith(0), (err: unknown) => exitWith(1, err));
