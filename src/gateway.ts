/**
 * The governed gateway: the MCP endpoint wired to the control database (identities, grants,
 * policies, approvals, audit), the SQL analyser, the source connectors, the rate limiter and the
 * cache. `interlock serve` and `interlock demo` call startGovernedGateway.
 */
import { createHmac } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import { getKeyPepper, listenControlChanges, type ControlDb, type ControlListener } from './control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from './control/config';
import type { ClientLimitSettings } from './transport/client-limits';
import { DbIdentityResolver } from './control/keys';
import { federatedIdentity } from './auth';
import { GroupCommitAuditSink, openAuditPool } from './audit/writer';
import { DbGovernanceStore } from './governance/db-store';
import type { SourceRecord } from './governance/store';
import { initSqlParser } from './sql/analyze';
import { SourceConnectorRegistry } from './sources/registry';
import type { PostgresSourceSettings } from './sources/postgres/connector';
import { listenGateway, type RunningGateway } from './server';
import type { GatewayAppOptions } from './transport/app';
import { interlockToolBindings } from './tools/registry';
import { listSourcesHandler, StoreSourceDirectory } from './tools/handlers/list-sources';
import { describeAccessHandler, describeSourceHandler } from './tools/handlers/describe';
import { queryHandler } from './pipeline/query';
import { discoverHandler } from './tools/handlers/discover';
import type { RelationName } from './sql/catalog-types';
import type { LiveRelationTree } from './sql/hierarchy';
import { relatedDocumentsHandler } from './tools/handlers/related';
import { approvalStatusHandler } from './tools/handlers/approval-status';
import { approvalLookup } from './approvals/status';
import { mountConsole } from './console/routes';
import { startWebhookDispatcher } from './approvals/webhooks';
import { documentsConnectorRequest } from './tools/handlers/documents-request';
import { postgresRateLimiter, type RateLimitSettings } from './pipeline/05-rate-limit';
import { CACHE_CHANNEL, ResultCache } from './pipeline/cache';
import { AnalysisCache } from './pipeline/analysis-cache';
import { sweepExpiredApprovals } from './control/approvals';
import { scanSource } from './control/scan';
import type { ConnectorProvider } from './pipeline/07-execute';
import { createLogger } from './observability/logger';
import { createOperationsApp, GatewayMetrics, mountOperations } from './observability/metrics';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { migrationStatus } from './control/db';
import type { OriginPolicy } from './transport/http-headers';
import protocol from '../spec/protocol-v1.json';
import type { ToolBinding } from './tools/types';

export { CACHE_CHANNEL };

/** Options of startGovernedGateway. */
export interface GovernedGatewayOptions {
  db: ControlDb;
  config: ResolvedGatewayConfig;
  /** Overrides config.listen. */
  host?: string;
  port?: number;
  /** Adds the official conformance suite's test-only fixture tools. Never in production. */
  fixtures?: boolean;
  logger?: Logger;
  /** How often SQL sources' catalogs are rescanned, in ms (default 15 minutes; 0 disables). */
  catalogRescanMs?: number;
  /** Extra route modules (deprecated routes, /v1, admin API), mounted before /mcp. */
  routes?: GatewayAppOptions['routes'];
}

