/**
 * The analyser's golden file (issue 25, item 1): proof that a refactor of the walker (first the
 * split of the former `src/sql/analyzer.ts` into `src/sql/analyzer/` by family) changes no analysis
 * and no work.
 *
 * `collectStatements` gathers every SQL statement the project writes down: the string literals of
 * `test/` and `bench/` that read as SQL (`SQL_START`), and every spelling of every step of the
 * conformance `sql-gateway` pack (`conformance/sql/payloads.ts`, `allPayloads`). `analyseForGolden`
 * runs `analyzeSql` (default options) over one statement against `catalogFor(sql)`: the unit tests'
 * scanned catalogue (`test/unit/sql/helpers.ts` `CATALOG`: PostgreSQL 15 + Chinook + the extra
 * relations) plus, for each relation the statement names that the catalogue lacks, a synthetic table
 * whose `text` columns are the names the statement gives it (`syntheticRelations`). The catalogue is
 * a pure function of the text, so the analysis is too.
 *
 * The golden file (`GOLDEN_PATH`) holds one entry per distinct statement, sorted by text:
 * `{sql, from, analysis, work}`, `from` the sorted places it was found, `analysis` in canonical JSON
 * (`canonical`: keys sorted at every level, arrays in the analyser's order), `work` the walk's work
 * in steps (`AnalyzeOptions.onWork`; null when the statement was refused before the walk), so a
 * refactor of the walker is shown to do the same work too (the work budget refuses on it). The
 * unit test `test/unit/sql/analysis-golden.test.ts` recomputes every entry and compares exactly; it
 * never collects anew, so adding a test does not break it.
 *
 * Usage (from the repository root):
 *   npx tsx scripts/analysis-golden.ts --write   collect, analyse, write the golden file
 *   npx tsx scripts/analysis-golden.ts --check   recompute the golden's entries; exit 1 on any difference,
 *                                                and say how many statements the tree has that it lacks
 * Regenerate (`--write`) only when a change to the analyser is meant to change analyses, and review the diff.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { allPayloads } from '../conformance/sql/payloads';
import { analyzeSql, initSqlParser } from '../src/sql/analyze';
import type { CatalogRelation, SourceCatalog } from '../src/sql/catalog-types';
import { parseSql } from '../src/sql/parser';
import { CATALOG } from '../test/unit/sql/helpers';

/** The repository root (this file is `scripts/analysis-golden.ts`). */
export const ROOT = join(__dirname, '..');

/** Where the golden file lives, from the repository root. */
export const GOLDEN_PATH = 'test/unit/sql/fixtures/analysis-golden.json';

/** A literal is taken as SQL when, after blanks and comments, it opens with one of these words (any case) or `(`. */
export const SQL_START =
  /^(?:\s|--[^\n]*\n|\/\*[\s\S]*?\*\/)*(?:\(|(?:select|with|insert|update|delete|merge|explain|values|table|copy|call|do|set|reset|show|begin|start|commit|rollback|end|abort|savepoint|release|lock|listen|notify|unlisten|prepare|execute|deallocate|declare|fetch|move|close|discard|create|drop|alter|grant|revoke|truncate|vacuum|analyze|refresh|cluster|reindex|checkpoint|load|comment|security|import)\b)/i;

/** Literals shorter than this (after trimming) are not taken: words such as "select" or "end" alone. */
const MIN_LENGTH = 8;

/** One statement and the places it was found (`test/…ts`, `bench/…ts`, `conformance/sql/payloads.ts`). */
export interface GoldenStatement {
  sql: string;
  from: string[];
}

/** One entry of the golden file: the statement, where it was found, its analysis in canonical form, the walk's work. */
export interface GoldenEntry extends GoldenStatement {
  analysis: unknown;
  /** Steps the walker used (`AnalyzeOptions.onWork`); null when the statement never reached the walker. */
  work: number | null;
}

/** The golden file's shape. */
export interface GoldenFile {
  version: 1;
  entries: GoldenEntry[];
}

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...tsFiles(p));
    else if (e.name.endsWith('.ts')) out.push(p);
  }
  return out.sort();
}

