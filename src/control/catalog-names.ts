/**
 * The names a policy or role writes (sources in `applies_to.sources`; relations and columns in a
 * policy's rule or a role's resources) checked against the registered sources and their scanned
 * catalogues (task hnu4a item 1): one typo in `columns: [public.customer.emial]` would otherwise
 * leave the e-mail unmasked without a signal. A source name that is not registered is always
 * refused; a relation or column that no catalogue of the sources it concerns holds is refused with
 * a "did you mean" unless the operator says it is intended (`allowUnknownNames`: CLI
 * `--allow-unknown-names`, admin API `allow_unknown_names=true`), since tables may be created later.
 * The catalogues are the snapshots `interlock source scan` stores (src/control/catalog.ts), never
 * a guess. Wildcard parts (`*`) match any name; a name made only of wildcards is not checked.
 */
import type pg from 'pg';
import type { SourceCatalog } from '../sql/catalog-types';
import type { Policy } from '../../generated/policy-v1';
import type { SourceRole } from '../../generated/role-v1';
import type { ControlDb } from './db';
import { closestName as closestNameAmong } from '../errors/suggest';
import { ValidationError } from './errors';

/** A name to check: where it is written ("rule/columns/0"), the name, and what it names by its parts (2: schema.table, 3: schema.table.column). */
export interface WrittenName {
  path: string;
  name: string;
}

/** The registered sources: every id, and for each PostgreSQL source its stored catalogue (null: never scanned). */
export interface KnownSources {
  ids: Set<string>;
  catalogs: Map<string, SourceCatalog | null>;
}

/** What the check found: unknown sources (always refused) and unknown relations or columns (refused unless intended), as "path: what" lines. */
export interface NameFindings {
  sources: string[];
  names: string[];
}

/** Loads the registered sources and the catalogues of the PostgreSQL ones, on `q` (a pool, or a transaction's client). */
export async function loadKnownSources(q: ControlDb | pg.ClientBase): Promise<KnownSources> {
  const runner = 'pool' in q ? q.pool : q;
  const r = await runner.query<{ id: string; type: string; catalog: SourceCatalog | null }>(
    'SELECT s.id, s.type, c.catalog FROM sources s LEFT JOIN catalog_snapshots c ON c.source_id = s.id ORDER BY s.id',
  );
  const known: KnownSources = { ids: new Set(), catalogs: new Map() };
  for (const row of r.rows) {
    known.ids.add(row.id);
    if (row.type === 'postgres') known.catalogs.set(row.id, row.catalog);
  }
  return known;
}

/**
 * The closest of `candidates` to `name` ignoring case (at most 2 edits, or a fifth of its length),
 * else undefined (src/errors/suggest.ts closestName).
 */
export function closestName(name: string, candidates: Iterable<string>): string | undefined {
  return closestNameAmong(name, candidates, Math.max(2, Math.floor(name.length / 5)), (s) => s.toLowerCase()) ?? undefined;
}

const suggest = (s: string | undefined) => (s ? `; did you mean ${s}?` : '');

/** The "schema.table" and "schema.table.column" names a catalogue holds. */
function catalogNames(catalog: SourceCatalog): { relations: string[]; columns: string[] } {
  const relations: string[] = [];
  const columns: string[] = [];
  for (const r of catalog.relations) {
    relations.push(`${r.schema}.${r.name}`);
    for (const c of r.columns) columns.push(`${r.schema}.${r.name}.${c.name}`);
  }
  return { relations, columns };
}

const partsMatch = (pattern: string[], parts: string[]) => pattern.length === parts.length && pattern.every((p, i) => p === '*' || p === parts[i]);

/**
 * Checks `names` against the catalogues of `sources` (the named ones; none named: every registered
 * source) and each of `sources` against the registered ids. A name is checked only when it has 2
 * (relation) or 3 (column) dot-separated parts and not only wildcards; when a named PostgreSQL
 * source was never scanned, or no source concerned has a catalogue, names are not checked (there
 * is nothing to check them against). Pure.
 */
