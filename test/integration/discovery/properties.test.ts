/**
 * Discovery properties on real PostgreSQL (issue 4, "Done when"): over random corpora in three
 * sources (two documents sources and a PostgreSQL one, with links pointing across sources), random
 * identities (roles with audiences and discover/deny patterns), random hide_documents policies and
 * random filters:
 * - no hit or expansion ever comes from another source, outside the caller's audience, outside the
 *   role patterns, or from a hidden type or category;
 * - every filter agrees with a brute-force filter over the same corpus (compared as SETS, with a
 *   term every document contains), and truncation is exact;
 * - limits are never exceeded (expansions included, at most half the limit);
 * - related documents never cross sources, even when links point across, and every same-source
 *   link and shared entity the caller may see is found;
 * - any query text is safe.
 * The brute force decides with AccessEvaluator.decideOpaque (the one evaluator) and reads the
 * policies itself, independently of the SQL translation in src/discovery/access.ts.
 */
import fc from 'fast-check';
import type { Policy } from '../../../generated/policy-v1';
import type { SourceRole } from '../../../generated/role-v1';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { putSource } from '../../../src/control/sources';
import { AccessEvaluator, type RoleGrant } from '../../../src/governance/evaluator';
import { policyApplies } from '../../../src/governance/policies';
import { buildScope, mayAct } from '../../../src/discovery/access';
import { indexAssets } from '../../../src/discovery/indexer';
import { relatedAssets, searchAssets, type DiscoverFilters } from '../../../src/discovery/search';
import type { AssetInput } from '../../../src/discovery/types';
import { pgServer, createTempDatabase, type TempDatabase } from '../../helpers/pg';

const SOURCES = ['src-a', 'src-b', 'src-c'] as const;
type Src = (typeof SOURCES)[number];
const TYPE_OF: Record<Src, 'documents' | 'postgres'> = { 'src-a': 'documents', 'src-b': 'postgres', 'src-c': 'documents' };
const SEGMENTS = ['ops', 'sec', 'hr', 'a/b', 'a', 'runbooks'];
const DOC_TYPES = ['runbook', 'policy', 'ticket', 'guide'];
const AUDIENCES = ['staff', 'security', 'hr'];
const ENTITIES = [
  { type: 'service', value: 'ledger' },
  { type: 'service', value: 'auth' },
  { type: 'team', value: 'sre' },
  { type: 'team', value: 'ledger' },
];
const WORDS = ['alpha', 'bravo', 'charlie', 'delta', 'kilo'];
const PATTERNS = ['*', '*.*', 'ops', 'ops/*', 'sec/*', 'a/b/*', 'a/*', 'a', 'ops/runbooks', 'hr/*', 'a/b/runbooks/*', 'public.*'];
const T0 = Date.UTC(2024, 0, 1);
const T1 = Date.UTC(2026, 0, 1);
const NOW = new Date('2025-06-01T12:00:00Z');
const SUBJECT = { identityId: 'idn_00000000000000000001', identityName: 'agent' };
const MAX_DOCS = 18;

let tmp: TempDatabase;
let db: ControlDb;

beforeAll(async () => {
  tmp = await createTempDatabase('disc_props');
  db = await openControlDb(tmp.url);
  for (const id of SOURCES) {
    const settings =
      TYPE_OF[id] === 'documents'
        ? { path: `/nonexistent/${id}` }
        : { ...pgServer(), database: 'none', reader: { user: 'none', password: 'x' }, tls: { mode: 'off' } };
    await putSource(db, { id, type: TYPE_OF[id], name: id, settings });
  }
}, 60_000);
afterAll(async () => {
  await db?.close();
  await tmp?.drop();
});

// ---------- arbitraries ----------

/** Timestamps from a small set, so range bounds often equal a document's time (inclusive ends are tested). */
const INSTANTS = Array.from({ length: 12 }, (_, i) => new Date(T0 + Math.floor(((T1 - T0) * i) / 11)).toISOString());
const isoArb = fc.constantFrom(...INSTANTS);

const docArb = fc.record({
  documentType: fc.constantFrom(...DOC_TYPES),
  categoryPath: fc.array(fc.constantFrom(...SEGMENTS), { maxLength: 3 }),
  audience: fc.subarray(AUDIENCES),
  entities: fc.subarray(ENTITIES, { maxLength: 3 }),
  timestamp: fc.option(isoArb, { nil: null }),
  words: fc.array(fc.constantFrom(...WORDS), { maxLength: 6 }),
  links: fc.array(fc.record({ src: fc.constantFrom(...SOURCES), n: fc.nat(MAX_DOCS + 2) }), { maxLength: 3 }),
});

