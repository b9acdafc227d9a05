/**
 * The `rows` class of the sql-gateway pack (issue 27 "Must show", issue 30): does a gateway that says
 * "identity A may read only rows where tenant = 'a'" keep every other row hidden, whatever SQL A writes?
 *
 * The fixture's `icf_rows` holds rows of two tenants (fixture.ts: `rowTenant`, labels `rowLabel`). The
 * implementer gives a second key (`--restricted-api-key`) for an identity restricted to tenant 'a' on
 * that table (and allowed to read `icf_items`); how its gateway expresses the restriction is its own
 * business. Without that key the class is skipped with the reason.
 *
 * Every statement the class sends is generated (fast-check, from the run's seed): plain reads,
 * aggregates, GROUP BY, window functions, joins (with `icf_items`, self-joins, joins on another row's
 * key), sub-selects (scalar, EXISTS, IN, correlated, LATERAL), CTEs (plain, MATERIALIZED, recursive),
 * set operations, and error probes (`1/(CASE WHEN tenant = 'b' THEN 0 ELSE 1 END)`, failing casts,
 * `sqrt` of a negative, in WHERE, the select list, aggregates, join conditions and sub-selects). Each
 * statement reads `icf_rows` through the placeholder `{R}` and outputs one text column of markers
 * (`icfr_<family>.<values>_z`). The oracle runs it on the fixture database twice, as the --pg-url role
 * in a read-only transaction: with `{R}` as `(SELECT * FROM icf_rows WHERE tenant = 'a' OFFSET 0)` (the
 * rows A may read; OFFSET 0 keeps the planner from evaluating A's expressions on other rows), and with
 * `{R}` as the whole table. A finding (a leak of the class) is:
 *  - any answer carrying a tenant 'b' label (a hidden row's content);
 *  - an answer with rows whose markers differ from the oracle's over A's rows (a row, count, sum, … that
 *    only the hidden rows explain);
 *  - a refused or failed answer where the whole table fails, A's rows do not, and the gateway answers
 *    the same statement written over A's rows (the fenced sub-select) with rows: the error tells A that
 *    a hidden row exists.
 * A gateway may refuse any statement shape (refusals are counted, not findings), but it must answer a
 * plain read of A's rows with every tenant 'a' label, else the class cannot judge it (a false positive).
 */
import fc from 'fast-check';
import type { Client } from 'pg';
import { rowLabel, rowTenant, ROW_IDS } from './fixture';

/** A tool call's answer as the pack sees it. */
export interface RowAnswer {
  ok: boolean;
  status: number;
  body: string;
}

/** One generated statement: `sql` reads icf_rows through the placeholder `{R}` (always followed by an alias). */
export interface RowQuery {
  family: string;
  sql: string;
}

/** The table expression identity A may read, as the oracle and the control statement spell it. */
export const TENANT_A_ROWS = "(SELECT * FROM icf_rows WHERE tenant = 'a' OFFSET 0)";

/** `q.sql` with `{R}` replaced by `table`. */
export function spell(q: RowQuery, table: string): string {
  return q.sql.split('{R}').join(table);
}

/** The markers of an answer or a result: the distinct `icfr_…_z` strings it carries, sorted. */
export function markers(text: string): string[] {
  return [...new Set(text.match(/icfr_[a-z0-9.-]*_z/g) ?? [])].sort();
}

const tenant = fc.constantFrom('a', 'b');
const small = fc.integer({ min: 0, max: 24 });
const rowId = fc.constantFrom(...ROW_IDS);
const hiddenId = fc.constantFrom(...ROW_IDS.filter((id) => rowTenant(id) === 'b'));

/** A predicate over the row alias `x`. */
const pred = (x: string): fc.Arbitrary<string> =>
  fc.oneof(
    tenant.map((t) => `${x}.tenant = '${t}'`),
    tenant.map((t) => `${x}.tenant <> '${t}'`),
    small.map((k) => `${x}.amount > ${k}`),
    small.map((k) => `${x}.amount <= ${k}`),
    rowId.map((id) => `${x}.id = ${id}`),
    tenant.map((t) => `${x}.label LIKE 'row${t}%'`),
    fc.constant(`${x}.item_id IN (1, 3)`),
    fc.constant('true'),
    small.map((k) => `(${x}.tenant = 'b' OR ${x}.amount > ${k})`),
  );

/** An expression that fails (division by zero, a failing cast, sqrt of a negative) exactly on rows meeting `cond`. */
const failsWhen = (x: string, cond: string): fc.Arbitrary<string> =>
  fc.constantFrom(
    `1 / (CASE WHEN ${cond} THEN 0 ELSE 1 END) = 1`,
    `(CASE WHEN ${cond} THEN ${x}.label ELSE '1' END)::int = 1`,
    `sqrt(CASE WHEN ${cond} THEN -1 ELSE 1 END) = 1`,
  );
