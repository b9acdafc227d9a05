/**
 * Shared harness for the red-team attack suites (defended.test.ts, found.test.ts): a governed gateway
 * on this machine's PostgreSQL with Chinook (demo-agent / demo-analyst, e-mail partially and phone
 * fully masked), rate limits lifted, a superuser client on the source database to read the real
 * state, helpers to classify an answer, and a second, narrow identity for isolation checks.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import type { ControlDb } from '../../../src/control/db';
import { openGovernanceAccess } from '../../../src/admin/governance-db';
import { syncConfiguredClaimRules } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';
import type { TokenIssuer } from '../../../generated/config-v1';
import { DbGovernanceStore } from '../../../src/governance/db-store';
import { describeAccessHandler, describeSourceHandler } from '../../../src/tools/handlers/describe';
import { listSourcesHandler, StoreSourceDirectory } from '../../../src/tools/handlers/list-sources';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import type { ToolCallContext, ToolOutcome } from '../../../src/tools/types';

export { callTool };
export type { GovernedEnv };

/** Rate limits high enough for hundreds of attack calls per file. */
export const NO_LIMITS = {
  rate_limits: { per_identity: { points: 1_000_000, window_seconds: 60 }, per_source: { points: 1_000_000, window_seconds: 60 } },
  // The attack files share one environment and leave their queued writes pending: the queue caps (issue 24 item 2) are not what they test.
  approvals: { max_pending_per_identity: 100_000, max_pending_per_source: 100_000 },
} as const;

/** The attack environment: the governed env plus a superuser client on the Chinook copy. */
export interface AttackEnv {
  env: GovernedEnv;
  admin: pg.Client;
  /** Cleartext contact details of customer 1 (read as superuser, never through the gateway). */
  secret: { email: string; phone: string };
  close(): Promise<void>;
}

export async function startAttackEnv(): Promise<AttackEnv> {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const env = await startGovernedEnv({ config: NO_LIMITS as any });
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  admin.on('error', () => undefined);
  await admin.connect();
  const r = await admin.query('SELECT email, phone FROM customer WHERE customer_id = 1');
  return {
    env,
    admin,
    secret: { email: r.rows[0].email, phone: r.rows[0].phone },
    async close() {
      await admin.end().catch(() => undefined);
      await env.close();
    },
  };
}

/** How the gateway answered one interlock_query call. */
export type Kind = 'rows' | 'queued' | 'refused' | 'invalid' | 'failed' | 'transport';

export interface Answer {
  kind: Kind;
  status: number;
  /** structuredContent.code for refusals and tool errors. */
  code?: string;
  rows: Record<string, unknown>[];
  /** structuredContent (or the JSON-RPC error) as sent. */
  sc: any;
  /** The whole JSON-RPC response, serialised (for leak checks). */
  raw: string;
}

/** Classifies a tools/call answer of the handshake dialect. */
export function classify(r: { status: number; body: any }): Answer {
  const raw = JSON.stringify(r.body);
  const res = r.body?.result;
  if (!res) return { kind: 'transport', status: r.status, rows: [], sc: r.body?.error, raw };
  const sc = res.structuredContent ?? {};
  if (sc.status === 'queued') return { kind: 'queued', status: r.status, rows: [], sc, raw };
  if (res.isError) {
    if (['forbidden', 'unauthorized', 'rate_limited', 'not_found', 'unavailable'].includes(sc.status)) return { kind: 'refused', status: r.status, code: sc.code, rows: [], sc, raw };
    if (sc.code === 'tool_execution_failed') return { kind: 'failed', status: r.status, code: sc.code, rows: [], sc, raw };
    return { kind: 'invalid', status: r.status, code: sc.code, rows: [], sc, raw };
  }
  return { kind: 'rows', status: r.status, rows: Array.isArray(sc.rows) ? sc.rows : [], sc, raw };
}

/** Runs one interlock_query on source chinook as `apiKey` (default: demo-agent). */
export async function query(a: AttackEnv, sql: string, extra: Record<string, unknown> = {}, apiKey?: string): Promise<Answer> {
  const r = await callTool(a.env, 'interlock_query', { source_id: 'chinook', sql, ...extra }, apiKey ?? a.env.apiKey);
  return classify(r);
}

/** A fingerprint of everything an attack could change in the source database. */
export async function sourceState(a: AttackEnv): Promise<string> {
  const r = await a.admin.query(`SELECT
    (SELECT count(*) FROM playlist)::text AS playlists,
    (SELECT coalesce(max(playlist_id), 0) FROM playlist)::text AS max_playlist,
    (SELECT count(*) FROM playlist_track)::text AS playlist_tracks,
    (SELECT md5(string_agg(name, ',' ORDER BY playlist_id)) FROM playlist) AS playlist_names,
    (SELECT count(*) FROM customer)::text AS customers,
    (SELECT md5(string_agg(coalesce(email, '') || coalesce(phone, ''), ',' ORDER BY customer_id)) FROM customer) AS contacts,
    (SELECT count(*) FROM employee)::text AS employees,
    (SELECT count(*) FROM pg_largeobject_metadata)::text AS lobs,
    (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace)::text AS relations,
    (SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace)::text AS functions`);
  return JSON.stringify(r.rows[0]);
}

/** Locks and session state held by the gateway's reader connections (advisory locks, odd settings). */
export async function readerSessions(a: AttackEnv): Promise<{ advisoryLocks: number; backends: number }> {
  const role = a.env.demo.readerRole;
  const locks = await a.admin.query(
    "SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid WHERE l.locktype = 'advisory' AND s.usename = $1",
    [role],
  );
  const b = await a.admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1', [role]);
  return { advisoryLocks: locks.rows[0].n, backends: b.rows[0].n };
}

