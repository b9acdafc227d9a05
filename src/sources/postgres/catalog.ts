/**
 * Catalogue scanner for PostgreSQL sources: produces the `SourceCatalog` snapshot that the SQL
 * analyser (src/sql/analyze.ts) resolves relations, columns, functions and operators against
 * (sql-safety.md layers 1 and 3: names are resolved after parsing, against what the server has).
 */
import { lookupPath } from './session-settings';
import type pg from 'pg';
import type {
  CatalogColumn,
  CatalogFunction,
  CatalogKey,
  CatalogOperator,
  CatalogRoutine,
  CatalogRelation,
  OperatorResolution,
  ReferencingKey,
  ReferentialAction,
  RelationKind,
  SourceCatalog,
  Volatility,
} from '../../sql/catalog-types';
import { writeHooksSql } from './hook-guard';
import { loadSqlQualifier, qualifySql } from './qualify-sql';

export type { SourceCatalog } from '../../sql/catalog-types';

/**
 * A foreign key referencing a relation with a writing referential action, as one JSON array:
 * [referencing schema, name, confdeltype, confupdtype, referencing columns, referenced columns,
 * whether it is a partition's clone]. Shared by the scan's `fk_refs` and the live read at approval
 * (src/sources/postgres/referential-keys.ts), so both read the keys the same way; referencingKeyOf
 * turns one into a ReferencingKey. Over WRITING_KEYS_FROM (`con`, `kc`, `kn`).
 */
export const WRITING_KEY_JSON = `pg_catalog.json_build_array(kn.nspname, kc.relname, con.confdeltype, con.confupdtype,
      (SELECT pg_catalog.json_agg(ka.attname ORDER BY k.ord) FROM pg_catalog.unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
       JOIN pg_catalog.pg_attribute ka ON ka.attrelid = con.conrelid AND ka.attnum = k.attnum),
      (SELECT pg_catalog.json_agg(ka.attname ORDER BY k.ord) FROM pg_catalog.unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
       JOIN pg_catalog.pg_attribute ka ON ka.attrelid = con.confrelid AND ka.attnum = k.attnum),
      con.conparentid <> 0)`;

/** The constraints and their referencing relations WRITING_KEY_JSON reads (`con`, `kc`, `kn`). */
export const WRITING_KEYS_FROM = `pg_catalog.pg_constraint con
  JOIN pg_catalog.pg_class kc ON kc.oid = con.conrelid
  JOIN pg_catalog.pg_namespace kn ON kn.oid = kc.relnamespace`;

/** Foreign keys whose ON DELETE or ON UPDATE action writes the referencing rows (CASCADE, SET NULL, SET DEFAULT). */
export const WRITING_KEY_FILTER = `con.contype = 'f' AND (con.confdeltype = ANY (ARRAY['c', 'n', 'd']::"char"[]) OR con.confupdtype = ANY (ARRAY['c', 'n', 'd']::"char"[]))`;

/**
 * The version of one pg_proc row (`p`) as text, `oid:xmin` (task hf5): every CREATE OR REPLACE,
 * ALTER FUNCTION (SECURITY DEFINER, SET, OWNER, …) or GRANT writes a new row version (a new xmin),
 * and DROP + CREATE a new oid, so a function whose recorded version the server no longer has is not
 * the one the scan analysed. The scan records it per overload (`CatalogRoutine.version`); the read
 * guard of src/sources/postgres/function-guard.ts compares it with the server's before a statement.
 */
export const ROUTINE_VERSION_SQL = `p.oid::text || ':' || p.xmin::text`;

/** Default cap on the number of relations in one snapshot. */
export const DEFAULT_MAX_RELATIONS = 10_000;

const KIND: Record<string, RelationKind> = {
  r: 'table',
  v: 'view',
  m: 'materialized_view',
  f: 'foreign_table',
  p: 'partitioned_table',
};
const VOLATILITY: Record<string, Volatility> = { i: 'immutable', s: 'stable', v: 'volatile' };

/**
 * The catalogue scan's statement, as written (exported for the tests). It runs on the reader role's
 * own search_path, where an insider may create a better-matching function, operator or type (red
 * team rt47b J3, J3b): every function is written pg_catalog-qualified, and scanCatalog sends
 * `qualifySql(SCAN_SQL)` (qualify-sql.ts), which pins every operator, type, collation and relation
 * to pg_catalog too; IN lists, NOT LIKE and NULLIF are written as `= ANY (…)`, `!~~` and CASE.
 * One statement, so the whole snapshot comes from one MVCC snapshot and costs one round trip.
 * $1 = relation limit + 1 (the extra row detects truncation); $2 = the writer's login role name
 *   (text, NULL for none: the role whose settings the write-hook fingerprint's D5 digest holds).
 * - relations: every schema except pg_catalog, information_schema, interlock_rows (InterLock's row
 *   views, issue 27: agents never name them), TOAST and temporary schemas.
 * - functions: every schema (pg_catalog included), procedures excluded (CALL is refused anyway);
 *   overloads folded per (schema, name) with the most volatile provolatile winning.
 * - operators: volatility of the implementing function (a shell operator counts as volatile).
 * - search_path: current_schemas(false) = the explicit path, existing schemas only.
 */
