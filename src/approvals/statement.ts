/**
 * How a queued statement is shown to operators (issue 14, item 7): honestly. Comments are taken
 * out of the one-line form and flagged (a leading comment such as `/* add a playlist *\/` must not
 * be all an operator sees of a DELETE), whitespace between tokens is collapsed, and a shortened
 * form always ends with a visible mark, never silently. The stored statement is never changed: this
 * is display only, and `approval show` / the console show it in full, comments included.
 *
 * Tokens come from PostgreSQL's own scanner (libpg-query scanSync), so a "--" or "/*" inside a
 * string or dollar-quoted constant is not mistaken for a comment. Pure once the parser is loaded.
 */
import { createHash } from 'node:crypto';
import { scanSync } from 'libpg-query';
import { initSqlParser, isSqlParserReady } from '../sql/parser';
import { cutText } from '../errors/cut-text';

/** The mark that ends a shortened statement. */
export const TRUNCATION_MARK = '…';

/** A statement prepared for display. */
export interface DisplayStatement {
  /** One line: comments removed, whitespace between tokens collapsed, invisible characters shown as `⟨U+XXXX⟩` (showInvisible); shortened when `truncated`. */
  text: string;
  /** How many invisible (control, bidirectional, zero-width) characters the statement holds, comments included. */
  invisible: number;
  /** The comments found in the statement, verbatim, in order (empty when none). */
  comments: string[];
  /** True when `text` was cut to the requested length (it then ends with TRUNCATION_MARK). */
  truncated: boolean;
  /** Length in characters of the full one-line form. */
  fullLength: number;
}

/**
 * Characters an operator must see rather than have applied (issue 24 item 5): C0 and C1 controls
 * other than line feed and tab, DEL, the bidirectional embeddings, overrides, isolates and marks
 * (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069, which can make a statement read
 * differently from how PostgreSQL runs it: "Trojan Source"), zero-width characters and the
 * line/paragraph separators; and the characters that render as nothing yet can carry hidden text
 * (red team rt2): Unicode tag characters U+E0000–E007F ("ASCII smuggling"), variation selectors
 * (U+180B–U+180F, U+FE00–FE0F, U+E0100–E01EF), the soft hyphen, the combining grapheme joiner,
 * Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), Khmer inherent vowels (U+17B4, U+17B5), the
 * interlinear annotation characters (U+FFF9–FFFB) and the musical invisible formatting characters;
 * and the characters that render as a space but are not one to PostgreSQL (red team rt48a K1): every
 * Unicode space separator but U+0020 (U+00A0, U+1680, U+2000–U+200A, U+202F, U+205F, U+3000) and the
 * braille blank U+2800. PostgreSQL's scanner reads each as part of an identifier, so
 * `DELETE FROM t AS x<U+00A0>WHERE<U+00A0>false` (alias "x where false") deletes every row.
 */
const INVISIBLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u2069\u2800\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u{1d173}-\u{1d17a}\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}]/gu;

/** INVISIBLE and also line feed and tab: for a value shown on one line (a table cell). */
const INVISIBLE_ONE_LINE = new RegExp(`[\\t\\n]|${INVISIBLE.source}`, 'gu');

/**
 * `text` with every INVISIBLE character replaced by a visible token `⟨U+XXXX⟩` (uppercase hex, at
 * least four digits); line feeds and tabs are kept, unless `oneLine` (a value shown in one table
 * cell or line: a token subject, a claim value), which shows them too (⟨U+000A⟩, ⟨U+0009⟩). `count`
 * is how many were replaced. Display only.
 */
export function showInvisible(text: string, opts: { oneLine?: boolean } = {}): { text: string; count: number } {
  let count = 0;
  const out = text.replace(opts.oneLine ? INVISIBLE_ONE_LINE : INVISIBLE, (c) => {
    count++;
    return `⟨U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}⟩`;
  });
  return { text: out, count };
}

/**
 * Letters of the right-to-left scripts (bidirectional classes R and AL: Hebrew, Arabic, Syriac,
 * Thaana, N'Ko, Samaritan, Mandaic and their presentation forms, U+0590–U+08FF, U+FB1D–U+FDFF,
 * U+FE70–U+FEFE, U+10800–U+10FFF, U+1E800–U+1EFFF). Beside them a terminal or chat client that
 * applies the bidirectional algorithm draws digits and punctuation in another order than they are
 * stored (`'א' || 777 || 12 || 'ב'` drawn with 12 first: red team rt48a K7, fixed in the console
 * by its CSS; a terminal has no such switch), so the CLI says so (RIGHT_TO_LEFT_NOTE).
 */
