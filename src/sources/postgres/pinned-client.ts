/**
 * Source connections that start with the pinned session settings and prove it (issue 22, item 2).
 *
 * `PinnedClient` is a pg.Client that records every ParameterStatus the server sends from the first
 * byte of the session. `verifyPinnedSettings` checks, once per connection right after connect, that
 * the server holds every setting of PINNED_SESSION_SETTINGS: the reported ones (GUC_REPORT) from
 * ParameterStatus, the others (and any reported one the server did not report, e.g. behind a pooler)
 * with one extended-protocol `SELECT current_setting(…)` statement. A difference raises
 * `SessionSettingsMismatch`, which errors.ts turns into the `session_settings_mismatch` refusal
 * (status `unavailable`); its message names the settings and the server's values for the operator's
 * logs and never reaches an agent.
 *
 * After verification the client keeps watching: a ParameterStatus that moves a pinned setting away
 * from its value (something ran SET on the session) fails the statement in flight and destroys the
 * connection at once, so no later statement can run on it (the error carries LOCAL_WIRE_ERROR_CODE:
 * the gateway ended the connection, which does not count against the source).
 *
 * Use `pinnedPoolOptions()` for pg.Pool (a `Client` class and an `onConnect` hook) and
 * `connectPinned()` for a single connection; both put `pinnedStartupOptions()` in the startup packet
 * through the caller's `options` (see settings.ts `startupOptions` and control/sources.ts).
 */
import pg from 'pg';
import { LOCAL_WIRE_ERROR_CODE } from './health';
import { expectedText, holdsPin, lookupPath, PINNED_SESSION_SETTINGS, SessionSettingsMismatch, type PinnedSetting, type SettingMismatch } from './session-settings';
import type { ClientInternals } from './wire';

export { SESSION_SETTINGS_MISMATCH_CODE, SessionSettingsMismatch, isSessionSettingsMismatch, type SettingMismatch } from './session-settings';

/** PostgreSQL's GUC names are case-insensitive; ParameterStatus spells some in mixed case (DateStyle). */
const key = (name: string) => name.toLowerCase();
const PINNED_BY_KEY = new Map<string, PinnedSetting>(PINNED_SESSION_SETTINGS.map((s) => [key(s.name), s]));

/**
 * The one statement that sets the settings pinned on connect (`setOnConnect`: columns c0, c1, … hold
 * `set_config(name, value, false)`'s result, the value now in force) and reads the settings
 * ParameterStatus did not give: `pg_catalog.current_setting('a'), …`, columns named s0, s1, …, and
 * the session's effective lookup path as JSON (column sp: `current_schemas(false)`, what the
 * catalogue scan records as its `searchPath`) (extended protocol, one round trip). PostgreSQL
 * evaluates a target list left to right, so the reads see the sets.
 */
export function currentSettingsSql(toSet: readonly PinnedSetting[], names: readonly string[]): string {
  return `SELECT ${[
    ...toSet.map((s, i) => `pg_catalog.set_config('${s.name}', '${s.value}', false) AS c${i}`),
    ...names.map((n, i) => `pg_catalog.current_setting('${n}') AS s${i}`),
    'pg_catalog.array_to_json(pg_catalog.current_schemas(false))::pg_catalog.text AS sp',
  ].join(', ')}`;
}

/** The pinned settings set by the verification statement rather than the startup packet. */
const SET_ON_CONNECT = PINNED_SESSION_SETTINGS.filter((s) => s.setOnConnect);

/** A pg.Client that records the server's ParameterStatus values from the start of the session. */
export class PinnedClient extends pg.Client {
  /** Last value the server reported for each parameter, by lower-cased name. */
  readonly reported = new Map<string, string>();
  /** Set once verifyPinnedSettings passed; from then on a change of a pinned setting destroys the connection. */
  verified = false;
  /**
   * The session's effective lookup path when it was verified (`current_schemas(false)`: existing
   * schemas of its search_path, which ALTER ROLE / ALTER DATABASE … SET search_path decide), null
   * until then. Agents cannot change it (SET and set_config are refused), so a read compares it with
   * the path its statement was analysed on (read.ts `readFrom`; red team rt42 G3).
   */
  searchPath: readonly string[] | null = null;
  /** performance.now() when verifyPinnedSettings passed (0 until then). */
  verifiedAt = 0;