/** The string literals (and templates without substitutions) of one TypeScript text that read as SQL. */
export function sqlLiterals(fileName: string, text: string): string[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) && node.text.trim().length >= MIN_LENGTH && SQL_START.test(node.text)) out.push(node.text);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** Every statement of test/, bench/ and the conformance sql-gateway pack, distinct by text, sorted by text. */
export function collectStatements(root: string = ROOT): GoldenStatement[] {
  const found = new Map<string, Set<string>>();
  const add = (sql: string, from: string): void => {
    let s = found.get(sql);
    if (!s) found.set(sql, (s = new Set()));
    s.add(from);
  };
  for (const dir of ['test', 'bench']) {
    for (const file of tsFiles(join(root, dir))) {
      const rel = relative(root, file).split('\\').join('/');
      for (const sql of sqlLiterals(rel, readFileSync(file, 'utf8'))) add(sql, rel);
    }
  }
  for (const p of allPayloads()) for (const step of p.steps) add(step, 'conformance/sql/payloads.ts');
  return [...found.entries()].map(([sql, from]) => ({ sql, from: [...from].sort() })).sort((a, b) => (a.sql < b.sql ? -1 : a.sql > b.sql ? 1 : 0));
}

interface RangeVarNode {
  schemaname?: string;
  relname?: string;
  alias?: { aliasname?: string };
}

/**
 * Tables for the relations `sql` names that `base` lacks: one `kind: 'table'` relation per unknown
 * (schema, name), schema `public` when unqualified, each column `text`. Columns: the last part of
 * every column reference qualified by the relation's name or alias, and, for the first unknown
 * relation only (so that no name becomes ambiguous), every unqualified column reference and every
 * INSERT/UPDATE target column. A CTE name is never unknown. Nothing when the text does not parse.
 */
export function syntheticRelations(sql: string, base: SourceCatalog): CatalogRelation[] {
  if (sql.includes('\u0000')) return [];
  let tree: unknown;
  try {
    tree = parseSql(sql);
  } catch {
    return [];
  }
  const known = new Set(base.relations.map((r) => `${r.schema}.${r.name}`));
  const ctes = new Set<string>();
  const ranges: RangeVarNode[] = [];
  const qualified: Array<[string, string]> = [];
  const bare: string[] = [];
  const walk = (node: unknown, key: string | null): void => {
    if (Array.isArray(node)) {
      for (const x of node) walk(x, key);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    const o = node as Record<string, unknown>;
    // A RangeVar is wrapped in FROM lists but bare as a DML target (`relation`): known by its shape.
    if (typeof o.relname === 'string' && 'relpersistence' in o) ranges.push(o as RangeVarNode);
    if (key === 'CommonTableExpr' && typeof o.ctename === 'string') ctes.add(o.ctename);
    if (key === 'ColumnRef' && Array.isArray(o.fields)) {
      const parts = (o.fields as Array<Record<string, { sval?: string }>>).map((f) => f.String?.sval);
      if (parts.every((p) => typeof p === 'string')) {
        if (parts.length === 1) bare.push(parts[0]!);
        else qualified.push([parts[parts.length - 2]!, parts[parts.length - 1]!]);
      }
    }
    if ((key === 'InsertStmt' || key === 'UpdateStmt') && Array.isArray(o[key === 'InsertStmt' ? 'cols' : 'targetList'])) {
      for (const t of o[key === 'InsertStmt' ? 'cols' : 'targetList'] as Array<{ ResTarget?: { name?: string } }>) if (t.ResTarget?.name) bare.push(t.ResTarget.name);
    }
    for (const [k, v] of Object.entries(o)) walk(v, /^[A-Z]/.test(k) ? k : null);
  };
  walk(tree, null);
  const out = new Map<string, { rel: CatalogRelation; names: Set<string> }>();
  for (const r of ranges) {
    if (!r.relname) continue;
    const schema = r.schemaname ?? 'public';
    const k = `${schema}.${r.relname}`;
    if (known.has(k) || (!r.schemaname && ctes.has(r.relname))) continue;
    let e = out.get(k);
    if (!e) out.set(k, (e = { rel: { schema, name: r.relname, kind: 'table', columns: [] }, names: new Set() }));
    e.names.add(r.relname);
    if (r.alias?.aliasname) e.names.add(r.alias.aliasname);
  }
  const entries = [...out.values()];
  for (const [i, e] of entries.entries()) {
    const cols = new Set<string>();
    for (const [q, c] of qualified) if (e.names.has(q)) cols.add(c);
    if (i === 0) for (const c of bare) cols.add(c);
    e.rel.columns = [...cols].sort().map((name) => ({ name, dataType: 'text' }));
  }
  return entries.map((e) => e.rel);
}

/** The catalogue a statement is analysed against: `CATALOG` plus `syntheticRelations(sql, CATALOG)`. */
export function catalogFor(sql: string): SourceCatalog {
  const extra = syntheticRelations(sql, CATALOG);
  return extra.length === 0 ? CATALOG : { ...CATALOG, relations: [...CATALOG.relations, ...extra] };
}

/** `value` as plain JSON data with object keys sorted at every level (undefined members dropped, as JSON does). */
export function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value).sort()) {
    const v = (value as Record<string, unknown>)[k];
    if (v !== undefined) out[k] = canonical(v);
  }
  return out;
}