export const SCAN_SQL = `
WITH rels AS (
  SELECT n.nspname AS s, c.relname AS n, c.relkind AS k, c.oid, c.relispartition AS ip, c.reloptions AS ro
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind = ANY (ARRAY['r','v','m','f','p']::"char"[])
    AND n.nspname <> ALL (ARRAY['pg_catalog', 'information_schema', 'interlock_rows']::name[])
    AND n.nspname !~~ 'pg\\_toast%'
    AND n.nspname !~~ 'pg\\_temp\\_%'
  ORDER BY 1, 2
  LIMIT $1
), procs AS (
  SELECT n.nspname AS s, p.proname AS n,
    -- An aggregate is marked immutable in pg_proc whatever its support functions do; take the
    -- most volatile of the aggregate and its transition/final/combine/(de)serial functions.
    CASE WHEN p.prokind = 'a' THEN coalesce((
      SELECT CASE WHEN pg_catalog.bool_or(f.provolatile = 'v') OR p.provolatile = 'v' THEN 'v'
                  WHEN pg_catalog.bool_or(f.provolatile = 's') OR p.provolatile = 's' THEN 's' ELSE 'i' END
      FROM pg_catalog.pg_aggregate a
      JOIN pg_catalog.pg_proc f ON f.oid = ANY (ARRAY[a.aggtransfn::oid, a.aggfinalfn::oid, a.aggcombinefn::oid, a.aggserialfn::oid,
                                             a.aggdeserialfn::oid, a.aggmtransfn::oid, a.aggminvtransfn::oid, a.aggmfinalfn::oid])
      WHERE a.aggfnoid = p.oid), 'v')
    ELSE p.provolatile::text END AS v,
    p.proretset AS rs,
    -- A composite result (also a domain over one, or a single OUT parameter of a composite type,
    -- which PostgreSQL expands the same way) has the composite's columns; else the OUT/TABLE names.
    CASE
      WHEN rt.relid IS NOT NULL THEN (
        SELECT pg_catalog.json_agg(a.attname ORDER BY a.attnum)::text
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = rt.relid AND a.attnum > 0 AND NOT a.attisdropped)
      WHEN p.proargmodes IS NOT NULL AND p.proargmodes && ARRAY['o','b','t']::"char"[] THEN (
        SELECT pg_catalog.json_agg(p.proargnames[i] ORDER BY i)::text
        FROM pg_catalog.generate_subscripts(p.proargmodes, 1) AS i
        WHERE p.proargmodes[i] = ANY (ARRAY['o','b','t']::"char"[]))
      ELSE 'null'
    END AS oc,
    -- The relation or stand-alone composite type whose row the result is (task hs), outside the system schemas.
    CASE WHEN rt.relid IS NOT NULL AND rt.s <> ALL (ARRAY['pg_catalog', 'information_schema']::name[]) THEN pg_catalog.jsonb_build_array(rt.s, rt.n)
         WHEN t3.typtype = 'd' THEN pg_catalog.jsonb_build_array('', '') END AS rr
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
  -- The result's composite type (task hs): a relation's row type or a stand-alone one, or the one a
  -- domain (up to three domains deep) is over: the pg_class row whose live columns the result has
  -- (joins, not a recursive query, which would cost the whole scan a JIT compilation). A deeper
  -- chain of domains is recorded as a row type of no relation ('', ''): calls are refused.
  LEFT JOIN pg_catalog.pg_type t0 ON t0.oid = p.prorettype
  LEFT JOIN pg_catalog.pg_type t1 ON t0.typtype = 'd' AND t1.oid = t0.typbasetype
  LEFT JOIN pg_catalog.pg_type t2 ON t1.typtype = 'd' AND t2.oid = t1.typbasetype
  LEFT JOIN pg_catalog.pg_type t3 ON t2.typtype = 'd' AND t3.oid = t2.typbasetype
  LEFT JOIN LATERAL (SELECT CASE WHEN t0.typtype = 'c' THEN t0.typrelid WHEN t1.typtype = 'c' THEN t1.typrelid
                                 WHEN t2.typtype = 'c' THEN t2.typrelid WHEN t3.typtype = 'c' THEN t3.typrelid END AS relid) rt0 ON true
  LEFT JOIN pg_catalog.pg_class rc ON rc.oid = rt0.relid
  LEFT JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
  LEFT JOIN LATERAL (SELECT rc.oid AS relid, rn.nspname AS s, rc.relname AS n) rt ON true
  WHERE p.prokind <> 'p'
    AND n.nspname !~~ 'pg\\_toast%'
    AND n.nspname !~~ 'pg\\_temp\\_%'
), unsafe_domains AS (
  -- Domains whose CHECK constraints run on every cast to them (directly or through a base domain).
  WITH RECURSIVE d(oid) AS (
    SELECT t.oid FROM pg_catalog.pg_type t
    WHERE t.typtype = 'd' AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c WHERE c.contypid = t.oid AND c.contype = 'c')
    UNION
    SELECT t.oid FROM pg_catalog.pg_type t JOIN d ON t.typbasetype = d.oid WHERE t.typtype = 'd'
  ) SELECT oid FROM d
), unsafe_types AS (
  SELECT n.nspname AS s, t.typname AS n
  FROM pg_catalog.pg_type t
  JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
  WHERE n.nspname <> ALL (ARRAY['pg_catalog', 'information_schema']::name[])
    AND n.nspname !~~ 'pg\\_toast%'
    AND n.nspname !~~ 'pg\\_temp\\_%'
    AND (t.oid IN (SELECT oid FROM unsafe_domains)
     OR (t.typtype = 'b' AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc f WHERE f.oid = t.typinput AND f.provolatile = 'v'))
     OR (t.typtype = 'c' AND EXISTS (
          SELECT 1 FROM pg_catalog.pg_attribute a
          LEFT JOIN pg_catalog.pg_type at ON at.oid = a.atttypid
          WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
            AND (a.atttypid IN (SELECT oid FROM unsafe_domains) OR at.typelem IN (SELECT oid FROM unsafe_domains)))))
)
, fk_refs AS (
  -- Foreign keys whose action on delete or update of a referenced row writes the referencing rows
  -- (issue 27, rt27w finding B), grouped by the referenced relation: [referencing schema, name,
  -- confdeltype, confupdtype, referencing columns, referenced columns]. Each constraint row counts
  -- (a partition's cloned constraint names the partition; a partitioned referenced table has one
  -- per referenced partition).
  SELECT con.confrelid AS oid, pg_catalog.json_agg(${WRITING_KEY_JSON} ORDER BY kn.nspname, kc.relname, con.conname) AS j
  FROM ${WRITING_KEYS_FROM}
  WHERE ${WRITING_KEY_FILTER}
  GROUP BY con.confrelid
)
SELECT
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
      's', r.s, 'n', r.n, 'k', r.k, 'ip', r.ip,
      -- Direct parents (partition parent or inheritance parents) in inhseqno order.
      'p', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(pn.nspname, pc.relname) ORDER BY i.inhseqno), '[]'::json)
            FROM pg_catalog.pg_inherits i
            JOIN pg_catalog.pg_class pc ON pc.oid = i.inhparent
            JOIN pg_catalog.pg_namespace pn ON pn.oid = pc.relnamespace
            WHERE i.inhrelid = r.oid),
      -- Every ancestor, nearest first (multi-level partition trees, multiple inheritance).
      'a', (WITH RECURSIVE up(oid, depth) AS (
              SELECT i.inhparent, 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = r.oid
              UNION
              SELECT i.inhparent, up.depth + 1 FROM pg_catalog.pg_inherits i JOIN up ON i.inhrelid = up.oid WHERE up.depth < 64)
            SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(an.nspname, ac.relname) ORDER BY u.depth, an.nspname, ac.relname), '[]'::json)
            FROM (SELECT oid, pg_catalog.min(depth) AS depth FROM up GROUP BY oid) u
            JOIN pg_catalog.pg_class ac ON ac.oid = u.oid
            JOIN pg_catalog.pg_namespace an ON an.oid = ac.relnamespace),
      'd', CASE WHEN r.k = ANY (ARRAY['v', 'm']::"char"[]) THEN pg_catalog.pg_get_viewdef(r.oid) END,
      -- Views and materialized views (issue 27): what the server's dependency records of the
      -- _RETURN rule name. vr: the relations the stored query reads, [schema, name, relkind];
      -- vu: functions and operators (their function) outside pg_catalog/information_schema, and
      -- types whose input runs user code, as "schema.name"; vo: [security_barrier, security_invoker].
      'vr', CASE WHEN r.k = ANY (ARRAY['v', 'm']::"char"[]) THEN (
            SELECT coalesce(pg_catalog.json_agg(DISTINCT pg_catalog.jsonb_build_array(dn.nspname, dc.relname, dc.relkind)), '[]'::json)
            FROM pg_catalog.pg_rewrite rw
            JOIN pg_catalog.pg_depend dp ON dp.classid = 'pg_catalog.pg_rewrite'::regclass AND dp.objid = rw.oid
                                        AND dp.refclassid = 'pg_catalog.pg_class'::regclass AND dp.refobjid <> r.oid
            JOIN pg_catalog.pg_class dc ON dc.oid = dp.refobjid
            JOIN pg_catalog.pg_namespace dn ON dn.oid = dc.relnamespace
            WHERE rw.ev_class = r.oid) END,
      'vu', CASE WHEN r.k = ANY (ARRAY['v', 'm']::"char"[]) THEN (
            SELECT coalesce(pg_catalog.json_agg(DISTINCT u.s || '.' || u.n), '[]'::json)
            FROM pg_catalog.pg_rewrite rw
            JOIN pg_catalog.pg_depend dp ON dp.classid = 'pg_catalog.pg_rewrite'::regclass AND dp.objid = rw.oid
            CROSS JOIN LATERAL (
              SELECT fn.nspname, f.proname::text FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
              WHERE dp.refclassid = 'pg_catalog.pg_proc'::regclass AND f.oid = dp.refobjid
              UNION ALL
              SELECT xn.nspname, x.n FROM pg_catalog.pg_operator o
              CROSS JOIN LATERAL (VALUES (o.oprnamespace, o.oprname::text),
                ((SELECT f.pronamespace FROM pg_catalog.pg_proc f WHERE f.oid = o.oprcode), (SELECT f.proname::text FROM pg_catalog.pg_proc f WHERE f.oid = o.oprcode))) AS x(ns, n)
              JOIN pg_catalog.pg_namespace xn ON xn.oid = x.ns
              WHERE dp.refclassid = 'pg_catalog.pg_operator'::regclass AND o.oid = dp.refobjid
              UNION ALL
              SELECT ut.s, ut.n FROM pg_catalog.pg_type ty JOIN pg_catalog.pg_namespace tn ON tn.oid = ty.typnamespace
              JOIN unsafe_types ut ON ut.s = tn.nspname AND ut.n = ty.typname
              WHERE dp.refclassid = 'pg_catalog.pg_type'::regclass AND ty.oid = dp.refobjid) AS u(s, n)
            WHERE rw.ev_class = r.oid AND u.s <> ALL (ARRAY['pg_catalog', 'information_schema']::name[])) END,
      'vo', CASE WHEN r.k = ANY (ARRAY['v', 'm']::"char"[]) THEN pg_catalog.json_build_array(
            coalesce((SELECT o.option_value::bool FROM pg_catalog.pg_options_to_table(r.ro) o WHERE o.option_name = 'security_barrier'), false),
            coalesce((SELECT o.option_value::bool FROM pg_catalog.pg_options_to_table(r.ro) o WHERE o.option_name = 'security_invoker'), false)) END,
      'c', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
                   NOT a.attnotnull, pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                   CASE WHEN a.attidentity <> '' THEN a.attidentity::text END, CASE WHEN a.attgenerated <> '' THEN a.attgenerated::text END, a.atttypid::int8,
                   -- A generated column's inputs: the columns its expression's pg_attrdef row depends on (rt42 G1).
                   CASE WHEN a.attgenerated <> '' THEN (SELECT coalesce(pg_catalog.json_agg(ga.attname ORDER BY ga.attnum), '[]'::json)
                     FROM pg_catalog.pg_depend gd JOIN pg_catalog.pg_attribute ga ON ga.attrelid = gd.refobjid AND ga.attnum = gd.refobjsubid
                     WHERE gd.classid = 'pg_catalog.pg_attrdef'::regclass AND gd.objid = d.oid
                       AND gd.refclassid = 'pg_catalog.pg_class'::regclass AND gd.refobjid = r.oid AND gd.refobjsubid > 0 AND gd.refobjsubid <> a.attnum) END) ORDER BY a.attnum), '[]'::json)
            FROM pg_catalog.pg_attribute a
            LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped),
      -- Primary and unique keys: [contype, [column, …]] in key order.
      'x', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(con.contype,
                   (SELECT pg_catalog.json_agg(ka.attname ORDER BY k.ord)
                    FROM pg_catalog.unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
                    JOIN pg_catalog.pg_attribute ka ON ka.attrelid = con.conrelid AND ka.attnum = k.attnum))
                 ORDER BY con.contype, con.conname), '[]'::json)
            FROM pg_catalog.pg_constraint con
            WHERE con.conrelid = r.oid AND con.contype = ANY (ARRAY['p', 'u']::"char"[])),
      -- Issue 27: foreign keys referencing it with a writing action (fk_refs), and whether user
      -- triggers (any event) or user rewrite rules (not a view's _RETURN) run on its writes.
      'fk', coalesce(fr.j, '[]'::json),
      'h', pg_catalog.json_build_array(
            EXISTS (SELECT 1 FROM pg_catalog.pg_trigger tg WHERE tg.tgrelid = r.oid AND NOT tg.tgisinternal),
            EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite rw WHERE rw.ev_class = r.oid AND rw.rulename <> '_RETURN')),
      -- Task hhook: the code its writes run, as one fingerprint (hook-guard.ts writeHooksSql; the
      -- approved write's guard recomputes it with the same expression).
      'hv', ${writeHooksSql('r.oid', '$2::text')}
    ) ORDER BY r.s, r.n), '[]'::json) FROM rels r LEFT JOIN fk_refs fr ON fr.oid = r.oid) AS relations,
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(f.s, f.n, f.v, f.rs, f.oc, f.rr) ORDER BY f.s, f.n), '[]'::json) FROM (
     SELECT s, n,
       CASE WHEN pg_catalog.bool_or(v = 'v') THEN 'v' WHEN pg_catalog.bool_or(v = 's') THEN 's' ELSE 'i' END AS v,
       pg_catalog.bool_or(rs) AS rs,
       CASE WHEN pg_catalog.count(DISTINCT oc) = 1 THEN pg_catalog.min(oc) ELSE 'null' END AS oc,
       pg_catalog.jsonb_agg(DISTINCT rr) FILTER (WHERE rr IS NOT NULL) AS rr
     FROM procs GROUP BY s, n) f) AS functions,
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(o.s, o.n, o.v) ORDER BY o.s, o.n), '[]'::json) FROM (
     SELECT n.nspname AS s, o.oprname AS n,
       CASE WHEN pg_catalog.bool_or(p.provolatile IS NULL OR p.provolatile = 'v') THEN 'v'
            WHEN pg_catalog.bool_or(p.provolatile = 's') THEN 's' ELSE 'i' END AS v
     FROM pg_catalog.pg_operator o
     JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
     LEFT JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode
     GROUP BY n.nspname, o.oprname) o) AS operators,
  (SELECT coalesce(pg_catalog.json_agg(c.relname ORDER BY c.relname), '[]'::json)
     FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = ANY (ARRAY['r','v','m','f','p']::"char"[])) AS system_relations,
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(u.s, u.n) ORDER BY u.s, u.n), '[]'::json) FROM unsafe_types u) AS unsafe_types,
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(n.nspname, t.typname) ORDER BY n.nspname, t.typname), '[]'::json)
     FROM pg_catalog.pg_type t
     JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     LEFT JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
     WHERE n.nspname !~~ 'pg\\_toast%' AND n.nspname !~~ 'pg\\_temp\\_%'
       AND (t.typrelid = 0 OR c.relkind = 'c')) AS types,
  pg_catalog.current_schemas(false)::text[] AS search_path,
  pg_catalog.current_setting('server_version_num')::int AS server_version_num,
  -- ---- Operator resolution (issue 22, item 5; src/sql/operators.ts) ----
  -- Every operator with its declared operand and result types and the volatility of its function
  -- (a shell operator counts as volatile); the types operands can have (relation row types and
  -- their arrays excluded: an operand of one is unprovable); the implicit casts.
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(n.nspname, o.oprname, o.oprleft::int8, o.oprright::int8, o.oprresult::int8,
            coalesce(p.provolatile::text, 'v')) ORDER BY o.oid), '[]'::json)
     FROM pg_catalog.pg_operator o
     JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
     LEFT JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode
     WHERE n.nspname !~~ 'pg\\_temp\\_%') AS operator_signatures,
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(t.oid::int8, n.nspname, t.typname, t.typtype, t.typcategory, t.typispreferred,
            t.typbasetype::int8, t.typelem::int8, pg_catalog.format_type(t.oid, NULL), pg_catalog.format_type(t.oid, -1)) ORDER BY t.oid), '[]'::json)
     FROM pg_catalog.pg_type t
     JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     LEFT JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
     LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
     LEFT JOIN pg_catalog.pg_class ec ON ec.oid = e.typrelid
     WHERE n.nspname !~~ 'pg\\_toast%' AND n.nspname !~~ 'pg\\_temp\\_%'
       AND (t.typrelid = 0 OR c.relkind = 'c') AND (e.typrelid IS NULL OR e.typrelid = 0 OR ec.relkind = 'c')) AS type_details,
  (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(k.castsource::int8, k.casttarget::int8) ORDER BY k.castsource, k.casttarget), '[]'::json)
     FROM pg_catalog.pg_cast k WHERE k.castcontext = 'i') AS implicit_casts
  -- ---- User functions (task hfn; src/sql/function-reads.ts) ----
  -- Each overload outside pg_catalog/information_schema: [schema, name, language, prosecdef,
  -- proconfig, owner, prosrc of a LANGUAGE sql string body, the dependency records of every
  -- LANGUAGE sql function {r: [[schema, name, relkind]], f: [[schema, name]] (functions, and
  -- operators' functions), u: uses a type whose input runs user code}]: a SQL-standard body's, and
  -- for a string body those of its parameter defaults (evaluated in the caller's statement) and its
  -- parameter and result types (a domain CHECK runs on the coercion) (red team rt41b), and the row's version
  -- (ROUTINE_VERSION_SQL, task hf5: checked again before every statement that runs it). prosqlbody is read through to_jsonb so the scan
  -- also runs on servers before 14, which lack it.
  ,(SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(n.nspname, p.proname, l.lanname, p.prosecdef, p.proconfig, pg_catalog.pg_get_userbyid(p.proowner),
            CASE WHEN l.lanname = 'sql' AND (pg_catalog.to_jsonb(p) ->> 'prosqlbody') IS NULL THEN p.prosrc END,
            CASE WHEN l.lanname = 'sql' THEN pg_catalog.json_build_object(
              'r', (SELECT coalesce(pg_catalog.json_agg(DISTINCT pg_catalog.jsonb_build_array(dn.nspname, dc.relname, dc.relkind)), '[]'::json)
                    FROM pg_catalog.pg_depend dp
                    JOIN pg_catalog.pg_class dc ON dc.oid = dp.refobjid
                    JOIN pg_catalog.pg_namespace dn ON dn.oid = dc.relnamespace
                    WHERE dp.classid = 'pg_catalog.pg_proc'::regclass AND dp.objid = p.oid AND dp.refclassid = 'pg_catalog.pg_class'::regclass),
              'f', (SELECT coalesce(pg_catalog.json_agg(DISTINCT pg_catalog.jsonb_build_array(fn.nspname, f.proname)), '[]'::json)
                    FROM pg_catalog.pg_depend dp
                    LEFT JOIN pg_catalog.pg_operator o ON dp.refclassid = 'pg_catalog.pg_operator'::regclass AND o.oid = dp.refobjid
                    JOIN pg_catalog.pg_proc f ON f.oid = CASE WHEN dp.refclassid = 'pg_catalog.pg_proc'::regclass THEN dp.refobjid ELSE o.oprcode END
                    JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
                    WHERE dp.classid = 'pg_catalog.pg_proc'::regclass AND dp.objid = p.oid
                      AND dp.refclassid = ANY (ARRAY['pg_catalog.pg_proc'::regclass, 'pg_catalog.pg_operator'::regclass]::oid[])),
              'u', EXISTS (SELECT 1 FROM pg_catalog.pg_depend dp
                    JOIN pg_catalog.pg_type ty ON ty.oid = dp.refobjid
                    JOIN pg_catalog.pg_namespace tn ON tn.oid = ty.typnamespace
                    JOIN unsafe_types ut ON ut.s = tn.nspname AND ut.n = ty.typname
                    WHERE dp.classid = 'pg_catalog.pg_proc'::regclass AND dp.objid = p.oid AND dp.refclassid = 'pg_catalog.pg_type'::regclass),
              't', (SELECT coalesce(pg_catalog.json_agg(DISTINCT dp.refobjid::int8), '[]'::json) FROM pg_catalog.pg_depend dp
                    WHERE dp.classid = 'pg_catalog.pg_proc'::regclass AND dp.objid = p.oid AND dp.refclassid = 'pg_catalog.pg_type'::regclass)) END,
            ${ROUTINE_VERSION_SQL})
            ORDER BY n.nspname, p.proname, p.oid), '[]'::json)
     FROM pg_catalog.pg_proc p
     JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
     JOIN pg_catalog.pg_language l ON l.oid = p.prolang
     WHERE p.prokind <> 'p' AND n.nspname <> ALL (ARRAY['pg_catalog', 'information_schema']::name[])
       AND n.nspname !~~ 'pg\\_toast%' AND n.nspname !~~ 'pg\\_temp\\_%') AS routines
  ,(SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(n.nspname, o.oprname, o.oprleft::int8, o.oprright::int8, fn.nspname, f.proname,
            o.oid::text || ':' || o.xmin::text) ORDER BY o.oid), '[]'::json)
     FROM pg_catalog.pg_operator o
     JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
     LEFT JOIN pg_catalog.pg_proc f ON f.oid = o.oprcode
     LEFT JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
     WHERE n.nspname <> ALL (ARRAY['pg_catalog', 'information_schema']::name[]) AND n.nspname !~~ 'pg\\_temp\\_%') AS operator_code
  ,current_user::text AS reader_role
  -- Code PostgreSQL finds by a type's oid (task hcast; red team rt43b F1, F3): the row versions of
  -- every cast from or to a type outside pg_catalog (oid >= 16384, FirstNormalObjectId) and of every
  -- domain constraint, per type ('c'/'d' oid:xmin, sorted bytewise). What the type guard
  -- (type-guard.ts) compares; the same text it computes on the server.
  ,(SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(v.t::int8, v.vs) ORDER BY v.t), '[]'::json)
     FROM (SELECT e.t, pg_catalog.string_agg(e.e, ',' ORDER BY e.e COLLATE "C") AS vs
           FROM (SELECT k.castsource AS t, 'c' || k.oid::text || ':' || k.xmin::text AS e FROM pg_catalog.pg_cast k
                 UNION SELECT k.casttarget, 'c' || k.oid::text || ':' || k.xmin::text FROM pg_catalog.pg_cast k
                 UNION SELECT c.contypid, 'd' || c.oid::text || ':' || c.xmin::text FROM pg_catalog.pg_constraint c WHERE c.contypid <> 0) e
           WHERE e.t >= 16384::oid GROUP BY e.t) v) AS cast_versions
  -- Stand-alone composite types (CREATE TYPE … AS (…); relkind c) with their attributes, as
  -- relations' columns are recorded: what the shape guard expects of a function result of such a
  -- type (task hs; ALTER TYPE … ADD ATTRIBUTE changes it).
  ,(SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(n.nspname, c.relname,
            (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum), '[]'::json)
             FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)) ORDER BY n.nspname, c.relname), '[]'::json)
     FROM pg_catalog.pg_class c
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind = 'c' AND n.nspname <> ALL (ARRAY['pg_catalog', 'information_schema']::name[])
       AND n.nspname !~~ 'pg\\_toast%' AND n.nspname !~~ 'pg\\_temp\\_%') AS composite_types
  -- User code attached to types (task hcast; src/sql/type-code.ts): the user functions of casts
  -- WITH FUNCTION (castmethod 'f') from or to a type and the support functions (pg_amproc) of its
  -- operator classes and families of every access method (a cast between a user type and a built-in one is attached to the
  -- user type only: it runs where that type is involved); then every type built on one (domains, arrays, ranges,
  -- multiranges, stand-alone composites with a field of it; closed over by typeCodeOf). A user cast between two
  -- pg_catalog types is marked 'always' (it may run in any statement).
  ,(WITH att(t, fs, fn, al) AS (
      SELECT x.t, fn.nspname, f.proname, (sn.nspname = 'pg_catalog' AND tn.nspname = 'pg_catalog')
      FROM pg_catalog.pg_cast k
      JOIN pg_catalog.pg_proc f ON f.oid = k.castfunc
      JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
      JOIN pg_catalog.pg_type st ON st.oid = k.castsource JOIN pg_catalog.pg_namespace sn ON sn.oid = st.typnamespace
      JOIN pg_catalog.pg_type tt ON tt.oid = k.casttarget JOIN pg_catalog.pg_namespace tn ON tn.oid = tt.typnamespace
      CROSS JOIN LATERAL (VALUES (k.castsource, sn.nspname), (k.casttarget, tn.nspname)) AS x(t, s)
      WHERE k.castmethod = 'f' AND fn.nspname <> ALL (ARRAY['pg_catalog', 'information_schema']::name[])
        -- A cast between a user type and a built-in one runs only where the user type is involved.
        AND (x.s <> 'pg_catalog' OR (sn.nspname = 'pg_catalog' AND tn.nspname = 'pg_catalog'))
      UNION
      -- Support functions of every access method (btree, hash, gist, gin, brin, spgist, extensions'):
      -- attached to the input type of every operator class of the family and to the function's own
      -- left and right types (a family may hold cross-type functions no class names) (task hf5).
      SELECT x.t, fn.nspname, f.proname, false
      FROM pg_catalog.pg_amproc ap
      JOIN pg_catalog.pg_proc f ON f.oid = ap.amproc
      JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
      CROSS JOIN LATERAL (SELECT oc.opcintype FROM pg_catalog.pg_opclass oc WHERE oc.opcfamily = ap.amprocfamily
                          UNION SELECT ap.amproclefttype UNION SELECT ap.amprocrighttype) AS x(t)
      WHERE fn.nspname <> ALL (ARRAY['pg_catalog', 'information_schema']::name[]) AND x.t <> 0
    )
    SELECT pg_catalog.json_build_object(
      'a', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(a.t::int8, n.nspname, ty.typname, a.fs, a.fn, a.al) ORDER BY a.t, a.fs, a.fn), '[]'::json)
            FROM (SELECT t, fs, fn, pg_catalog.bool_or(al) AS al FROM att GROUP BY t, fs, fn) a
            JOIN pg_catalog.pg_type ty ON ty.oid = a.t JOIN pg_catalog.pg_namespace n ON n.oid = ty.typnamespace),
      -- The type graph [child oid, child schema, child name, parent oid], only when some code is attached
      -- (the closure is taken in src/sources/postgres/catalog.ts: a recursive query here would cost the
      -- whole scan a JIT compilation).
      'e', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(e.c::int8, n.nspname, ty.typname, e.p::int8)), '[]'::json)
            FROM (SELECT d.oid AS c, d.typbasetype AS p FROM pg_catalog.pg_type d WHERE d.typbasetype <> 0
                  UNION ALL SELECT d.oid, d.typelem FROM pg_catalog.pg_type d WHERE d.typelem <> 0 AND d.typcategory = 'A'
                  UNION ALL SELECT r.rngtypid, r.rngsubtype FROM pg_catalog.pg_range r
                  UNION ALL SELECT r.rngmultitypid, r.rngsubtype FROM pg_catalog.pg_range r
                  UNION ALL SELECT c.reltype, a.atttypid FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
                    WHERE c.relkind = 'c' AND a.attnum > 0 AND NOT a.attisdropped) e
            JOIN pg_catalog.pg_type ty ON ty.oid = e.c JOIN pg_catalog.pg_namespace n ON n.oid = ty.typnamespace
            WHERE EXISTS (SELECT 1 FROM att)))
  ) AS type_code
  -- ---- end of operator resolution ----
  -- The catalogued columns' types and every type they are built on (domain bases, array elements),
  -- with enum labels and range subtypes (issue 23: describe_source names each column's type).
  ,(WITH RECURSIVE ty(oid) AS (
      SELECT a.atttypid FROM rels r JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid WHERE a.attnum > 0 AND NOT a.attisdropped
      UNION
      SELECT x.o FROM ty JOIN pg_catalog.pg_type t ON t.oid = ty.oid
        CROSS JOIN LATERAL (VALUES (CASE WHEN t.typtype = 'd' THEN t.typbasetype END), (CASE WHEN t.typcategory = 'A' THEN t.typelem END)) AS x(o)
      WHERE x.o IS NOT NULL AND x.o <> 0)
    SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_array(t.oid::int8, t.typtype, t.typcategory, t.typbasetype::int8, t.typelem::int8, pg_catalog.format_type(t.oid, NULL),
             CASE WHEN t.typtype = 'e' THEN (SELECT pg_catalog.json_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid) END,
             (SELECT pg_catalog.format_type(rg.rngsubtype, NULL) FROM pg_catalog.pg_range rg WHERE rg.rngtypid = t.oid OR rg.rngmultitypid = t.oid LIMIT 1)) ORDER BY t.oid), '[]'::json)
    FROM (SELECT DISTINCT oid FROM ty) u JOIN pg_catalog.pg_type t ON t.oid = u.oid) AS column_types
`;