  constructor(config?: string | pg.ClientConfig) {
    super(config);
    const conn = (this as unknown as ClientInternals).connection;
    conn.on('parameterStatus', (msg: unknown) => {
      const { parameterName, parameterValue } = msg as { parameterName: string; parameterValue: string };
      this.reported.set(key(parameterName), parameterValue);
      const pin = PINNED_BY_KEY.get(key(parameterName));
      if (this.verified && pin && !holdsPin(pin, parameterValue)) {
        const err = Object.assign(new SessionSettingsMismatch([{ name: pin.name, expected: expectedText(pin), actual: parameterValue }]), { code: LOCAL_WIRE_ERROR_CODE });
        // Fail the statement in flight now (its CommandComplete may be in the same chunk), then drop the socket.
        (this as unknown as { _handleErrorEvent(e: Error): void })._handleErrorEvent(err);
        conn.stream.destroy?.(err);
      }
    });
  }
}

/**
 * Checks a freshly connected PinnedClient against PINNED_SESSION_SETTINGS (see the module comment).
 * Costs one extended-protocol statement (the unreported settings and the lookup path, kept as
 * `searchPath`). Resolves when every setting holds (and marks the client verified).
 * @throws SessionSettingsMismatch naming every setting that differs; driver errors of the query as they are
 */
export async function verifyPinnedSettings(client: PinnedClient): Promise<void> {
  const mismatches: SettingMismatch[] = [];
  const toQuery: PinnedSetting[] = [];
  for (const s of PINNED_SESSION_SETTINGS) {
    if (s.setOnConnect) continue;
    const got = s.reported ? client.reported.get(key(s.name)) : undefined;
    if (got === undefined) toQuery.push(s);
    else if (!holdsPin(s, got)) mismatches.push({ name: s.name, expected: expectedText(s), actual: got });
  }
  const r = await client.query({ text: currentSettingsSql(SET_ON_CONNECT, toQuery.map((s) => s.name)), queryMode: 'extended' } as pg.QueryConfig);
  const row = (r.rows[0] ?? {}) as Record<string, unknown>;
  SET_ON_CONNECT.forEach((s, i) => {
    const got = row[`c${i}`];
    if (typeof got !== 'string' || !holdsPin(s, got)) mismatches.push({ name: s.name, expected: expectedText(s), actual: typeof got === 'string' ? got : null });
  });
  toQuery.forEach((s, i) => {
    const got = row[`s${i}`];
    if (typeof got !== 'string' || !holdsPin(s, got)) mismatches.push({ name: s.name, expected: expectedText(s), actual: typeof got === 'string' ? got : null });
  });
  if (mismatches.length > 0) throw new SessionSettingsMismatch(mismatches);
  const path: unknown = typeof row.sp === 'string' ? JSON.parse(row.sp) : null;
  client.searchPath = Array.isArray(path) && path.every((x) => typeof x === 'string') ? lookupPath(path as string[]) : null;
  client.verifiedAt = performance.now();
  client.verified = true;
}

/**
 * pg.Pool options that make every pooled connection a verified PinnedClient: pg-pool ends a client
 * whose `onConnect` hook rejects and hands the error to the caller waiting for it. The caller still
 * passes `options` with the pinned startup options. `searchPath`: a search_path value too long for
 * the startup packet (settings.ts searchPathFitsStartup, red team rt42c P1), set by one statement
 * before the verification (which then records the path the read compares, read.ts pathMismatch).
 */
export function pinnedPoolOptions(searchPath?: string): Pick<pg.PoolConfig, 'Client' | 'onConnect'> {
  return {
    Client: PinnedClient as unknown as pg.PoolConfig['Client'],
    onConnect: ((client: pg.ClientBase) => (searchPath === undefined
      ? verifyPinnedSettings(client as unknown as PinnedClient)
      : client.query({ text: SET_SEARCH_PATH_SQL, values: [searchPath], queryMode: 'extended' } as pg.QueryConfig).then(() => verifyPinnedSettings(client as unknown as PinnedClient)))) as unknown as pg.PoolConfig['onConnect'],
  };
}

/** Sets the session's search_path ($1: the value) when it is too long for the startup packet (settings.ts searchPathFitsStartup). */
export const SET_SEARCH_PATH_SQL = "SELECT pg_catalog.set_config('search_path', $1, false)";

/**
 * Opens one verified source connection (`config.options` must hold the pinned startup options).
 * On any failure the connection is ended before the error is rethrown.
 * @throws SessionSettingsMismatch, or pg's connect error
 */
export async function connectPinned(config: pg.ClientConfig): Promise<PinnedClient> {
  const client = new PinnedClient(config);
  client.on('error', () => undefined); // a dropped idle connection is reported by the next query
  try {
    await client.connect();
    await verifyPinnedSettings(client);
    return client;
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
}
