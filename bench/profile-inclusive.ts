/**
 * Inclusive time per function of a kept CPU profile (issue 28, task h28l): for each function of the
 * gateway's own code (dist/src) and of its libraries, the time of every sample whose stack holds
 * it (counted once per sample however often it recurs), in µs per call, busy samples only (idle,
 * `(program)` and the socket writes' descheduling left out). Reads the .cpuprofile that
 * `PROFILE_KEEP=FILE bench/profile.ts` kept, over its last `seconds` seconds of samples (the timed
 * window: profile.ts's BENCH_SECONDS less its 1 s warm-up, which ends just before the gateway is
 * stopped); `calls` is the number of calls in that window (calls/s × seconds, as profile.ts prints
 * them), `filter` a substring of the frame key (default `/src/`).
 * Run: `npx tsx bench/profile-inclusive.ts FILE calls seconds [filter] [top]`.
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

function main(): void {
  const [file, callsText, secondsText, filter = '/src/', topText = '60'] = process.argv.slice(2);
  const p = JSON.parse(readFileSync(file, 'utf8')) as { startTime: number; endTime: number; nodes: Node[]; samples: number[]; timeDeltas: number[] };
  const calls = Number(callsText);
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const key = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.replace(/^file:\/\//, '').replace(/^.*node_modules\//, '').replace(/^.*?\/dist\//, '')}:${n.callFrame.lineNumber + 1}`;
  const incl = new Map<string, number>();
  let busy = 0;
  const times: number[] = [];
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) times.push((t += p.timeDeltas[i] ?? 0));
  // The window ends where the load stopped: the last busy stretch before the gateway was stopped is its shutdown, under a second.
  const from = times[times.length - 1] - Number(secondsText) * 1e6 - 300_000;
  for (let i = 0; i < p.samples.length; i++) {
    if (times[i] < from) continue;
    const dt = p.timeDeltas[i] ?? 0;
    const leaf = byId.get(p.samples[i])!;
    const fn = leaf.callFrame.functionName;
    if (fn === '(idle)' || fn === '(program)' || fn === 'writev' || fn === 'writeBuffer' || fn === 'writeUtf8String') continue;
    busy += dt;
    const seen = new Set<string>();
    for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
      const k = key(byId.get(id)!);
      if (seen.has(k)) continue;
      seen.add(k);
      incl.set(k, (incl.get(k) ?? 0) + dt);
    }
  }
  console.log(`busy ${(busy / calls).toFixed(1)} µs per call (${calls} calls)`);
  const rows = [...incl].filter(([k]) => k.includes(filter)).sort((a, b) => b[1] - a[1]).slice(0, Number(topText));
  for (const [k, us] of rows) console.log(`${(us / calls).toFixed(1).padStart(8)}  ${k}`);
}

main();
