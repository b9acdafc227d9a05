/**
 * The type guard (task hcast; red team rt43b F1 high, F3 low): a read guard part (portal-read.ts
 * `ReadGuard`) that lets a statement run only while the casts and domain constraints of every type
 * outside `pg_catalog` it involves (`SqlAnalysisOk.typeUses`) are the ones the catalogue scan saw.
 *
 * PostgreSQL finds a cast (pg_cast, by source and target type oid) and a domain's CHECK constraints
 * (pg_constraint, `contypid`) by oid, never by a name, so the function guard (function-guard.ts, by
 * name) cannot see `CREATE CAST (t AS text) WITH FUNCTION f(t)` or `ALTER DOMAIN d ADD CONSTRAINT …
 * CHECK (f(VALUE))` made after the scan by the owner of `t` or `d` (a non-superuser may create a cast
 * only when it owns the source or the target type, so casts between two built-in types need no
 * check). For each involved type (by oid: `typeUses.oids`; by name in each of its schemas:
 * `typeUses.names`, resolved on the server), with every type those are built on at any depth
 * (domain bases, array elements, range and multirange subtypes, composite attributes; rt43c F1,
 * F2), the live `c<oid>:<xmin>` of every pg_cast row with that type as source or target and
 * `d<oid>:<xmin>` of every pg_constraint row of it as a domain, sorted bytewise and joined by
 * `,`, must equal the scan's (`SourceCatalog.castVersions`; '' for a type the scan saw none of).
 * Built-in types (oid < 16384) are not compared.
 *
 * Sent as one more UNION ALL part of the same single guard statement (shape-guard.ts
 * `withShapeGuard` combines them), in the read's own round trip right before it, and by approved
 * writes in their transaction (task hw: the connector's `functionGuard`). It returns no rows when
 * every type matches and raises 22012 (read.ts GUARD_SQLSTATE) at the first that does not: the
 * statement is not run, the read resolves `functionsChanged`, the pipeline answers `catalog_stale`
 * and the gateway rescans; after the rescan the cast's function is attached to the type (type-code.ts)
 * and judged like a call of it, and a domain with a CHECK is an unsafe type (refused in a cast).
 * Cost: per type one probe of pg_cast_source_target_index (castsource), a scan of pg_cast (about 230
 * rows) for casttarget and a probe of pg_constraint_contypid_index; a name is one probe of
 * pg_type_typname_nsp_index per schema; each step of the walk one pg_type probe (and pg_range,
 * pg_attribute probes).
 *
 * What it cannot see: a definition committed between the guard's snapshot and the statement's (the
 * same round trip, READ COMMITTED); a cast or domain constraint used by a stored view's query on a
 * type none of the columns read (or behind the view) has.
 */
import type { SourceCatalog } from '../../sql/catalog-types';
import { guardsTypes } from '../../sql/type-uses';
import type { ReadGuard } from './portal-read';
import { textArrayLiteral } from './shape-guard';
import { qualifySql } from './qualify-sql';

/**
 * The type guard's SQL, its parameters numbered from `$offset+1`: `$1` the involved types' oids
 * (oid[]); `$2`, `$3` the involved type names' schemas and names (name[], pairwise); `$4`, `$5` the
 * scanned types' oids and versions (int8[], text[]: `SourceCatalog.castVersions`); `$6` the
 * versions expected of a type `$4` does not hold ('' normally; a value no server answers when the
 * snapshot has no versions). `parts` leaves out the branch of the oids (`byOid` false) or of the
 * names (`byName` false) when the statement has none (their parameters are still bound, unused
 * but typed by their casts). Texts made once per variant.
 */
