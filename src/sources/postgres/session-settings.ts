/**
 * The session settings InterLock pins on every connection it opens to a PostgreSQL source
 * (issue 22 "pinned session settings", issue 23 "host independence").
 *
 * Two families, one list:
 * - lexer settings: what the SQL analyser (libpg-query, which always lexes as the defaults below)
 *   assumes about how the server reads a statement's text; a difference is a bypass;
 * - output settings: what the value mapping (spec/value-mapping-v1.json) assumes about PostgreSQL's
 *   text output; a difference is a wrong value.
 *
 * Each is sent in the startup packet (`options=-c name=value`; those marked `setOnConnect` by the
 * connection's verification statement instead) and, for those the server reports in
 * ParameterStatus (GUC_REPORT), verified after connect: a server that reports another value makes the
 * source `unavailable` with an operator-visible cause.
 *
 * This module is the single source of truth: connection code, the analyser's assumptions and the
 * value decoder all import from here.
 */

/** One pinned setting. `reported` is true when PostgreSQL sends it in ParameterStatus (GUC_REPORT). */
export interface PinnedSetting {
  /** The GUC name as PostgreSQL spells it in ParameterStatus (case matters for DateStyle etc.). */
  readonly name: string;
  /** The value sent in the startup packet. */
  readonly value: string;
  /** The value the server reports back in ParameterStatus when the pin held (with `accepts`: one such value, e.g. this server's). */
  readonly expected: string;
  /**
   * When set, every value it matches holds the pin, not only `expected` (DateStyle: the output style
   * is pinned, the year/month/day order of input stays the server's, red team rt46a D1).
   */
  readonly accepts?: RegExp;
  /**
   * When true, `value` is not sent in the startup packet but set by the connection's verification
   * statement (pinned-client.ts `verifyPinnedSettings`: `set_config(name, value, false)`), after the
   * server has applied the database's and role's defaults (`ALTER DATABASE/ROLE … SET`), which a
   * startup option would override. DateStyle: `set_config('DateStyle', 'ISO')` sets the output style
   * and keeps the field order those defaults gave, so an agent's '01/02/03' reads as every other
   * client of that database and role reads it (red team rt46a D1's rest).
   */
  readonly setOnConnect?: boolean;
  /** Whether PostgreSQL reports this setting in ParameterStatus (so it can be verified without a query). */
  readonly reported: boolean;
  /** `lexer`: the analyser depends on it; `output`: the value mapping depends on it. */
  readonly family: 'lexer' | 'output';
  /** Why InterLock pins it (shown in docs/operators.md). */
  readonly why: string;
}

/** The pinned settings, in the order they are sent. */
export const PINNED_SESSION_SETTINGS: readonly PinnedSetting[] = [
  { name: 'standard_conforming_strings', value: 'on', expected: 'on', reported: true, family: 'lexer',
    why: "the analyser lexes '…' literals with backslashes as ordinary characters; off makes the server read \\' as an escaped quote, so text the analyser sees as a constant would run as SQL" },
  { name: 'backslash_quote', value: 'safe_encoding', expected: 'safe_encoding', reported: false, family: 'lexer',
    why: "with standard_conforming_strings on, \\' is never an escape; safe_encoding refuses it in client encodings where a backslash can end a multibyte character" },
  { name: 'client_encoding', value: 'UTF8', expected: 'UTF8', reported: true, family: 'lexer',
    why: 'statements and results travel as UTF-8; another encoding changes how bytes become characters on both sides' },
  { name: 'DateStyle', value: 'ISO', expected: 'ISO, MDY', accepts: /^ISO, (MDY|DMY|YMD)$/, reported: true, setOnConnect: true, family: 'output',
    why: "dates and timestamps are returned as PostgreSQL writes them in ISO 8601 form; the field order of ambiguous date input ('01/02/03') stays the one other clients of the database and role get (postgresql.conf, ALTER DATABASE/ROLE … SET)" },
  { name: 'IntervalStyle', value: 'postgres', expected: 'postgres', reported: true, family: 'output',
    why: "intervals are returned in PostgreSQL's default text form" },
  { name: 'TimeZone', value: 'UTC', expected: 'UTC', reported: true, family: 'output',
    why: 'timestamptz values are written with an explicit +00 offset, whatever the server or gateway host zone' },
  { name: 'extra_float_digits', value: '1', expected: '1', reported: false, family: 'output',
    why: 'float4/float8 are written as the shortest text that reads back exactly (PostgreSQL 12+)' },
  { name: 'bytea_output', value: 'hex', expected: 'hex', reported: false, family: 'output',
    why: 'bytea is returned as PostgreSQL hex text (\\x…)' },
] as const;

