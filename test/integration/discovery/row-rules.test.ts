/**
 * Discovery's mapped rows filtered by row rules (issue 27 item 3, docs/row-rules.md "Discovery"): a
 * document mapped from a row of a ruled table (or of a view over one) is found, related and fetched
 * only when the source says the row passes the caller's rule now; identities with different
 * attributes see different documents; one without the attribute sees none of that table; an
 * unruled mapped table is not affected.
 */
import type { RoleStatement } from '../../../generated/role-v1';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { discoverHandler } from '../../../src/tools/handlers/discover';
import { relatedDocumentsHandler } from '../../../src/tools/handlers/related';
import { documentsConnectorRequest } from '../../../src/tools/handlers/documents-request';
import type { ToolOutcome } from '../../../src/tools/types';
import { startRowDiscoverySource, type RowDiscoverySource } from '../../helpers/discovery-rows';
import { rowViewProvisioner } from '../../../src/pipeline/row-views';

let fx: RowDiscoverySource;
let su: RowDiscoverySource['su'];

beforeAll(async () => {
  fx = await startRowDiscoverySource(
    'disc_rows',
    `CREATE TABLE notes (id int PRIMARY KEY, region text NOT NULL, title text, body text);
    INSERT INTO notes SELECT g, (ARRAY['eu','us','ap'])[1 + g % 3], 'note ' || g, 'zebra report number ' || g FROM generate_series(1, 9) g;
    CREATE VIEW notes_v AS SELECT id, title, body FROM notes;
    CREATE TABLE wiki (id int PRIMARY KEY, title text, body text);
    INSERT INTO wiki VALUES (1, 'wiki one', 'zebra handbook');`,
    ['notes', 'notes_v', 'wiki'],
  );
  su = fx.su;
}, 60_000);
afterAll(async () => fx?.close());

const RULED: RoleStatement[] = [
  { effect: 'allow', action: 'discover', resource: '*' },
  { effect: 'allow', action: 'request', resource: '*' },
  { effect: 'allow', action: 'read', resource: 'public.notes', rows: 'region = ANY(identity.regions)' },
  { effect: 'allow', action: 'read', resource: 'public.notes_v' },
  { effect: 'allow', action: 'read', resource: 'public.wiki' },
];

function sc(o: ToolOutcome): Record<string, unknown> {
  if (o.kind !== 'result') throw new Error(`expected a result, got ${JSON.stringify(o)}`);
  return o.structuredContent!;
}

/** The three tools for one identity with `attributes` under `statements`, with (or without) the row reader. */
async function caller(attributes: Record<string, unknown> | undefined, statements: RoleStatement[] = RULED, rowReads = true) {
  const { record, role, deps, ctx } = await fx.caller(attributes, statements, rowReads);
  const discover = discoverHandler(deps);
  const related = relatedDocumentsHandler(deps);
  const request = documentsConnectorRequest(deps);
  return {
    discover: async (query = 'zebra') => ((sc(await discover({ source_id: 'hr', query, limit: 50 }, ctx())).hits as Array<{ asset_id: string }>).map((h) => h.asset_id).sort()),
    related: async (asset_id: string) => {
      const o = await related({ asset_id, limit: 50 }, ctx());
      return o.kind === 'result' ? (sc(o).related as Array<{ asset_id: string }>).map((h) => h.asset_id).sort() : (o as { code: string }).code;
    },
    get: async (asset_id: string) => {
      const o = await request(record, { operation: 'get_document', asset_id }, ctx(), new AccessEvaluator([{ sourceId: 'hr', role }]));
      return o.kind === 'result' ? 'ok' : (o as { code: string }).code;
    },
  };
}

const docs = (ids: number[]) => ids.flatMap((i) => [`hr:public.notes/${i}`, `hr:public.notes_v/${i}`]);
const EU = [3, 6, 9];
const US = [1, 4, 7];

test('two identities with different attributes find different documents of the ruled table and of the view over it', async () => {
  expect(await (await caller({ regions: ['eu'] })).discover()).toEqual([...docs(EU), 'hr:public.wiki/1'].sort());
  expect(await (await caller({ regions: ['us'] })).discover()).toEqual([...docs(US), 'hr:public.wiki/1'].sort());
  expect(await (await caller({ regions: ['eu', 'us'] })).discover()).toEqual([...docs([...EU, ...US]), 'hr:public.wiki/1'].sort());
});

