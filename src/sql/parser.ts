/**
 * Thin wrapper over libpg-query (the real PostgreSQL grammar compiled to WASM), sql-safety.md
 * layer 1. Loads the WASM once; exposes synchronous parse/fingerprint calls that throw
 * `SqlParseFailure` with a short, agent-safe message (no echo of the statement).
 */
import { fingerprintSync, loadModule, parseSync, scanSync } from 'libpg-query';
import { clipText } from '../errors/cut-text';

let loading: Promise<void> | null = null;
let loaded = false;

/**
 * Loads the parser's WASM module. Idempotent and safe to call concurrently: every caller awaits the
 * same load. Must have resolved before `analyzeSql` is called. Rejects if the WASM cannot load.
 */
export async function initSqlParser(): Promise<void> {
  if (loaded) return;
  if (!loading) {
    loading = loadModule().then(
      () => {
        loaded = true;
      },
      (err: unknown) => {
        loading = null;
        throw err;
      },
    );
  }
  await loading;
}

/** True once `initSqlParser()` has resolved. */
export function isSqlParserReady(): boolean {
  return loaded;
}

/** A parse failure with an agent-safe message (at most ~160 characters, never the statement). */
export class SqlParseFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SqlParseFailure';
  }
}

/** Shortens a parser message: the fragment after "at or near" and quoted fragments are cut to ~24 characters. */
export function safeParserMessage(raw: string): string {
  let msg = raw;
  const near = / at or near /.exec(msg);
  if (near) {
    const rest = msg.slice(near.index + near[0].length);
    msg = msg.slice(0, near.index + near[0].length) + clipText(rest, 26);
  }
  msg = msg.replace(/"([^"]*)"/g, (_m, inner: string) => `"${clipText(inner, 24)}"`);
  msg = msg.replace(/[\u0000-\u001f\u007f]/g, ' ');
  msg = clipText(msg, 160);
  return msg;
}

function wrapParseError(err: unknown): SqlParseFailure {
  const e = err as { message?: unknown; sqlDetails?: { cursorPosition?: unknown } };
  const raw = typeof e?.message === 'string' ? e.message : 'syntax error';
  const pos = typeof e?.sqlDetails?.cursorPosition === 'number' ? e.sqlDetails.cursorPosition : undefined;
  const base = safeParserMessage(raw);
  return new SqlParseFailure(pos !== undefined && pos >= 0 ? `${base} (at character ${pos + 1})` : base);
}

function ensureLoaded(): void {
  if (!loaded) throw new Error('SQL parser not initialised: await initSqlParser() first');
}

/** Parsed statements as libpg-query returns them (`{ stmts: [{ stmt: { NodeType: {...} } }] }`). */
export interface RawParseResult {
  stmts?: Array<{ stmt?: Record<string, unknown>; stmt_len?: number; stmt_location?: number }>;
}

/**
 * Parses `sql` into the raw PostgreSQL parse tree with the real grammar (sql-safety.md layer 1).
 * Callers must have rejected NUL bytes first (the parser stops at them). Throws `SqlParseFailure`
 * on a syntax error; throws `Error` if the parser is not initialised.
 */
export function parseSql(sql: string): RawParseResult {
  ensureLoaded();
  try {
    return parseSync(sql) as unknown as RawParseResult;
  } catch (err) {
    throw wrapParseError(err);
  }
}

/**
 * libpg-query's statement fingerprint (16 hex digits; constants, comments and layout ignored), a
 * cache-key ingredient. Throws `SqlParseFailure` for unparsable input, `Error` if not initialised.
 */
export function fingerprintSql(sql: string): string {
  ensureLoaded();
  try {
    return fingerprintSync(sql);
  } catch (err) {
    throw wrapParseError(err);
  }
}

/** One lexical token: its text and the scanner's token name (`ICONST`, `FCONST`, `PARAM`, …). */
export interface SqlToken {
  text: string;
  tokenName: string;
}

/**
 * Lexes `sql` with the parser's scanner (PostgreSQL 18 rules). Throws `SqlParseFailure` when the
 * text cannot be lexed; `Error` if the parser is not initialised.
 */
export function scanSql(sql: string): SqlToken[] {
  ensureLoaded();
  try {
    return scanSync(sql).tokens.map((t) => ({ text: t.text, tokenName: t.tokenName }));
  } catch (err) {
    throw wrapParseError(err);
  }
}
