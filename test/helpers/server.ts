/**
 * An in-process InterLock on 127.0.0.1 for transport-level tests: the real app, a static identity
 * resolver with one valid agent key, an in-memory source directory and audit sink. Governance over
 * a real control database is tested in test/integration.
 */
import { listenGateway, type RunningGateway } from '../../src/server';
import { interlockToolBindings } from '../../src/tools/registry';
import { StaticIdentityResolver } from '../../src/pipeline/01-identity';
import { listSourcesHandler, StaticSourceDirectory } from '../../src/tools/handlers/list-sources';
import { MemoryAuditSink } from '../../src/audit/types';
import { createLogger } from '../../src/observability/logger';
import type { ToolBinding } from '../../src/tools/types';

/** The valid agent key of the test server. */
export const TEST_API_KEY = 'ilk_test_0123456789abcdefghijklmnopqrstuv';

/** A started test server. */
export interface TestServer {
  url: string;
  apiKey: string;
  audit: MemoryAuditSink;
  running: RunningGateway;
  close(): Promise<void>;
}

/** Starts the test server; `fixtures: true` adds the official suite's test_* tools (test-only pack). */
export async function startTestServer(opts: { fixtures?: boolean; extraTools?: ToolBinding[] } = {}): Promise<TestServer> {
  const audit = new MemoryAuditSink();
  const dir = new StaticSourceDirectory([
    { id: 'demo', name: 'Demo source', type: 'postgres', description: 'granted to the test agent', active: true, grantees: ['id-test-agent'] },
    { id: 'hidden', name: 'Hidden source', type: 'postgres', active: true, grantees: ['someone-else'] },
  ]);
  const tools = interlockToolBindings({ interlock_list_sources: listSourcesHandler(dir) });
  if (opts.fixtures) {
    // Loaded lazily so that the fixture pack is never imported by production code paths.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { conformanceFixtureTools } = require('../../src/fixtures/conformance-tools') as typeof import('../../src/fixtures/conformance-tools');
    // Fixtures first: the official suite calls the first listed tool without an API key.
    tools.unshift(...conformanceFixtureTools());
  }
  if (opts.extraTools) tools.push(...opts.extraTools);
  const running = await listenGateway({
    tools,
    identityResolver: new StaticIdentityResolver({ [TEST_API_KEY]: { id: 'id-test-agent', name: 'test-agent' } }),
    audit,
    logger: createLogger('silent'),
    port: 0,
  });
  return { url: running.url, apiKey: TEST_API_KEY, audit, running, close: () => running.close(2000) };
}