interface ScanRow {
  /** d: view definition (views and materialized views); c: [name, format_type, nullable, default expression, attidentity ('a'|'d'), attgenerated ('s'), atttypid, a generated column's input columns]; x: [contype ('p'|'u'), columns]. */
  relations: Array<{ s: string; n: string; k: string; ip?: boolean; p?: Array<[string, string]>; a?: Array<[string, string]>; d: string | null; vr?: Array<[string, string, string]> | null; vu?: string[] | null; vo?: [boolean, boolean] | null; c: Array<[string, string, boolean?, (string | null)?, (string | null)?, (string | null)?, number?, (string[] | null)?]>; x?: Array<[string, string[] | null]>; fk?: Array<[string, string, string, string, string[] | null, string[] | null, boolean?]>; h?: [boolean, boolean]; hv?: string }>;
  /** [schema, name, provolatile, returns a set, out columns (JSON text), result row types [[schema, name]] | null]. */
  functions: Array<[string, string, string, boolean, string | null, Array<[string, string]> | null]>;
  /** [schema, name, [[attribute, format_type]]] of every stand-alone composite type. */
  composite_types: Array<[string, string, Array<[string, string]>]>;
  operators: Array<[string, string, string]>;
  system_relations: string[];
  unsafe_types: Array<[string, string]>;
  types: Array<[string, string]>;
  search_path: string[];
  server_version_num: number;
  operator_signatures: OperatorResolution['operators'];
  type_details: OperatorResolution['types'];
  implicit_casts: OperatorResolution['implicitCasts'];
  /** [oid, typtype, typcategory, typbasetype, typelem, format_type, enum labels | null, range subtype | null]. */
  column_types: Array<[number, string, string, number, number, string, string[] | null, string | null]>;
  routines: Array<[string, string, string, boolean, string[] | null, string, string | null, { r: Array<[string, string, string]>; f: Array<[string, string]>; u: boolean; t?: number[] } | null, string?]>;
  operator_code: NonNullable<SourceCatalog['operatorCode']>;
  /** a: [type oid, schema, name, function schema, function name, always]; e: [child oid, child schema, child name, parent oid]. */
  type_code: { a: Array<[number, string, string, string, string, boolean]>; e: Array<[number, string, string, number]> };
  reader_role: string;
  /** [type oid, versions] (task hcast; `SourceCatalog.castVersions`). */
  cast_versions: Array<[number, string]>;
}