export function checkWrittenNames(known: KnownSources, sources: { path: string; ids: string[] } | undefined, names: WrittenName[]): NameFindings {
  const findings: NameFindings = { sources: [], names: [] };
  sources?.ids.forEach((id, i) => {
    if (!known.ids.has(id)) findings.sources.push(`${sources.path}/${i}: no source "${id}" is registered${suggest(closestName(id, known.ids))}`);
  });
  const concerned = sources?.ids.length ? sources.ids.filter((id) => known.ids.has(id)) : [...known.ids];
  const catalogs: Array<[string, SourceCatalog]> = [];
  const unscanned: string[] = [];
  for (const id of concerned) {
    if (!known.catalogs.has(id)) continue; // not a PostgreSQL source
    const c = known.catalogs.get(id);
    if (!c) {
      if (sources?.ids.length) return findings; // a named source never scanned: nothing to check against
      unscanned.push(id);
      continue;
    }
    catalogs.push([id, c]);
  }
  if (catalogs.length === 0) return findings;
  const all = catalogs.map(([, c]) => catalogNames(c));
  // A name meant for a source registered but not scanned yet (e.g. one `interlock apply` has just added)
  // is looked up only in the other sources' catalogues: say so, and name the unscanned ones (trial nuc).
  const pending = unscanned.length ? ` (not scanned yet: ${unscanned.join(', ')}; run \`interlock source scan ${unscanned.length === 1 ? unscanned[0] : 'ID'}\`, then repeat)` : '';
  const where = catalogs.map(([id]) => id).join(', ') + pending;
  for (const n of names) {
    const parts = n.name.split('.');
    if ((parts.length !== 2 && parts.length !== 3) || parts.every((p) => p === '*')) continue;
    const pool = all.flatMap((x) => (parts.length === 2 ? x.relations : x.columns));
    if (pool.some((c) => partsMatch(parts, c.split('.')))) continue;
    const kind = parts.length === 2 ? 'relation' : 'column';
    const hint = n.name.includes('*') ? undefined : closestName(n.name, pool);
    findings.names.push(`${n.path}: no ${kind} ${n.name} in the scanned catalogue of ${where}${suggest(hint)}`);
  }
  return findings;
}

/** The advice appended to a refusal of unknown names. */
export const ALLOW_UNKNOWN_HINT =
  'if a name is meant for a relation or column created later, repeat with --allow-unknown-names (admin API: allow_unknown_names=true); after a schema change run `interlock source scan ID` first';

/**
 * Throws ValidationError(`${what}: …`, lines) when `findings` hold an unknown source, or an unknown
 * relation or column and `allowUnknownNames` is not set.
 */
export function refuseUnknownNames(what: string, findings: NameFindings, allowUnknownNames: boolean | undefined): void {
  const lines = [...findings.sources, ...(allowUnknownNames ? [] : findings.names)];
  if (lines.length === 0) return;
  const msg = findings.sources.length && (allowUnknownNames || findings.names.length === 0)
    ? `${what} names a source that is not registered`
    : `${what} names ${findings.sources.length ? 'a source that is not registered or ' : ''}a relation or column that no scanned catalogue has (${ALLOW_UNKNOWN_HINT})`;
  throw new ValidationError(msg, lines);
}

/** The sources and names a policy writes: `applies_to.sources`; the relations of deny_relations and restrict_rows (a one-part name, a schema, as `schema.*`), the columns of mask_columns. Paths start with the policy's name. */
export function policyWrittenNames(p: Policy): { sources?: { path: string; ids: string[] }; names: WrittenName[] } {
  const r = p.rule as { type: string; columns?: string[]; relations?: string[] };
  const list = r.type === 'mask_columns' ? { key: 'columns', items: r.columns ?? [] } : r.type === 'deny_relations' || r.type === 'restrict_rows' ? { key: 'relations', items: r.relations ?? [] } : { key: '', items: [] };
  return {
    ...(p.applies_to?.sources ? { sources: { path: `${p.name}/applies_to/sources`, ids: p.applies_to.sources } } : {}),
    // A one-part relation pattern names a schema (src/governance/policies.ts patternMatches): checked as schema.* (rtn4).
    names: list.items.map((name, i) => ({ path: `${p.name}/rule/${list.key}/${i}`, name: list.key === 'relations' && !name.includes('.') ? `${name}.*` : name })),
  };
}

/** The relation and column resources of a role's statements (discover and request statements name document categories or requests, not relations). */
export function roleWrittenNames(role: SourceRole): WrittenName[] {
  return role.statements.flatMap((s, i) => (s.action === 'discover' || s.action === 'request' ? [] : [{ path: `statements/${i}/resource`, name: s.resource }]));
}

