/**
 * Between policy (step 4) and write safety (step 6) or execution (step 7): the relation hierarchy is checked against
 * the server (issue 22 item 1). The catalogue can be older than the source: a table attached as a
 * partition of a masked or denied parent after the scan, a partition detached from one, or a new
 * partition under a parent with a denied descendant rule. When the server's hierarchy of the
 * relations the read touches differs from the catalogue's, steps 3 and 4 are decided again with the
 * union of both (src/sql/hierarchy.ts `overlayHierarchy`), so such a relation is never read as
 * unruled; when the server cannot be asked, the read is refused.
 *
 * Writes are checked too, on submission and again when an approved write is re-checked
 * (src/approvals/execute.ts): a write into a partition attached under a write-denied parent is
 * refused like a write into the parent.
 *
 * Only callers whose rules can refuse or mask (a read or write deny in their roles, or a `mask_columns` or
 * `deny_relations` policy that applies to them) are checked: for anyone else a change of hierarchy
 * cannot reveal anything. For a checked read whose relations the catalogue places in no tree, the
 * check rides on the read itself (standaloneGuardFor: a guard run before the statement in its round
 * trip, issue 23 bench 01); only when it trips does checkHierarchy run. A result-cache hit is served
 * without either (issue 28, src/pipeline/query.ts: answers are stored only by reads that found the
 * catalogue's tree, under a key that binds the catalogue snapshot and policies). A relation named in the statement but
 * unknown to the catalogue never gets here: the analyser refuses it (`source_role_denied`).
 */
import type { Policy } from '../../generated/policy-v1';
import type { AccessEvaluator } from '../governance/evaluator';
import type { PolicySubject } from '../governance/policies';
import { hierarchySensitive } from '../governance/hierarchy';
import type { SqlAnalysis } from '../sql/analyze';
import type { RelationName, SourceCatalog } from '../sql/catalog-types';
import { catalogHierarchy, hierarchyChanged, overlayHierarchy } from '../sql/hierarchy';
import type { ToolOutcome } from './types';
import { authorizeStatement, viewBases } from './03-authorize';
import { policyStep, type PolicyRestrictions } from './04-policy';
import { mapConnectorError, type QueryConnector } from './07-execute';

type OkAnalysis = Extract<SqlAnalysis, { ok: true }>;

/** Inputs of the check: the request's decisions so far and how to reach the server. */
export interface HierarchyCheckInput {
  connector: QueryConnector;
  evaluator: AccessEvaluator;
  sourceId: string;
  analysis: OkAnalysis;
  catalog: SourceCatalog;
  policies: Policy[];
  subject: PolicySubject;
  now: Date;
  restrictions: PolicyRestrictions;
  signal?: AbortSignal;
  identityId: string;
  /** The statement's text: chooses the refusal's prose (src/pipeline/03-authorize.ts deniedText). */
  sql?: string;
}

/**
 * The outcome: `changed` false → proceed with the restrictions already decided; `changed` true →
 * proceed with `restrictions` decided on the live hierarchy (the result must not be cached under the
 * old decisions' key); `ok` false → answer `outcome` (a refusal of step 3 or 4, or the mapped
 * connector failure when the server could not be asked).
 */
/**
 * The check's answer. `unreachable` marks a refusal because the server could not be asked (the
 * connector's own outcome: circuit open, unavailable…), as opposed to a decision on its answer.
 */
export type HierarchyCheck = { ok: true; changed: boolean; restrictions: PolicyRestrictions } | { ok: false; outcome: ToolOutcome; unreachable?: boolean };

export { hierarchySensitive };

/** Relations the read touches: those it names, those behind the view columns it uses, and the bases of the views it reads (rt1 RT1-3). */
function touched(a: OkAnalysis, catalog: SourceCatalog): RelationName[] {
  const out = new Map<string, RelationName>();
  for (const r of [...a.reads, ...a.writes, ...(a.viewSources ?? [])]) out.set(`${r.schema}\u0000${r.table}`, { schema: r.schema, name: r.table });
  for (const b of viewBases(a, catalog)) out.set(`${b.schema}\u0000${b.name}`, b);
  return [...out.values()];
}