/** One scanned column: name and type, plus nullability, default, identity and generation when the scan reported them. */
function columnOf([name, dataType, nullable, def, identity, generated, typeOid, generatedFrom]: ScanRow['relations'][number]['c'][number]): CatalogColumn {
  const c: CatalogColumn = { name, dataType };
  if (typeof typeOid === 'number') c.typeOid = typeOid;
  if (typeof nullable === 'boolean') {
    c.nullable = nullable;
    c.default = def ?? null;
    c.identity = identity === 'a' ? 'always' : identity === 'd' ? 'by_default' : null;
    c.generated = generated === 's';
    if (c.generated && Array.isArray(generatedFrom)) c.generatedFrom = generatedFrom;
  }
  return c;
}

const ACTION: Record<string, ReferentialAction> = { a: 'no_action', r: 'restrict', c: 'cascade', n: 'set_null', d: 'set_default' };

/** One scanned foreign key referencing a relation; an action code the scan does not know counts as cascade (fail closed). */
export function referencingKeyOf([schema, name, del, upd, cols, refCols, cloned]: NonNullable<ScanRow['relations'][number]['fk']>[number]): ReferencingKey {
  return { schema, name, columns: cols ?? [], referencedColumns: refCols ?? [], onDelete: ACTION[del] ?? 'cascade', onUpdate: ACTION[upd] ?? 'cascade', ...(cloned === true ? { cloned: true } : {}) };
}

