/**
 * The governed gateway: the MCP endpoint wired to the control database (identities, grants,
 * policies, approvals, audit), the SQL analyser, the source connectors, the rate limiter and the
 * cache. `interlock serve` and `interlock demo` call startGovernedGateway.
 */
import { createHmac } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import { getKeyPepper, listenControlChanges, listenNotifications, type ControlDb, type ControlListener } from './control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from './control/config';
import type { ClientLimitSettings } from './transport/client-limits';
import { CapacityLimiter, DEFAULT_CAPACITY } from './transport/capacity';
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
import { rowViewProvisioner } from './pipeline/row-views';
import { ROW_VIEW_STALE_SQLSTATE } from './pipeline/row-rules';
import { discoverHandler } from './tools/handlers/discover';
import { DiscoverySearchSlots } from './discovery/search-slots';
import type { RelationName } from './sql/catalog-types';
import type { LiveRelationTree } from './sql/hierarchy';
import { relatedDocumentsHandler } from './tools/handlers/related';
import { approvalStatusHandler } from './tools/handlers/approval-status';
import { approvalLookup } from './approvals/status';
import { mountConsole } from './console/routes';
import { openGovernanceAccess, type GovernanceAccess } from './admin/governance-db';
import type { TokenIssuer } from '../generated/config-v1';
import { listConfiguredClaimGrants, missingClaimGrants, MISSING_CLAIM_RULE_FIX, OTHER_ISSUER_RULES_NOTE, replaceConfiguredClaimGrants, type ClaimRulesSync, type ConfiguredClaimGrant } from './control/claim-rules';
import { startWebhookDispatcher } from './approvals/webhooks';
import { documentsConnectorRequest } from './tools/handlers/documents-request';
import { postgresRateLimiter, type RateLimitSettings } from './pipeline/05-rate-limit';
import { CACHE_CHANNEL, ResultCache } from './pipeline/cache';
import { AnalysisCache } from './pipeline/analysis-cache';
import { sweepExpiredApprovals } from './control/approvals';
import { startPendingSealer } from './audit/pending';
import { scanSource } from './control/scan';
import type { ConnectorProvider } from './pipeline/07-execute';
import { createLogger } from './observability/logger';
import { logThrottle } from './observability/log-throttle';
import { createOperationsApp, GatewayMetrics, mountOperations } from './observability/metrics';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CONTROL_CONNECT_TIMEOUT_MS, MigrationsPendingError, migrationStatus } from './control/db';
import { controlPool } from './control/targets';
import { ControlError } from './control/errors';
import { sendReadiness, type NotReadyReason } from './observability/metrics';
import { errorBodyHandler, healthz, hostOriginGuard, unknownRoute } from './transport/http-guard';
import express from 'express';
import type { OriginPolicy } from './transport/http-headers';
import protocol from '../spec/protocol-v1.json';
import type { ToolBinding } from './tools/types';
import { auditKeyring, type AuditKeyring } from './audit/key';
import { ownsKeyedTrail, registerAuditKeyIds } from './audit/keyed-trail';

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
  /** Longest run of one discovery search statement, in ms (default DISCOVERY_SEARCH_TIMEOUT_MS, 15 s; src/discovery/search-slots.ts). */
  discoverySearchTimeoutMs?: number;
  /** Extra route modules (deprecated routes, /v1, admin API), mounted before /mcp. */
  routes?: GatewayAppOptions['routes'];
  /** A listening server to take over (the standby's; see serveGovernedGateway) instead of opening one. */
  server?: Server;
  /**
   * The audit keys (src/audit/key.ts), asked once the control database is open (the embedded one's
   * generated key lives in its data dir). Absent: auditKeyring(config.audit). With a signing key the
   * writer lanes write chain format 5 (keyed), else format 3.
   */
  auditKeys?: () => AuditKeyring;
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
  /** Admission by capacity (issue 29; src/transport/capacity.ts): its limit, calls in flight and queued; absent when admission.enabled is false. */
  capacity?: CapacityLimiter;
  /**
   * Resolves once no catalogue rescan the gateway started itself (a statement refused
   * `catalog_stale`, task hf5; an approved write's guard, task hw) runs or waits to run, for any
   * source (at once when none does). Never rejects: a failed rescan counts as ended. Tests use it to
   * know which snapshot a later source change comes after (task flake47).
   */
  rescansIdle(): Promise<void>;
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
  // The audit keys (the control database is open): the writer lanes' and the queued writes' tags.
  const auditKeys = opts.auditKeys ? opts.auditKeys() : auditKeyring(config.audit);
  const store = new DbGovernanceStore(db, {
    auditKey: auditKeys.signing,
    approvalTtlSeconds: config.approvals.ttl_seconds,
    auditCommitTimeoutMs: config.audit?.commit_timeout_ms ?? 2000,
    pendingCaps: { perIdentity: config.approvals.max_pending_per_identity ?? DEFAULT_CONFIG.approvals.max_pending_per_identity, perSource: config.approvals.max_pending_per_source ?? DEFAULT_CONFIG.approvals.max_pending_per_source },
  });
  // API keys, and access tokens of the configured issuers beside them (issue 26).
  let metricsRef: GatewayMetrics | null = null;
  const { resolver: identityResolver, surface: authSurface, subjects: tokenSubjects } = federatedIdentity(config.auth, new DbIdentityResolver(db, { logger }), db, {
    logger,
    onValidation: (o) => metricsRef?.observeTokenValidation(o),
    // A sign-in that took a claim grant back is authorised without it (red team rt48d R6), not from
    // the grants cached until the grants notification arrives.
    onClaimGrantsSynced: (identityId) => store.dropGrants(identityId),
  });
  const cache = new ResultCache({ ttlMs: config.cache.ttl_ms, maxBytes: config.cache.max_bytes });
  const analysisCache = new AnalysisCache();
  const registry = new SourceConnectorRegistry({ logger });
  const connectors: ConnectorProvider = { reader: (s) => registry.get(s.id, s.settings as unknown as PostgresSourceSettings) };
  // Row views (issue 27) are created by the source's writer role; without one, ruled reads are refused.
  const rowViews = rowViewProvisioner(
    async (s, sql) => {
      await registry.get(s.id, s.settings as unknown as PostgresSourceSettings).write(sql, []);
    },
    // The operator's log gets the server's own reason (e.g. "permission denied for database"): agents never see it.
    // A view that now resolves an object its table or original does not (rt48c K3, K5) is fixed by a
    // rescan, which prints the names qualified: started here, at most once a minute per source.
    (sourceId, view, err) => (void ((err as { sqlState?: string })?.sqlState === ROW_VIEW_STALE_SQLSTATE && rowViewRescans(sourceId) !== null && rescanStale(sourceId).catch(() => undefined)), logger.warn({ source_id: sourceId, view, err: (err as Error)?.message, sqlstate: (err as { sqlState?: string })?.sqlState, reason: ((err as { cause?: unknown })?.cause as Error | undefined)?.message }, 'row view could not be created: row-ruled tables of this source are unreadable until it can (the writer role must own schema interlock_rows or have CREATE on the database)')),
  );
  const rowViewRescans = logThrottle(60_000);
  const limits: RateLimitSettings = {
    perIdentity: { points: config.rate_limits.per_identity.points, windowSeconds: config.rate_limits.per_identity.window_seconds },
    perSource: { points: config.rate_limits.per_source.points, windowSeconds: config.rate_limits.per_source.window_seconds },
  };
  // Rate-limit counters live in the control database (shared by replicas); each replica claims them
  // in blocks (05-rate-limit.ts), and the claims are not worth a disk flush: their pool commits
  // asynchronously (a crash can forget the last few hundred milliseconds of claims, never grant
  // access). The audit keeps its durable commits.
  const limiterPool = controlPool(db.url, { max: 4, application_name: 'interlock-ratelimit', options: '-c synchronous_commit=off' });
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
      // identity_subjects: a token's cached resolution names the identity its subject was linked to (task hfix).
      if (table === '*' || table === 'api_keys' || table === 'identities' || table === 'grants' || table === 'claim_mappings' || table === 'configured_claim_grants' || table === 'identity_subjects') identityResolver.invalidate();
    }, logger),
  );
  // Invalidations sent while the listener was away are lost: after a reconnect the whole result cache goes.
  listeners.push(await listenChannel(db.url, CACHE_CHANNEL, (sourceId) => cache.invalidateSource(sourceId), logger, () => cache.clear()));

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
    // Mapped rows of ruled relations are filtered against the source through the row views (issue 27 item 3).
    rowReads: { connectors, rowViews },
    // One set of search slots for both discovery tools: their ranking keeps to a share of the control pool (rt49b D1).
    searchSlots: new DiscoverySearchSlots(undefined, undefined, undefined, opts.discoverySearchTimeoutMs),
  };
  const permissionLog = logThrottle(60_000);
  const goneLog = logThrottle(60_000);
  // Task hf5: a user function changed since the scan, or an outdated snapshot. One rescan of a source at a time; another
  // asked for while one runs is run once after it (a change may have landed during the scan).
  // The promise settles when a scan begun after the request has ended (rejected when it failed):
  // an approved write refused catalog_stale waits for it (task hw); reads do not.
  const rescans = new Map<string, { again: boolean; waiters: Array<(err: unknown) => void> }>();
  /** Told when `rescans` empties (GovernedGateway.rescansIdle). */
  const idleWaiters: Array<() => void> = [];
  const rescansIdle = (): Promise<void> => (rescans.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => idleWaiters.push(resolve)));
  const staleLog = logThrottle(60_000);
  const rescanStale = (sourceId: string): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const settle = (err: unknown) => (err === null ? resolve() : reject(err));
      const running = rescans.get(sourceId);
      if (running) {
        running.again = true;
        running.waiters.push(settle);
        return;
      }
      const state = { again: false, waiters: [settle] };
      rescans.set(sourceId, state);
      const run = (): void => {
        state.again = false;
        const waiting = state.waiters.splice(0);
        scanSource(db, sourceId)
          .then(() => store.markCatalogStale(sourceId))
          .then(
            () => waiting.forEach((w) => w(null)),
            (err: unknown) => {
              logger.warn({ source_id: sourceId, code: (err as { code?: string }).code }, 'catalog rescan of a stale snapshot failed');
              waiting.forEach((w) => w(err ?? new Error('catalog rescan failed')));
            },
          )
          .finally(() => {
            if (state.again) return run();
            rescans.delete(sourceId);
            if (rescans.size === 0) idleWaiters.splice(0).forEach((w) => w());
          });
      };
      run();
    });
  // An approved write its guard refused (task hw): the same one-at-a-time rescan, awaited by the approval.
  const rescanForApproval = (f: { sourceId: string }): Promise<void> => rescanStale(f.sourceId);
  const tools: ToolBinding[] = interlockToolBindings({
    interlock_query: queryHandler({
      store, connectors, rateLimiter, cache, analysisCache, catalog, maskSecret, rowViews, connectorRequest: documentsConnectorRequest(discovery),
      // One line per source and relation a minute: an agent repeating the read must not flood the log (rtn4).
      onSourcePermissionDenied: (f) => {
        const repeated = permissionLog(`${f.sourceId}\u0000${f.object ?? ''}`);
        if (repeated === null) return;
        logger.warn({ source_id: f.sourceId, relation: f.object, sqlstate: '42501', request_id: f.requestId, ...(repeated ? { repeated_since_last: repeated } : {}) }, 'the source refused its reader role access to a relation a governed read needs (insufficient_privilege): grant the reader role SELECT on it (interlock source scan lists what the reader cannot read); the agent was told source_permission_denied');
      },
      // A relation dropped on the source since the scan (rtn4 item 2): the catalogue is stale; one
      // line per source and relation a minute, and the snapshot read again then (a rescan's).
      onRelationGone: (f) => {
        const repeated = goneLog(`${f.sourceId}\u0000${f.object ?? ''}`);
        if (repeated === null) return;
        store.markCatalogStale(f.sourceId);
        logger.warn({ source_id: f.sourceId, relation: f.object, sqlstate: '42P01', request_id: f.requestId, ...(repeated ? { repeated_since_last: repeated } : {}) }, `a relation the scanned catalogue holds is gone from the source (undefined_table): the catalogue is stale; run interlock source scan ${f.sourceId}; agents reading it are told statement_failed (42P01)`);
      },
      // A function or operator a statement may resolve changed on the source since the scan, or the
      // snapshot predates the type facts (tasks hf5, hg1): the agent is told catalog_stale and the source rescanned now; one
      // line per source and reason a minute.
      onCatalogStale: (f) => {
        rescanStale(f.sourceId).catch(() => undefined);
        const repeated = staleLog(`${f.sourceId}\u0000${f.reason}`);
        if (repeated === null) return;
        logger.warn({ source_id: f.sourceId, reason: f.reason, request_id: f.requestId, ...(repeated ? { repeated_since_last: repeated } : {}) }, f.reason === 'columns_changed' || f.reason === 'catalog_changed'
          ? 'a relation whose whole rows a governed read uses has other columns than its catalogue scan recorded (or one of its user functions changed): the read was refused catalog_stale and the source is being rescanned'
          : f.reason === 'functions_changed'
          ? 'a function or operator of a name a governed read looks up (or a user function it runs) was created, renamed, moved, replaced, altered or dropped on the source since its catalogue was scanned (or the snapshot predates their versions): the read was refused catalog_stale and the source is being rescanned'
          : f.reason === 'search_path_changed'
          ? 'a new reader connection resolves names on another path (current_schemas) than the catalogue scan recorded (a schema of that path was dropped, or the reader lost USAGE on it, since the scan): the read was refused catalog_stale and the source is being rescanned'
          : 'the source\'s catalogue snapshot predates the facts on code attached to types: statements are refused catalog_stale and the source is being rescanned');
      },
    }),
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
  let auditKeyRefused: () => Promise<boolean> = async () => false;
  const ops = {
    // Not ready while the control database (a read-write primary) does not answer (issue 29).
    ready: async (): Promise<boolean | NotReadyReason> => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), CONTROL_CONNECT_TIMEOUT_MS)));
      const st = await Promise.race([migrationStatus(db).catch(() => null), late]).finally(() => clearTimeout(timer));
      if (st === null) return 'control_database_unavailable';
      if (!st.upToDate) return 'migrations_pending';
      // The keyed trail refuses this gateway's batches (no audit key, or one not registered): every governed call fails closed.
      return (await auditKeyRefused()) ? 'audit_key_refused' : true;
    },
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
  const auditSink = new GroupCommitAuditSink(auditPool, logger, { commitTimeoutMs: auditCommitMs, key: auditKeys.signing });
  // Asked of the database again while refused (red team rt47a H2): a drained replica gets no call to clear it.
  auditKeyRefused = async () => (await auditSink.recheckKeyRefusal()) !== null;
  if (!auditKeys.signing) logger.warn({ component: 'audit' }, 'no audit key (audit.key / INTERLOCK_AUDIT_KEY): audit batches are unkeyed (format 3), so a holder of the database credential could forge them (docs/operators.md "The audit key")');
  else {
    // The key's id (not secret), so replicas and verify's output can be compared (nu46).
    logger.info({ component: 'audit', keyId: auditKeys.signing.id, verifyKeyIds: [...auditKeys.byId.keys()] }, 'audit batches are keyed (format 5) with the audit key of this id');
    await registerOwnAuditKeys(db, auditKeys, logger);
  }
  // Admission by capacity (issue 29): fed by call latency, event-loop delay and the audit writer's queue.
  const capacity = capacityLimiter(config.admission ?? DEFAULT_CONFIG.admission!, () => auditSink.pendingEvents());
  // At level debug: the limiter's state every 100 ms (bench/admission-trace.ts reads these lines).
  const capacityTrace = capacity && logger.isLevelEnabled('debug') ? setInterval(() => logger.debug({ component: 'admission', ...capacity.snapshot() }, 'admission state'), 100) : null;
  capacityTrace?.unref();
  // Governance changes of /admin/v1 and /console: through the operator connection when configured,
  // else on db with its role's privileges checked (one warning now when they would be refused).
  const governance = await openGovernanceAccess({ db, operatorUrl: config.database?.operator_url, logger });
  const host = opts.host ?? config.listen.host;
  // Operations endpoints: on their own listener when ops_listen is set (issue 10, Build 8), else beside /mcp.
  const opsServer = config.ops_listen ? await listenOperations(createOperationsApp(metrics, ops, originPolicyFor(config.ops_listen.host ?? '127.0.0.1', config, logger), logger), config.ops_listen.host ?? '127.0.0.1', config.ops_listen.port) : null;
  // Closes what the start opened (the control listeners above, pools, the audit writer): at the end of
  // close(), and alone when the start fails to listen (a port taken), so nothing keeps reconnecting.
  const abandon = async (): Promise<void> => {
    if (opsServer) {
      opsServer.server.closeAllConnections();
      await new Promise<void>((resolve) => opsServer.server.close(() => resolve()));
    }
    await Promise.allSettled(listeners.map((l) => l.close()));
    await identityResolver.close().catch(() => undefined);
    await registry.closeAll().catch(() => undefined);
    if (capacityTrace) clearInterval(capacityTrace);
    capacity?.close();
    await limiterPool.end().catch(() => undefined);
    await governance.close().catch(() => undefined);
    await auditSink.close().catch(() => undefined);
    await auditPool.end().catch(() => undefined);
  };
  const running = await listenGateway({
    healthz: !opsServer,
    routes: [...(opsServer ? [] : [(app: import('express').Express) => mountOperations(app, metrics, ops, originPolicyFor(host, config))]), ...(require('./http') as typeof import('./http')).httpRoutes({ db, logger, circuitStates: () => registry.states(), connectors: registry, originPolicy: originPolicyFor(host, config), governance, onCatalogStale: rescanForApproval }), (app, deps) => mountConsole(app, { db, connectors: registry, originPolicy: originPolicyFor(host, config), logger, sessions: consoleSessionTimeouts(config), governance, onCatalogStale: rescanForApproval }, deps), ...(opts.routes ?? [])], // eslint-disable-line @typescript-eslint/no-require-imports
    observe: (e) => metrics.observeToolCall(e),
    observeOverCapacity: (tool) => metrics.observeOverCapacity(tool),
    rateLimiter,
    clientLimits: clientLimitSettings(config.client_limits ?? DEFAULT_CONFIG.client_limits),
    answerWriteTimeoutMs: config.client_limits?.answer_write_timeout_ms ?? DEFAULT_CONFIG.client_limits.answer_write_timeout_ms,
    observeRequest: (m, d, s, sec) => metrics.observeRequest(m, d, s, sec),
    tools,
    identityResolver,
    authSurface,
    audit: auditSink,
    capacity,
    originPolicy: originPolicyFor(host, config, logger),
    logger,
    host,
    port: opts.port ?? config.listen.port,
    server: opts.server,
    requestTimeoutMs: config.listen.request_timeout_ms,
    headersTimeoutMs: config.listen.headers_timeout_ms,
    tls: config.listen.tls,
    trustProxy: config.trust_proxy ?? false,
    instructions: 'InterLock governs access to an organisation\'s data. Call interlock_list_sources, then interlock_describe_access, then interlock_query. Writes are queued for human approval: never retry a queued write.',
  }).catch(async (err: unknown) => {
    await abandon();
    throw err;
  });
  // The configuration's claim rules, which interlock_sync_claim_grants checks pairs against (task
  // hcg): recorded when this role or the operator connection may, else each one missing is logged once.
  // Only once the listener is bound (task hnu3 item 5): a start that fails (a port taken) changes nothing.
  await syncConfiguredClaimRules({ governance, db, issuers: config.auth?.issuers ?? [], logger, onMissing: (g) => tokenSubjects?.noteMissing(g.issuer, g.role, g.source) });
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
  // Sign-in events stored as pending while the approval events' chain was held (task hchain): chained
  // every few seconds and once more at shutdown, never waiting for the chain's lock.
  const pendingSealer = startPendingSealer({ db, logger });
  const close = running.close;
  return {
    ...running,
    metrics,
    store,
    connectors: registry,
    cache,
    analysisCache,
    opsUrl: opsServer?.url,
    capacity,
    rescansIdle,
    async close(deadlineMs?: number) {
      for (const t of timers) clearInterval(t);
      // Shutting down: a server-side end of an idle audit connection (57P01 when the control server
      // stops too) is expected now, not a warning (hgov item 5).
      auditPool.removeAllListeners('error');
      auditPool.on('error', (err) => logger.debug({ component: 'audit', code: (err as { code?: string }).code }, 'idle audit connection ended during shutdown'));
      await close(deadlineMs);
      await pendingSealer.close();
      await webhooks.close();
      // Every answer has waited for its event; the writer's chains end with their seals (issue 28).
      await abandon();
    },
  };
}

