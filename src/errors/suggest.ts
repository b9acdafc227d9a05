/**
 * "Did you mean …?" for a mistyped name (an environment variable, a config-file key, a CLI value):
 * the known name nearest by edit distance, when it is near enough to be a typo.
 */

/** Levenshtein distance of `a` and `b` (insertions, deletions and substitutions each count 1). */
export function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
  }
  return d[a.length][b.length];
}

/**
 * The name of `known` nearest to `name` (the first of equals), or null when even that one is more
 * than `maxDistance` edits away. Default distance: half the name's length (rounded up), at most 4,
 * so a short key ("prot") is matched by a swap ("port") but not by an unrelated short word.
 */
export function closestName(name: string, known: Iterable<string>, maxDistance = Math.min(4, Math.ceil(name.length / 2))): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  for (const k of known) {
    const dist = editDistance(name, k);
    if (dist < bestD) {
      best = k;
      bestD = dist;
    }
  }
  return bestD <= maxDistance ? best : null;
}