/**
 * One scanned user-function overload (task hfn). Relations of a kind InterLock does not catalogue
 * (a sequence, an index) are kept: src/sql/function-reads.ts finds them missing and fails closed;
 * a composite type's row type (relkind c) holds no rows and is dropped.
 */
function routineOf([schema, name, language, secdef, config, owner, source, deps, version]: ScanRow['routines'][number]): CatalogRoutine {
  const r: CatalogRoutine = { schema, name, language, securityDefiner: secdef === true, config: config ?? null, owner };
  if (typeof version === 'string') r.version = version;
  if (deps) {
    r.depends = {
      relations: deps.r.filter(([, , k]) => k !== 'c').map(([s, n]) => ({ schema: s, name: n })),
      functions: deps.f.map(([s, n]) => ({ schema: s, name: n })),
      unsafeTypes: deps.u === true,
      ...(Array.isArray(deps.t) ? { types: deps.t.map(Number) } : {}),
    };
  }
  if (typeof source === 'string') r.source = source;
  return r;
}

/**
 * The scanned code attached to types (task hcast) closed over the type graph: every type built on a
 * type with attached code (domain, array, range, multirange, composite field; recursively) gets
 * that code too. `always` stays on the rows where the cast itself is between two built-in types.
 */
function typeCodeOf(tc: ScanRow['type_code']): NonNullable<SourceCatalog['typeCode']> {
  const out = new Map<string, [number, string, string, string, string, boolean]>();
  const children = new Map<number, Array<[number, string, string]>>();
  for (const [c, s, n, p] of tc.e) {
    const list = children.get(Number(p)) ?? [];
    list.push([Number(c), s, n]);
    children.set(Number(p), list);
  }
  const queue: Array<[number, string, string, string, string, boolean]> = tc.a.map(([oid, s, n, fs, fn, al]) => [Number(oid), s, n, fs, fn, al === true]);
  while (queue.length) {
    const row = queue.shift()!;
    const key = `${row[0]}\u0000${row[3]}\u0000${row[4]}`;
    const had = out.get(key);
    if (had) {
      had[5] = had[5] || row[5];
      continue;
    }
    out.set(key, row);
    for (const [c, s, n] of children.get(row[0]) ?? []) queue.push([c, s, n, row[3], row[4], false]);
  }
  return [...out.values()].sort((x, y) => x[0] - y[0] || (x[3] + '.' + x[4]).localeCompare(y[3] + '.' + y[4]));
}