/** A condition singling out hidden rows (or, for contrast, any rows) of alias `x`. */
const probeCond = (x: string): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constant(`${x}.tenant = 'b'`) },
    { weight: 2, arbitrary: hiddenId.map((id) => `${x}.id = ${id}`) },
    { weight: 1, arbitrary: small.map((k) => `${x}.amount = ${k}`) },
    { weight: 1, arbitrary: tenant.map((t) => `${x}.label LIKE 'row${t}-%'`) },
  );

const agg = fc.constantFrom('count(*)', 'sum(r.amount)', 'max(r.id)', 'min(r.amount)', 'count(DISTINCT r.tenant)', "string_agg(r.tenant, '' ORDER BY r.id)", "bool_or(r.tenant = 'b')", 'round(avg(r.amount))');
const q = (family: string) => (sql: string): RowQuery => ({ family, sql });

/** The statement generator of the class (every family listed in the module comment). */
export function rowQueryArb(): fc.Arbitrary<RowQuery> {
  const plain = fc.oneof(
    pred('r').map((p) => `SELECT 'icfr_p.' || r.id || '_z' AS v FROM {R} r WHERE ${p}`),
    pred('r').map((p) => `SELECT 'icfr_l.' || r.label || '_z' AS v FROM {R} r WHERE ${p} ORDER BY r.id`),
    rowId.map((id) => `SELECT 'icfr_o.' || r.id || '_z' AS v FROM {R} r ORDER BY r.id OFFSET ${id % 6} LIMIT 3`),
  ).map(q('plain'));
  const aggregate = fc.oneof(
    fc.tuple(agg, pred('r')).map(([a, p]) => `SELECT 'icfr_a.' || coalesce((${a})::text, 'null') || '_z' AS v FROM {R} r WHERE ${p}`),
    fc.tuple(fc.constantFrom('tenant', 'item_id'), fc.integer({ min: 0, max: 3 })).map(([c, k]) => `SELECT 'icfr_g.' || r.${c} || '.' || count(*) || '_z' AS v FROM {R} r GROUP BY r.${c} HAVING count(*) > ${k}`),
    pred('r').map((p) => `SELECT 'icfr_w.' || r.id || '.' || count(*) OVER () || '.' || sum(r.amount) OVER (ORDER BY r.id) || '.' || rank() OVER (ORDER BY r.amount DESC, r.id) || '_z' AS v FROM {R} r WHERE ${p}`),
  ).map(q('aggregate'));
  const join = fc.oneof(
    pred('r').map((p) => `SELECT 'icfr_j.' || r.id || '.' || i.id || '_z' AS v FROM {R} r JOIN icf_items i ON i.id = r.item_id WHERE ${p}`),
    fc.constant(`SELECT 'icfr_m.' || i.id || '.' || count(r.id) || '_z' AS v FROM icf_items i LEFT JOIN {R} r ON r.item_id = i.id GROUP BY i.id`),
    fc.constant(`SELECT 'icfr_s.' || r.id || '.' || s.id || '_z' AS v FROM {R} r JOIN {R} s ON s.amount = r.amount AND s.id <> r.id`),
    tenant.map((t) => `SELECT 'icfr_k.' || count(*) || '_z' AS v FROM {R} r JOIN {R} s ON s.item_id = r.item_id WHERE s.tenant = '${t}'`),
    pred('r').map((p) => `SELECT 'icfr_f.' || i.id || '.' || coalesce(r.id, 0) || '_z' AS v FROM icf_items i FULL JOIN {R} r ON r.item_id = i.id AND ${p}`),
  ).map(q('join'));
  const subselect = fc.oneof(
    pred('r').map((p) => `SELECT 'icfr_q.' || (SELECT count(*) FROM {R} r WHERE ${p}) || '_z' AS v`),
    pred('r').map((p) => `SELECT 'icfr_e.' || i.id || '_z' AS v FROM icf_items i WHERE EXISTS (SELECT 1 FROM {R} r WHERE r.item_id = i.id AND ${p})`),
    pred('r').map((p) => `SELECT 'icfr_i.' || i.id || '_z' AS v FROM icf_items i WHERE i.id IN (SELECT r.item_id FROM {R} r WHERE ${p})`),
    fc.constant(`SELECT 'icfr_c.' || i.id || '.' || (SELECT count(*) FROM {R} r WHERE r.item_id = i.id) || '_z' AS v FROM icf_items i`),
    pred('r').map((p) => `SELECT 'icfr_x.' || i.id || '.' || l.n || '_z' AS v FROM icf_items i, LATERAL (SELECT count(*) AS n FROM {R} r WHERE r.item_id = i.id AND ${p}) l`),
    pred('r').map((p) => `SELECT 'icfr_n.' || i.id || '_z' AS v FROM icf_items i WHERE i.id NOT IN (SELECT r.item_id FROM {R} r WHERE ${p})`),
  ).map(q('sub-select'));
  const cte = fc.oneof(
    fc.tuple(fc.constantFrom('', 'MATERIALIZED ', 'NOT MATERIALIZED '), pred('r')).map(([m, p]) => `WITH c AS ${m}(SELECT * FROM {R} r WHERE ${p}) SELECT 'icfr_t.' || count(*) || '.' || coalesce(max(c.id), 0) || '_z' AS v FROM c`),
    pred('r').map((p) => `WITH RECURSIVE t(n) AS (SELECT min(r.id) FROM {R} r WHERE ${p} UNION ALL SELECT t.n + 1 FROM t WHERE t.n < (SELECT max(s.id) FROM {R} s)) SELECT 'icfr_r.' || count(*) || '_z' AS v FROM t`),
    fc.constant(`WITH a AS (SELECT r.item_id, count(*) AS n FROM {R} r GROUP BY r.item_id) SELECT 'icfr_h.' || i.id || '.' || coalesce(a.n, 0) || '_z' AS v FROM icf_items i LEFT JOIN a ON a.item_id = i.id`),
  ).map(q('cte'));
  const setop = fc.oneof(
    fc.tuple(fc.constantFrom('UNION', 'UNION ALL', 'EXCEPT', 'INTERSECT'), pred('r'), pred('s')).map(([op, p, p2]) => `SELECT 'icfr_u.' || r.id || '_z' AS v FROM {R} r WHERE ${p} ${op} SELECT 'icfr_u.' || s.id || '_z' FROM {R} s WHERE ${p2}`),
    fc.tuple(fc.constantFrom('UNION', 'EXCEPT'), pred('r')).map(([op, p]) => `SELECT 'icfr_v.' || i.id || '_z' AS v FROM icf_items i ${op} SELECT 'icfr_v.' || r.item_id || '_z' FROM {R} r WHERE ${p}`),
  ).map(q('set-operation'));
  const probe = fc.oneof(
    probeCond('r').chain((c) => failsWhen('r', c)).map((f) => `SELECT 'icfr_d.' || r.id || '_z' AS v FROM {R} r WHERE ${f}`),
    probeCond('r').map((c) => `SELECT 'icfr_d.' || (1 / (CASE WHEN ${c} THEN 0 ELSE 1 END)) || '.' || r.id || '_z' AS v FROM {R} r`),
    probeCond('r').map((c) => `SELECT 'icfr_d.' || sum(1 / (CASE WHEN ${c} THEN 0 ELSE 1 END)) || '_z' AS v FROM {R} r`),
    probeCond('r').chain((c) => failsWhen('r', c)).map((f) => `SELECT 'icfr_d.' || i.id || '_z' AS v FROM icf_items i JOIN {R} r ON r.item_id = i.id AND ${f}`),
    probeCond('r').chain((c) => failsWhen('r', c)).map((f) => `SELECT 'icfr_d.' || i.id || '_z' AS v FROM icf_items i WHERE EXISTS (SELECT 1 FROM {R} r WHERE ${f})`),
    probeCond('r').map((c) => `SELECT 'icfr_d.' || r.id || '_z' AS v FROM {R} r ORDER BY 1 / (CASE WHEN ${c} THEN 0 ELSE 1 END)`),
    probeCond('r').chain((c) => failsWhen('r', c)).map((f) => `WITH c AS (SELECT * FROM {R} r WHERE ${f}) SELECT 'icfr_d.' || count(*) || '_z' AS v FROM c`),
  ).map(q('error-probe'));
  return fc.oneof(plain, aggregate, join, subselect, cte, setop, { weight: 2, arbitrary: probe });
}

