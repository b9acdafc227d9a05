/**
 * Red team rtc against issue 28 (a result-cache hit is served without the live hierarchy check),
 * finding RTC-3 (low; fixed): a checked caller's read of a relation the catalogue places in a
 * tree runs the full check in one round trip and the statement in the next. A partition attached
 * between the two is read under decisions made on the old tree, and the answer is STORED (the check
 * found the catalogue's tree), so every caller with the same key is served it for the cache's TTL
 * without a check — rows of a relation a policy denies them, which they were not permitted when the
 * answer was stored either. Before issue 28 a hit ran the check first and refused; now a checked
 * caller's hit over a relation the catalogue places in a tree runs the check first again
 * (hitNeedsCheck), while a hit over relations that stand alone (read under the guard, in the same
 * round trip as the statement) is served without one.
 */
import type { Policy } from '../../../generated/policy-v1';
import { MemoryGovernanceStore } from '../../../src/governance/store';
import { queryHandler } from '../../../src/pipeline/query';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import { ResultCache } from '../../../src/pipeline/cache';
import { AnalysisCache } from '../../../src/pipeline/analysis-cache';
import { initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { relationKey } from '../../../src/sql/hierarchy';
import type { QueryConnector } from '../../../src/pipeline/07-execute';
import type { ToolCallContext } from '../../../src/tools/types';

beforeAll(() => initSqlParser());

const columns = [{ name: 'id', dataType: 'text' }];
/** `m` partitioned with partition `m1`; `priv` a plain table when scanned. */
const CATALOG = {
  relations: [
    { schema: 'public', name: 'm', kind: 'partitioned_table', columns, partition: false, parents: [], ancestors: [] },
    { schema: 'public', name: 'm1', kind: 'table', columns, partition: true, parents: [{ schema: 'public', name: 'm' }], ancestors: [{ schema: 'public', name: 'm' }] },
    { schema: 'public', name: 'priv', kind: 'table', columns, partition: false, parents: [], ancestors: [] },
  ],
  functions: [],
  searchPath: ['public'],
  scannedAt: '2026-12-05T00:00:00Z',
  truncated: false,
} as unknown as SourceCatalog;
const DENY_PRIV: Policy = { name: 'deny-priv', rule: { type: 'deny_relations', relations: ['public.priv'] } };

test('RTC-3 a partition attached between the full check and the read is not served from the cache to the next checked caller', async () => {
  const store = new MemoryGovernanceStore();
  store.sources.set('db', { id: 'db', type: 'postgres', name: 'db', enabled: true, settings: {} });
  store.catalogs.set('db', CATALOG);
  store.grants.push({ identityId: 'me', sourceId: 'db', role: { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] } as never });
  store.policies.push(DENY_PRIV as never);
  // The server's tree: the catalogue's until the first statement runs, `priv` attached under `m` from then on.
  let attached = false;
  const m1 = { schema: 'public', name: 'm1' };
  const connector: QueryConnector = {
    read: async () => {
      attached = true;
      return { fields: [{ name: 'id' }], rowsArray: [['1'], ['PRIV-ROW']], truncated: false };
    },
    relationTrees: async (relations) =>
      new Map(relations.map((r) => [relationKey(r.schema, r.name), { ancestors: [], descendants: r.name === 'm' ? (attached ? [m1, { schema: 'public', name: 'priv' }] : [m1]) : [] }])),
    standaloneGuard: (relations) => ({ text: 'GUARD', values: relations.flatMap((r) => [r.schema, r.name]) }),
  };
  const query = queryHandler({
    store,
    connectors: { reader: () => connector },
    rateLimiter: memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } }),
    cache: new ResultCache({ ttlMs: 60_000, maxBytes: 1e6 }),
    analysisCache: new AnalysisCache(),
    catalog: (s) => store.loadCatalog(s.id),
    maskSecret: 's',
  });
  const ctx = (): ToolCallContext => ({ requestId: 'r', apiKey: 'k', identity: { id: 'me', name: 'me', keyId: 'k1' }, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} }) as never;
  // The racing call itself reads what the server held (the check passed on the old tree).
  await query({ source_id: 'db', sql: 'SELECT id FROM m' }, ctx());
  // The next call: the live tree now puts priv under m, so the deny on priv refuses the read of m.
  expect(await query({ source_id: 'db', sql: 'SELECT id FROM m' }, ctx())).toMatchObject({ kind: 'refusal', code: 'policy_denied' });
});