/** config admission as a CapacityLimiter, or undefined when admission.enabled is false. */
export function capacityLimiter(a: NonNullable<ResolvedGatewayConfig['admission']>, auditQueueDepth?: () => number): CapacityLimiter | undefined {
  if (!a.enabled) return undefined;
  return new CapacityLimiter(
    {
      enabled: true,
      initialLimit: a.initial_limit,
      minLimit: a.min_limit,
      maxLimit: Math.max(a.min_limit, a.max_limit),
      queueSize: a.queue_size,
      queueTimeoutMs: a.queue_timeout_ms,
      tolerance: a.tolerance,
      maxEventLoopDelayMs: a.max_event_loop_delay_ms,
      maxAuditQueue: a.max_audit_queue,
      pauseRefusedConnections: a.pause_refused_connections ?? true,
      frontDoor: a.front_door ?? true,
      controller: a.controller ?? 'long_average',
      minRttIntervalMs: a.min_rtt_interval_ms ?? DEFAULT_CAPACITY.minRttIntervalMs,
      minRttSamples: a.min_rtt_samples ?? DEFAULT_CAPACITY.minRttSamples,
      latencyPercentile: a.latency_percentile ?? DEFAULT_CAPACITY.latencyPercentile,
      sampleSourceTime: a.sample_source_time ?? false,
      samplePoolWait: a.sample_pool_wait ?? false,
      raiseOnSlotWaiters: a.raise_on_slot_waiters ?? DEFAULT_CAPACITY.raiseOnSlotWaiters,
      identityLimit: a.identity_limit ?? DEFAULT_CAPACITY.identityLimit,
      identitySlotWaitMs: a.identity_slot_wait_ms ?? DEFAULT_CAPACITY.identitySlotWaitMs,
      identityWaitRatio: a.identity_wait_ratio ?? DEFAULT_CAPACITY.identityWaitRatio,
    },
    { auditQueueDepth },
  );
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

/** LISTENs on `channel` (listenNotifications): `onPayload` for each non-empty payload, `onReconnect` after a reconnect. */
export function listenChannel(url: string, channel: string, onPayload: (payload: string) => void, logger?: Logger, onReconnect: () => void = () => undefined): Promise<ControlListener> {
  return listenNotifications(url, channel, (p) => p && onPayload(p), onReconnect, logger);
}

/** Options of serveGovernedGateway: those of startGovernedGateway, with the control database opened (and reopened) by `openDb`. */
export interface ServeGatewayOptions extends Omit<GovernedGatewayOptions, 'db' | 'server'> {
  /** Opens the control database (migrations, pepper). A ControlError 'unavailable' means "not reachable yet": retried. */
  openDb: () => Promise<ControlDb>;
  /** First retry delay in ms (default 1000), doubling up to retryMaxMs (default 15 000). */
  retryMs?: number;
  retryMaxMs?: number;
}

/** A gateway that is serving: governed, or standing by until its control database answers. */
export interface ServingGateway {
  url: string;
  port: number;
  /** Resolves with the governed gateway once it runs (at once when the database answered at start). */
  ready: Promise<GovernedGateway>;
  /** The governed gateway, or null while standing by. */
  current(): GovernedGateway | null;
  /**
   * Why it stands by (one line, no driver text: the last ControlError of `openDb`, e.g. pending
   * migrations naming `interlock db migrate`), or null once governed.
   */
  notReadyReason(): string | null;
  /** Stops retrying and closes whichever is running (RunningGateway.close). */
  close(deadlineMs?: number): Promise<void>;
}

/** True for ControlError 'unavailable' (cannot reach it, the database does not exist yet, credentials refused, migrations pending with migrate off): worth retrying. */
function isUnreachable(err: unknown): boolean {
  return err instanceof ControlError && err.kind === 'unavailable';
}

/**
 * Starts the governed gateway as `interlock serve` does (issue 29, item 3): when the control
 * database cannot be reached (ControlError 'unavailable' from `openDb`), the process does not exit.
 * It logs why, listens at once on the configured address in standby (GET /healthz 200, /readyz 503
 * {status: not_ready, reason: control_database_unavailable}, initialize and tools/list as usual,
 * every tools/call refused `audit_unavailable`: nothing can be recorded, so nothing is answered),
 * retries `openDb` (retryMs doubling to retryMaxMs), and once it opens starts the governed gateway
 * on the same listening socket. Any other error of `openDb` (a pepper conflict, a bad URL) rejects as
 * before.
 */
export async function serveGovernedGateway(opts: ServeGatewayOptions): Promise<ServingGateway> {
  const logger = opts.logger ?? createLogger(opts.config.log_level);
  let firstError: unknown;
  try {
    const db = await opts.openDb();
    const gw = await startGovernedGateway({ ...opts, logger, db });
    return { url: gw.url, port: gw.port, ready: Promise.resolve(gw), current: () => gw, notReadyReason: () => null, close: (d) => gw.close(d) };
  } catch (err) {
    if (!isUnreachable(err)) throw err;
    firstError = err;
  }
  logger.error(
    { component: 'control-db', reason: (firstError as Error).message },
    firstError instanceof MigrationsPendingError
      ? 'the control database needs migrations this role does not apply: serving not ready (governed calls refused audit_unavailable) and retrying'
      : 'the control database is unavailable: serving not ready (governed calls refused audit_unavailable) and retrying',
  );
  let lastError: unknown = firstError;
  // /readyz names pending migrations (a role that does not migrate: docs/operators.md) apart from an unreachable database.
  const standby = await startStandby(opts, logger, () => (lastError instanceof MigrationsPendingError ? 'migrations_pending' : 'control_database_unavailable'));
  let governed: GovernedGateway | null = null;
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let delay = opts.retryMs ?? 1000;
  const ready = new Promise<GovernedGateway>((resolve, reject) => {
    const attempt = async () => {
      timer = null;
      if (stopped) return;
      let db: ControlDb;
      try {
        db = await opts.openDb();
      } catch (err) {
        lastError = err;
        if (!isUnreachable(err)) {
          logger.error({ component: 'control-db', reason: (err as Error).message }, 'the control database cannot be used; still not ready');
          reject(err);
          return;
        }
        logger.warn({ component: 'control-db', reason: (err as Error).message, retry_ms: delay }, err instanceof MigrationsPendingError ? 'the control database still needs migrations' : 'the control database is still unavailable');
        timer = setTimeout(() => void attempt(), delay);
        delay = Math.min(delay * 2, opts.retryMaxMs ?? 15_000);
        return;
      }
      if (stopped) return;
      await standby.closeOps();
      try {
        governed = await startGovernedGateway({ ...opts, logger, db, server: standby.server });
      } catch (err) {
        standby.restore();
        logger.warn({ component: 'control-db', reason: (err as Error).message }, 'starting on the control database failed; retrying');
        timer = setTimeout(() => void attempt(), delay);
        return;
      }
      logger.info({ component: 'control-db' }, 'the control database answered: the gateway is ready');
      resolve(governed);
    };
    timer = setTimeout(() => void attempt(), delay);
  });
  ready.catch(() => undefined);
  return {
    url: standby.url,
    port: standby.port,
    ready,
    current: () => governed,
    notReadyReason: () => (governed ? null : (lastError as Error).message),
    async close(deadlineMs?: number) {
      stopped = true;
      if (timer) clearTimeout(timer);
      if (governed) await governed.close(deadlineMs);
      else {
        await standby.closeOps();
        await standby.close(deadlineMs);
      }
    },
  };
}

/** The standby listener of serveGovernedGateway, plus the operations listener when ops_listen is set. */
async function startStandby(opts: ServeGatewayOptions, logger: Logger, reason: () => NotReadyReason): Promise<RunningGateway & { closeOps(): Promise<void>; restore(): void }> {
  const { config } = opts;
  const host = opts.host ?? config.listen.host;
  const refuse = async (): Promise<import('./pipeline/types').ToolOutcome> => ({ kind: 'refusal', code: 'audit_unavailable' });
  const readyz = (app: import('express').Express) => {
    app.use('/readyz', hostOriginGuard(originPolicyFor(host, config)));
    app.get('/readyz', (_req, res) => sendReadiness(res, reason()));
  };
  const running = await listenGateway({
    healthz: !config.ops_listen,
    routes: config.ops_listen ? [] : [readyz],
    tools: interlockToolBindings({}).map((b) => ({ ...b, handler: refuse })),
    // Every call ends in audit_unavailable: its event cannot be recorded, so nothing is answered.
    identityResolver: { resolve: async () => ({ id: 'standby', name: 'standby', keyId: 'standby' }) },
    audit: { record: () => Promise.reject(new Error('the control database is unavailable')) },
    originPolicy: originPolicyFor(host, config, logger),
    logger,
    host,
    port: opts.port ?? config.listen.port,
    requestTimeoutMs: config.listen.request_timeout_ms,
    headersTimeoutMs: config.listen.headers_timeout_ms,
    tls: config.listen.tls,
    trustProxy: config.trust_proxy ?? false,
  });
  let ops: Server | null = null;
  if (config.ops_listen) {
    const opsHost = config.ops_listen.host ?? '127.0.0.1';
    const app = express();
    app.disable('x-powered-by');
    app.use(hostOriginGuard(originPolicyFor(opsHost, config, logger)));
    app.get('/healthz', healthz);
    app.get('/readyz', (_req, res) => sendReadiness(res, reason()));
    app.use(unknownRoute);
    app.use(errorBodyHandler(logger));
    ops = (await listenOperations(app, opsHost, config.ops_listen.port)).server;
  }
  return {
    ...running,
    async closeOps() {
      const s = ops;
      ops = null;
      if (!s) return;
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    },
    restore() {
      running.server.removeAllListeners('request');
      running.server.on('request', running.gateway.handler);
    },
  };
}

/**
 * At start, with a signing key (red team rt46b G2): when the gateway's role owns the trail (the
 * embedded demo, an owner connection), marks it keyed and registers the ids of its keys (signing and
 * previous; registerAuditKeyIds, src/audit/keyed-trail.ts), as `interlock audit require-key` does, so
 * the demo stays keyed with no step. Else does nothing: the runtime role cannot key the trail, the
 * operator runs require-key (docs/operators.md "The audit key"). Never throws: a failure is logged
 * (warn, component audit), and a keyed trail that lacks the key refuses its batches (42501).
 */
export async function registerOwnAuditKeys(db: ControlDb, keys: AuditKeyring, logger: Logger): Promise<void> {
  try {
    if (!(await ownsKeyedTrail(db.pool))) return;
    const r = await registerAuditKeyIds(db.pool, [...keys.byId.keys()], 'gateway_start');
    if (r.added.length) logger.info({ component: 'audit', added: r.added, sinceBatch: r.sinceBatch }, 'the audit trail is keyed: this gateway registered its audit key id(s)');
  } catch (err) {
    logger.warn({ component: 'audit', code: (err as { code?: string }).code }, 'the audit key ids could not be registered in the control database (audit_keyed_trail)');
  }
}

/** Options of syncConfiguredClaimRules. */
export interface ClaimRulesStartOptions {
  /** Where governance writes go (the operator connection when configured, else the gateway's pool). */
  governance: GovernanceAccess;
  /** The gateway's control database (read when the rules cannot be written). */
  db: ControlDb;
  /** config auth.issuers. */
  issuers: readonly TokenIssuer[];
  logger: Logger;
  /** Called for each configured pair the database does not record (after its warning). */
  onMissing?: (g: ConfiguredClaimGrant) => void;
}

/**
 * Logs once (warn, component oauth, OTHER_ISSUER_RULES_NOTE) the issuers, sorted, whose recorded
 * claim rules the start-up sync left because this gateway does not configure them (red team rtcg:
 * rows of an issuer no gateway configures any more, or seeded at the upgrade, stay usable by a
 * stolen runtime credential until `interlock db sync-claim-rules` removes them). Throws on read failure.
 */
async function noteOtherIssuerRules(opts: ClaimRulesStartOptions): Promise<void> {
  const mine = new Set(opts.issuers.map((i) => i.issuer));
  const others = [...new Set((await listConfiguredClaimGrants(opts.db)).map((g) => g.issuer).filter((i) => !mine.has(i)))].sort();
  if (others.length > 0) opts.logger.warn({ component: 'oauth', issuers: others }, OTHER_ISSUER_RULES_NOTE);
}

/**
 * At `serve` start (task hcg): replaces the rows of configured_claim_grants of the issuers in
 * `issuers` with the pairs of their role_grants, leaving other issuers' rows alone (red team rtcg;
 * replaceConfiguredClaimGrants scope 'configured', one config event claim_rules_synced when anything
 * changed, operator system; the issuers whose rules it left are logged, noteOtherIssuerRules) when the governance role may (family claim_rules: the owner of the
 * control tables, or the operator connection's role); else reads the table and logs each configured
 * pair it lacks once (warn, component oauth, naming the fix): those pairs are not given until a
 * privileged sync (src/auth/token-identities.ts leaves them out). Never throws: a failure is logged
 * and sign-in keeps the rules the database knows. Returns what was done.
 */
export async function syncConfiguredClaimRules(opts: ClaimRulesStartOptions): Promise<{ synced: ClaimRulesSync } | { missing: ConfiguredClaimGrant[] } | { failed: true }> {
  const { governance, logger } = opts;
  try {
    // Only the issuers this gateway configures (red team rtcg): a replica with other issuers, or
    // none, leaves the rules of the others alone; `interlock db sync-claim-rules` prunes them.
    const synced = await governance.run('claim_rules', (g) => replaceConfiguredClaimGrants(g, opts.issuers, undefined, { scope: 'configured' }));
    if (synced.added.length + synced.removed.length > 0) logger.info({ component: 'oauth', via: governance.via, added: synced.added.length, removed: synced.removed.length }, 'the configuration\'s claim rules are recorded in the control database');
    await noteOtherIssuerRules(opts).catch(() => undefined);
    return { synced };
  } catch (err) {
    if (!(err instanceof ControlError)) logger.warn({ component: 'oauth', code: (err as { code?: string }).code }, 'the configuration\'s claim rules could not be recorded in the control database');
  }
  try {
    const missing = missingClaimGrants(opts.issuers, await listConfiguredClaimGrants(opts.db));
    for (const g of missing) {
      logger.warn({ component: 'oauth', issuer: g.issuer, role: g.role, source: g.source }, MISSING_CLAIM_RULE_FIX);
      opts.onMissing?.(g);
    }
    return { missing };
  } catch (err) {
    logger.warn({ component: 'oauth', code: (err as { code?: string }).code }, 'the claim rules recorded in the control database could not be read');
    return { failed: true };
  }
}