type DocSpec = typeof docArb extends fc.Arbitrary<infer T> ? T : never;

const corpusArb = fc.record({
  'src-a': fc.array(docArb, { maxLength: MAX_DOCS }),
  'src-b': fc.array(docArb, { maxLength: MAX_DOCS }),
  'src-c': fc.array(docArb, { maxLength: MAX_DOCS }),
});

const statementArb = fc.record({
  effect: fc.constantFrom('allow' as const, 'allow' as const, 'allow' as const, 'deny' as const),
  action: fc.constantFrom('discover' as const, 'discover' as const, '*' as const, 'read' as const, 'request' as const),
  resource: fc.oneof({ weight: 1, arbitrary: fc.constant('*') }, { weight: 3, arbitrary: fc.constantFrom(...PATTERNS) }),
});

const rolesArb = (src: Src) =>
  fc
    .oneof(
      { weight: 1, arbitrary: fc.constant([]) },
      { weight: 4, arbitrary: fc.array(fc.record({ audiences: fc.subarray(AUDIENCES), statements: fc.array(statementArb, { minLength: 1, maxLength: 4 }) }), { minLength: 1, maxLength: 2 }) },
    )
    .map((rs) =>
    rs.map((r, k): SourceRole => ({ name: `${src}-r${k}`, audiences: r.audiences, statements: r.statements as SourceRole['statements'] })),
  );

const identityArb = fc.record({ 'src-a': rolesArb('src-a'), 'src-b': rolesArb('src-b'), 'src-c': rolesArb('src-c') });

const policyArb = fc.record({
  enabled: fc.boolean(),
  appliesTo: fc.oneof(
    fc.constant(undefined),
    fc.constantFrom(...SOURCES).map((s) => ({ sources: [s] })),
    fc.constantFrom(...SOURCES.flatMap((s) => [`${s}-r0`, `${s}-r1`])).map((r) => ({ roles: [r] })),
    fc.constantFrom('agent', SUBJECT.identityId, 'someone-else').map((i) => ({ identities: [i] })),
  ),
  documentTypes: fc.subarray(DOC_TYPES, { maxLength: 2 }),
  prefixes: fc.array(fc.array(fc.constantFrom(...SEGMENTS), { minLength: 1, maxLength: 2 }), { maxLength: 2 }),
});
const policiesArb = fc.array(policyArb, { maxLength: 3 }).map((ps) =>
  ps.map((p, i): Policy => ({
    name: `p${i}`,
    enabled: p.enabled,
    ...(p.appliesTo ? { applies_to: p.appliesTo } : {}),
    rule: { type: 'hide_documents', document_types: p.documentTypes, category_prefixes: p.prefixes as Array<[string, ...string[]]> },
  })),
);

const filterParts = {
  sourceTypes: fc.subarray(['postgres', 'documents'], { minLength: 1 }),
  documentTypes: fc.subarray(DOC_TYPES, { minLength: 1 }),
  categoryPath: fc.array(fc.constantFrom(...SEGMENTS), { minLength: 1, maxLength: 2 }),
  timeRange: fc.record({ from: isoArb, to: isoArb }, { requiredKeys: [] }),
  audience: fc.subarray(AUDIENCES, { minLength: 1 }),
  entities: fc.subarray(ENTITIES, { minLength: 1, maxLength: 2 }),
};
/** No filter, one filter, or any combination (each filter narrows, so fewer is likelier to match). */
const filtersArb: fc.Arbitrary<DiscoverFilters> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({}) },
  { weight: 5, arbitrary: fc.oneof(...Object.entries(filterParts).map(([k, a]) => (a as fc.Arbitrary<unknown>).map((v) => ({ [k]: v }) as DiscoverFilters))) },
  { weight: 2, arbitrary: fc.record(filterParts, { requiredKeys: [] }) as fc.Arbitrary<DiscoverFilters> },
);

// ---------- the corpus as indexed, and the brute force ----------

interface Doc extends AssetInput {
  source: Src;
}

