/**
 * The gateway's HTTP surface besides POST /mcp, as route modules for GatewayAppOptions.routes:
 * the deprecated /mcp/tools/list, /mcp/tools/call and /mcp/sse (src/http/legacy.ts), the /v1
 * query proxy (src/http/v1.ts) and the /admin/v1 operators' API (src/admin/routes.ts).
 * spec/openapi-v1.yaml describes them all.
 */
import type { Express } from 'express';
import type { Logger } from 'pino';
import type { ControlDb } from '../control/db';
import type { DispatchDeps } from '../protocol/dispatch';
import type { SourceConnectorRegistry } from '../sources/registry';
import type { OriginPolicy } from '../transport/http-headers';
import { mountAdmin } from '../admin/routes';
import type { GovernanceAccess } from '../admin/governance-db';
import { mountLegacyRoutes } from './legacy';
import { mountV1 } from './v1';

export { mountAdmin } from '../admin/routes';
export { mountLegacyRoutes } from './legacy';
export { mountV1 } from './v1';

/** Options of httpRoutes. */
export interface HttpRoutesOptions {
  db: ControlDb;
  /** Circuit state per source id on this replica (SourceConnectorRegistry.states). */
  circuitStates?: () => Record<string, string>;
  /** Connector registry reused for writes approved through the admin API. */
  connectors?: SourceConnectorRegistry;
  /** The same Host/Origin policy as POST /mcp (originPolicyFor(host, config)). */
  originPolicy?: OriginPolicy;
  logger?: Logger;
  /** Where the admin API writes governance changes (src/admin/governance-db.ts); default: db, checked. */
  governance?: GovernanceAccess;
  /** Rescans a source after an approved write's guard refused it catalog_stale (task hw; ApproveOptions.onCatalogStale); absent: the approval scans it itself. */
  onCatalogStale?: (facts: { sourceId: string; approvalId: string }) => Promise<void>;
}

/** The three route modules, in mounting order, ready for GatewayAppOptions.routes. */
export function httpRoutes(opts: HttpRoutesOptions): Array<(app: Express, deps: DispatchDeps) => void> {
  return [
    (app, deps) => mountLegacyRoutes(app, deps, { originPolicy: opts.originPolicy, logger: opts.logger }),
    (app, deps) => mountV1(app, deps, { originPolicy: opts.originPolicy, logger: opts.logger }),
    (app, deps) => mountAdmin(app, deps, { db: opts.db, circuitStates: opts.circuitStates, connectors: opts.connectors, originPolicy: opts.originPolicy, logger: opts.logger, governance: opts.governance, onCatalogStale: opts.onCatalogStale }),
  ];
}
