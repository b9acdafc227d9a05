/**
 * One statement by construction (issue 22, item 3): an architecture test over src/.
 *
 * It finds every file that holds a connection to a source (opens one through the pinned factories,
 * checks one out of a source pool, borrows one, or is handed one) and every call that sends text on
 * it (`.query(…)`), and fails on any call that could go over the simple query protocol, which runs
 * every statement of its text, with text that is not a constant: a template with substitutions, a
 * variable, or text sent with no parameters or an empty/unknown parameter list (node-postgres
 * switches to the extended protocol only for `queryMode: 'extended'`, a name, or a non-empty values
 * array). Constant text is the gateway's own (BEGIN, COMMIT, SET LOCAL …) and cannot carry an agent's.
 * It also checks that no source connection is created outside those factories.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const ROOT = join(__dirname, '..', '..', '..');
const SRC = join(ROOT, 'src');

/** Tokens that mark a file holding a source connection. */
const SOURCE_CONNECTION_MARKERS = ['connectSourceClient(', 'connectPinned(', 'new PinnedClient(', 'pinnedPoolOptions(', '.checkout(', '.withReader(', 'lendReader(', 'scanCatalog('];
/** Files that are handed a source connection by a caller (a marker in the caller names them). */
const HANDED_A_CONNECTION = ['src/sources/postgres/catalog.ts'];

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? walk(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** A `.query(…)` call that could send non-constant text over the simple protocol. */
export interface Finding {
  file: string;
  line: number;
  text: string;
}

/** True when `e` is constant text: a string literal, a template without substitutions, or a `const` initialised with one in this file. */
function isConstantText(e: ts.Expression, sf: ts.SourceFile): boolean {
  if (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) return true;
  if (ts.isParenthesizedExpression(e) || ts.isAsExpression(e)) return isConstantText(e.expression, sf);
  if (ts.isIdentifier(e)) {
    let found = false;
    const visit = (n: ts.Node): void => {
      if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && n.name.text === e.text && n.initializer && ts.isVariableDeclarationList(n.parent) && (n.parent.flags & ts.NodeFlags.Const) !== 0) {
        found = isConstantText(n.initializer, sf);
      }
      ts.forEachChild(n, visit);
    };
    visit(sf);
    return found;
  }
  return false;
}

/** True when the values argument is an array literal with at least one element (pg then uses the extended protocol). */
function isNonEmptyArrayLiteral(e: ts.Expression | undefined): boolean {
  return !!e && ts.isArrayLiteralExpression(e) && e.elements.length > 0;
}

/** True for an object literal (possibly cast) with `queryMode: 'extended'` or a `name` (a prepared statement). */
function isExtendedConfig(e: ts.Expression): boolean {
  if (ts.isParenthesizedExpression(e) || ts.isAsExpression(e)) return isExtendedConfig(e.expression);
  if (!ts.isObjectLiteralExpression(e)) return false;
  return e.properties.some(
    (p) => ts.isPropertyAssignment(p) && ts.isIdentifier(p.name) && ((p.name.text === 'queryMode' && ts.isStringLiteral(p.initializer) && p.initializer.text === 'extended') || p.name.text === 'name'),
  );
}

/** A Submittable (pg-cursor's Cursor, the connector's PortalRead): it speaks the extended protocol itself (checked below). */
function isSubmittable(e: ts.Expression): boolean {
  if (ts.isNewExpression(e) && ts.isIdentifier(e.expression) && e.expression.text === 'Cursor') return true;
  if (ts.isAsExpression(e)) return /Submittable/.test(e.type.getText()) || isSubmittable(e.expression);
  return false;
}

