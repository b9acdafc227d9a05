/**
 * Peak RSS of a child process around one call (Linux): idle RSS after a full GC, VmHWM reset
 * through /proc/PID/clear_refs, then the peak after the call. Shared by scenarios 5 and 8.
 */
import { procMemory, resetPeakRss, sleep, type GatewayChild } from './env';

/** 100,000 rows of track data (29 copies of the 3,503 tracks, cut at 100,000): scenarios 5 and 8. */
export const LARGE_SQL = 'SELECT t.track_id, t.name, t.album_id, t.milliseconds, t.unit_price, g.n AS copy FROM generate_series(1, 29) AS g(n) CROSS JOIN track t LIMIT 100000';
/** Rows the large read returns (and the row cap it runs under). */
export const LARGE_ROWS = 100_000;

/** One measured call: times (ms), idle and peak RSS (KiB), growth above idle (MiB), the sampled peak, bytes on the wire. */
export interface Measured {
  ttfbMs: number;
  totalMs: number;
  idleKiB: number;
  peakKiB: number;
  growthMiB: number;
  sampledPeakKiB: number;
  bytes?: number;
}

/** Samples VmRSS every `ms` until stopped; returns the largest value seen (KiB). */
function sampleRss(pid: number, ms = 5): { stop(): number } {
  let max = 0;
  const t = setInterval(() => {
    try {
      max = Math.max(max, procMemory(pid).rssKiB);
    } catch {
      // process gone
    }
  }, ms);
  return {
    stop() {
      clearInterval(t);
      return max;
    },
  };
}

/**
 * Measures one call of `run` in `child`: a full GC, idle RSS, VmHWM reset, the call, then the peak
 * (VmHWM) and the largest RSS sampled every 5 ms. Throws when VmHWM cannot be reset.
 */
export async function measure(child: GatewayChild, run: () => Promise<{ ttfbMs: number; totalMs: number; bytes?: number }>): Promise<Measured> {
  await child.ask({ cmd: 'gc' });
  await sleep(200);
  const idleKiB = procMemory(child.pid).rssKiB;
  if (!resetPeakRss(child.pid)) throw new Error('cannot reset VmHWM (/proc/PID/clear_refs): run as the owner of the child on Linux');
  const sampler = sampleRss(child.pid);
  const r = await run();
  const sampledPeakKiB = sampler.stop();
  const peakKiB = procMemory(child.pid).hwmKiB;
  return { ttfbMs: r.ttfbMs, totalMs: r.totalMs, bytes: r.bytes, idleKiB, peakKiB, growthMiB: (peakKiB - idleKiB) / 1024, sampledPeakKiB };
}

