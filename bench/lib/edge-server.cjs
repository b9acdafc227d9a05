/**
 * The gateway's HTTP edge and dispatcher alone, as a bench child (bench/edge-cpu.ts, issue 28 item 3):
 * listenGateway of the compiled tree at EDGE_ROOT (its dist/) with the production pieces of the edge
 * (client limits at their defaults, admission by capacity at the config defaults, a request
 * observer) and one in-memory governed tool (interlock_list_sources over a static directory, a
 * static key, an audit sink that commits at once). No database: what is measured is node:http,
 * src/transport, src/protocol and dispatch's bookkeeping per tools/call. Prints "READY <url> <key>".
 */
'use strict';
const path = require('node:path');
const root = path.resolve(process.env.EDGE_ROOT || path.join(__dirname, '..', '..'));
const dist = (p) => require(path.join(root, 'dist', 'src', p));
const { listenGateway } = dist('server.js');
const { interlockToolBindings } = dist('tools/registry.js');
const { StaticIdentityResolver } = dist('pipeline/01-identity.js');
const { listSourcesHandler, StaticSourceDirectory } = dist('tools/handlers/list-sources.js');
const { createLogger } = dist('observability/logger.js');
const { capacityLimiter } = dist('gateway.js');
const { DEFAULT_CONFIG } = dist('control/config.js');

const KEY = 'ilk_bench_edge_0123456789abcdefghijklmnopq';
(async () => {
  const gw = await listenGateway({
    tools: interlockToolBindings({ interlock_list_sources: listSourcesHandler(new StaticSourceDirectory([{ id: 'demo', name: 'Demo', type: 'postgres', active: true, grantees: ['id-edge'] }])) }),
    identityResolver: new StaticIdentityResolver({ [KEY]: { id: 'id-edge', name: 'edge' } }),
    audit: { record: () => Promise.resolve() },
    logger: createLogger('silent'),
    clientLimits: {},
    capacity: capacityLimiter(DEFAULT_CONFIG.admission),
    observeRequest: () => undefined,
    port: 0,
  });
  process.stdout.write(`READY ${gw.url} ${KEY}\n`);
  process.on('SIGTERM', () => process.exit(0));
  process.on('disconnect', () => process.exit(0));
})();