/** Whether the server's `value` of `pin` holds it (`expected`, or any value `accepts` matches). */
export function holdsPin(pin: PinnedSetting, value: string): boolean {
  return pin.accepts ? pin.accepts.test(value) : value === pin.expected;
}

/** What a mismatch names as expected for `pin`: `expected`, or the pattern `accepts` (e.g. `^ISO, (MDY|DMY|YMD)$`). */
export function expectedText(pin: PinnedSetting): string {
  return pin.accepts ? pin.accepts.source : pin.expected;
}

/** The `-c name=value` startup options for every pinned setting but those set on connect (`setOnConnect`), values with spaces escaped as PostgreSQL's options parser wants. */
export function pinnedStartupOptions(): string {
  return PINNED_SESSION_SETTINGS.filter((s) => !s.setOnConnect).map((s) => `-c ${s.name}=${s.value.replace(/\\/g, '\\\\').replace(/ /g, '\\ ')}`).join(' ');
}

/** Error code of a connection whose session settings are not the pinned ones. */
export const SESSION_SETTINGS_MISMATCH_CODE = 'EINTERLOCK_SESSION_SETTINGS';

/** One pinned setting the server did not hold: `actual` is what it reported (null: it did not say). */
export interface SettingMismatch {
  name: string;
  expected: string;
  actual: string | null;
}

/**
 * A connection whose server does not hold the pinned settings (a pooler that dropped the startup
 * options, an override that won). `message` names each setting with the server's value: operator
 * text for logs, never for an agent (SourceError carries it only as its non-enumerable cause).
 */
export class SessionSettingsMismatch extends Error {
  readonly code = SESSION_SETTINGS_MISMATCH_CODE;
  constructor(readonly mismatches: readonly SettingMismatch[]) {
    super(
      `the source connection does not hold the session settings InterLock pins: ${mismatches
        .map((m) => `${m.name} is ${m.actual === null ? 'not reported' : JSON.stringify(m.actual)}, expected ${JSON.stringify(m.expected)}`)
        .join('; ')}`,
    );
    this.name = 'SessionSettingsMismatch';
  }
}

/** True for a SessionSettingsMismatch (duck-typed on its code, as errors may cross realms). */
export function isSessionSettingsMismatch(err: unknown): err is SessionSettingsMismatch {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === SESSION_SETTINGS_MISMATCH_CODE;
}

/**
 * The lookup path a session reports (`current_schemas(false)`) without the session's own temporary
 * schema (`pg_temp_<n>`, which a path starting with `pg_temp` makes PostgreSQL create and name): no
 * other session can use it, so a reader connection pinned to a path naming it would report another
 * path than the scan recorded, and every read would be catalog_stale and rescan (red team rt47b J2).
 * User schemas cannot be named `pg_…`, so the pattern names temporary schemas only.
 */
export function lookupPath(schemas: readonly string[]): string[] {
  return schemas.filter((s) => !/^pg_temp_[0-9]+$/.test(s));
}

/** Whether two lookup paths name the same schemas in the same order (the same array: at once). */
export function samePath(a: readonly string[], b: readonly string[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
