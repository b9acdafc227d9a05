/**
 * A per-key log throttle (red team rtn4 item 1): an operator warning an agent can cause on every call
 * (a source's 42501 on a governed read, src/gateway.ts) is logged once per key and window; the next
 * line for that key after the window says how many were held back. Keys are remembered up to
 * `maxKeys` (then forgotten all at once: a burst of new keys logs again, never unbounded memory).
 */

/** Decides whether a line for `key` is logged now: `null` to skip, else the number of lines skipped for it since the last one logged. */
export type LogThrottle = (key: string) => number | null;

/**
 * A LogThrottle with a window of `windowMs` milliseconds per key and at most `maxKeys` keys,
 * reading the time from `now` (ms; default Date.now). Pure apart from its own memory; never throws.
 */
export function logThrottle(windowMs: number, maxKeys = 1000, now: () => number = Date.now): LogThrottle {
  const seen = new Map<string, { at: number; skipped: number }>();
  return (key) => {
    const t = now();
    const s = seen.get(key);
    if (s && t - s.at < windowMs) {
      s.skipped++;
      return null;
    }
    if (!s && seen.size >= maxKeys) seen.clear();
    seen.set(key, { at: t, skipped: 0 });
    return s ? s.skipped : 0;
  };
}
