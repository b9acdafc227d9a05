/**
 * A governed gateway on this machine's PostgreSQL for integration and end-to-end tests: a fresh
 * control database, Chinook provisioned by the demo provisioner under unique names (database, reader
 * and writer roles), and the real gateway on 127.0.0.1 with a random port. `close()` removes all of it.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { ADMIN_URL, createTempDatabase, urlFor, type TempDatabase } from './pg';
import { openControlDb, type ControlDb } from '../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../src/control/config';
import { provisionDemo, type ProvisionedDemo } from '../../src/demo/provision';
import { startGovernedGateway, type GovernedGateway } from '../../src/gateway';
import { createLogger } from '../../src/observability/logger';
import { upsertRole } from '../../src/control/roles';
import { createIdentity, setIdentityAttributes } from '../../src/control/identities';
import { grantRole } from '../../src/control/grants';
import { createApiKey } from '../../src/control/keys';

/** A provisioned, running governed gateway. */
export interface GovernedEnv {
  url: string;
  apiKey: string;
  demo: ProvisionedDemo;
  db: ControlDb;
  gateway: GovernedGateway;
  /** Superuser URL of the Chinook copy (to check database state directly). */
  sourceUrl: string;
  /** URL of the control database (for the operator CLI, `--database-url`). */
  controlUrl: string;
  close(): Promise<void>;
}

/** Starts the environment. `config` overrides parts of the default configuration (e.g. rate limits); `port` (default 0, any free port) is the gateway's. */
export async function startGovernedEnv(opts: { config?: { [K in keyof ResolvedGatewayConfig]?: Partial<ResolvedGatewayConfig[K]> }; fixtures?: boolean; logger?: import('pino').Logger; port?: number; beforeOpen?: (control: TempDatabase) => Promise<void> } = {}): Promise<GovernedEnv> {
  const tag = randomBytes(4).toString('hex');
  const control: TempDatabase = await createTempDatabase('control');
  const databaseName = `il_chinook_${tag}`;
  const rolePrefix = `il_t_${tag}`;
  const logger = opts.logger ?? createLogger('silent');
  // opts.beforeOpen: runs on the new, empty control database before anything connects to it (e.g. ALTER DATABASE … SET).
  if (opts.beforeOpen) await opts.beforeOpen(control);
  const db = await openControlDb(control.url, { logger });
  const demo = await provisionDemo({ adminUrl: ADMIN_URL, controlDb: db, databaseName, rolePrefix, sourceId: 'chinook', identityName: 'demo-agent', logger });
  // Each section of opts.config is merged over the default section (so a test names only what it changes).
  const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig) as unknown as Record<string, unknown>;
  for (const [k, v] of Object.entries(opts.config ?? {})) config[k] = v && typeof v === 'object' && !Array.isArray(v) && config[k] && typeof config[k] === 'object' ? { ...(config[k] as object), ...v } : v;
  const gateway = await startGovernedGateway({ db, config: config as unknown as ResolvedGatewayConfig, host: '127.0.0.1', port: opts.port ?? 0, fixtures: opts.fixtures, logger });
  return {
    url: gateway.url,
    apiKey: demo.apiKey,
    demo,
    db,
    gateway,
    sourceUrl: urlFor(databaseName),
    controlUrl: control.url,
    async close() {
      await gateway.close(1000);
      await db.close();
      await control.drop();
      const admin = new pg.Client({ connectionString: ADMIN_URL });
      await admin.connect();
      try {
        await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [databaseName]);
        await admin.query(`DROP DATABASE IF EXISTS "${databaseName}"`);
        for (const r of [demo.readerRole, demo.writerRole]) await admin.query(`DROP ROLE IF EXISTS "${r}"`);
      } finally {
        await admin.end();
      }
    },
  };
}

/** Calls a tool over POST /mcp in the handshake dialect (2025-11-25) and returns the JSON-RPC response. */
export async function callTool(env: { url: string }, name: string, args: Record<string, unknown>, apiKey: string | null, extraHeaders: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', ...extraHeaders };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  const r = await fetch(env.url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } }) });
  const text = await r.text();
  const ct = r.headers.get('content-type') ?? '';
  const body = ct.startsWith('text/event-stream') ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6)) : JSON.parse(text);
  return { status: r.status, body };
}

/** Runs `sql` on the environment's Chinook copy as the superuser (to check database state directly). */
export async function sourceQuery<T = any>(env: { sourceUrl: string }, sql: string, params: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: env.sourceUrl });
  await c.connect();
  try {
    return (await c.query(sql, params)).rows;
  } finally {
    await c.end();
  }
}

/** The operator CLI in process against the environment's control database: exit code and the lines it wrote to out and err. */
export function operatorCli(env: { controlUrl: string }): (...args: string[]) => Promise<{ code: number; out: string[]; err: string[] }> {
  return async (...args) => {
    const { runCli } = await import('../../src/cli/main');
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(['--database-url', env.controlUrl, ...args], { out: (x) => void out.push(x), err: (x) => void err.push(x) });
    return { code, out, err };
  };
}

/** Calls the admin API (`/admin/v1` + path) of the environment's gateway with an operator token: status and JSON body. */
export function adminApi(env: { url: string }, token: () => string): (method: string, path: string, body?: unknown) => Promise<{ status: number; json: any }> {
  return async (method, path, body) => {
    const r = await fetch(`${new URL(env.url).origin}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${token()}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, json: await r.json() };
  };
}

/**
 * An identity `name` on the governed demo whose one role (`role`) lets it read only the playlists
 * named in its `names` attribute (`names` given) and write table playlist (approval still needed);
 * returns its API key. Used by the approval tests of row rules (issue 27, task hnu42a).
 */
export async function playlistOwnerKey(env: GovernedEnv, name: string, role: string, names: string[]): Promise<string> {
  await upsertRole(env.db, {
    name: role,
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.playlist', rows: 'name = ANY(identity.names)' },
      { effect: 'allow', action: 'write', resource: 'public.playlist' },
    ],
  });
  const who = await createIdentity(env.db, name);
  await setIdentityAttributes(env.db, name, { names });
  await grantRole(env.db, { identityId: who.id, roleName: role, sourceId: env.demo.sourceId });
  return (await createApiKey(env.db, who.id)).secret;
}