export function typeGuardSql(offset = 0, parts: { byOid: boolean; byName: boolean } = { byOid: true, byName: true }): string {
  const key = `${offset}:${parts.byOid}:${parts.byName}`;
  const hit = texts.get(key);
  if (hit !== undefined) return hit;
  const p = (i: number): string => `$${offset + i}`;
  const oidBranch = `SELECT a.t FROM pg_catalog.unnest(${p(1)}::oid[]) AS a(t)`;
  const nameBranch = `SELECT t0.oid AS t
    FROM ROWS FROM (pg_catalog.unnest(${p(2)}::name[]), pg_catalog.unnest(${p(3)}::name[])) AS u(s, n)
    JOIN pg_catalog.pg_namespace m ON m.nspname = u.s
    JOIN pg_catalog.pg_type t0 ON t0.typname = u.n AND t0.typnamespace = m.oid`;
  // Unused parameters are still named (PostgreSQL must infer every parameter's type).
  const unused = [!parts.byOid ? `${p(1)}::oid[] IS NULL` : '', !parts.byName ? `${p(2)}::name[] IS NULL AND ${p(3)}::name[] IS NULL` : ''].filter(Boolean);
  const branches = [parts.byOid ? oidBranch : '', parts.byName ? nameBranch : ''].filter(Boolean).join('\n    UNION ALL\n    ');
  // Every type an involved one is built on, at any depth, is compared too (red team rt43c F1, F2:
  // a domain four deep, a composite's attribute, a range's subtype hid a user type whose new cast
  // then ran): domain bases (PostgreSQL flattens a domain to its base type to find a cast), array
  // elements, range and multirange subtypes, composite attributes (`(p).m::text`). pg_type has no
  // cycles through these and UNION drops repeats, so the walk ends.
  const text = `
SELECT 1
FROM (
  SELECT DISTINCT y.t FROM (WITH RECURSIVE r(t) AS (
    ${branches}
    UNION
    SELECT b.t FROM r JOIN pg_catalog.pg_type tb ON tb.oid = r.t
    CROSS JOIN LATERAL (
      SELECT tb.typbasetype WHERE tb.typtype = 'd'
      UNION ALL SELECT tb.typelem WHERE tb.typelem <> 0::oid
      UNION ALL SELECT g.rngsubtype FROM pg_catalog.pg_range g WHERE g.rngtypid = tb.oid OR g.rngmultitypid = tb.oid
      UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a WHERE tb.typtype = 'c' AND a.attrelid = tb.typrelid AND a.attnum > 0 AND NOT a.attisdropped) AS b(t)
  ) SELECT r.t FROM r) y WHERE y.t >= 16384::oid${unused.length ? ' AND NOT (' + unused.join(' AND ') + ')' : ''}) w
CROSS JOIN LATERAL (
  SELECT coalesce(pg_catalog.string_agg(e.e, ',' ORDER BY e.e COLLATE "C"), '') AS have, pg_catalog.count(*) AS k
  FROM (SELECT 'c' || k.oid::text || ':' || k.xmin::text AS e FROM pg_catalog.pg_cast k WHERE k.castsource = w.t
        UNION SELECT 'c' || k.oid::text || ':' || k.xmin::text FROM pg_catalog.pg_cast k WHERE k.casttarget = w.t
        UNION SELECT 'd' || c.oid::text || ':' || c.xmin::text FROM pg_catalog.pg_constraint c WHERE c.contypid = w.t) e) x
WHERE CASE WHEN x.have <> coalesce((SELECT v.v FROM ROWS FROM (pg_catalog.unnest(${p(4)}::int8[]), pg_catalog.unnest(${p(5)}::text[])) AS v(t, v) WHERE v.t = w.t::int8), ${p(6)}::text)
           THEN 1 / (x.k * 0) = 1 ELSE false END
`;
  const qualified = qualifySql(text);
  if (texts.size < 64) texts.set(key, qualified);
  return qualified;
}

/** Guard texts per offset and variant. */
const texts = new Map<string, string>();

/** What a type guard is made from (`SqlAnalysisOk.typeUses`). */
export interface TypeUses {
  oids: readonly number[];
  names: ReadonlyArray<{ schema: string; name: string }>;
}

/** The scan's versions as guard parameters [$4, $5, $6] per catalogue (made once). */
const scannedParams = new WeakMap<SourceCatalog, readonly [string, string, string]>();

/** A value no server answer equals: the snapshot has no cast versions (scanned before task hcast). */
const UNKNOWN = '?';

function scanned(catalog: SourceCatalog): readonly [string, string, string] {
  let hit = scannedParams.get(catalog);
  if (hit) return hit;
  const rows = catalog.castVersions;
  hit = rows ? ['{' + rows.map((r) => String(Math.trunc(Number(r[0])))).join(',') + '}', textArrayLiteral(rows.map((r) => r[1])), ''] : ['{}', '{}', UNKNOWN];
  scannedParams.set(catalog, hit);
  return hit;
}


/** Guards made per `uses` object and catalogue, with the guard each was combined with. */
const made = new WeakMap<object, WeakMap<SourceCatalog, { prior: ReadGuard | null; guard: ReadGuard }>>();

/**
 * `prior` (the function guard, or null) followed by the type guard for `uses` against `catalog`
 * (see typeGuardSql), as one ReadGuard; `prior` alone when `uses` names no type or `catalog` is not
 * a scan. A scan without `castVersions` expects a value the server never answers for every involved
 * type (the guard trips and the source is rescanned). Frozen; memoised per `uses`, `prior` and catalogue.
 */
export function withTypeGuard(catalog: SourceCatalog, prior: ReadGuard | null, uses: TypeUses | undefined): ReadGuard | null {
  if (!uses || (uses.oids.length === 0 && uses.names.length === 0) || !guardsTypes(catalog)) return prior;
  let byCat = made.get(uses);
  if (!byCat) made.set(uses, (byCat = new WeakMap()));
  const hit = byCat.get(catalog);
  if (hit && hit.prior === prior) return hit.guard;
  const offset = prior ? prior.values.length : 0;
  const text = (prior ? prior.text + ' UNION ALL ' : '') + typeGuardSql(offset, { byOid: uses.oids.length > 0, byName: uses.names.length > 0 });
  const values = [
    ...(prior?.values ?? []),
    '{' + uses.oids.map((o) => String(Math.trunc(Number(o)))).join(',') + '}',
    textArrayLiteral(uses.names.map((n) => n.schema)),
    textArrayLiteral(uses.names.map((n) => n.name)),
    ...scanned(catalog),
  ];
  const guard: ReadGuard = Object.freeze({ text, values: Object.freeze(values) as string[] });
  byCat.set(catalog, { prior, guard });
  return guard;
}