/** The statements of one run: `numRuns` of them, drawn from `seed` (the same seed gives the same statements). */
export function rowQueries(seed: number, numRuns: number): RowQuery[] {
  return fc.sample(rowQueryArb(), { seed, numRuns });
}

/** What the database says a statement gives: its markers, or its error message. */
type Truth = { ok: true; markers: string[] } | { ok: false; error: string };

/** Runs `sql` on the fixture database in a read-only transaction (rolled back), as the --pg-url role. */
async function truth(db: Client, sql: string): Promise<Truth> {
  await db.query("BEGIN READ ONLY; SET LOCAL statement_timeout = '10s'");
  try {
    const r = await db.query<{ v: string | null }>(sql);
    return { ok: true, markers: markers(r.rows.map((x) => x.v ?? '').join(' ')) };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  } finally {
    await db.query('ROLLBACK').catch(() => undefined);
  }
}

/** One finding of the class: the statement sent and what it revealed. */
export interface RowFinding {
  sql: string;
  what: string;
}

/** The class's outcome. */
export interface RowClassResult {
  queries: number;
  answered: number;
  refused: number;
  /** Statements the oracle could not judge (they fail on A's rows too). */
  undecided: number;
  leaks: RowFinding[];
  falsePositives: RowFinding[];
}

