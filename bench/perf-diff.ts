/**
 * Compares two `perf record` samples of bench/perf-record.ts (issue 28, task p49): for each side,
 * `perf script -F comm,tid,time,ip,sym` of its data file, the samples after the first `skip` seconds
 * of the window (JIT warm-up; default 4), attributed by stack: a kernel leaf by the system call above
 * it (write, read, epoll); the garbage collector; TurboFan's background compile jobs ("V8 compiler");
 * else the innermost frame of the gateway's source (`src/<dir>/<file>`, dist or ts), else the
 * innermost library (`lib:<package>`) or node module (`node:<file>`), else native. Prints µs per
 * call per bucket for A and B (samples × 1e6 / freq ÷ calls in the window, the calls scaled by the
 * window's share), sorted by B − A.
 * Run: `npx tsx bench/perf-diff.ts A.data callsA B.data callsB [skip] [freq] [top]`
 * (calls as bench/perf-record.ts printed them; freq its PERF_FREQ, default 999).
 */
import { execFileSync } from 'node:child_process';

interface Sample {
  time: number;
  stack: Array<{ addr: string; sym: string }>;
}

function load(file: string): Sample[] {
  const text = execFileSync('perf', ['script', '-i', file, '-F', 'comm,tid,time,ip,sym'], { encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'ignore'] });
  const out: Sample[] = [];
  let cur: Sample | null = null;
  for (const line of text.split('\n')) {
    if (!line.trim()) {
      if (cur) out.push(cur);
      cur = null;
      continue;
    }
    if (!/^\s/.test(line)) {
      const f = line.trim().split(/\s+/);
      cur = { time: Number(f[2].replace(/:$/, '')), stack: [] };
      continue;
    }
    const t = line.trim();
    const sp = t.indexOf(' ');
    cur?.stack.push({ addr: sp < 0 ? t : t.slice(0, sp), sym: sp < 0 ? '?' : t.slice(sp + 1) });
  }
  if (cur) out.push(cur);
  return out;
}

const SRC = /\/(?:dist\/)?src\/(\S+?)\.(?:js|ts)\b/;

function bucket(s: Sample): string {
  const st = s.stack;
  if (st.length === 0) return 'native:?';
  if (st[0].addr.startsWith('ffff')) {
    const user = st.find((f) => !f.addr.startsWith('ffff'))?.sym ?? '';
    if (/write/.test(user)) return 'kernel:write';
    if (/epoll/.test(user)) return 'kernel:epoll';
    if (/read/.test(user)) return 'kernel:read';
    return 'kernel:other';
  }
  if (st.slice(0, 12).some((f) => /Scavenge|Heap::|MarkCompact|GCTracer|Sweeper|Marking/.test(f.sym))) return 'GC';
  if (st.some((f) => f.sym.includes('OptimizingCompileDispatcher'))) return 'V8 compiler';
  for (const f of st) {
    const m = SRC.exec(f.sym);
    if (m && f.sym.startsWith('JS:')) return `src:${m[1]}`;
    if (f.sym.includes('/bench/lib/')) return 'bench floor code';
  }
  for (const f of st) {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f.sym);
    if (m) return `lib:${m[1]}`;
  }
  for (const f of st) {
    const m = /^JS:\S* (node:[^:]+)/.exec(f.sym);
    if (m) return m[1];
    if (f.sym.startsWith('JS:')) return 'js:other';
  }
  return st.some((f) => f.sym.includes('uv_run')) ? 'native:node/uv' : 'native:other';
}

function side(file: string, calls: number, skip: number, usPerSample: number): { per: Map<string, number>; total: number } {
  const all = load(file);
  const t0 = Math.min(...all.map((s) => s.time));
  const t1 = Math.max(...all.map((s) => s.time));
  const kept = all.filter((s) => s.time >= t0 + skip);
  const windowCalls = (calls * (t1 - t0 - skip)) / (t1 - t0);
  const per = new Map<string, number>();
  for (const s of kept) per.set(bucket(s), (per.get(bucket(s)) ?? 0) + usPerSample / windowCalls);
  return { per, total: (kept.length * usPerSample) / windowCalls };
}

function main(): void {
  const [a, ca, b, cb, skipText = '4', freqText = '999', topText = '45'] = process.argv.slice(2);
  const us = 1e6 / Number(freqText);
  const A = side(a, Number(ca), Number(skipText), us);
  const B = side(b, Number(cb), Number(skipText), us);
  console.log(`µs per call (samples after the first ${skipText} s): A ${A.total.toFixed(1)}  B ${B.total.toFixed(1)}`);
  const keys = [...new Set([...A.per.keys(), ...B.per.keys()])];
  const rows = keys.map((k) => ({ k, a: A.per.get(k) ?? 0, b: B.per.get(k) ?? 0 })).sort((x, y) => y.b - y.a - (x.b - x.a));
  for (const r of rows.slice(0, Number(topText))) console.log(`${r.k.padEnd(48)} A ${r.a.toFixed(1).padStart(6)}  B ${r.b.toFixed(1).padStart(6)}  B−A ${(r.b - r.a).toFixed(1).padStart(6)}`);
}

main();
