/**
 * Layers that hold (issue 25, item 3; docs/architecture.md "Layers"). Every import between two
 * folders of src/ runs from a higher layer to a lower one or within one layer, except the upward
 * pairs named in UPWARD_ALLOWED (each justified in docs/architecture.md), and no file of src/
 * imports itself through others (no import circle; item 2). Imports are read as text: static
 * `import … from`, `export … from`, `import('…')` and `require('…')` of relative paths.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const SRC = join(__dirname, '../../../src');

/** The layers, top first: a folder (or a top-level file, without .ts) may import its own layer and those below. */
const LAYERS: string[][] = [
  ['cli', 'gateway', 'server', 'demo'],
  ['http', 'admin', 'console', 'observability'],
  ['transport', 'auth'],
  ['protocol'],
  ['tools', 'fixtures'],
  ['pipeline', 'approvals'],
  ['governance', 'sql', 'discovery', 'declarative'],
  ['sources', 'control', 'audit'],
  ['errors', 'install-root'],
];

/** Upward folder pairs that remain, each named and justified in docs/architecture.md (at most four). */
const UPWARD_ALLOWED = ['control -> sql', 'protocol -> auth', 'protocol -> transport', 'sources -> sql'];

/** One import of one src file: the importing and imported files, relative to src/ (with extension). */
interface Edge {
  from: string;
  to: string;
}

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

function resolveModule(from: string, spec: string): string | null {
  const base = resolve(dirname(from), spec);
  for (const candidate of [`${base}.ts`, join(base, 'index.ts'), base]) if (existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  return null;
}

/** Every import between files of src/. */
function srcEdges(): Edge[] {
  const out: Edge[] = [];
  const pattern = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)'(\.{1,2}\/[^']+)'/gm;
  for (const file of files(SRC)) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(pattern)) {
      const target = resolveModule(file, m[1]!);
      if (target && target.startsWith(SRC + '/')) out.push({ from: relative(SRC, file), to: relative(SRC, target) });
    }
  }
  return out;
}

/** The folder (or top-level file without `.ts`) a path of src/ belongs to. */
function unit(path: string): string {
  const parts = path.split('/');
  return parts.length > 1 ? parts[0]! : parts[0]!.replace(/\.ts$/, '');
}

/** The upward folder pairs of `edges` under `layers`, each with its imports; unranked folders listed apart. */
function upwardImports(edges: Edge[], layers: string[][]): { upward: Record<string, string[]>; unranked: string[] } {
  const rank = new Map<string, number>();
  layers.forEach((names, i) => names.forEach((n) => rank.set(n, i)));
  const upward: Record<string, string[]> = {};
  const unranked = new Set<string>();
  for (const e of edges) {
    const a = unit(e.from);
    const b = unit(e.to);
    if (!rank.has(a)) unranked.add(a);
    if (!rank.has(b)) unranked.add(b);
    if (a !== b && rank.has(a) && rank.has(b) && rank.get(a)! > rank.get(b)!) (upward[`${a} -> ${b}`] ??= []).push(`${e.from} -> ${e.to}`);
  }
  return { upward, unranked: [...unranked].sort() };
}

/** The import circles of `edges` (each as its files, smallest first), by Tarjan's strongly connected components. */
function circles(edges: Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  let n = 0;
  const visit = (v: string): void => {
    index.set(v, n);
    low.set(v, n++);
    stack.push(v);
    on.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const part: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        part.push(w);
      } while (w !== v);
      if (part.length > 1 || (next.get(v) ?? []).includes(v)) out.push(part.sort());
    }
  };
  for (const v of [...next.keys()].sort()) if (!index.has(v)) visit(v);
  return out;
}

describe('src/ layers', () => {
  const edges = srcEdges();

  it('reads the imports of src/', () => {
    expect(edges.length).toBeGreaterThan(300);
    expect(edges).toContainEqual({ from: 'transport/mcp-endpoint.ts', to: 'protocol/dispatch.ts' });
    expect(edges).toContainEqual({ from: 'audit/writer.ts', to: 'audit/append.ts' });
  });

  it('ranks every folder and top-level file of src/', () => {
    const all = [...new Set(files(SRC).map((f) => unit(relative(SRC, f))))].sort();
    expect(all.filter((u) => !LAYERS.flat().includes(u))).toEqual([]);
    expect(upwardImports(edges, LAYERS).unranked).toEqual([]);
  });

  it('imports run downward except the named pairs, at most four', () => {
    expect(UPWARD_ALLOWED.length).toBeLessThanOrEqual(4);
    expect(Object.keys(upwardImports(edges, LAYERS).upward).sort()).toEqual(UPWARD_ALLOWED);
  });

  it('an upward import is found and named with its files', () => {
    const found = upwardImports([{ from: 'sql/x.ts', to: 'pipeline/y.ts' }, { from: 'pipeline/y.ts', to: 'sql/x.ts' }, { from: 'nowhere/z.ts', to: 'sql/x.ts' }], LAYERS);
    expect(found).toEqual({ upward: { 'sql -> pipeline': ['sql/x.ts -> pipeline/y.ts'] }, unranked: ['nowhere'] });
  });

  it('no file of src/ imports itself through others', () => {
    expect(circles(edges)).toEqual([]);
    expect(circles([{ from: 'a.ts', to: 'b.ts' }, { from: 'b.ts', to: 'a.ts' }, { from: 'b.ts', to: 'c.ts' }])).toEqual([['a.ts', 'b.ts']]);
  });
});