/** The `.query(…)` calls of one source file that could carry non-constant text over the simple protocol. */
export function simpleProtocolFindings(file: string, code: string): Finding[] {
  const sf = ts.createSourceFile(file, code, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const out: Finding[] = [];
  const visit = (n: ts.Node): void => {
    // `db.pool` is the ControlDb's pool (the control database), never a source connection.
    if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression) && n.expression.name.text === 'query' && n.arguments.length > 0 && n.expression.expression.getText() !== 'db.pool') {
      const [text, values] = n.arguments;
      const safe = isConstantText(text, sf) || isExtendedConfig(text) || isSubmittable(text) || isNonEmptyArrayLiteral(values);
      if (!safe) out.push({ file, line: sf.getLineAndCharacterOfPosition(n.getStart()).line + 1, text: n.getText().slice(0, 120) });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

const files = walk(SRC).map((p) => ({ path: relative(ROOT, p).split('\\').join('/'), code: readFileSync(p, 'utf8') }));
const sourceFiles = files.filter((f) => HANDED_A_CONNECTION.includes(f.path) || SOURCE_CONNECTION_MARKERS.some((m) => f.code.includes(m)));

test('the files holding a source connection are found (the check is not vacuous)', () => {
  const paths = sourceFiles.map((f) => f.path);
  for (const p of ['src/sources/postgres/pools.ts', 'src/sources/postgres/read.ts', 'src/sources/postgres/write.ts', 'src/sources/postgres/cancel.ts', 'src/sources/postgres/catalog.ts', 'src/console/plan.ts', 'src/control/scan.ts', 'src/discovery/tables.ts']) {
    expect(paths).toContain(p);
  }
});

test('no call on a source connection can send non-constant text over the simple query protocol', () => {
  expect(sourceFiles.flatMap((f) => simpleProtocolFindings(f.path, f.code))).toEqual([]);
});

test('source connections are only made by the pinned factories; every other pg client names a connection string (control database, admin URL) or is the control pool of src/control/targets.ts (issue 29: several hosts)', () => {
  const raw = files.flatMap((f) =>
    [...f.code.matchAll(/new (?:pg\.)?(?:Client|Pool)\(([^)]*)/g)].filter((m) => !/connectionString/.test(m[1]) && !(f.path === 'src/sources/postgres/pools.ts' && /connectionConfig/.test(m[1])) && !(f.path === 'src/control/targets.ts' && /^controlConnectionConfig\(/.test(m[1]))).map(() => f.path),
  );
  expect(raw).toEqual([]);
  // The pool's connections are PinnedClients verified on connect.
  const pools = files.find((f) => f.path === 'src/sources/postgres/pools.ts')!.code;
  expect(pools).toMatch(/new pg\.Pool\(\{\s*\.\.\.this\.connectionConfig\(kind\),[\s\S]{0,200}\.\.\.pinnedPoolOptions\((?:latePath)?\)/);
});

test('the connector Submittable (PortalRead) sends Parse, never a simple Query message', () => {
  const portal = files.find((f) => f.path === 'src/sources/postgres/portal-read.ts')!.code;
  expect(portal).toMatch(/connection\.parse\(/);
  expect(portal).not.toMatch(/connection\.query\(/);
});

describe('the check itself', () => {
  test.each([
    ['c.query(`EXPLAIN ${sql}`, params)', 1],
    ['c.query(`EXPLAIN ${sql}`)', 1],
    ['c.query(sql)', 1],
    ['c.query(sql, [])', 1],
    ['c.query({ text: sql, values })', 1],
    ['let t = "SELECT 1"; c.query(t)', 1],
    ["c.query('BEGIN READ ONLY')", 0],
    ['const Q = `SELECT 1`; c.query(Q)', 0],
    ['c.query(`EXPLAIN ${sql}`, [a])', 0],
    ["c.query({ text: `EXPLAIN ${sql}`, values: params, queryMode: 'extended' } as pg.QueryConfig)", 0],
    ['c.query(new Cursor(sql, [1]))', 0],
    ['c.query(q as unknown as pg.Submittable)', 0],
    ['db.pool.query(`SELECT ${COLS} FROM sources`)', 0],
    ['pool.query(`SELECT ${COLS} FROM sources`)', 1],
  ])('%s → %i finding(s)', (code, n) => {
    expect(simpleProtocolFindings('x.ts', code)).toHaveLength(n);
  });
});