function buildCorpus(spec: Record<Src, DocSpec[]>): Doc[] {
  const out: Doc[] = [];
  for (const src of SOURCES) {
    spec[src].forEach((d, i) => {
      out.push({
        source: src,
        assetId: `${src}:d${i}.md`,
        documentType: d.documentType,
        title: `Document ${i} ${d.words[0] ?? ''}`.trim(),
        body: `common ${d.words.join(' ')}`,
        categoryPath: d.categoryPath,
        timestamp: d.timestamp,
        audience: d.audience,
        entities: d.entities,
        links: [...new Set(d.links.map((l) => `${l.src}:d${l.n}.md`))],
      });
    });
  }
  return out;
}

async function indexCorpus(corpus: Doc[]): Promise<void> {
  for (const src of SOURCES) {
    await indexAssets(db, src, TYPE_OF[src], corpus.filter((d) => d.source === src).map(({ source: _s, ...a }) => a));
  }
}

function grantsOf(identity: Record<Src, SourceRole[]>): RoleGrant[] {
  return SOURCES.flatMap((src) => identity[src].map((role) => ({ sourceId: src, role })));
}

/** Independent visibility: the evaluator for roles, the audiences, and the policies read directly. */
function visibleBrute(ev: AccessEvaluator, policies: Policy[], src: Src, d: Doc): boolean {
  if (d.source !== src) return false;
  if (ev.decideOpaque(src, 'discover', d.categoryPath.join('/')) !== 'allow') return false;
  const aud = ev.audiences(src);
  if (d.audience.length > 0 && !d.audience.some((a) => aud.includes(a))) return false;
  const subject = { ...SUBJECT, roles: ev.roleNames(src), sourceId: src };
  for (const p of policies) {
    if (!policyApplies(p, subject) || p.rule.type !== 'hide_documents') continue;
    if ((p.rule.document_types ?? []).includes(d.documentType)) return false;
    if ((p.rule.category_prefixes ?? []).some((px) => px.every((x, i) => d.categoryPath[i] === x))) return false;
  }
  return true;
}

function filterBrute(f: DiscoverFilters, d: Doc): boolean {
  if (f.sourceTypes && !f.sourceTypes.includes(TYPE_OF[d.source])) return false;
  if (f.documentTypes && !f.documentTypes.includes(d.documentType)) return false;
  if (f.categoryPath && !f.categoryPath.every((x, i) => d.categoryPath[i] === x)) return false;
  if (f.timeRange && (f.timeRange.from !== undefined || f.timeRange.to !== undefined)) {
    if (d.timestamp === null) return false;
    const t = Date.parse(d.timestamp);
    if (f.timeRange.from !== undefined && t < Date.parse(f.timeRange.from)) return false;
    if (f.timeRange.to !== undefined && t > Date.parse(f.timeRange.to)) return false;
  }
  if (f.audience && !d.audience.some((a) => f.audience!.includes(a))) return false;
  if (f.entities && !f.entities.every((e) => d.entities.some((x) => x.type === e.type && x.value === e.value))) return false;
  return true;
}

const sorted = (xs: Iterable<string>) => [...xs].sort();

// ---------- properties ----------

