/**
 * "Did you mean …?" for a mistyped name (an environment variable, a config-file key, a CLI value, a
 * relation or column of a policy or role): the known name nearest by edit distance, when it is near
 * enough to be a typo.
 */

/**
 * Levenshtein distance of `a` and `b` (insertions, deletions and substitutions each count 1), or
 * Infinity once it must exceed `max` (default: no bound). Two rows, cut early past `max`, so a
 * catalogue of many thousand names costs little per candidate.
 */
export function editDistance(a: string, b: string, max = Infinity): number {
  if (Math.abs(a.length - b.length) > max) return Infinity;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (cur[j] < best) best = cur[j];
    }
    if (best > max) return Infinity;
    prev = cur;
  }
  return prev[b.length];
}

/**
 * The name of `known` nearest to `name` (the first of equals; `name` itself is skipped), or null
 * when even that one is more than `maxDistance` edits away. Default distance: half the name's length
 * (rounded up), at most 4, so a short key ("prot") is matched by a swap ("port") but not by an
 * unrelated short word. `fold` maps both sides before comparing (e.g. lower case); the known name is
 * returned as given.
 */
export function closestName(name: string, known: Iterable<string>, maxDistance = Math.min(4, Math.ceil(name.length / 2)), fold: (s: string) => string = (s) => s): string | null {
  const n = fold(name);
  let best: string | null = null;
  let bestD = maxDistance + 1;
  for (const k of known) {
    if (k === name) continue;
    const dist = editDistance(n, fold(k), bestD - 1);
    if (dist < bestD) {
      best = k;
      bestD = dist;
    }
  }
  return best;
}