test('an identity without the attribute sees none of the ruled table (nor the view over it); the unruled table stays', async () => {
  expect(await (await caller(undefined)).discover()).toEqual(['hr:public.wiki/1']);
});

test('related documents and get_document follow the same rows', async () => {
  const eu = await caller({ regions: ['eu'] });
  expect(await eu.get('hr:public.notes/3')).toBe('ok');
  expect(await eu.get('hr:public.notes/1')).toBe('unknown_asset');
  expect(await eu.get('hr:public.notes_v/1')).toBe('unknown_asset');
  expect(await eu.related('hr:public.notes/1')).toBe('unknown_asset');
  const rel = await eu.related('hr:public.notes/3');
  expect(Array.isArray(rel) && rel.every((id) => !/\/(1|2|4|5|7|8)$/.test(id) || id.startsWith('hr:public.wiki'))).toBe(true);
});

test('the source is the authority: a row moved out of the caller\'s rule after indexing is no longer shown', async () => {
  await su.query("UPDATE notes SET region = 'us' WHERE id = 3");
  try {
    expect(await (await caller({ regions: ['eu'] })).discover()).toEqual([...docs([6, 9]), 'hr:public.wiki/1'].sort());
  } finally {
    await su.query("UPDATE notes SET region = 'eu' WHERE id = 3");
  }
});

test('without a row reader (or for a caller whose rule cannot be enforced) the ruled documents are not shown; a caller without row rules sees all', async () => {
  expect(await (await caller({ regions: ['eu'] }, RULED, false)).discover()).toEqual(['hr:public.wiki/1']);
  const plain = RULED.map((s) => (s.resource === 'public.notes' ? { effect: 'allow' as const, action: 'read' as const, resource: 'public.notes' } : s));
  expect(await (await caller(undefined, plain)).discover()).toEqual([...docs([1, 2, 3, 4, 5, 6, 7, 8, 9]), 'hr:public.wiki/1'].sort());
});

test('row views that cannot be created (no writer role): discover, related documents and get_document refuse row_rules_unavailable as interlock_query does, never an empty answer (task hnu42b item 1)', async () => {
  const { record, role, deps, ctx } = await fx.caller({ regions: ['eu'] }, RULED);
  const failing = rowViewProvisioner(async () => {
    throw Object.assign(new Error('permission denied for database'), { sqlState: '42501' });
  });
  deps.rowReads = { connectors: deps.rowReads!.connectors, rowViews: failing };
  const refusal = (o: ToolOutcome) => (o.kind === 'refusal' ? { kind: o.kind, code: o.code } : o);
  expect(refusal(await discoverHandler(deps)({ source_id: 'hr', query: 'wiki', limit: 50 }, ctx()))).toEqual({ kind: 'refusal', code: 'row_rules_unavailable' });
  expect(refusal(await relatedDocumentsHandler(deps)({ asset_id: 'hr:public.wiki/1', limit: 50 }, ctx()))).toEqual({ kind: 'refusal', code: 'row_rules_unavailable' });
  // A seed in the ruled table is not visible while its rules cannot be enforced: unknown_asset, as a missing one (rt42b D1).
  expect(refusal(await relatedDocumentsHandler(deps)({ asset_id: 'hr:public.notes/1', limit: 50 }, ctx()))).toEqual({ kind: 'refusal', code: 'unknown_asset' });
  expect(refusal(await documentsConnectorRequest(deps)(record, { operation: 'get_document', asset_id: 'hr:public.notes/3' }, ctx(), new AccessEvaluator([{ sourceId: 'hr', role }])))).toEqual({ kind: 'refusal', code: 'row_rules_unavailable' });
  // An identity with no row rule on the source is not affected.
  const plain = RULED.map((s) => (s.resource === 'public.notes' ? { effect: 'allow' as const, action: 'read' as const, resource: 'public.notes' } : s));
  const other = await fx.caller(undefined, plain);
  other.deps.rowReads = { connectors: other.deps.rowReads!.connectors, rowViews: failing };
  const ok = await discoverHandler(other.deps)({ source_id: 'hr', query: 'wiki', limit: 50 }, other.ctx());
  expect(ok.kind).toBe('result');
  expect((sc(ok).hits as Array<{ asset_id: string }>).map((h) => h.asset_id)).toEqual(['hr:public.wiki/1']);
});