test('search: results equal the brute force as sets, never exceed the limit, truncation is exact; expansions stay inside', async () => {
  const seen = { nonEmpty: 0, partial: 0, truncated: 0, expansions: 0, hiddenByPolicy: 0, outsideAudience: 0 };
  await fc.assert(
    fc.asyncProperty(corpusArb, identityArb, policiesArb, filtersArb, fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 50 })), fc.constantFrom('common', ...WORDS), async (spec, identity, policies, filters, limit, word) => {
      const corpus = buildCorpus(spec);
      await indexCorpus(corpus);
      const ev = new AccessEvaluator(grantsOf(identity));
      for (const src of SOURCES) {
        const scope = buildScope(ev, policies, SUBJECT, src, 'discover', NOW);
        const visible = corpus.filter((d) => visibleBrute(ev, policies, src, d));
        if (!mayAct(scope)) expect(visible).toEqual([]);
        const expected = new Set(visible.filter((d) => filterBrute(filters, d)).map((d) => d.assetId));
        const own = corpus.filter((d) => d.source === src);
        if (expected.size > 0) seen.nonEmpty++;
        if (visible.length > 0 && visible.length < own.length) seen.partial++;
        if (expected.size > limit) seen.truncated++;
        if (own.some((d) => ev.decideOpaque(src, 'discover', d.categoryPath.join('/')) === 'allow' && d.audience.length > 0 && !d.audience.some((a) => ev.audiences(src).includes(a)))) seen.outsideAudience++;
        if (own.some((d) => ev.decideOpaque(src, 'discover', d.categoryPath.join('/')) === 'allow' && (d.audience.length === 0 || d.audience.some((a) => ev.audiences(src).includes(a))) && !visibleBrute(ev, policies, src, d))) seen.hiddenByPolicy++;

        // Unfiltered, large limit: exactly the visible set.
        const all = await searchAssets(db.pool, scope, { query: 'common', limit: 50 });
        expect(sorted(all.hits.map((h) => h.asset_id))).toEqual(sorted(visible.map((d) => d.assetId)));
        expect(all.truncated).toBe(false);

        // Filtered, random limit.
        const r = await searchAssets(db.pool, scope, { query: 'common', filters, limit });
        const ids = r.hits.map((h) => h.asset_id);
        expect(ids.length).toBe(Math.min(limit, expected.size));
        expect(r.truncated).toBe(expected.size > limit);
        for (const id of ids) expect(expected.has(id)).toBe(true);
        if (limit >= expected.size) expect(sorted(ids)).toEqual(sorted(expected));
        for (const h of r.hits) {
          expect(h.source_id).toBe(src);
          expect(h.expansion).toBe(false);
        }
        for (let i = 1; i < r.hits.length; i++) expect(r.hits[i].score).toBeLessThanOrEqual(r.hits[i - 1].score);

        // With expansion (a selective word, so related assets are mostly not hits themselves): still
        // within the limit, the scope and the filters; no duplicates.
        const x = await searchAssets(db.pool, scope, { query: word, filters, limit, expandRelated: true });
        const xids = x.hits.map((h) => h.asset_id);
        expect(xids.length).toBeLessThanOrEqual(limit);
        expect(new Set(xids).size).toBe(xids.length);
        const exp = x.hits.filter((h) => h.expansion);
        expect(exp.length).toBeLessThanOrEqual(Math.floor(limit / 2));
        const direct = new Set(x.hits.filter((h) => !h.expansion).map((h) => h.asset_id));
        for (const h of x.hits) {
          expect(expected.has(h.asset_id)).toBe(true);
          expect(h.source_id).toBe(src);
          expect(h.asset_id.startsWith(`${src}:`)).toBe(true);
        }
        for (const h of exp) expect(direct.has(h.related_to!)).toBe(true);
        seen.expansions += exp.length;
      }
    }),
    { numRuns: 100 },
  );
  // The generators must reach the interesting cases (otherwise the property proves little).
  if (process.env.DISC_STATS) console.log(JSON.stringify(seen));
  // (Typical counts over 100 runs: nonEmpty ~45, partial ~50, truncated ~10, expansions ~20, hidden ~15, outside ~40.)
  expect(seen.nonEmpty).toBeGreaterThan(15);
  expect(seen.partial).toBeGreaterThan(15);
  expect(seen.truncated).toBeGreaterThan(2);
  expect(seen.expansions).toBeGreaterThan(4);
  expect(seen.hiddenByPolicy).toBeGreaterThan(3);
  expect(seen.outsideAudience).toBeGreaterThan(8);
}, 240_000);

