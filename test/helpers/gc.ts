/**
 * A forced, full garbage collection for memory assertions in tests (load tests measure heap and RSS
 * against a warmed-up baseline).
 */
import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * The V8 gc() function. Jest runs without --expose-gc; setting the flag at run time makes V8 install
 * `gc` in contexts created afterwards, so a fresh vm context hands it over. Null if that fails.
 */
export function findGc(): (() => void) | null {
  const g = (globalThis as { gc?: () => void }).gc;
  if (typeof g === 'function') return g;
  try {
    v8.setFlagsFromString('--expose-gc');
    const fn = vm.runInNewContext('gc') as unknown;
    return typeof fn === 'function' ? (fn as () => void) : null;
  } catch {
    return null;
  }
}

/** Runs gc() a few times with short pauses, then reads heapUsed and rss (bytes). */
export async function settledHeap(gc: () => void): Promise<{ heapUsed: number; rss: number }> {
  for (let i = 0; i < 4; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, rss: m.rss };
}