/**
 * When the check can ride on the read itself (issue 23, bench 01): the caller is checked (see
 * module doc), the catalogue places no touched relation in a tree, and the connector offers a
 * guard. Returns the guard to pass to `read` (the statement then runs only if the server proves
 * every touched relation still stands alone, in the same round trip), or null: run checkHierarchy
 * first. A read whose guard trips must still go through checkHierarchy.
 */
export function standaloneGuardFor(i: Omit<HierarchyCheckInput, 'now' | 'restrictions' | 'signal' | 'identityId'>): { text: string; values: string[] } | null {
  if (!i.connector.standaloneGuard || !i.connector.relationTrees || i.analysis.kind !== 'read') return null;
  if (!hierarchySensitive(i.evaluator, i.sourceId, i.policies, i.subject)) return null;
  const relations = standaloneRelations(i.analysis, i.catalog);
  return relations ? i.connector.standaloneGuard(relations) : null;
}

/**
 * Whether a result-cache hit must run checkHierarchy before it is served (red team rtc, RTC-3): the
 * caller is checked and the catalogue places a touched relation in a tree. Such a read is checked in
 * one round trip and run in the next, so a partition attached between the two is read and stored
 * under decisions made on the old tree; the hit's own check finds the new tree. A hit over
 * relations that stand alone is served without a check (their reads carry the guard, in the same
 * round trip; issue 28).
 */
export function hitNeedsCheck(i: Omit<HierarchyCheckInput, 'now' | 'restrictions' | 'signal' | 'identityId'>): boolean {
  if (!i.connector.relationTrees || i.analysis.kind !== 'read') return false;
  if (!hierarchySensitive(i.evaluator, i.sourceId, i.policies, i.subject)) return false;
  return standaloneRelations(i.analysis, i.catalog) === null;
}

/** Per analysis (the analysis cache hands out the same object for a repeated statement): its catalogue and standaloneRelations' answer on it. */
const standaloneMemo = new WeakMap<OkAnalysis, { catalog: SourceCatalog; relations: RelationName[] | null }>();

/**
 * The relations `analysis` touches when the catalogue places none of them in a tree (and there is at
 * least one), else null. Remembered per analysis object and catalogue (both immutable once built),
 * so a repeated statement does not walk the hierarchy again (issue 28 item 3).
 */
function standaloneRelations(analysis: OkAnalysis, catalog: SourceCatalog): RelationName[] | null {
  const hit = standaloneMemo.get(analysis);
  if (hit && hit.catalog === catalog) return hit.relations;
  const base = catalogHierarchy(catalog);
  const relations = touched(analysis, catalog);
  const alone = relations.length > 0 && !relations.some((r) => base.ancestors(r.schema, r.name).length > 0 || base.descendants(r.schema, r.name).length > 0);
  standaloneMemo.set(analysis, { catalog, relations: alone ? relations : null });
  return alone ? relations : null;
}

/** Runs the check (see module doc). Never throws: connector failures become outcomes. */
export async function checkHierarchy(i: HierarchyCheckInput): Promise<HierarchyCheck> {
  const unchanged: HierarchyCheck = { ok: true, changed: false, restrictions: i.restrictions };
  if (!i.connector.relationTrees || !hierarchySensitive(i.evaluator, i.sourceId, i.policies, i.subject)) return unchanged;
  const base = catalogHierarchy(i.catalog);
  const relations = touched(i.analysis, i.catalog);
  // Relations the catalogue places in a tree need the walk anyway; otherwise the server first
  // proves (cheaply) which relations still stand alone (src/sources/postgres/hierarchy.ts).
  const probe = !relations.some((r) => base.ancestors(r.schema, r.name).length > 0 || base.descendants(r.schema, r.name).length > 0);
  let live;
  try {
    live = await i.connector.relationTrees(relations, { signal: i.signal, identityId: i.identityId, probe });
  } catch (err) {
    return { ok: false, outcome: mapConnectorError(err), unreachable: true };
  }
  if (!hierarchyChanged(base, live)) return unchanged;
  const h = overlayHierarchy(base, live);
  const denied = authorizeStatement(i.evaluator, i.sourceId, i.analysis, i.catalog, h, i.sql);
  if (denied) return { ok: false, outcome: denied };
  const pol = policyStep(i.policies, i.subject, i.analysis, i.catalog, i.now, h);
  if (!pol.ok) return pol;
  return { ok: true, changed: true, restrictions: pol.restrictions };
}