/**
 * Refuses (ValidationError) a mask_columns name that the policy engine can never match, whatever
 * the catalogue (red team rtn4, item 4): the engine (src/governance/policies.ts maskFor) matches
 * schema.table (every column) or schema.table.column, so a bare "email" or "*" masked nothing while
 * the name check, which skips names that are not 2 or 3 parts, let it through. Not lifted by
 * `allowUnknownNames` (no later table makes such a name match).
 */
export function refuseUnmatchableMaskNames(policies: Policy[]): void {
  const lines: string[] = [];
  for (const p of policies) {
    const w = policyWrittenNames(p);
    if (p.rule.type !== 'mask_columns') continue;
    for (const n of w.names) {
      const parts = n.name.split('.').length;
      if (parts !== 2 && parts !== 3) lines.push(`${n.path}: ${n.name} is not schema.table.column (or schema.table for every column; * wildcards allowed): it would mask nothing`);
    }
  }
  if (lines.length) throw new ValidationError(`${policies.length === 1 ? `policy "${policies[0].name}"` : 'the policy list'} names a masked column that matches no column`, lines);
}

/**
 * Refuses (ValidationError, exit 2 / 400 validation_failed) policies naming an unregistered source,
 * or a relation or column no catalogue of their sources holds unless `allowUnknownNames`.
 */
export function refuseUnknownPolicyNames(known: KnownSources, policies: Policy[], allowUnknownNames?: boolean): void {
  refuseUnmatchableMaskNames(policies);
  const all: NameFindings = { sources: [], names: [] };
  for (const p of policies) {
    const w = policyWrittenNames(p);
    const f = checkWrittenNames(known, w.sources, w.names);
    all.sources.push(...f.sources);
    all.names.push(...f.names);
  }
  refuseUnknownNames(policies.length === 1 ? `policy "${policies[0].name}"` : 'the policy list', all, allowUnknownNames);
}

/** Refuses (ValidationError) a role whose relation or column resources no registered source's catalogue holds, unless `allowUnknownNames`. */
export function refuseUnknownRoleNames(known: KnownSources, role: SourceRole, allowUnknownNames?: boolean): void {
  refuseUnknownNames(`role "${role.name}"`, checkWrittenNames(known, undefined, roleWrittenNames(role)), allowUnknownNames);
}

/** A PostgreSQL source a role is, or is being, granted on, with its stored catalogue (null: never scanned). */
export interface SqlGrantTarget {
  id: string;
  catalog: SourceCatalog | null;
}

/** Most qualified names a "did you mean" of a one-part resource lists. */
const ONE_PART_SUGGESTIONS = 5;

/**
 * The qualified names (`schema.table` for relations, `schema.table.column` for columns) of the
 * catalogues whose last part is `name` (exactly; else the closest last part, ignoring case), sorted,
 * for a "did you mean". Empty when no catalogue holds anything close.
 */
export function qualifiedNamesFor(name: string, catalogs: Array<SourceCatalog | null>): string[] {
  const byLast = new Map<string, Set<string>>();
  const add = (last: string, full: string) => (byLast.get(last) ?? byLast.set(last, new Set()).get(last)!).add(full);
  for (const c of catalogs) {
    if (!c) continue;
    for (const r of c.relations) {
      add(r.name, `${r.schema}.${r.name}`);
      for (const col of r.columns) add(col.name, `${r.schema}.${r.name}.${col.name}`);
    }
  }
  const last = byLast.has(name) ? name : closestName(name, byLast.keys());
  return last === undefined ? [] : [...byLast.get(last)!].sort();
}

/**
 * Refuses (ValidationError, CLI exit 2 / admin API 400 validation_failed) a role granted, or being
 * granted, on PostgreSQL sources (`targets`) when one of its relation or column statements (not
 * discover or request, which name document categories) has a one-part resource other than `*`: on
 * a SQL source resources are `schema.table` or `schema.table.column`, so `deny read email` would
 * deny nothing as written (red team rtn4 item 4b; the evaluator makes a stored one fail closed,
 * src/governance/evaluator.ts). Each line names the statement and offers the qualified names of the
 * targets' scanned catalogues ending in that name. Never lifted by `allowUnknownNames`: no later
 * table makes a one-part name meaningful on a SQL source. Document sources keep one-part paths (not
 * targets). Pure.
 */
