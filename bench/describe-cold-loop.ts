/**
 * Task hpriv item 2 (red team rt41a): the longest event-loop turn while describe decides a cold
 * snapshot's view columns through their lineage, in process, no database.
 *
 * Catalogue: the Chinook scan (test fixture) plus BENCH_VIEWS (2000) views of four columns over
 * customer; caller: read allow on public.*, read deny on public.customer.email (a read deny makes
 * describe decide view columns through lineage). Each round takes a new catalogue object (cold, as
 * after a reload that made a new object) and runs each side:
 * - `one turn` (rt41a's handler): viewColumnDenied on every view column in one synchronous pass;
 * - `chunked` (this change): await warmViewColumnReads (VIEW_COLUMN_CHUNK analyses per turn), then
 *   the same pass (cache hits).
 * Reported per side: wall ms of the whole decision and the longest loop turn seen by
 * perf_hooks.monitorEventLoopDelay (resolution 1 ms; its max is the longest delay of a timer, i.e.
 * how long a request arriving meanwhile waits). BENCH_ROUNDS (3) rounds, sides alternating.
 * Run: `npx tsx bench/describe-cold-loop.ts`.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadavg } from 'node:os';
import { initSqlParser } from '../src/sql/analyze';
import { AccessEvaluator } from '../src/governance/evaluator';
import { catalogHierarchy } from '../src/sql/hierarchy';
import { viewColumnDenied, warmViewColumnReads } from '../src/tools/handlers/describe';
import type { CatalogRelation, SourceCatalog } from '../src/sql/catalog-types';
import fixture from '../test/unit/sql/fixtures/pg15-chinook-catalog.json';

const VIEWS = Number(process.env.BENCH_VIEWS ?? 2000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

function catalogue(): SourceCatalog {
  const base = fixture as unknown as SourceCatalog;
  const views: CatalogRelation[] = Array.from({ length: VIEWS }, (_, i) => ({
    schema: 'public',
    name: `v_bench_${i}`,
    kind: 'view',
    columns: ['id', 'e', 'shout', 'n'].map((name) => ({ name, dataType: 'text' })),
    definition: ' SELECT customer.customer_id AS id,\n    customer.email AS e,\n    upper((customer.email)::text) AS shout,\n    length((customer.phone)::text) AS n\n   FROM customer;',
  }));
  return { ...base, relations: [...base.relations, ...views] };
}

const evaluator = new AccessEvaluator([
  { sourceId: 'b', role: { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.customer.email' }] } as never },
]);

function decideAll(cat: SourceCatalog): number {
  const h = catalogHierarchy(cat);
  let hidden = 0;
  for (const rel of cat.relations) for (const c of rel.columns) if (viewColumnDenied(evaluator, 'b', cat, h, rel.schema, rel.name, c.name)) hidden++;
  return hidden;
}

async function side(name: 'one turn' | 'chunked'): Promise<{ ms: number; maxTurnMs: number; hidden: number }> {
  const cat = catalogue();
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await new Promise((r) => setTimeout(r, 5));
  const t0 = performance.now();
  if (name === 'chunked') await warmViewColumnReads(cat);
  const hidden = decideAll(cat);
  const ms = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 5));
  h.disable();
  return { ms: Math.round(ms), maxTurnMs: Math.round(h.max / 1e6), hidden };
}

async function main(): Promise<void> {
  await initSqlParser();
  const out: Record<string, Array<{ ms: number; maxTurnMs: number; hidden: number }>> = { 'one turn': [], chunked: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of round % 2 === 0 ? (['one turn', 'chunked'] as const) : (['chunked', 'one turn'] as const)) out[s].push(await side(s));
  }
  // eslint-disable-next-line no-console
  console.log(JSON.stringify({ views: VIEWS, viewColumns: VIEWS * 4, load1: Number(loadavg()[0].toFixed(2)), ...out }, null, 1));
}

void main();
