/**
 * The discovery tools as handlers (issue 4, Build 4–6, 8) over a real control database and the
 * in-memory governance store: result shapes (validated against spec/), the pipeline's refusals in
 * order, audit details, hide_documents never hinted at, unknown_asset indistinguishable from a
 * hidden asset, no cross-source related documents, and get_document through interlock_query.
 */
import type { Policy } from '../../../generated/policy-v1';
import type { SourceRole } from '../../../generated/role-v1';
import { validateDiscoverHit, validateDocumentContent, validateRelatedDocument } from '../../../generated/validators';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { putSource } from '../../../src/control/sources';
import { MemoryGovernanceStore, type SourceRecord } from '../../../src/governance/store';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import { queryHandler } from '../../../src/pipeline/query';
import { ResultCache } from '../../../src/pipeline/cache';
import { describeAccessHandler } from '../../../src/tools/handlers/describe';
import { discoverHandler, type DiscoveryDeps } from '../../../src/tools/handlers/discover';
import { relatedDocumentsHandler } from '../../../src/tools/handlers/related';
import { documentsConnectorRequest } from '../../../src/tools/handlers/documents-request';
import { indexAssets } from '../../../src/discovery/indexer';
import type { AssetInput } from '../../../src/discovery/types';
import type { Identity, ToolCallContext, ToolHandler, ToolOutcome } from '../../../src/tools/types';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';

let tmp: TempDatabase;
let db: ControlDb;

const doc = (assetId: string, over: Partial<AssetInput> = {}): AssetInput => ({
  assetId,
  documentType: 'runbook',
  title: `Title of ${assetId}`,
  body: `failover procedure for ${assetId}`,
  categoryPath: ['ops'],
  timestamp: '2025-01-01T00:00:00.000Z',
  audience: [],
  entities: [],
  links: [],
  ...over,
});

const KB: AssetInput[] = [
  doc('kb:ops/failover.md', { links: ['kb:ops/backup.md', 'kb:sec/secret.md', 'kb2:elsewhere.md', 'kb:hr/salaries.md'], entities: [{ type: 'service', value: 'db' }] }),
  doc('kb:ops/backup.md', { entities: [{ type: 'service', value: 'db' }] }),
  doc('kb:sec/secret.md', { categoryPath: ['sec'], audience: ['security'], body: 'classified failover notes' }),
  doc('kb:hr/salaries.md', { categoryPath: ['hr'], documentType: 'salary', body: 'salary failover bands' }),
  doc('kb:ops/staff-only.md', { audience: ['staff'] }),
  ...Array.from({ length: 60 }, (_, i) => doc(`kb:ops/bulk-${String(i).padStart(2, '0')}.md`, { body: 'bulk filler text' })),
];
const KB2: AssetInput[] = [doc('kb2:elsewhere.md', { entities: [{ type: 'service', value: 'db' }], body: 'failover elsewhere' })];

const AGENT: Identity = { id: 'idn_00000000000000000aaa', name: 'agent', keyId: 'key_00000000000000000aaa' };
const OUTSIDER: Identity = { id: 'idn_00000000000000000bbb', name: 'outsider', keyId: 'key_00000000000000000bbb' };

const role = (name: string, statements: SourceRole['statements'], audiences: string[] = []): SourceRole => ({ name, audiences, statements });
const READER = role('reader', [
  { effect: 'allow', action: 'discover', resource: '*' },
  { effect: 'allow', action: 'request', resource: 'ops/*' },
], ['staff']);

let store: MemoryGovernanceStore;
let deps: DiscoveryDeps;
let discover: ToolHandler;
let related: ToolHandler;
let query: ToolHandler;

function source(id: string, type: 'documents' | 'postgres' = 'documents', enabled = true): SourceRecord {
  return { id, type, name: id, enabled, settings: type === 'documents' ? { path: '/nonexistent' } : {} };
}

function ctx(identity: Identity | null): ToolCallContext & { auditDetails: Record<string, unknown> } {
  return {
    requestId: 'req_test',
    apiKey: 'k',
    identity,
    dialect: 'handshake',
    protocolVersion: '2025-11-25',
    toolName: 't',
    canonicalTool: 't',
    signal: new AbortController().signal,
    notify: () => undefined,
    auditDetails: {},
  };
}

function sc(o: ToolOutcome): Record<string, unknown> {
  if (o.kind !== 'result') throw new Error(`expected a result, got ${JSON.stringify(o)}`);
  expect(JSON.parse((o.content[0] as { text: string }).text)).toEqual(o.structuredContent);
  return o.structuredContent!;
}