/** The canonical analysis of one statement. The SQL parser must be initialised (`initSqlParser`). */
export function analyseForGolden(sql: string): unknown {
  return canonical(analyzeSql(sql, catalogFor(sql)));
}

/** The walk's work in steps for one statement (`AnalyzeOptions.onWork`), null when refused before the walk. */
export function workForGolden(sql: string): number | null {
  let work: number | null = null;
  analyzeSql(sql, catalogFor(sql), {
    onWork: (steps) => {
      work = steps;
    },
  });
  return work;
}

/** The golden file's text: one entry per line, so a difference reads as a diff of statements. */
export function goldenText(entries: GoldenEntry[]): string {
  return `{"version":1,"entries":[\n${entries.map((e) => JSON.stringify({ sql: e.sql, from: e.from, analysis: e.analysis, work: e.work })).join(',\n')}\n]}\n`;
}

/** The entries whose recomputed analysis differs from the stored one: `{sql, stored, now}` (JSON texts). */
export function differences(golden: GoldenFile): Array<{ sql: string; stored: string; now: string }> {
  const out: Array<{ sql: string; stored: string; now: string }> = [];
  for (const e of golden.entries) {
    const stored = JSON.stringify(e.analysis);
    const now = JSON.stringify(analyseForGolden(e.sql));
    if (stored !== now) out.push({ sql: e.sql, stored, now });
  }
  return out;
}

/** The entries whose recomputed work differs from the stored one: `{sql, stored, now}`. */
export function workDifferences(golden: GoldenFile): Array<{ sql: string; stored: number | null; now: number | null }> {
  const out: Array<{ sql: string; stored: number | null; now: number | null }> = [];
  for (const e of golden.entries) {
    const now = workForGolden(e.sql);
    if (e.work !== now) out.push({ sql: e.sql, stored: e.work, now });
  }
  return out;
}

/** Reads the golden file from `root`. */
export function readGolden(root: string = ROOT): GoldenFile {
  return JSON.parse(readFileSync(join(root, GOLDEN_PATH), 'utf8')) as GoldenFile;
}

async function main(argv: string[]): Promise<number> {
  await initSqlParser();
  if (argv.includes('--write')) {
    const entries = collectStatements().map((s) => ({ ...s, analysis: analyseForGolden(s.sql), work: workForGolden(s.sql) }));
    writeFileSync(join(ROOT, GOLDEN_PATH), goldenText(entries));
    process.stdout.write(`${GOLDEN_PATH}: ${entries.length} statements\n`);
    return 0;
  }
  if (argv.includes('--check')) {
    const golden = readGolden();
    const diff = differences(golden);
    for (const d of diff.slice(0, 20)) process.stdout.write(`differs: ${JSON.stringify(d.sql)}\n  stored ${d.stored}\n  now    ${d.now}\n`);
    const work = workDifferences(golden);
    for (const d of work.slice(0, 20)) process.stdout.write(`work differs: ${JSON.stringify(d.sql)}: stored ${d.stored}, now ${d.now}\n`);
    const stored = new Set(golden.entries.map((e) => e.sql));
    const missing = collectStatements().filter((s) => !stored.has(s.sql)).length;
    process.stdout.write(`${golden.entries.length} statements, ${diff.length} differ, ${work.length} differ in work; ${missing} statements in the tree are not in the golden file\n`);
    return diff.length === 0 && work.length === 0 ? 0 : 1;
  }
  process.stderr.write('usage: tsx scripts/analysis-golden.ts --write | --check\n');
  return 2;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}