export function refuseOnePartSqlResources(role: SourceRole, targets: SqlGrantTarget[]): void {
  if (targets.length === 0) return;
  const onePart = roleWrittenNames(role).filter((n) => n.name !== '*' && !n.name.includes('.'));
  if (onePart.length === 0) return;
  const catalogs = targets.map((t) => t.catalog);
  const lines = onePart.map((n) => {
    const names = qualifiedNamesFor(n.name, catalogs);
    const shown = names.slice(0, ONE_PART_SUGGESTIONS).join(', ') + (names.length > ONE_PART_SUGGESTIONS ? ` (and ${names.length - ONE_PART_SUGGESTIONS} more)` : '');
    return `${n.path}: ${n.name} is one part: on a PostgreSQL source a resource is schema.table or schema.table.column (* wildcards allowed), so it would match nothing${suggest(shown || undefined)}`;
  });
  const ids = targets.map((t) => t.id).sort();
  throw new ValidationError(`role "${role.name}" is granted on PostgreSQL source${ids.length > 1 ? 's' : ''} ${ids.join(', ')}: a one-part resource matches no relation or column there`, lines);
}

/**
 * Refuses (refuseOnePartSqlResources's ValidationError) a PostgreSQL source `sourceId` being added
 * while a role that a grant, a claim mapping's `role_grants` or a configured claim rule already names
 * on that id holds a one-part relation or column resource (red team rt39 finding 4: rules outlive the
 * source they name, so a documents source removed and added again as PostgreSQL under the same id
 * would give its category-path roles to the new database). Run inside the adding transaction, after
 * the insert; `q` a pool or a client.
 */
export async function refuseOnePartRolesOnSource(q: ControlDb | pg.ClientBase, sourceId: string): Promise<void> {
  const runner = 'pool' in q ? q.pool : q;
  const r = await runner.query<{ name: string; statements: SourceRole['statements'] }>(
    `SELECT r.name, r.statements FROM roles r WHERE r.name IN (
       SELECT g.role_name FROM grants g WHERE g.source_id = $1
       UNION SELECT rg->>'role' FROM claim_mappings m, jsonb_array_elements(CASE WHEN jsonb_typeof(m.role_grants) = 'array' THEN m.role_grants ELSE '[]'::jsonb END) rg WHERE rg->>'source' = $1
       UNION SELECT c.role_name FROM configured_claim_grants c WHERE c.source_id = $1)
     ORDER BY r.name`,
    [sourceId],
  );
  for (const role of r.rows) refuseOnePartSqlResources({ name: role.name, statements: role.statements }, [{ id: sourceId, catalog: null }]);
}

/**
 * The PostgreSQL sources among `sourceIds`, or (with `roleName`) those the role is granted on (any
 * grant: an operator's or a token's claims) or that a claim mapping's `role_grants` or the
 * configuration's claim rules (configured_claim_grants) would grant it on, with their stored
 * catalogues, ordered by id; on `q` (a pool, or a transaction's client).
 */
export async function loadSqlGrantTargets(q: ControlDb | pg.ClientBase, by: { sourceIds: string[] } | { roleName: string }): Promise<SqlGrantTarget[]> {
  const runner = 'pool' in q ? q.pool : q;
  const r = 'roleName' in by
    ? await runner.query<SqlGrantTarget>(
        `SELECT s.id, c.catalog FROM sources s LEFT JOIN catalog_snapshots c ON c.source_id = s.id
         WHERE s.type = 'postgres' AND s.id IN (
           SELECT g.source_id FROM grants g WHERE g.role_name = $1
           UNION SELECT rg->>'source' FROM claim_mappings m, jsonb_array_elements(CASE WHEN jsonb_typeof(m.role_grants) = 'array' THEN m.role_grants ELSE '[]'::jsonb END) rg WHERE rg->>'role' = $1
           UNION SELECT c.source_id FROM configured_claim_grants c WHERE c.role_name = $1)
         ORDER BY s.id`,
        [by.roleName],
      )
    : await runner.query<SqlGrantTarget>(`SELECT s.id, c.catalog FROM sources s LEFT JOIN catalog_snapshots c ON c.source_id = s.id WHERE s.type = 'postgres' AND s.id = ANY($1) ORDER BY s.id`, [by.sourceIds]);
  return r.rows.map((x) => ({ id: x.id, catalog: x.catalog }));
}