function refusal(o: ToolOutcome): { code: string; message?: string } {
  if (o.kind !== 'refusal') throw new Error(`expected a refusal, got ${JSON.stringify(o)}`);
  return { code: o.code, message: o.message };
}

function setup(opts: { policies?: Policy[]; points?: number } = {}) {
  store = new MemoryGovernanceStore();
  for (const s of [source('kb'), source('kb2'), source('sql', 'postgres'), source('off', 'documents', false)]) store.sources.set(s.id, s);
  store.grants.push({ identityId: AGENT.id, sourceId: 'kb', role: READER });
  store.grants.push({ identityId: AGENT.id, sourceId: 'kb2', role: role('readonly', [{ effect: 'allow', action: 'read', resource: '*' }]) });
  store.grants.push({ identityId: AGENT.id, sourceId: 'off', role: READER });
  store.grants.push({ identityId: OUTSIDER.id, sourceId: 'kb2', role: READER });
  store.policies = opts.policies ?? [];
  const rateLimiter = memoryRateLimiter({ perIdentity: { points: opts.points ?? 1000, windowSeconds: 60 }, perSource: { points: 1000, windowSeconds: 60 } });
  deps = { store, rateLimiter, db };
  discover = discoverHandler(deps);
  related = relatedDocumentsHandler(deps);
  query = queryHandler({
    store,
    rateLimiter,
    cache: new ResultCache(),
    catalog: async () => null,
    maskSecret: 'secret',
    connectors: { reader: () => { throw new Error('no SQL here'); } },
    connectorRequest: documentsConnectorRequest(deps),
  });
}

beforeAll(async () => {
  tmp = await createTempDatabase('disc_handlers');
  db = await openControlDb(tmp.url);
  for (const s of ['kb', 'kb2', 'off']) await putSource(db, { id: s, type: 'documents', name: s, settings: { path: '/nonexistent' } });
  await indexAssets(db, 'kb', 'documents', KB);
  await indexAssets(db, 'kb2', 'documents', KB2);
  await indexAssets(db, 'off', 'documents', [doc('off:ops/x.md')]);
}, 60_000);
afterAll(async () => {
  await db?.close();
  await tmp?.drop();
});

