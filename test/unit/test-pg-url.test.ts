/**
 * Every test honours INTERLOCK_TEST_PG_URL (issue 24 item 6): no test file names the default test
 * server's address (127.0.0.1 with port 5432) itself; tests take host and port from
 * test/helpers/pg.ts (ADMIN_URL, pgServer()). Two CLI tests used to pass `--port 5432`.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const TEST_ROOT = join(__dirname, '..');
const files = (dir: string): string[] => readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? files(join(dir, n)) : /\.ts$/.test(n) ? [join(dir, n)] : []));

test('no test hard-codes the test PostgreSQL server (127.0.0.1 and 5432 on one line)', () => {
  const offenders = files(TEST_ROOT)
    .filter((f) => !f.endsWith(join('helpers', 'pg.ts')) && f !== __filename)
    .flatMap((f) => readFileSync(f, 'utf8').split('\n').map((line, i) => ({ where: `${relative(TEST_ROOT, f)}:${i + 1}`, line })))
    // Error-text fixtures (a driver message naming an address) connect nowhere.
    .filter(({ line }) => /127\.0\.0\.1|localhost/.test(line) && /\b5432\b/.test(line) && !/\|\|\s*'?5432/.test(line) && !/ECONNREFUSED/.test(line))
    .map((o) => o.where);
  expect(offenders).toEqual([]);
});