/**
 * Creates a second identity whose only role reads `tables` (no describe, no write) on chinook and
 * returns its API key. Used to check that what one identity may not see is not disclosed.
 */
export async function narrowIdentity(a: AttackEnv, name: string, tables: string[]): Promise<{ id: string; apiKey: string }> {
  const identity = await createIdentity(a.env.db, name);
  await upsertRole(a.env.db, {
    name: `${name}-role`,
    statements: tables.map((t) => ({ effect: 'allow', action: 'read', resource: `public.${t}` })),
  });
  await grantRole(a.env.db, { identityId: identity.id, roleName: `${name}-role`, sourceId: 'chinook' });
  const key = await createApiKey(a.env.db, identity.id);
  a.env.gateway.store.invalidate('*');
  return { id: identity.id, apiKey: key.secret };
}

/**
 * Creates identity `name` holding one role `<name>-role` of `statements` on chinook (names not in the
 * catalogue accepted, as `--allow-unknown-names` does) and returns its API key's secret.
 */
export async function statementsAgent(a: AttackEnv, name: string, statements: Array<{ effect: string; action: string; resource: string }>): Promise<string> {
  const identity = await createIdentity(a.env.db, name);
  await upsertRole(a.env.db, { name: `${name}-role`, statements }, {}, { allowUnknownNames: true });
  await grantRole(a.env.db, { identityId: identity.id, roleName: `${name}-role`, sourceId: 'chinook' });
  a.env.gateway.store.invalidate('*');
  return (await createApiKey(a.env.db, identity.id)).secret;
}

/** True when `text` carries `value` verbatim (also JSON-escaped). */
export function leaks(text: string, value: string): boolean {
  if (!value) return false;
  return text.includes(value) || text.includes(JSON.stringify(value).slice(1, -1)) || text.includes(JSON.stringify(JSON.stringify(value)).slice(3, -3));
}

/** Runs `fn` on a fresh connection as `url`'s role (e.g. a stolen runtime credential), closed afterwards. */
export async function asRole<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** The SQLSTATE `sql` fails with on `c` ('42501' etc.), or 'ok' when it succeeds. */
export const sqlStateOf = (c: pg.Client, sql: string, params: unknown[] = []): Promise<string> => c.query(sql, params).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));

/** Resolves to `p`'s value, or to 'hung' when it has not settled within `ms` (the attack's bound). */
export function within<T>(p: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), ms)));
  return Promise.race([p, hung]).finally(() => clearTimeout(timer));
}

/**
 * Waits (bounded: 10 s) until some session of `pool`'s database waits for a lock (pg_stat_activity
 * wait_event_type 'Lock'); throws when none does. Used by the claim-sync races (rtcg, rths).
 */
export async function lockWaitSeen(pool: pg.Pool): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows: w } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
    if (w[0]!.n > 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('no session waited for a lock within 10 s');
}

/**
 * A gateway's start-up claim-rule sync (syncConfiguredClaimRules) with `issuers`, through a fresh
 * operator connection at `operatorUrl` (closed afterwards), the runtime pool `rt` and a silent logger.
 */
export async function startClaimSync(rt: ControlDb, operatorUrl: string, issuers: TokenIssuer[]) {
  const quiet = createLogger('silent', { write: () => undefined });
  const op = await openGovernanceAccess({ db: rt, operatorUrl, logger: quiet });
  try {
    return await syncConfiguredClaimRules({ governance: op, db: rt, issuers, logger: quiet });
  } finally {
    await op.close();
  }
}

/** What the gateway's tools give identity `identityId`/`name` on `sourceId`, read through a fresh DbGovernanceStore on `db`. */
export interface ToolAccess {
  /** Role names the store's grants give on the source (sorted). */
  roles: string[];
  /** Source ids interlock_list_sources answers with. */
  listed: string[];
  /** Source ids interlock_describe_access answers with. */
  described: string[];
  /** interlock_describe_source on the source (a governed call): 'result' or the refusal code. */
  describeSource: string;
}

/**
 * The access the gateway's tools give an identity on one source, as its loaders read the control
 * database (grantsForIdentity: interlock_effective_grants, task hcl): used by the claim-sync races
 * (rtcg, rths) to show a late claim grant row grants nothing.
 */
export async function toolAccess(db: ControlDb, identityId: string, name: string, sourceId: string): Promise<ToolAccess> {
  const store = new DbGovernanceStore(db, { ttlMs: 0 });
  const rateLimiter = memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } });
  const deps = { store, rateLimiter, catalog: () => null };
  const ctx = { requestId: 'r', apiKey: 'k', identity: { id: identityId, name, keyId: 'k1' }, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} } as ToolCallContext;
  const keys = (o: ToolOutcome) => (o.kind === 'result' ? Object.keys(o.structuredContent ?? {}).sort() : [`refused: ${(o as { code?: string }).code}`]);
  const d = await describeSourceHandler(deps)({ source_id: sourceId }, ctx);
  return {
    roles: (await store.grantsForIdentity(identityId)).filter((g) => g.sourceId === sourceId).map((g) => g.role.name).sort(),
    listed: keys(await listSourcesHandler(new StoreSourceDirectory(store))({}, ctx)),
    described: keys(await describeAccessHandler(deps)({}, ctx)),
    describeSource: d.kind === 'result' ? 'result' : String((d as { code?: string }).code),
  };
}