test('related documents: same source only (even when links point across), visible only, every visible link and shared entity found', async () => {
  const seen = { links: 0, entities: 0, crossLinks: 0 };
  await fc.assert(
    fc.asyncProperty(corpusArb, identityArb, policiesArb, async (spec, identity, policies) => {
      const corpus = buildCorpus(spec);
      await indexCorpus(corpus);
      const ev = new AccessEvaluator(grantsOf(identity));
      for (const src of SOURCES) {
        const scope = buildScope(ev, policies, SUBJECT, src, 'discover', NOW);
        const visible = new Map(corpus.filter((d) => visibleBrute(ev, policies, src, d)).map((d) => [d.assetId, d]));
        const seeds = corpus.filter((d) => d.source === src).slice(0, 4);
        for (const seed of seeds) {
          const rel = await relatedAssets(db.pool, scope, seed.assetId, 50);
          const ids = rel.map((r) => r.asset_id);
          expect(new Set(ids).size).toBe(ids.length);
          expect(ids).not.toContain(seed.assetId);
          for (const r of rel) {
            expect(r.asset_id.startsWith(`${src}:`)).toBe(true);
            expect(visible.has(r.asset_id)).toBe(true);
          }
          // Every visible same-source link (either direction) is a 'link'; every other visible asset sharing an entity is an 'entity' with the shared count.
          const byId = new Map(rel.map((r) => [r.asset_id, r]));
          seen.links += rel.filter((r) => r.relation === 'link').length;
          seen.entities += rel.filter((r) => r.relation === 'entity').length;
          seen.crossLinks += seed.links.filter((l) => !l.startsWith(`${src}:`) && corpus.some((d) => d.assetId === l)).length;
          for (const d of visible.values()) {
            if (d.assetId === seed.assetId) continue;
            const linked = seed.links.includes(d.assetId) || d.links.includes(seed.assetId);
            const shared = d.entities.filter((e) => seed.entities.some((s) => s.type === e.type && s.value === e.value)).length;
            if (linked) expect(byId.get(d.assetId)?.relation).toBe('link');
            else if (shared > 0) expect(byId.get(d.assetId)).toMatchObject({ relation: 'entity', score: shared });
          }
        }
        // A seed of another source yields nothing in this scope (cross-source links are never followed).
        for (const other of corpus.filter((d) => d.source !== src).slice(0, 3)) {
          expect(await relatedAssets(db.pool, scope, other.assetId, 50)).toEqual([]);
        }
      }
    }),
    { numRuns: 40 },
  );
  if (process.env.DISC_STATS) console.log(JSON.stringify(seen));
  expect(seen.links).toBeGreaterThan(3);
  expect(seen.entities).toBeGreaterThan(5);
  expect(seen.crossLinks).toBeGreaterThan(5);
}, 240_000);

test('any query text is safe: no error, and only visible assets', async () => {
  const spec = fc.sample(corpusArb, { numRuns: 1, seed: 11 })[0];
  const corpus = buildCorpus(spec);
  await indexCorpus(corpus);
  const identity = { 'src-a': [{ name: 'all', audiences: ['staff'], statements: [{ effect: 'allow', action: 'discover', resource: '*' }] } as SourceRole], 'src-b': [], 'src-c': [] };
  const ev = new AccessEvaluator(grantsOf(identity));
  const scope = buildScope(ev, [], SUBJECT, 'src-a', 'discover', NOW);
  const visible = new Set(corpus.filter((d) => visibleBrute(ev, [], 'src-a', d)).map((d) => d.assetId));
  const tricky = fc.constantFrom(
    "'); DROP TABLE assets; --",
    '"unclosed phrase',
    'OR OR -',
    '!!! && || <-> :* ',
    '\u0000common',
    'common\uD800',
    '-common',
    'common -alpha "bravo charlie" OR delta',
    '*',
    '\\',
    ' ',
  );
  await fc.assert(
    fc.asyncProperty(fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 60 }), tricky), fc.boolean(), async (q, expand) => {
      const r = await searchAssets(db.pool, scope, { query: q, limit: 10, expandRelated: expand });
      expect(r.hits.length).toBeLessThanOrEqual(10);
      for (const h of r.hits) expect(visible.has(h.asset_id)).toBe(true);
    }),
    { numRuns: 150 },
  );
  const still = await db.pool.query("SELECT to_regclass('assets') AS t");
  expect(still.rows[0].t).toBe('assets');
}, 120_000);

test('regression: an expansion always refers to a direct hit that is still in the list (small limits)', async () => {
  const spec = { 'src-a': [], 'src-b': [[], ['kilo'], ['kilo']].map((words) => ({ documentType: 'runbook', categoryPath: [], audience: [], entities: [], timestamp: null, words, links: [] })), 'src-c': [] } as unknown as Record<Src, DocSpec[]>;
  const corpus = buildCorpus(spec);
  await indexCorpus(corpus);
  const all = { 'src-a': [], 'src-b': [{ name: 'r', audiences: [], statements: [{ effect: 'allow', action: 'discover', resource: '*' }] } as SourceRole], 'src-c': [] };
  const scope = buildScope(new AccessEvaluator(grantsOf(all)), [], SUBJECT, 'src-b', 'discover', NOW);
  for (const limit of [2, 3, 4]) {
    const x = await searchAssets(db.pool, scope, { query: 'common', limit, expandRelated: true });
    const direct = new Set(x.hits.filter((h) => !h.expansion).map((h) => h.asset_id));
    expect(x.hits.length).toBeLessThanOrEqual(limit);
    for (const h of x.hits.filter((e) => e.expansion)) expect(direct.has(h.related_to!)).toBe(true);
  }
});
