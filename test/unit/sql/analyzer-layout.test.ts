/**
 * The walker's layout (issue 25, item 1; src/sql/analyzer/README.md): one file per family of the
 * grammar, each listed in the directory's README, none long, and one public entry point —
 * `src/sql/analyzer/index.ts`, imported in src/ only by `src/sql/analyze.ts`. (Import circles
 * between the family files are refused by test/unit/architecture/layers.test.ts.)
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const SRC = join(__dirname, '../../../src');
const DIR = join(SRC, 'sql/analyzer');

function srcFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? srcFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

const families = readdirSync(DIR).filter((f) => f.endsWith('.ts')).sort();

describe('src/sql/analyzer layout', () => {
  it('has the families of PostgreSQL’s parser, each listed in the README with its purpose', () => {
    expect(families).toEqual(
      ['agg', 'clause', 'cte', 'dml', 'expr', 'from', 'func', 'index', 'json', 'nodes', 'oper', 'relation', 'state', 'stmt', 'target', 'type', 'uses'].map((f) => `${f}.ts`),
    );
    const readme = readFileSync(join(DIR, 'README.md'), 'utf8');
    expect(families.filter((f) => !readme.includes(`| \`${f}\` |`))).toEqual([]);
  });

  it('keeps every family file short and opening with its purpose', () => {
    for (const f of families) {
      const text = readFileSync(join(DIR, f), 'utf8');
      expect([f, text.split('\n').length <= 400]).toEqual([f, true]);
      expect([f, text.startsWith('/**')]).toEqual([f, true]);
    }
  });

  it('is entered through index.ts only, and only by src/sql/analyze.ts', () => {
    const importers: string[] = [];
    const inner: string[] = [];
    for (const file of srcFiles(SRC)) {
      if (file.startsWith(DIR + '/')) continue;
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/from\s*'(\.{1,2}\/[^']*)'/g)) {
        const target = relative(SRC, join(file, '..', m[1]!));
        if (target === 'sql/analyzer' || target === 'sql/analyzer/index') importers.push(relative(SRC, file));
        else if (target.startsWith('sql/analyzer/')) inner.push(`${relative(SRC, file)} -> ${target}`);
      }
    }
    expect([...new Set(importers)]).toEqual(['sql/analyze.ts']);
    expect(inner).toEqual([]);
  });
});