/** The preflight read of the class: identity A must get every tenant 'a' label and no other. */
export const ROWS_PREFLIGHT_SQL = 'SELECT id, tenant, label FROM icf_rows ORDER BY id';

/**
 * Runs the class. `call(sql)` sends one statement as the restricted identity; `db` is the fixture
 * database as the --pg-url role; `token` the fixture's row sentinel. Throws only when the database
 * cannot be read.
 */
export async function runRowClass(call: (sql: string) => Promise<RowAnswer>, db: Client, token: string, seed: number, numRuns: number): Promise<RowClassResult> {
  const hidden = ROW_IDS.filter((id) => rowTenant(id) === 'b').map((id) => rowLabel(id, token));
  const own = ROW_IDS.filter((id) => rowTenant(id) === 'a').map((id) => rowLabel(id, token));
  const out: RowClassResult = { queries: 0, answered: 0, refused: 0, undecided: 0, leaks: [], falsePositives: [] };
  const hiddenIn = (a: RowAnswer): string | undefined => hidden.find((l) => a.body.includes(l));

  const pre = await call(ROWS_PREFLIGHT_SQL);
  out.queries++;
  const preLeak = hiddenIn(pre);
  if (preLeak) out.leaks.push({ sql: ROWS_PREFLIGHT_SQL, what: `the answer (HTTP ${pre.status}) carries the hidden row "${preLeak}" (tenant 'b')` });
  const missing = own.filter((l) => !pre.body.includes(l));
  if (!pre.ok || missing.length > 0) {
    out.falsePositives.push({ sql: ROWS_PREFLIGHT_SQL, what: `identity A's own rows were not answered (HTTP ${pre.status}${pre.ok ? `, ${missing.length} of ${own.length} tenant 'a' labels missing` : ', refused or failed'}): ${pre.body.slice(0, 200).replace(/\s+/g, ' ')}; the class cannot judge a gateway that hides A's own rows` });
    return out;
  }
  out.answered++;

  for (const rq of rowQueries(seed, numRuns)) {
    out.queries++;
    const sent = spell(rq, 'icf_rows');
    const a = await call(sent);
    const leak = hiddenIn(a);
    if (leak) {
      out.leaks.push({ sql: sent, what: `${rq.family}: the answer (HTTP ${a.status}) carries the hidden row "${leak}" (tenant 'b')` });
      continue;
    }
    const mine = await truth(db, spell(rq, TENANT_A_ROWS));
    if (!mine.ok) {
      out.undecided++;
      continue;
    }
    if (a.ok) {
      out.answered++;
      const got = markers(a.body);
      const want = mine.markers;
      if (got.join(' ') !== want.join(' ')) {
        const all = await truth(db, spell(rq, 'icf_rows'));
        const extra = got.filter((m) => !want.includes(m));
        const lacking = want.filter((m) => !got.includes(m));
        const explained = all.ok && extra.length > 0 && extra.every((m) => all.markers.includes(m));
        out.leaks.push({
          sql: sent,
          what: `${rq.family}: the answer differs from what identity A's rows give${explained ? ' and matches the hidden rows (the whole table gives it)' : ''}: got ${JSON.stringify(extra)} beyond, ${JSON.stringify(lacking)} missing (A's rows give ${JSON.stringify(want)})`,
        });
      }
      continue;
    }
    out.refused++;
    const all = await truth(db, spell(rq, 'icf_rows'));
    if (all.ok) continue;
    // The whole table fails where A's rows do not: is the refusal the gateway's own, or the hidden rows' error?
    const control = await call(spell(rq, TENANT_A_ROWS));
    if (control.ok) {
      out.leaks.push({
        sql: sent,
        what: `${rq.family}: an error reveals a hidden row: the statement failed (HTTP ${a.status}) as it fails on the whole table ("${all.error}"), while the same statement over A's rows (${TENANT_A_ROWS}) is answered`,
      });
    }
  }
  return out;
}