function isPool(client: pg.ClientBase | pg.Pool): client is pg.Pool {
  return typeof (client as pg.Pool).totalCount === 'number' && typeof (client as pg.Pool).connect === 'function';
}

/** JIT off for the session, answering the setting it had (withoutJit; exported for the parse-tree test of red team rt47b J3b). */
export const JIT_OFF_SQL = "SELECT setting AS prev, pg_catalog.set_config(name, 'off', false) FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'jit'";

/** JIT set back to $1 for the session (withoutJit). */
export const JIT_RESTORE_SQL = "SELECT pg_catalog.set_config('jit', $1, false)";

/**
 * Runs `run` (the scan's statement) on `c` with JIT off for the session, then sets it back to what it
 * was (where the server has the setting; errors of the restore are ignored: a connection whose scan
 * failed is dropped by its lender). The statement's estimated cost passes the default
 * jit_above_cost and compiling it takes seconds (src/control/scan.ts turns JIT off on its own
 * connection; other callers, and the write-hook fingerprint's walks, red team rt44a, made this the
 * scan's own concern). The first row of the result.
 */
async function withoutJit(c: { query: pg.Pool['query'] }, run: () => Promise<pg.QueryResult<ScanRow>>): Promise<ScanRow> {
  const was = (await c.query<{ prev: string }>(JIT_OFF_SQL)).rows[0]?.prev;
  try {
    return (await run()).rows[0];
  } finally {
    if (was !== undefined && was !== 'off') await c.query({ text: JIT_RESTORE_SQL, values: [was], queryMode: 'extended' } as pg.QueryConfig).catch(() => undefined);
  }
}

