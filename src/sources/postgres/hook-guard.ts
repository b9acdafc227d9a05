/**
 * The write-hook guard (task hhook; red team rt43a A1–A5, A8, A10): the code a relation runs on a
 * write, as one fingerprint, recorded by the catalogue scan (catalog.ts, `CatalogRelation.hookVersion`)
 * and compared, in an approved write's own transaction right before its statement, for every
 * relation the write touches (its targets, the views on a target's path and their base relations,
 * the descendants of each, and the relations its foreign keys' referential actions write:
 * src/sql/referential-reach.ts `touched`, computed by src/approvals/execute.ts `recheck`). A role
 * with DDL rights on a written table (its owner, a DBA; not the writer role) that attaches code
 * after the write was queued and reviewed makes it differ: the statement is not run, the write is
 * rolled back and the approval fails `catalog_stale` (the source is rescanned; requeued and approved
 * again, the write is reviewed against what the table now runs).
 *
 * The fingerprint (writeHooksSql, ONE expression used by both) covers, per relation: its oid,
 * relrowsecurity/relforcerowsecurity, its owner (row-level security does not apply to the owner
 * unless forced; rt44a O1) and its view options check_option, security_barrier and
 * security_invoker (rt44a O2); its triggers (pg_trigger `oid:xmin`, internal ones included,
 * each with its function's pg_proc `oid:xmin`: a trigger created, altered, enabled or disabled, or its
 * function replaced); its rewrite rules (pg_rewrite `oid:xmin`, a view's `_RETURN` included: a
 * redefined view); its row-level security policies (pg_policy `oid:xmin`); its column defaults and
 * generated expressions (pg_attrdef `oid:xmin`); its constraints (pg_constraint `oid:xmin`: CHECK,
 * keys, exclusion); its indexes (pg_index `indexrelid:xmin`: expression and partial indexes run code
 * on every write); its inheritance children and partitions (pg_inherits `inhrelid:xmin`: one attached
 * later receives rows); its columns' types (`attnum:atttypid`); and every domain its columns' types
 * reach (through domain bases, array elements, range subtypes and composite attributes): the domain's
 * pg_type `oid:xmin` (its default, NOT NULL) and its pg_constraint rows `oid:xmin` (its CHECKs);
 * and (red team rt44a D1–D4, X2) every function and operator those hooks depend on as PostgreSQL
 * records it (pg_depend from the triggers, rules, policies, defaults, constraints, domain
 * constraints, domains (their DEFAULT: red team rt45a X3) and indexes; from an operator to its functions, from an operator class to its
 * family's support functions and operators, from a function with an SQL-standard body to what it
 * calls, to any depth): pg_proc and pg_operator `oid:xmin` (a DEFAULT's, CHECK's, index
 * expression's or policy's function replaced by CREATE OR REPLACE, which takes no table lock).
 * xmin changes with every new row version (CREATE OR REPLACE, ALTER, GRANT), oid with DROP + CREATE.
 *
 * Cost: a handful of index probes per relation (pg_trigger_tgrelid_tgname_index,
 * pg_rewrite_rel_rulename_index, pg_policy_polrelid_polname_index, pg_attrdef_adrelid_adnum_index,
 * pg_constraint_conrelid_contypid_conname_index, pg_index_indrelid_index, pg_inherits_parent_index,
 * pg_attribute_relid_attnum_index) and a walk of the columns' types; in the write's transaction, no
 * extra round trip beyond the guard that already ran there (task hw), to which this part is joined.
 * A relation with part `G` (OPAQUE_REACH_SQL) pays for the digest: 33–70 ms per computation on a
 * database of 1,000 tables of 11 columns (8–15 ms before rt45a added relations, columns and types),
 * in the guard and in the scan, per such relation.
 *
 * Locks (red team rt44a L1, L2): runWrite locks the write's targets ROW EXCLUSIVE before the guard
 * (`WriteGuard.lock`; descendants and a view's base relations with them), so DDL on them committed
 * later waits for the write; and runs the guard again after the statement (deferred triggers made
 * to fire at its end), so a definition committed while the statement ran — a trigger function
 * replaced (no table lock) while the statement waited for a row lock — rolls the write back.
 *
 * What it cannot see: the effects outside the transaction (dblink, sequences, advisory locks) of
 * code replaced while the statement ran, which ran before the guard after it rolled it back (rt44a
 * L2r); casts and type input functions (task hcast); event triggers (DDL only). Code reached from
 * a plpgsql (or other non-SQL-standard) body, for which PostgreSQL records no dependency (what a
 * reviewed trigger function calls or resolves by name on the writer's path, rt44a D5), or from a
 * built-in that runs SQL text (query_to_xml …) or an extension's C function (dblink_exec) (rt45a S2),
 * is covered coarsely: such a relation's fingerprint holds a digest of all user code and every
 * relation, column and type in the database (OPAQUE_REACH_SQL), so any change to it trips the guard.
 * The writer cannot hold the reached functions still (a row lock on pg_proc needs UPDATE on it), so
 * rt44a L2r stays.
 *
 * Names (red team rt47b J3b): the guard runs on the writer's connection, the fingerprint inside the
 * scan on the reader's, each on its role's search_path; hookGuardSql sends its text through
 * qualifySql (qualify-sql.ts), so every operator, type and function it uses is pg_catalog's (IN
 * lists and IS DISTINCT FROM are written as `= ANY (ARRAY[…])` and `coalesce(a <> b, …)`), and an
 * insider's `public.<> (oid, integer)` is never the one `typelem <> 0` calls.
 */