describe('interlock_discover', () => {
  beforeEach(() => setup());

  test('hits in the spec shape; audience and role rules applied; audit details', async () => {
    const c = ctx(AGENT);
    const r = sc(await discover({ source_id: 'kb', query: 'failover' }, c));
    const hits = r.hits as Array<Record<string, unknown>>;
    for (const h of hits) expect(validateDiscoverHit(h)).toBe(true);
    const ids = hits.map((h) => h.asset_id);
    expect(ids).toEqual(expect.arrayContaining(['kb:ops/failover.md', 'kb:ops/backup.md', 'kb:ops/staff-only.md', 'kb:hr/salaries.md']));
    expect(ids).not.toContain('kb:sec/secret.md'); // audience security: not the agent's
    expect(r.truncated).toBe(false);
    expect(String(hits[0].snippet)).toContain('<b>failover</b>');
    expect(c.auditDetails).toEqual({ source_id: 'kb', action: 'discover', row_count: hits.length });
  });

  test('a query PostgreSQL cannot turn into a tsquery is invalid_arguments, not a failure (issue 22 item 6)', async () => {
    const c = ctx(AGENT);
    // A run of "-" operators overflows websearch_to_tsquery's operator stack ("tsquery stack too small").
    const r = await discover({ source_id: 'kb', query: `${'-'.repeat(600)}failover` }, c);
    expect(r).toEqual({
      kind: 'tool_error',
      code: 'invalid_arguments',
      message: 'The query cannot be turned into a PostgreSQL text-search query (for example a long run of "-" operators or a very long word); write it as plain words, "quoted phrases", OR and -word.',
    });
    expect(c.auditDetails).toEqual({ source_id: 'kb', action: 'discover' });
    // Many excluded words are a query like any other.
    const many = sc(await discover({ source_id: 'kb', query: `failover ${Array.from({ length: 200 }, (_, i) => `-w${i}`).join(' ')}` }, ctx(AGENT)));
    expect((many.hits as Array<{ asset_id: string }>).map((h) => h.asset_id)).toContain('kb:ops/failover.md');
  });

  test('limit: default 10 from spec, at most 50, truncated set when more matched', async () => {
    const d = sc(await discover({ source_id: 'kb', query: 'bulk' }, ctx(AGENT)));
    expect((d.hits as unknown[]).length).toBe(10);
    expect(d.truncated).toBe(true);
    const m = sc(await discover({ source_id: 'kb', query: 'bulk', limit: 50 }, ctx(AGENT)));
    expect((m.hits as unknown[]).length).toBe(50);
    const over = sc(await discover({ source_id: 'kb', query: 'bulk', limit: 500 }, ctx(AGENT)));
    expect((over.hits as unknown[]).length).toBe(50);
  });

  test('filters and expansion', async () => {
    const f = sc(await discover({ source_id: 'kb', query: 'failover', document_types: ['salary'], category_path: ['hr'] }, ctx(AGENT)));
    expect((f.hits as Array<{ asset_id: string }>).map((h) => h.asset_id)).toEqual(['kb:hr/salaries.md']);
    const e = sc(await discover({ source_id: 'kb', query: 'procedure', entities: [{ type: 'service', value: 'db' }], expand_related: true, limit: 4 }, ctx(AGENT)));
    const hits = e.hits as Array<Record<string, unknown>>;
    expect(hits.length).toBeLessThanOrEqual(4);
    for (const h of hits) {
      expect(validateDiscoverHit(h)).toBe(true);
      expect(h.source_id).toBe('kb');
    }
    const bad = await discover({ source_id: 'kb', query: 'x', time_range: { from: 'not a date' } }, ctx(AGENT));
    expect(bad).toMatchObject({ kind: 'tool_error', code: 'invalid_arguments' });
  });

  test('refusals in pipeline order: unknown or ungranted source, disabled, no discover allow, identity', async () => {
    expect(refusal(await discover({ source_id: 'nope', query: 'x' }, ctx(AGENT))).code).toBe('unknown_source');
    expect(refusal(await discover({ source_id: 'kb', query: 'x' }, ctx(OUTSIDER))).code).toBe('unknown_source');
    expect(refusal(await discover({ source_id: 'off', query: 'x' }, ctx(AGENT))).code).toBe('source_disabled');
    expect(refusal(await discover({ source_id: 'kb2', query: 'x' }, ctx(AGENT))).code).toBe('source_role_denied');
    expect(refusal(await discover({ source_id: 'kb', query: 'x' }, ctx(null))).code).toBe('identity_required');
  });

  test('policy refusal (time window on discover) and rate limit', async () => {
    setup({ policies: [{ name: 'never', rule: { type: 'time_window', days: ['mon'], start: '00:00', end: '00:01', actions: ['discover'] } }] });
    const c = ctx(AGENT);
    expect(refusal(await discover({ source_id: 'kb', query: 'x' }, c)).code).toBe('policy_denied');
    expect(c.auditDetails.policy).toBe('never');
    setup({ points: 1 });
    expect((await discover({ source_id: 'kb', query: 'x' }, ctx(AGENT))).kind).toBe('result');
    expect(refusal(await discover({ source_id: 'kb', query: 'x' }, ctx(AGENT))).code).toBe('rate_limited');
  });

  test('hidden by policy: filtered out and never hinted at (same answer as no match at all)', async () => {
    setup({ policies: [{ name: 'hide-hr', applies_to: { identities: ['agent'] }, rule: { type: 'hide_documents', document_types: ['salary'], category_prefixes: [['sec']] } }] });
    const onlyHidden = sc(await discover({ source_id: 'kb', query: 'salary bands' }, ctx(AGENT)));
    const nothing = sc(await discover({ source_id: 'kb', query: 'zebra unicorn' }, ctx(AGENT)));
    expect(onlyHidden).toEqual({ hits: [], truncated: false });
    expect(onlyHidden).toEqual(nothing);
    const all = sc(await discover({ source_id: 'kb', query: 'failover', limit: 50 }, ctx(AGENT)));
    expect((all.hits as Array<{ asset_id: string }>).map((h) => h.asset_id)).not.toContain('kb:hr/salaries.md');
  });
});