const RIGHT_TO_LEFT = /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefe\u{10800}-\u{10fff}\u{1e800}-\u{1efff}]/u;

/** True when `text` holds a right-to-left letter (RIGHT_TO_LEFT). */
export function hasRightToLeft(text: string): boolean {
  return RIGHT_TO_LEFT.test(text);
}

/** The CLI's line beside a statement or parameters holding right-to-left letters (rt48a K7, terminals). */
export const RIGHT_TO_LEFT_NOTE =
  'note: right-to-left letters in the statement or its parameters: a terminal or chat client that lays out bidirectional text may draw the digits and punctuation between them out of order; check the values with --json (exact) or in the console';

/** Hex digits of the parameters' digest that end a shortened preview (paramsForDisplay). */
export const PARAMS_DIGEST_LENGTH = 6;

/**
 * The parameter values of an approval as `approval list` and the console's list show them: JSON
 * with invisible characters shown as ⟨U+XXXX⟩ (showInvisible, as the statement: task hnu43 item 2),
 * '' when there are none. Past `width` characters it is shortened to at most `width` characters,
 * ending in `…#` and the first PARAMS_DIGEST_LENGTH hex digits of the SHA-256 of the full
 * parameters' JSON (`["Focus","aaaa…#3f9a1c`), so two writes whose values differ only past the cut
 * show different previews (task low48 item 3); one line still. Display only: the console sets it
 * as text, never as markup.
 */
export function paramsForDisplay(params: unknown[] | null | undefined, width?: number): { text: string; truncated: boolean } {
  if (!params || params.length === 0) return { text: '', truncated: false };
  const json = JSON.stringify(params);
  const text = showInvisible(json).text;
  if (width === undefined || text.length <= width) return { text, truncated: false };
  const digest = createHash('sha256').update(json).digest('hex').slice(0, PARAMS_DIGEST_LENGTH);
  return { text: `${cutText(text, Math.max(1, width - 2 - PARAMS_DIGEST_LENGTH))}…#${digest}`, truncated: true };
}

/** Loads the scanner (the CLI and console call it once before statementForDisplay). */
export const initStatementDisplay = initSqlParser;

/**
 * The display form of `sql`; `maxChars` (≥ 2) shortens the one-line text with TRUNCATION_MARK.
 * Falls back to collapsing whitespace (comments not detected, so none reported) when the scanner is
 * not loaded or cannot scan the text.
 */
export function statementForDisplay(sql: string, maxChars?: number): DisplayStatement {
  let line: string;
  const comments: string[] = [];
  try {
    if (!isSqlParserReady()) throw new Error('scanner not loaded');
    const bytes = Buffer.from(sql, 'utf8');
    const piece = (a: number, b: number) => bytes.subarray(a, b).toString('utf8');
    const parts: string[] = [];
    let prevEnd = -1;
    let gap = false;
    for (const t of scanSync(sql).tokens) {
      if (t.tokenName === 'C_COMMENT' || t.tokenName === 'SQL_COMMENT') {
        comments.push(piece(t.start, t.end).trim());
        gap = true;
        continue;
      }
      if (prevEnd >= 0 && (gap || /\s/.test(piece(prevEnd, t.start)))) parts.push(' ');
      parts.push(piece(t.start, t.end));
      prevEnd = t.end;
      gap = false;
    }
    line = parts.join('');
  } catch {
    line = sql.replace(/\s+/g, ' ').trim();
  }
  const invisible = showInvisible(sql).count;
  line = showInvisible(line).text;
  const shown = comments.map((c) => showInvisible(c).text);
  const fullLength = [...line].length;
  if (maxChars !== undefined && fullLength > Math.max(2, maxChars)) {
    return { text: [...line].slice(0, Math.max(2, maxChars) - 1).join('') + TRUNCATION_MARK, comments: shown, invisible, truncated: true, fullLength };
  }
  return { text: line, comments: shown, invisible, truncated: false, fullLength };
}