import type { RelationName, SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';
import { quoteIdent } from '../../sql/mask-sql';
import { qualifySql } from './qualify-sql';

/** The oid of system catalogue `name` (a pg_class oid, as pg_depend's classid) as an SQL constant. */
const CLS = (name: string) => `'pg_catalog.${name}'::pg_catalog.regclass::pg_catalog.oid`;

/**
 * A digest (md5 hex) of every object created after initdb that code can run or reach by name at run
 * time (oid ≥ 16384, FirstNormalObjectId): functions and procedures, operators, casts, triggers,
 * rewrite rules (views), row-level security policies, column defaults and constraints, each as
 * `oid:xmin`; and (red team rt45a S1) every relation other than a temporary one as
 * `oid:schema:name:kind:row security` (a table created on a body's path shadows the one it wrote;
 * not xmin, which TRUNCATE, REINDEX or CLUSTER change), its columns as `attnum:type` (a column added
 * whose type is a domain with a DEFAULT runs that default), every type outside a temporary schema as
 * `oid:xmin` (a domain created or its DEFAULT changed) and every inheritance link (a partition or
 * child attached); and (task dgx) the rows of pg_db_role_setting that apply to the writer's sessions
 * (this database or all databases; the role named by `writer`, an SQL expression of its login name,
 * or all roles), as `database:role:md5(settings)`: an `ALTER ROLE … SET` / `ALTER DATABASE … SET` /
 * `ALTER ROLE … IN DATABASE … SET` (TimeZone, DateStyle, plpgsql.variable_conflict, a custom `x.y`
 * a body reads with current_setting) applies to the writer's new sessions and changes what such code
 * does. Part `G` of the fingerprint holds it for a relation whose hooks reach a function
 * with a body PostgreSQL records no dependencies for (plpgsql, PL/*, or LANGUAGE sql with a string
 * body: prolang other than internal (12) and c (13), no SQL-standard `prosqlbody`), a C or internal
 * function created after initdb (an extension's: dblink_exec runs any SQL text), or a built-in that
 * runs SQL text or reads relations by name (SQL_TEXT_RUNNERS; rt45a S2): what such code calls, looks
 * up on the writer's search path or writes (and so what those tables run) can be anything in the
 * database, so any such change after the scan trips the guard (red team rt44a D5).
 * Strict by design: DDL anywhere in the source fails queued writes to such relations once (requeue).
 */
function opaqueReachSql(writer: string): string {
  return `SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(hgv.v, ',' ORDER BY hgv.v), '')) FROM (
          SELECT 'p' || hg1.oid::text || ':' || hg1.xmin::text AS v FROM pg_catalog.pg_proc hg1 WHERE hg1.oid >= 16384
          UNION ALL SELECT 'o' || hg2.oid::text || ':' || hg2.xmin::text FROM pg_catalog.pg_operator hg2 WHERE hg2.oid >= 16384
          UNION ALL SELECT 'c' || hg3.oid::text || ':' || hg3.xmin::text FROM pg_catalog.pg_cast hg3 WHERE hg3.oid >= 16384
          UNION ALL SELECT 't' || hg4.oid::text || ':' || hg4.xmin::text FROM pg_catalog.pg_trigger hg4 WHERE hg4.oid >= 16384
          UNION ALL SELECT 'r' || hg5.oid::text || ':' || hg5.xmin::text FROM pg_catalog.pg_rewrite hg5 WHERE hg5.oid >= 16384
          UNION ALL SELECT 'l' || hg6.oid::text || ':' || hg6.xmin::text FROM pg_catalog.pg_policy hg6
          UNION ALL SELECT 'd' || hg7.oid::text || ':' || hg7.xmin::text FROM pg_catalog.pg_attrdef hg7 WHERE hg7.oid >= 16384
          UNION ALL SELECT 'k' || hg8.oid::text || ':' || hg8.xmin::text FROM pg_catalog.pg_constraint hg8 WHERE hg8.oid >= 16384
          UNION ALL SELECT 'n' || hg9.oid::text || ':' || hg9.relnamespace::text || ':' || hg9.relname::text || ':' || hg9.relkind::text || ':' || hg9.relrowsecurity::text || hg9.relforcerowsecurity::text
            FROM pg_catalog.pg_class hg9 WHERE hg9.oid >= 16384 AND hg9.relpersistence <> 't'
          UNION ALL SELECT 'a' || hga.attrelid::text || ':' || hga.attnum::text || ':' || hga.atttypid::text FROM pg_catalog.pg_attribute hga
            JOIN pg_catalog.pg_class hgb ON hgb.oid = hga.attrelid WHERE hga.attrelid >= 16384 AND hgb.relpersistence <> 't' AND hga.attnum > 0 AND NOT hga.attisdropped
          UNION ALL SELECT 'y' || hgy.oid::text || ':' || hgy.xmin::text FROM pg_catalog.pg_type hgy
            JOIN pg_catalog.pg_namespace hgn ON hgn.oid = hgy.typnamespace WHERE hgy.oid >= 16384 AND hgn.nspname !~ '^pg_(toast_)?temp_'
          UNION ALL SELECT 'h' || hgi.inhrelid::text || ':' || hgi.inhparent::text FROM pg_catalog.pg_inherits hgi WHERE hgi.inhrelid >= 16384
          UNION ALL SELECT 's' || hgs.setdatabase::text || ':' || hgs.setrole::text || ':' || pg_catalog.md5(hgs.setconfig::text) FROM pg_catalog.pg_db_role_setting hgs
            WHERE hgs.setdatabase = ANY (ARRAY[0, (SELECT hgd.oid FROM pg_catalog.pg_database hgd WHERE hgd.datname = pg_catalog.current_database())]::oid[])
              AND hgs.setrole = ANY (ARRAY[0, (SELECT hgr.oid FROM pg_catalog.pg_roles hgr WHERE hgr.rolname = ${writer})]::oid[])) hgv`;
}

/**
 * The built-in functions (prolang internal, by their C symbol, prosrc) that run SQL text or read
 * relations by a name or cursor given at run time: the query, cursor, table, schema and database
 * `*_to_xml*` family, ts_stat and ts_rewrite with a query. PostgreSQL records no dependency on a
 * built-in (pinned) function, nor on what the text names, so a hook calling one is found in its
 * stored expression (`:funcid <oid> ` in the node tree; red team rt45a S2).
 */
const SQL_TEXT_RUNNERS = ['query_to_xml', 'query_to_xmlschema', 'query_to_xml_and_xmlschema', 'cursor_to_xml', 'cursor_to_xmlschema', 'table_to_xml', 'table_to_xmlschema', 'table_to_xml_and_xmlschema', 'schema_to_xml', 'schema_to_xmlschema', 'schema_to_xml_and_xmlschema', 'database_to_xml', 'database_to_xmlschema', 'database_to_xml_and_xmlschema', 'ts_stat1', 'ts_stat2', 'tsquery_rewrite_query'];

/** The regular expression (SQL text) a node tree matches when it calls one of SQL_TEXT_RUNNERS. */
const SQL_TEXT_RUNNER_RE = `(SELECT ':funcid (' || pg_catalog.string_agg(hgz.oid::text, '|') || ') ' FROM pg_catalog.pg_proc hgz WHERE hgz.prolang = 12 AND hgz.prosrc = ANY (ARRAY[${SQL_TEXT_RUNNERS.map((n) => `'${n}'`).join(', ')}]::text[]))`;

/**
 * The recursive CTE `hy(oid)` (its name and body, for a WITH RECURSIVE) of every type the columns of
 * relation `rel` (an SQL expression) reach: their types, then domain bases, array elements, range
 * and multirange subtypes and composite attributes, to any depth.
 */
function typesReached(rel: string): string {
  return `hy(oid) AS (
        SELECT hb.atttypid FROM pg_catalog.pg_attribute hb WHERE hb.attrelid = ${rel} AND hb.attnum > 0 AND NOT hb.attisdropped
        UNION
        SELECT hx.o FROM hy JOIN pg_catalog.pg_type hty ON hty.oid = hy.oid
        CROSS JOIN LATERAL (
          SELECT hty.typbasetype WHERE hty.typtype = 'd'
          UNION ALL SELECT hty.typelem WHERE hty.typcategory = 'A' AND hty.typelem <> 0
          UNION ALL SELECT hr.rngsubtype FROM pg_catalog.pg_range hr WHERE hr.rngtypid = hty.oid OR hr.rngmultitypid = hty.oid
          UNION ALL SELECT hca.atttypid FROM pg_catalog.pg_attribute hca WHERE hty.typtype = 'c' AND hca.attrelid = hty.typrelid AND hca.attnum > 0 AND NOT hca.attisdropped) AS hx(o))`;
}

/**
 * The write-hook fingerprint of the relation whose oid is the SQL expression `rel` (evaluated once
 * per reference; pass a column), as text (see the module comment). The scan records it per relation
 * (catalog.ts `hv`), the guard recomputes it live; both use this one expression, so equal means
 * unchanged. `writer`: an SQL expression of the writer's login role name (text or name; NULL for
 * none), whose settings the D5 digest holds: `session_user` (the default) in the guard, which runs
 * on the writer's connection; the configured writer role in the scan, which runs as the reader.
 * All aliases are prefixed `hk` so it can sit in any query.
 */
export function writeHooksSql(rel: string, writer = 'session_user'): string {
  const list = (expr: string, from: string, order: string) => `coalesce((SELECT pg_catalog.string_agg(${expr}, ',' ORDER BY ${order}) FROM ${from}), '')`;
  return `pg_catalog.concat_ws('|', ${rel}::text,
    (SELECT hc.relrowsecurity::text || hc.relforcerowsecurity::text || '/' || hc.relowner::text || coalesce('/' || (SELECT pg_catalog.string_agg(ho, ',' ORDER BY ho)
        FROM pg_catalog.unnest(hc.reloptions) AS ho WHERE pg_catalog.split_part(ho, '=', 1) = ANY (ARRAY['check_option', 'security_barrier', 'security_invoker']::text[])), '') FROM pg_catalog.pg_class hc WHERE hc.oid = ${rel}),
    'T' || ${list(`ht.oid::text || ':' || ht.xmin::text || '/' || coalesce(hp.oid::text || ':' || hp.xmin::text, '-')`, `pg_catalog.pg_trigger ht LEFT JOIN pg_catalog.pg_proc hp ON hp.oid = ht.tgfoid WHERE ht.tgrelid = ${rel}`, 'ht.oid')},
    'R' || ${list(`hw.oid::text || ':' || hw.xmin::text`, `pg_catalog.pg_rewrite hw WHERE hw.ev_class = ${rel}`, 'hw.oid')},
    'P' || ${list(`hl.oid::text || ':' || hl.xmin::text`, `pg_catalog.pg_policy hl WHERE hl.polrelid = ${rel}`, 'hl.oid')},
    'D' || ${list(`hd.oid::text || ':' || hd.xmin::text`, `pg_catalog.pg_attrdef hd WHERE hd.adrelid = ${rel}`, 'hd.oid')},
    'K' || ${list(`hk.oid::text || ':' || hk.xmin::text`, `pg_catalog.pg_constraint hk WHERE hk.conrelid = ${rel}`, 'hk.oid')},
    'I' || ${list(`hi.indexrelid::text || ':' || hi.xmin::text`, `pg_catalog.pg_index hi WHERE hi.indrelid = ${rel}`, 'hi.indexrelid')},
    'H' || ${list(`hn.inhrelid::text || ':' || hn.xmin::text`, `pg_catalog.pg_inherits hn WHERE hn.inhparent = ${rel}`, 'hn.inhrelid')},
    'A' || ${list(`ha.attnum::text || ':' || ha.atttypid::text`, `pg_catalog.pg_attribute ha WHERE ha.attrelid = ${rel} AND ha.attnum > 0 AND NOT ha.attisdropped`, 'ha.attnum')},
    'Y' || coalesce((WITH RECURSIVE ${typesReached(rel)}
      SELECT pg_catalog.string_agg(hdt.oid::text || ':' || hdt.xmin::text || coalesce('/' || (
          SELECT pg_catalog.string_agg(hdc.oid::text || ':' || hdc.xmin::text, '/' ORDER BY hdc.oid) FROM pg_catalog.pg_constraint hdc WHERE hdc.contypid = hdt.oid), ''), ',' ORDER BY hdt.oid)
      FROM pg_catalog.pg_type hdt WHERE hdt.oid IN (SELECT hy.oid FROM hy) AND hdt.typtype = 'd'), ''),
    'F' || coalesce((WITH RECURSIVE ${typesReached(rel)},
      hf(c, o) AS (
        SELECT ${CLS('pg_trigger')}, hft.oid FROM pg_catalog.pg_trigger hft WHERE hft.tgrelid = ${rel}
        UNION SELECT ${CLS('pg_rewrite')}, hfw.oid FROM pg_catalog.pg_rewrite hfw WHERE hfw.ev_class = ${rel}
        UNION SELECT ${CLS('pg_policy')}, hfl.oid FROM pg_catalog.pg_policy hfl WHERE hfl.polrelid = ${rel}
        UNION SELECT ${CLS('pg_attrdef')}, hfd.oid FROM pg_catalog.pg_attrdef hfd WHERE hfd.adrelid = ${rel}
        UNION SELECT ${CLS('pg_constraint')}, hfk.oid FROM pg_catalog.pg_constraint hfk WHERE hfk.conrelid = ${rel} OR hfk.contypid IN (SELECT hy.oid FROM hy)
        UNION SELECT ${CLS('pg_class')}, hfi.indexrelid FROM pg_catalog.pg_index hfi WHERE hfi.indrelid = ${rel}
        UNION SELECT ${CLS('pg_type')}, hfy.oid FROM pg_catalog.pg_type hfy WHERE hfy.oid IN (SELECT hy.oid FROM hy) AND hfy.typtype = 'd'
        UNION
        SELECT hfx.c, hfx.o FROM hf CROSS JOIN LATERAL (
          SELECT hfe.refclassid, hfe.refobjid FROM pg_catalog.pg_depend hfe
            WHERE hfe.classid = hf.c AND hfe.objid = hf.o AND hfe.refclassid = ANY (ARRAY[${CLS('pg_proc')}, ${CLS('pg_operator')}, ${CLS('pg_opclass')}])
          UNION ALL SELECT ${CLS('pg_proc')}, hfp.amproc FROM pg_catalog.pg_opclass hfc JOIN pg_catalog.pg_amproc hfp ON hfp.amprocfamily = hfc.opcfamily WHERE hf.c = ${CLS('pg_opclass')} AND hfc.oid = hf.o
          UNION ALL SELECT ${CLS('pg_operator')}, hfo.amopopr FROM pg_catalog.pg_opclass hfc JOIN pg_catalog.pg_amop hfo ON hfo.amopfamily = hfc.opcfamily WHERE hf.c = ${CLS('pg_opclass')} AND hfc.oid = hf.o) AS hfx(c, o))
      SELECT coalesce(pg_catalog.string_agg(hfv.v, ',' ORDER BY hfv.v), '') || CASE WHEN EXISTS (
          SELECT 1 FROM pg_catalog.pg_proc hgq WHERE hgq.oid IN (SELECT hf.o FROM hf WHERE hf.c = ${CLS('pg_proc')})
            AND (hgq.prolang <> ALL (ARRAY[12, 13]::oid[]) AND (pg_catalog.to_jsonb(hgq) ->> 'prosqlbody') IS NULL OR hgq.oid >= 16384 AND hgq.prolang = ANY (ARRAY[12, 13]::oid[])))
          OR EXISTS (SELECT 1 FROM hf CROSS JOIN LATERAL (
            SELECT hnd.adbin::text FROM pg_catalog.pg_attrdef hnd WHERE hf.c = ${CLS('pg_attrdef')} AND hnd.oid = hf.o
            UNION ALL SELECT hnk.conbin::text FROM pg_catalog.pg_constraint hnk WHERE hf.c = ${CLS('pg_constraint')} AND hnk.oid = hf.o
            UNION ALL SELECT coalesce(hnl.polqual::text, '') || coalesce(hnl.polwithcheck::text, '') FROM pg_catalog.pg_policy hnl WHERE hf.c = ${CLS('pg_policy')} AND hnl.oid = hf.o
            UNION ALL SELECT hnw.ev_action::text || coalesce(hnw.ev_qual::text, '') FROM pg_catalog.pg_rewrite hnw WHERE hf.c = ${CLS('pg_rewrite')} AND hnw.oid = hf.o
            UNION ALL SELECT hnt.tgqual::text FROM pg_catalog.pg_trigger hnt WHERE hf.c = ${CLS('pg_trigger')} AND hnt.oid = hf.o
            UNION ALL SELECT coalesce(hni.indexprs::text, '') || coalesce(hni.indpred::text, '') FROM pg_catalog.pg_index hni WHERE hf.c = ${CLS('pg_class')} AND hni.indexrelid = hf.o
            UNION ALL SELECT pg_catalog.to_jsonb(hnp) ->> 'prosqlbody' FROM pg_catalog.pg_proc hnp WHERE hf.c = ${CLS('pg_proc')} AND hnp.oid = hf.o
            UNION ALL SELECT hny.typdefaultbin::text FROM pg_catalog.pg_type hny WHERE hf.c = ${CLS('pg_type')} AND hny.oid = hf.o) AS hn(t)
            WHERE hn.t ~ ${SQL_TEXT_RUNNER_RE})
        THEN '|G' || (${opaqueReachSql(writer)}) ELSE '' END FROM (
        SELECT 'p' || hfq.oid::text || ':' || hfq.xmin::text AS v FROM pg_catalog.pg_proc hfq WHERE hfq.oid IN (SELECT hf.o FROM hf WHERE hf.c = ${CLS('pg_proc')})
        UNION ALL SELECT 'o' || hfr.oid::text || ':' || hfr.xmin::text FROM pg_catalog.pg_operator hfr WHERE hfr.oid IN (SELECT hf.o FROM hf WHERE hf.c = ${CLS('pg_operator')})) hfv), ''))`;
}

/** Guard texts per (count, offset), made on first use (at most 256 kept). */
const texts = new Map<string, string>();

/**
 * The guard's SQL for `count` relations, its parameters numbered from `$offset+1`: per relation
 * `$k+1` schema, `$k+2` name, `$k+3` the expected fingerprint (text). No rows when every relation
 * exists and has its expected fingerprint; 22012 (read.ts GUARD_SQLSTATE) at the first that does not
 * (a relation gone counts, so does a schema or name of none: the `incomplete` row of hookGuardValues).
 */
export function hookGuardSql(count: number, offset = 0): string {
  const key = `${count}:${offset}`;
  const hit = texts.get(key);
  if (hit !== undefined) return hit;
  const rows = Array.from({ length: count }, (_, i) => {
    const k = offset + 3 * i;
    return `($${k + 1}::text, $${k + 2}::text, $${k + 3}::text)`;
  }).join(', ');
  const text = `
SELECT 1
FROM (VALUES ${rows}) AS u(s, n, v)
CROSS JOIN LATERAL (
  SELECT pg_catalog.max(y.v) AS v, pg_catalog.count(*) AS k
  FROM (SELECT ${writeHooksSql('c.oid')} AS v
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
        WHERE ns.nspname = u.s AND c.relname = u.n) y) x
WHERE CASE WHEN coalesce(x.v <> u.v, (x.v IS NULL) <> (u.v IS NULL)) THEN 1 / (x.k * 0) = 1 ELSE false END
`;
  const qualified = qualifySql(text);
  if (texts.size < 256) texts.set(key, qualified);
  return qualified;
}

/** A value no fingerprint equals: the catalogue has no fingerprint of the relation (a snapshot scanned before task hhook, or a relation it lacks). */
const UNKNOWN = '?';

/**
 * The guard's parameter values for `relations` against `catalog`: schema, name and the scanned
 * fingerprint (`CatalogRelation.hookVersion`; UNKNOWN when absent, so the guard trips and the source
 * is rescanned). `incomplete` (the walk of what the write touches stopped at a relation whose records
 * the catalogue lacks) adds a row naming no relation, which always trips.
 */
export function hookGuardValues(catalog: SourceCatalog, relations: readonly RelationName[], incomplete = false): string[] {
  const byKey = new Map(catalog.relations.map((r) => [r.schema + '\u0000' + r.name, r]));
  const values: string[] = [];
  for (const r of relations) values.push(r.schema, r.name, byKey.get(r.schema + '\u0000' + r.name)?.hookVersion ?? UNKNOWN);
  if (incomplete) values.push('', '', UNKNOWN);
  return values;
}

/**
 * An approved write's guard (ReadGuard: one statement, its parameters) and `lock`: an SQL statement
 * (`LOCK TABLE … IN ROW EXCLUSIVE MODE` of the write's targets; absent for none) that runWrite sends
 * before the guard, so that DDL on a target (which needs a lock that conflicts with ROW EXCLUSIVE)
 * is either committed before the guard reads the catalogue or waits for the write (red team rt44a L1).
 */
export interface WriteGuard extends ReadGuard {
  lock?: string;
}

/**
 * The LOCK statement of `targets` (the write's targets as the analysis names them) against
 * `catalog`: each table, partitioned table or view the catalogue records (PostgreSQL locks a
 * partitioned or inherited table's descendants and a view's base relations with it), in a fixed
 * order, ROW EXCLUSIVE (the mode the statement takes anyway); null when none. Foreign tables and
 * materialized views cannot be locked and are left out (the guard after the statement still sees them).
 */
export function lockSql(catalog: SourceCatalog, targets: readonly RelationName[]): string | null {
  const kinds = new Map(catalog.relations.map((r) => [r.schema + '\u0000' + r.name, r.kind]));
  const names = new Set<string>();
  for (const t of targets) {
    const k = kinds.get(t.schema + '\u0000' + t.name);
    if (k === 'table' || k === 'partitioned_table' || k === 'view') names.add(`${quoteIdent(t.schema)}.${quoteIdent(t.name)}`);
  }
  return names.size === 0 ? null : `LOCK TABLE ${[...names].sort().join(', ')} IN ROW EXCLUSIVE MODE`;
}

/**
 * `guard` (an approved write's function and shape guards, or null) followed by the write-hook guard
 * of `relations` (see hookGuardValues for `incomplete`), with `lock` for `targets` (lockSql; task
 * rt44a); `guard` itself when there is no relation to check. Frozen. Its SQL raises 22012 when a
 * guarded thing changed, as the others do.
 */
export function withHookGuard(catalog: SourceCatalog, guard: ReadGuard | null, relations: readonly RelationName[], incomplete = false, targets: readonly RelationName[] = []): WriteGuard | null {
  const values = hookGuardValues(catalog, relations, incomplete);
  if (values.length === 0) return guard; // no relation: nothing the write targets either
  const lock = lockSql(catalog, targets);
  const offset = guard ? guard.values.length : 0;
  const text = (guard ? guard.text + ' UNION ALL ' : '') + hookGuardSql(values.length / 3, offset);
  return Object.freeze({ text, values: Object.freeze([...(guard?.values ?? []), ...values]) as string[], ...(lock !== null ? { lock } : {}) });
}
