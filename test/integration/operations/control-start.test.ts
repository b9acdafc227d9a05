/**
 * Issue 29, item 3: the gateway starts without its control database. It listens, answers /readyz
 * 503 {status: not_ready, reason: control_database_unavailable}, refuses governed calls with a tool
 * result (audit_unavailable), and becomes ready once the database answers, on the same address.
 * The database "arrives" when a TCP relay to the test PostgreSQL starts on the port the control URL
 * names (nothing listens there before).
 */
import net from 'node:net';
import pino from 'pino';
import { createTempDatabase, pgServer, type TempDatabase } from '../../helpers/pg';
import { callTool } from '../../helpers/governed';
import { freePort } from '../../helpers/pg-cluster';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { serveGovernedGateway, type ServingGateway } from '../../../src/gateway';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { searchAudit } from '../../../src/audit/writer';
import { createLogger } from '../../../src/observability/logger';

let control: TempDatabase;
let relay: net.Server | null = null;
let serving: ServingGateway | null = null;
let db: ControlDb | null = null;
const sockets = new Set<net.Socket>();

/** Relays every connection on 127.0.0.1:port to the test PostgreSQL server. */
async function startRelay(port: number): Promise<net.Server> {
  const target = pgServer();
  const s = net.createServer((client) => {
    const up = net.connect(target.port, target.host);
    for (const x of [client, up]) {
      sockets.add(x);
      x.on('close', () => sockets.delete(x));
      x.on('error', () => undefined);
    }
    client.pipe(up).pipe(client);
  });
  await new Promise<void>((r) => s.listen(port, '127.0.0.1', () => r()));
  return s;
}

beforeAll(async () => {
  control = await createTempDatabase('ctlstart');
});
afterAll(async () => {
  await serving?.close(500);
  await db?.close();
  for (const x of sockets) x.destroy();
  if (relay) await new Promise<void>((r) => relay!.close(() => r()));
  await control.drop();
});

test('without its control database the gateway listens not ready, refuses calls with a tool result, and becomes ready when the database arrives', async () => {
  const port = await freePort();
  const url = new URL(control.url);
  url.host = `127.0.0.1:${port}`;
  const controlUrl = url.toString();
  let attempts = 0;
  const logLines: Array<{ msg: string; reason?: string }> = [];
  const config = structuredClone(DEFAULT_CONFIG) as unknown as ResolvedGatewayConfig;
  serving = await serveGovernedGateway({
    openDb: async () => {
      attempts++;
      db = await openControlDb(controlUrl, { logger: createLogger('silent') });
      return db;
    },
    config,
    host: '127.0.0.1',
    port: 0,
    logger: pino({ level: 'info' }, { write: (line: string) => void logLines.push(JSON.parse(line) as { msg: string; reason?: string }) }),
    retryMs: 200,
    retryMaxMs: 500,
  });
  expect(serving.current()).toBeNull();
  const base = new URL(serving.url).origin;

  const notReady = await fetch(`${base}/readyz`);
  expect(notReady.status).toBe(503);
  expect(await notReady.json()).toEqual({ status: 'not_ready', reason: 'control_database_unavailable' });
  expect((await fetch(`${base}/healthz`)).status).toBe(200);

  const refused = await callTool({ url: serving.url }, 'interlock_list_sources', {}, 'il_live_whatever');
  expect(refused.status).toBe(200);
  expect(refused.body.result.isError).toBe(true);
  expect(refused.body.result.structuredContent).toMatchObject({ status: 'unavailable', code: 'audit_unavailable' });
  // The server log names the real reason, not a source (hgov item 4).
  expect(logLines.filter((l) => l.msg.startsWith('tool call refused')).map((l) => [l.msg, l.reason])).toEqual([['tool call refused: audit unavailable', 'audit_unavailable']]);
  // tools/list still answers (the catalogue does not need the database).
  const list = await fetch(serving.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }) });
  expect(list.status).toBe(200);
  expect(((await list.json()) as { result: { tools: { name: string }[] } }).result.tools.map((t: { name: string }) => t.name)).toContain('interlock_query');
  await new Promise((r) => setTimeout(r, 600));
  expect(attempts).toBeGreaterThanOrEqual(2);

  // The database arrives.
  relay = await startRelay(port);
  const arrived = Date.now();
  const gw = await serving.ready;
  expect(Date.now() - arrived).toBeLessThan(5000);
  expect(serving.current()).toBe(gw);
  expect(gw.url).toBe(serving.url);
  const ready = await fetch(`${base}/readyz`);
  expect(ready.status).toBe(200);
  expect(await ready.json()).toEqual({ status: 'ready' });

  // A governed call now runs and is audited.
  const who = await createIdentity(db!, 'after-start');
  const key = await createApiKey(db!, who.id);
  const ok = await callTool({ url: serving.url }, 'interlock_list_sources', {}, key.secret);
  expect(ok.status).toBe(200);
  expect(ok.body.result.isError).toBeFalsy();
  const events = (await searchAudit(db!, { limit: 10 })).events.filter((e) => e.kind === 'tool_call');
  expect(events).toHaveLength(1);
  expect(events[0]).toMatchObject({ identityId: who.id, decision: 'allowed' });
}, 40_000);
