/**
 * Cutting text to a length on a character boundary (issue 22, item 6).
 *
 * JavaScript strings are UTF-16: a character outside the Basic Multilingual Plane (an emoji, many
 * CJK extension ideographs) is two code units, a surrogate pair. `s.slice(0, n)` can end between
 * the two, leaving a lone high surrogate that is not a Unicode character: strict JSON clients
 * reject it and UTF-8 encoders replace it. Every message, reason or name InterLock cuts to a length
 * goes through these functions, which never split a pair.
 */

/** True for the first half of a surrogate pair (U+D800–U+DBFF). */
function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/**
 * `s` cut to at most `max` UTF-16 code units, on a code point boundary: when the cut would fall
 * inside a surrogate pair, the whole pair is dropped (so the result can be one unit shorter).
 * `max` is a count of code units (a string's `length`); below 0 counts as 0.
 */
export function cutText(s: string, max: number): string {
  if (s.length <= max) return s;
  let end = Math.max(0, Math.floor(max));
  if (end > 0 && isHighSurrogate(s.charCodeAt(end - 1))) end--;
  return s.slice(0, end);
}

/**
 * `s` unchanged when it has at most `max` code units; otherwise cut with `cutText` and followed by
 * `mark` (default "…"), so the result has at most `max` + `mark.length` code units.
 */
export function clipText(s: string, max: number, mark = '…'): string {
  return s.length > max ? cutText(s, max) + mark : s;
}