/**
 * Reads a catalogue snapshot of the connected database as the connection's role.
 *
 * - `relations`: tables, views, materialized views, foreign and partitioned tables of every schema
 *   except `pg_catalog`, `information_schema`, TOAST and temporary schemas, with columns in order;
 *   sorted by schema then name; at most `opts.maxRelations` (default 10 000), `truncated` set when
 *   more exist. Views and materialized views carry their `definition` (`pg_get_viewdef`, printed
 *   for the scanning role's search path, which is the path the analyser resolves it with).
 *   They also carry `view` (issue 27): the relations, user functions and options their stored
 *   query depends on, from `pg_rewrite`/`pg_depend` (see `ViewFacts`).
 *   Every relation records whether it is a partition, its direct `parents` and all its `ancestors`
 *   from `pg_inherits` (partition trees of any depth, default partitions, inheritance; issue 22 item 1),
 *   the foreign keys referencing it with a writing action (`referencedBy`) and whether user triggers
 *   or rules run on its writes (`writeHooks`; issue 27, see `CatalogRelation`), and the fingerprint
 *   of the code its writes run (`hookVersion`; task hhook, hook-guard.ts), whose D5 digest holds
 *   the role settings of `opts.writer` (the writer's login role name; task dgx: without it, only
 *   settings for all roles, so an approved write trips if the writer role has its own).
 * - `functions`: every function/aggregate/window function of every schema, `pg_catalog` included,
 *   overloads folded per name (most volatile `provolatile` wins; see `CatalogFunction`).
 * - `operators`, `systemRelations`, `unsafeTypes`, `types`, `operatorResolution`: see `SourceCatalog`. Aggregates get the volatility
 *   of their most volatile support function (pg_proc marks every aggregate immutable).
 * - `routines`, `operatorCode`, `readerRole` (task hfn): every function outside `pg_catalog` and
 *   `information_schema`, one entry per overload, with its language, SECURITY DEFINER, `proconfig`,
 *   owner and body (`prosrc` of a LANGUAGE sql string body; `pg_depend` records of a SQL-standard
 *   body); the implementing function and row version (`oid:xmin`, task hg1) of every user operator; the scanning role's name (see
 *   `CatalogRoutine`; src/sql/function-reads.ts decides what a call may read from them).
 * - `castVersions` (task hcast): the row versions of the casts and domain constraints of every type
 *   outside `pg_catalog` that has any, per type oid (see `SourceCatalog.castVersions`).
 * - `searchPath`: `current_schemas(false)` for the connection's role.
 * - `serverVersionNum`: `server_version_num` (e.g. 150004, 180004).
 * - `columnTypes`: the columns' types and the types they are built on (see `SourceCatalog`); each
 *   column records its `typeOid`.
 *
 * One SQL statement (one snapshot, one round trip); a Pool is borrowed from and released.
 * `scannedAt` is the time just before that statement was sent (ISO 8601).
 * Throws the driver's error when the query fails (callers must not forward its text to agents).
 */