describe('interlock_related_documents', () => {
  beforeEach(() => setup());

  test('same source only, visible only; links to other sources and hidden assets are not followed', async () => {
    const c = ctx(AGENT);
    const r = sc(await related({ asset_id: 'kb:ops/failover.md' }, c));
    expect(r.asset_id).toBe('kb:ops/failover.md');
    expect(r.source_id).toBe('kb');
    const rel = r.related as Array<Record<string, unknown>>;
    for (const x of rel) {
      expect(validateRelatedDocument(x)).toBe(true);
      expect(String(x.asset_id).startsWith('kb:')).toBe(true);
    }
    const ids = rel.map((x) => x.asset_id);
    expect(ids).toContain('kb:ops/backup.md');
    expect(ids).toContain('kb:hr/salaries.md');
    expect(ids).not.toContain('kb:sec/secret.md');
    expect(ids).not.toContain('kb2:elsewhere.md');
    expect(rel.find((x) => x.asset_id === 'kb:ops/backup.md')).toMatchObject({ relation: 'link', score: 1 });
    expect(c.auditDetails).toEqual({ source_id: 'kb', action: 'discover', row_count: rel.length });
    const lim = sc(await related({ asset_id: 'kb:ops/failover.md', limit: 2 }, ctx(AGENT)));
    expect((lim.related as unknown[]).length).toBe(2);
  });

  test('missing, hidden (audience, policy), ungranted and no-discover assets all answer the same unknown_asset', async () => {
    setup({ policies: [{ name: 'hide-hr', rule: { type: 'hide_documents', category_prefixes: [['hr']] } }] });
    const answers = await Promise.all(
      ['kb:does/not/exist.md', 'kb:sec/secret.md', 'kb:hr/salaries.md', 'kb2:elsewhere.md', 'nosuchsource:x'].map(async (id) => related({ asset_id: id }, ctx(AGENT))),
    );
    const first = answers[0];
    expect(first).toMatchObject({ kind: 'refusal', code: 'unknown_asset' });
    for (const a of answers) expect(a).toEqual(first);
    // The outsider holds discover on kb2 only: kb assets do not exist for it.
    expect(await related({ asset_id: 'kb:ops/failover.md' }, ctx(OUTSIDER))).toEqual(first);
    // kb2's asset, seen by the outsider: its related documents never come from kb even though kb links to it.
    const r = sc(await related({ asset_id: 'kb2:elsewhere.md' }, ctx(OUTSIDER)));
    expect(r.related).toEqual([]);
  });

  test('a visible asset of a disabled source is unavailable; an invisible one stays unknown', async () => {
    expect(refusal(await related({ asset_id: 'off:ops/x.md' }, ctx(AGENT))).code).toBe('source_disabled');
    expect(refusal(await related({ asset_id: 'off:ops/x.md' }, ctx(OUTSIDER))).code).toBe('unknown_asset');
  });
});

describe('get_document through interlock_query (connector request)', () => {
  beforeEach(() => setup());

  test('full content in the spec shape; links keep only same-source assets the caller may discover', async () => {
    const c = ctx(AGENT);
    const r = sc(await query({ source_id: 'kb', request: { operation: 'get_document', asset_id: 'kb:ops/failover.md' } }, c));
    expect(validateDocumentContent(r)).toBe(true);
    expect(r).toMatchObject({ asset_id: 'kb:ops/failover.md', source_id: 'kb', body: 'failover procedure for kb:ops/failover.md', category_path: ['ops'] });
    expect(r.links).toEqual(['kb:ops/backup.md', 'kb:hr/salaries.md']);
    expect(c.auditDetails).toMatchObject({ source_id: 'kb', action: 'request', row_count: 1, asset_id: 'kb:ops/failover.md' });
  });

  test('governed by request: patterns, audience, source of the asset; unknown_asset alike; no request allow → forbidden', async () => {
    const get = (source_id: string, asset_id: string, who = AGENT) => query({ source_id, request: { operation: 'get_document', asset_id } }, ctx(who));
    const missing = await get('kb', 'kb:ops/none.md');
    expect(missing).toMatchObject({ kind: 'refusal', code: 'unknown_asset' });
    expect(await get('kb', 'kb:hr/salaries.md')).toEqual(missing); // request allowed on ops/* only
    expect(await get('kb', 'kb:sec/secret.md')).toEqual(missing); // audience
    expect(await get('kb', 'kb2:elsewhere.md')).toEqual(missing); // another source's asset
    expect(refusal(await get('kb2', 'kb2:elsewhere.md')).code).toBe('source_role_denied');
    expect(refusal(await get('kb', 'kb:ops/failover.md', OUTSIDER)).code).toBe('unknown_source');
    const bad = await query({ source_id: 'kb', request: { operation: 'delete_everything', asset_id: 'x' } }, ctx(AGENT));
    expect(bad).toMatchObject({ kind: 'tool_error', code: 'invalid_arguments' });
  });

  test('describe_access reports a documents source as enforced: false', async () => {
    const d = describeAccessHandler({ store, rateLimiter: deps.rateLimiter, catalog: async () => null });
    const r = sc(await d({ source_id: 'kb' }, ctx(AGENT)));
    expect((r.kb as { resources: unknown }).resources).toEqual({ enforced: false });
  });
});