/** A running governed gateway. */
export interface GovernedGateway extends RunningGateway {
  metrics: GatewayMetrics;
  store: DbGovernanceStore;
  connectors: SourceConnectorRegistry;
  cache: ResultCache;
  /** Cache of parsed, authorized statements (cleared on every control-table notification). */
  analysisCache: AnalysisCache;
  /** Base URL of the operations listener (config ops_listen), e.g. http://127.0.0.1:9464; absent when /metrics is served on listen. */
  opsUrl?: string;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

/** The Host/Origin guard from config: loopback names plus config.allowed_hosts; on a non-loopback bind with no list, any host. */
export function originPolicyFor(host: string, config: ResolvedGatewayConfig, logger?: Logger): OriginPolicy {
  if (!LOOPBACK.has(host) && config.allowed_hosts.length === 0) {
    logger?.warn({ host }, 'bound to a non-loopback address without allowed_hosts: the Host check is off; set allowed_hosts to the names clients use');
    return { allowedHosts: 'any', allowedOrigins: config.allowed_origins };
  }
  return { allowedHosts: [...protocol.http.defaultAllowedHosts, ...config.allowed_hosts], allowedOrigins: config.allowed_origins };
}

/** Starts the governed gateway and the background listeners; `close()` stops everything. */
export async function startGovernedGateway(opts: GovernedGatewayOptions): Promise<GovernedGateway> {
  const logger = opts.logger ?? createLogger(opts.config.log_level);
  await initSqlParser();
  const { db, config } = opts;
  const store = new DbGovernanceStore(db, {
    approvalTtlSeconds: config.approvals.ttl_seconds,
    auditCommitTimeoutMs: config.audit?.commit_timeout_ms ?? 2000,
    pendingCaps: { perIdentity: config.approvals.max_pending_per_identity ?? DEFAULT_CONFIG.approvals.max_pending_per_identity, perSource: config.approvals.max_pending_per_source ?? DEFAULT_CONFIG.approvals.max_pending_per_source },
  });
  // API keys, and access tokens of the configured issuers beside them (issue 26).
  let metricsRef: GatewayMetrics | null = null;
  const { resolver: identityResolver, surface: authSurface } = federatedIdentity(config.auth, new DbIdentityResolver(db, { logger }), db, { logger, onValidation: (o) => metricsRef?.observeTokenValidation(o) });
  const cache = new ResultCache({ ttlMs: config.cache.ttl_ms, maxBytes: config.cache.max_bytes });
  const analysisCache = new AnalysisCache();
  const registry = new SourceConnectorRegistry({ logger });
  const connectors: ConnectorProvider = { reader: (s) => registry.get(s.id, s.settings as unknown as PostgresSourceSettings) };
  const limits: RateLimitSettings = {
    perIdentity: { points: config.rate_limits.per_identity.points, windowSeconds: config.rate_limits.per_identity.window_seconds },
    perSource: { points: config.rate_limits.per_source.points, windowSeconds: config.rate_limits.per_source.window_seconds },
  };
  // Rate-limit counters live in the control database (shared by replicas); each replica claims them
  // in blocks (05-rate-limit.ts), and the claims are not worth a disk flush: their pool commits
  // asynchronously (a crash can forget the last few hundred milliseconds of claims, never grant
  // access). The audit keeps its durable commits.
  const limiterPool = new pg.Pool({ connectionString: db.url, max: 4, application_name: 'interlock-ratelimit', options: '-c synchronous_commit=off' });
  limiterPool.on('error', (err) => logger.warn({ component: 'rate-limit', code: (err as { code?: string }).code }, 'rate-limit connection failed'));
  // Tracked, so that every tools/call with an identity is charged whatever its outcome (issue 10, Build 6).
  const rateLimiter = await postgresRateLimiter(limiterPool, limits);
  const maskSecret = createHmac('sha256', await getKeyPepper(db)).update('interlock-mask-v1').digest('hex');
  const catalog = (s: { id: string }) => store.loadCatalog(s.id);

  // Registered source ids, the closed set of the metrics' source label (issue 10, Build 7).
  let sourceIds: ReadonlySet<string> = new Set();
  const refreshSourceIds = () =>
    store.listSources().then(
      (all) => void (sourceIds = new Set(all.map((s) => s.id))),
      (err: unknown) => logger.warn({ code: (err as { code?: string }).code }, 'could not list sources for metric labels'),
    );
  await refreshSourceIds();
  const listeners: ControlListener[] = [];
  listeners.push(
    await listenControlChanges(db, (table) => {
      store.invalidate(table);
      analysisCache.clear();
      if (table === '*' || table === 'sources') void refreshSourceIds();
      if (table === '*' || table === 'api_keys' || table === 'identities' || table === 'grants') identityResolver.invalidate();
    }, logger),
  );
  listeners.push(await listenChannel(db.url, CACHE_CHANNEL, (sourceId) => cache.invalidateSource(sourceId), logger));

  const discovery = {
    store,
    rateLimiter,
    db,
    maskSecret,
    // Mapped relations follow the live relation hierarchy (issue 22 item 1; red team rt1 RT1-6).
    liveTrees: async (source: SourceRecord, relations: readonly RelationName[]) => {
      const c = connectors.reader(source);
      if (!c.relationTrees) return new Map<string, LiveRelationTree>();
      return c.relationTrees(relations, {});
    },
  };
  const tools: ToolBinding[] = interlockToolBindings({
    interlock_query: queryHandler({ store, connectors, rateLimiter, cache, analysisCache, catalog, maskSecret, connectorRequest: documentsConnectorRequest(discovery) }),
    interlock_discover: discoverHandler(discovery),
    interlock_related_documents: relatedDocumentsHandler(discovery),
    interlock_list_sources: listSourcesHandler(new StoreSourceDirectory(store), rateLimiter),
    interlock_describe_access: describeAccessHandler({ store, rateLimiter, catalog }),
    interlock_describe_source: describeSourceHandler({ store, rateLimiter, catalog }),
    interlock_approval_status: approvalStatusHandler({ lookup: approvalLookup(db), rateLimiter }),
  });
  if (opts.fixtures) {
    // Test-only pack, loaded only on explicit request.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { conformanceFixtureTools } = require('./fixtures/conformance-tools') as typeof import('./fixtures/conformance-tools');
    tools.unshift(...conformanceFixtureTools());
  }
  const ops = {
    ready: async () => (await migrationStatus(db)).upToDate,
    circuitStates: () => registry.states(),
    poolStats: () => registry.poolStats(),
    pendingApprovals: async () => (await db.pool.query("SELECT count(*)::int AS n FROM approvals WHERE state = 'pending'")).rows[0].n as number,
    cacheStats: () => ({ hits: cache.hits, misses: cache.misses, entries: cache.size }),
  };
  const toolNames: ReadonlySet<string> = new Set(tools.map((t) => t.canonical));
  const metrics = new GatewayMetrics(ops, { tools: () => toolNames, sources: () => sourceIds });
  metricsRef = metrics;
  // The audit writer has its own connections, bounded by the commit timeout (fail closed, issue 11).
  const auditCommitMs = config.audit?.commit_timeout_ms ?? 2000;
  const auditPool = openAuditPool(db.url, auditCommitMs, logger);
  const auditSink = new GroupCommitAuditSink(auditPool, logger, { commitTimeoutMs: auditCommitMs });
  const host = opts.host ?? config.listen.host;
  // Operations endpoints: on their own listener when ops_listen is set (issue 10, Build 8), else beside /mcp.
  const opsServer = config.ops_listen ? await listenOperations(createOperationsApp(metrics, ops, originPolicyFor(config.ops_listen.host ?? '127.0.0.1', config, logger), logger), config.ops_listen.host ?? '127.0.0.1', config.ops_listen.port) : null;
  const running = await listenGateway({
    healthz: !opsServer,
    routes: [...(opsServer ? [] : [(app: import('express').Express) => mountOperations(app, metrics, ops, originPolicyFor(host, config))]), ...(require('./http') as typeof import('./http')).httpRoutes({ db, logger, circuitStates: () => registry.states(), connectors: registry, originPolicy: originPolicyFor(host, config) }), (app) => mountConsole(app, { db, connectors: registry, originPolicy: originPolicyFor(host, config), logger, sessions: consoleSessionTimeouts(config) }), ...(opts.routes ?? [])], // eslint-disable-line @typescript-eslint/no-require-imports
    observe: (e) => metrics.observeToolCall(e),
    rateLimiter,
    clientLimits: clientLimitSettings(config.client_limits ?? DEFAULT_CONFIG.client_limits),
    answerWriteTimeoutMs: config.client_limits?.answer_write_timeout_ms ?? DEFAULT_CONFIG.client_limits.answer_write_timeout_ms,
    observeRequest: (m, d, s, sec) => metrics.observeRequest(m, d, s, sec),
    tools,
    identityResolver,
    authSurface,
    audit: auditSink,
    originPolicy: originPolicyFor(host, config, logger),
    logger,
    host,
    port: opts.port ?? config.listen.port,
    requestTimeoutMs: config.listen.request_timeout_ms,
    headersTimeoutMs: config.listen.headers_timeout_ms,
    tls: config.listen.tls,
    trustProxy: config.trust_proxy ?? false,
    instructions: 'InterLock governs access to an organisation\'s data. Call interlock_list_sources, then interlock_describe_access, then interlock_query. Writes are queued for human approval: never retry a queued write.',
  });
  // Approval notifications (config notifications.webhooks).
  const webhooks = await startWebhookDispatcher({ db, webhooks: config.notifications?.webhooks ?? [], logger, coalesceQueuedAt: config.notifications?.coalesce_queued_at ?? DEFAULT_CONFIG.notifications.coalesce_queued_at });
  // Housekeeping: expire overdue approvals every approvals.sweep_interval_ms, at most sweep_batch per
  // tick and one tick at a time (issue 24 item 5); rescan SQL catalogs every catalog_rescan_ms.
  const timers: NodeJS.Timeout[] = [];
  timers.push(setInterval(() => void refreshSourceIds(), 30_000));
  let sweeping = false;
  const sweep = () => {
    if (sweeping) return;
    sweeping = true;
    sweepExpiredApprovals(db, new Date(), config.approvals.sweep_batch ?? DEFAULT_CONFIG.approvals.sweep_batch)
      .then((expired) => expired.length > 0 && logger.info({ component: 'approvals', expired: expired.length }, 'approvals expired'))
      .catch((err) => logger.warn({ err: String(err) }, 'approval expiry sweep failed'))
      .finally(() => {
        sweeping = false;
      });
  };
  timers.push(setInterval(sweep, config.approvals.sweep_interval_ms ?? DEFAULT_CONFIG.approvals.sweep_interval_ms));
  const rescanMs = opts.catalogRescanMs ?? 15 * 60_000;
  if (rescanMs > 0) {
    timers.push(
      setInterval(() => {
        void (async () => {
          for (const s of await store.listSources()) {
            if (s.type !== 'postgres' || !s.enabled) continue;
            await scanSource(db, s.id).catch((err) => logger.warn({ sourceId: s.id, code: (err as { code?: string }).code }, 'periodic catalog scan failed'));
          }
        })();
      }, rescanMs),
    );
  }
  for (const t of timers) t.unref();
  const close = running.close;
  return {
    ...running,
    metrics,
    store,
    connectors: registry,
    cache,
    analysisCache,
    opsUrl: opsServer?.url,
    async close(deadlineMs?: number) {
      for (const t of timers) clearInterval(t);
      await close(deadlineMs);
      if (opsServer) {
        opsServer.server.closeAllConnections();
        await new Promise<void>((resolve) => opsServer.server.close(() => resolve()));
      }
      await webhooks.close();
      await Promise.allSettled(listeners.map((l) => l.close()));
      await identityResolver.close();
      await registry.closeAll();
      await limiterPool.end().catch(() => undefined);
      // Every answer has waited for its event; the writer's chains end with their seals (issue 28).
      await auditSink.close().catch(() => undefined);
      await auditPool.end().catch(() => undefined);
    },
  };
}

/** config console as the console's session timeouts (defaults for a config without the section). */
function consoleSessionTimeouts(config: ResolvedGatewayConfig): { idleSeconds: number; absoluteSeconds: number } {
  const c = config.console ?? DEFAULT_CONFIG.console;
  return { idleSeconds: c.session_idle_timeout_seconds, absoluteSeconds: c.session_absolute_timeout_seconds };
}

/** config client_limits as ClientLimitSettings. */
function clientLimitSettings(c: ResolvedGatewayConfig['client_limits']): ClientLimitSettings {
  return {
    keyless: { points: c.keyless.points, windowSeconds: c.keyless.window_seconds },
    streamsPerAddress: c.streams_per_address,
    streamsPerIdentity: c.streams_per_identity,
    bodyReadsPerAddress: c.body_reads_per_address,
    bodyBytesInFlight: c.body_bytes_in_flight,
  };
}

/** Listens with the operations app on host:port; resolves with the server and its base URL. */
async function listenOperations(app: import('express').Express, host: string, port: number): Promise<{ server: Server; url: string }> {
  const server: Server = await new Promise((resolve, reject) => {
    const s = app.listen(port, host);
    s.once('listening', () => resolve(s));
    s.once('error', reject);
  });
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return { server, url: `http://${shownHost}:${(server.address() as AddressInfo).port}` };
}

/** LISTENs on `channel` with a dedicated connection, reconnecting after errors (1 s back-off). */
export async function listenChannel(url: string, channel: string, onPayload: (payload: string) => void, logger?: Logger): Promise<ControlListener> {
  let stopped = false;
  let client: pg.Client | null = null;
  const connect = async () => {
    const c = new pg.Client({ connectionString: url, application_name: `interlock-${channel}` });
    c.on('notification', (n) => {
      if (n.channel === channel && n.payload) onPayload(n.payload);
    });
    c.on('error', () => {
      if (stopped) return;
      logger?.warn({ channel }, 'listener lost its connection; reconnecting');
      client = null;
      setTimeout(() => void connect().catch(() => undefined), 1000).unref();
    });
    await c.connect();
    await c.query(`LISTEN ${channel}`);
    client = c;
  };
  await connect();
  return {
    async close() {
      stopped = true;
      await client?.end().catch(() => undefined);
    },
  };
}