export async function scanCatalog(
  client: pg.ClientBase | pg.Pool,
  opts?: { maxRelations?: number; writer?: string },
): Promise<SourceCatalog> {
  const max = Math.max(0, Math.floor(opts?.maxRelations ?? DEFAULT_MAX_RELATIONS));
  // Taken before the statement (whose snapshot is taken after it): saves are ordered by it
  // (src/control/catalog.ts saveCatalog), so a scan that read the source earlier never replaces one
  // that began later.
  const scannedAt = new Date().toISOString();
  await loadSqlQualifier();
  const sql = qualifySql(SCAN_SQL);
  let row: ScanRow;
  if (isPool(client)) {
    const c = await client.connect();
    try {
      row = await withoutJit(c, () => c.query<ScanRow>(sql, [max + 1, opts?.writer ?? null]));
    } finally {
      c.release();
    }
  } else {
    row = await withoutJit(client, () => client.query<ScanRow>(sql, [max + 1, opts?.writer ?? null]));
  }
  const truncated = row.relations.length > max;
  const relations: CatalogRelation[] = row.relations.slice(0, max).map((r): CatalogRelation => ({
    schema: r.s,
    name: r.n,
    kind: KIND[r.k],
    columns: r.c.map(columnOf),
    ...(typeof r.d === 'string' ? { definition: r.d } : {}),
    ...(Array.isArray(r.vr)
      ? {
          view: {
            reads: r.vr.filter(([, , k]) => k in KIND).map(([schema, name, k]) => ({ schema, name, kind: KIND[k] })),
            userCode: [...(r.vu ?? [])].sort(),
            securityBarrier: r.vo?.[0] === true,
            securityInvoker: r.vo?.[1] === true,
          },
        }
      : {}),
    keys: (r.x ?? []).filter(([, cols]) => Array.isArray(cols) && cols.length > 0).map(([t, cols]) => ({ kind: t === 'p' ? 'primary' : 'unique', columns: cols! }) as CatalogKey),
    partition: r.ip === true,
    parents: (r.p ?? []).map(([schema, name]) => ({ schema, name })),
    ancestors: (r.a ?? []).map(([schema, name]) => ({ schema, name })),
    ...(Array.isArray(r.fk) ? { referencedBy: r.fk.map(referencingKeyOf) } : {}),
    ...(Array.isArray(r.h) ? { writeHooks: { triggers: r.h[0] === true, rules: r.h[1] === true } } : {}),
    ...(typeof r.hv === 'string' ? { hookVersion: r.hv } : {}),
  }));
  const functions: CatalogFunction[] = row.functions.map(([schema, name, v, rs, oc, rr]) => {
    const f: CatalogFunction = { schema, name, volatility: VOLATILITY[v] ?? 'volatile', returnsSet: rs };
    const cols = oc === null ? null : (JSON.parse(oc) as unknown);
    if (Array.isArray(cols) && cols.length > 0 && cols.every((x) => typeof x === 'string' && x !== '')) f.outColumns = cols as string[];
    if (Array.isArray(rr) && rr.length) f.resultRowTypes = rr.map(([s, n]) => ({ schema: s, name: n })).sort((x, y) => (x.schema + '.' + x.name).localeCompare(y.schema + '.' + y.name));
    return f;
  });
  const operators: CatalogOperator[] = row.operators.map(([schema, name, v]) => ({
    schema,
    name,
    volatility: VOLATILITY[v] ?? 'volatile',
  }));
  return {
    relations,
    functions,
    operators,
    systemRelations: row.system_relations,
    unsafeTypes: row.unsafe_types.map(([schema, name]) => ({ schema, name })),
    types: row.types.map(([schema, name]) => ({ schema, name })),
    searchPath: lookupPath(row.search_path),
    serverVersionNum: row.server_version_num,
    operatorResolution: { operators: row.operator_signatures, types: row.type_details, implicitCasts: row.implicit_casts },
    columnTypes: row.column_types.map(([oid, typtype, category, base, element, name, labels, subtype]) => ({
      oid, typtype, category, base, element, name, ...(labels ? { labels } : {}), ...(subtype !== null ? { subtype } : {}),
    })),
    routines: row.routines.map(routineOf),
    operatorCode: row.operator_code,
    typeCode: typeCodeOf(row.type_code),
    castVersions: row.cast_versions.map(([t, v]) => [Number(t), v] as [number, string]),
    compositeTypes: row.composite_types.map(([schema, name, cols]) => ({ schema, name, columns: cols.map(([n, t]) => ({ name: n, dataType: t })) })),
    readerRole: row.reader_role,
    scannedAt,
    truncated,
  };
}
