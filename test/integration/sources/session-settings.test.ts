/**
 * Pinned session settings on real PostgreSQL (issue 22, items 2 and 3).
 *
 * The reader and writer roles get the opposite of each pinned setting (ALTER ROLE … SET): every
 * connection InterLock opens still runs with the pinned value (startup options win over role
 * defaults), and behind a proxy that drops startup options (a pooler) the source answers
 * `session_settings_mismatch` instead of running anything. The `standard_conforming_strings = off`
 * attacks of the issue run end to end: a read the analyser sees as constants, and a console plan of
 * a write whose text holds `COMMIT; DELETE`.
 */
import { Writable } from 'node:stream';
import { Client } from 'pg';
import pino from 'pino';
import { explainAsWriter } from '../../../src/console/plan';
import { connectSourceClient, type SourceRecord } from '../../../src/control/sources';
import { PostgresSourceConnector, SourceError, type PostgresSourceSettings } from '../../../src/sources/postgres/connector';
import { holdsPin, PINNED_SESSION_SETTINGS } from '../../../src/sources/postgres/session-settings';
import { LEXER_ASSUMPTIONS } from '../../../src/sql/lexer-assumptions';
import { startOptionsStrippingProxy, type StrippingProxy } from './fakes';
import { createSourceDb, type SourceDb } from './source-db';

const BIG = { maxRows: 100, maxBytes: 1e6 };
/** A value PostgreSQL accepts for each pinned setting that differs from the pinned one. */
const OPPOSITE: Record<string, string> = {
  standard_conforming_strings: 'off',
  backslash_quote: 'on',
  client_encoding: 'LATIN1',
  DateStyle: 'SQL, DMY',
  IntervalStyle: 'sql_standard',
  TimeZone: 'America/New_York',
  extra_float_digits: '0',
  bytea_output: 'escape',
};
/**
 * Analysed as a read of two constants (standard_conforming_strings on: `'a\'` ends at its second
 * quote); with the setting off the server reads `\'` as an escaped quote and runs the sub-select.
 */
const CONSTANTS_OR_SUBSELECT = "SELECT 'a\\' AS x, ' AS y, (SELECT secret FROM vault) AS leak --'";
/** Analysed as one UPDATE; with the setting off, over the simple protocol: UPDATE; COMMIT; DELETE. */
const UPDATE_OR_COMMIT_DELETE = "UPDATE notes SET a = 'x\\', b = '; COMMIT; DELETE FROM notes; --' WHERE id = 1";

let src: SourceDb;
let proxy: StrippingProxy;
/** The same, but setting its own client_encoding (pg always sends UTF8 in the startup packet, which wins over a role's). */
let latin1Proxy: StrippingProxy;
const open: PostgresSourceConnector[] = [];

function connector(settings: PostgresSourceSettings, logger?: pino.Logger): PostgresSourceConnector {
  const c = new PostgresSourceConnector('pins', settings, { logger });
  open.push(c);
  return c;
}
function viaProxy(p: StrippingProxy = proxy): PostgresSourceSettings {
  return src.settings({ host: '127.0.0.1', port: p.port, breaker: { failure_threshold: 100, reset_timeout_ms: 60_000 } });
}
/** The settings as the control database stores them (TLS mode explicit). */
function registered(settings: PostgresSourceSettings): Extract<SourceRecord, { type: 'postgres' }>['settings'] {
  return { ...settings, tls: { mode: 'off' } } as Extract<SourceRecord, { type: 'postgres' }>['settings'];
}
function record(settings: PostgresSourceSettings): SourceRecord {
  return { id: 'pins', name: 'pins', description: '', enabled: true, createdAt: '', updatedAt: '', type: 'postgres', settings: registered(settings) };
}
async function setOnRoles(name: string, value: string): Promise<void> {
  for (const role of [src.readerRole, src.writerRole]) await src.admin.query(`ALTER ROLE ${role} SET ${name} = '${value}'`);
}
async function count(): Promise<number> {
  return (await src.admin.query('SELECT count(*)::int AS n FROM notes')).rows[0].n;
}
/** A logger whose lines are collected (the operator's view). */
function capturingLogger(): { logger: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}

beforeAll(async () => {
  src = await createSourceDb('sess_pins', {
    chinook: false,
    extraSql: `CREATE TABLE vault (secret text NOT NULL); INSERT INTO vault VALUES ('the-secret');
               CREATE TABLE notes (id int PRIMARY KEY, a text, b text); `,
  });
  proxy = await startOptionsStrippingProxy({ host: src.host, port: src.port });
  latin1Proxy = await startOptionsStrippingProxy({ host: src.host, port: src.port }, { client_encoding: 'LATIN1' });
});
beforeEach(async () => {
  for (const role of [src.readerRole, src.writerRole]) await src.admin.query(`ALTER ROLE ${role} RESET ALL`);
  await src.admin.query("TRUNCATE notes; INSERT INTO notes VALUES (1, 'one', 'uno'), (2, 'two', 'dos')");
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await proxy?.close();
  await latin1Proxy?.close();
  for (const role of [src?.readerRole, src?.writerRole]) if (role) await src.admin.query(`ALTER ROLE ${role} RESET ALL`).catch(() => undefined);
  await src?.drop();
});

test('the lexer assumptions of the analyser are the lexer family of the pinned list', () => {
  expect(LEXER_ASSUMPTIONS.map((s) => [s.name, s.value])).toEqual([
    ['standard_conforming_strings', 'on'],
    ['backslash_quote', 'safe_encoding'],
    ['client_encoding', 'UTF8'],
  ]);
  expect(Object.keys(OPPOSITE).sort()).toEqual(PINNED_SESSION_SETTINGS.map((s) => s.name).sort());
});

describe.each(PINNED_SESSION_SETTINGS.map((s) => [s.name, s.expected, OPPOSITE[s.name]] as const))('%s', (name, expected, opposite) => {
  test(`a role set to ${opposite} still runs with ${expected} on the reader pool, the writer pool and single connections`, async () => {
    await setOnRoles(name, opposite);
    // The role default is really in force on a connection without InterLock's startup options.
    const plain = new Client({ host: src.host, port: src.port, database: src.db.name, user: src.readerRole });
    await plain.connect();
    try {
      // (pg always sends client_encoding=UTF8 in the startup packet, so that role default never applies.)
      expect((await plain.query(`SELECT pg_catalog.current_setting('${name}') AS v`)).rows).toEqual([{ v: name === 'client_encoding' ? 'UTF8' : opposite }]);
    } finally {
      await plain.end();
    }
    const c = connector(src.settings());
    // The value the pin holds: `expected`, or for DateStyle ISO in the server's field order (rt46a D1), never the role's.
    const pin = PINNED_SESSION_SETTINGS.find((s) => s.name === name)!;
    const held = (rows: unknown[]) => rows.length === 1 && holdsPin(pin, String((rows[0] as { v: unknown }).v)) && (rows[0] as { v: unknown }).v !== opposite;
    const read = await c.read(`SELECT pg_catalog.current_setting('${name}') AS v`, [], BIG);
    expect([read.rows, held(read.rows)]).toEqual([read.rows, true]);
    const lent = await c.withReader(async (client) => (await client.query(`SELECT pg_catalog.current_setting('${name}') AS v`)).rows);
    expect([lent, held(lent)]).toEqual([lent, true]);
    if (!pin.accepts) expect(read.rows).toEqual([{ v: expected }]);
    for (const role of ['reader', 'writer'] as const) {
      const single = await connectSourceClient(registered(src.settings()), role);
      try {
        const rows = (await single.query(`SELECT pg_catalog.current_setting('${name}') AS v`)).rows;
        expect([rows, held(rows)]).toEqual([rows, true]);
      } finally {
        await single.end();
      }
    }
  });

  test(`behind a pooler that drops startup options, a role set to ${opposite} makes the source unavailable (session_settings_mismatch)`, async () => {
    await setOnRoles(name, opposite);
    const { logger, lines } = capturingLogger();
    const pooler = name === 'client_encoding' ? latin1Proxy : proxy;
    const c = connector(viaProxy(pooler), logger);
    const err = await c.read('SELECT 1 AS one', [], BIG).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).code).toBe('session_settings_mismatch');
    expect((err as SourceError).contractCode).toBe('session_settings_mismatch');
    expect((err as SourceError).sourceFailure).toBe(true);
    // The agent-safe message is the spec's and names no setting value; the operator's log does.
    expect((err as SourceError).message).toBe("The source's connections do not hold the session settings the gateway pins (such as standard_conforming_strings), so the source is not used; an operator can see which setting differs.");
    expect(JSON.parse(JSON.stringify(err))).toEqual({ name: 'SourceError', code: 'session_settings_mismatch', message: (err as SourceError).message });
    const logged = lines.find((l) => l.msg === 'source failure');
    expect(logged?.code).toBe('session_settings_mismatch');
    const setOnConnect = PINNED_SESSION_SETTINGS.find((s) => s.name === name)!.setOnConnect === true;
    if (setOnConnect) {
      // Set by the connection's first statement (DateStyle, rt46a D1): held even behind such a pooler,
      // so the log names the other settings the pooler dropped, not this one, which it never carried.
      expect(JSON.stringify(logged?.err)).not.toContain(`${name} is`);
      expect(pooler.startups.at(-1)?.options).not.toContain(`-c ${name}=`);
    } else {
      expect(JSON.stringify(logged?.err)).toContain(`${name} is`);
      // The proxy really received the pinned options and dropped them.
      expect(pooler.startups.at(-1)?.options).toContain(`-c ${name}=`);
    }
    // A single connection (scan, indexer, console) is refused the same way.
    await expect(connectSourceClient(registered(viaProxy(pooler)), 'writer')).rejects.toMatchObject({ name: 'SessionSettingsMismatch', code: 'EINTERLOCK_SESSION_SETTINGS' });
  });
});

test('standard_conforming_strings = off on the reader: text the analyser reads as constants stays constants (no sub-select)', async () => {
  await setOnRoles('standard_conforming_strings', 'off');
  const r = await connector(src.settings()).read(CONSTANTS_OR_SUBSELECT, [], BIG);
  expect(r.fields.map((f) => f.name)).toEqual(['x', '?column?']);
  expect(r.rows).toEqual([{ x: 'a\\', '?column?': ' AS y, (SELECT secret FROM vault) AS leak --' }]);
  expect(JSON.stringify(r.rows)).not.toContain('the-secret');
});

test('standard_conforming_strings = off behind a pooler: the same read is refused before it runs', async () => {
  await setOnRoles('standard_conforming_strings', 'off');
  await expect(connector(viaProxy()).read(CONSTANTS_OR_SUBSELECT, [], BIG)).rejects.toMatchObject({ code: 'session_settings_mismatch' });
});

test('standard_conforming_strings = off on the writer: opening the plan of a pending write runs no COMMIT or DELETE', async () => {
  await setOnRoles('standard_conforming_strings', 'off');
  const plan = await explainAsWriter(record(src.settings()), UPDATE_OR_COMMIT_DELETE, []);
  expect(plan.ok).toBe(true);
  expect((plan as { lines: string[] }).lines[0]).toMatch(/^Update on notes/);
  expect(await count()).toBe(2);
  expect((await src.admin.query('SELECT a FROM notes WHERE id = 1')).rows).toEqual([{ a: 'one' }]);
});

test('the console plan is one statement by construction: stacked text is a syntax error, nothing runs', async () => {
  const plan = await explainAsWriter(record(src.settings()), 'UPDATE notes SET a = a WHERE id = 1; COMMIT; DELETE FROM notes', []);
  expect(plan).toEqual({ ok: false, reason: 'SQLSTATE 42601: cannot insert multiple commands into a prepared statement' });
  expect(await count()).toBe(2);
});

test('the console plan behind a pooler that drops startup options is refused with the operator-visible cause', async () => {
  await setOnRoles('standard_conforming_strings', 'off');
  const plan = await explainAsWriter(record(viaProxy()), UPDATE_OR_COMMIT_DELETE, []);
  // The server's own defaults (DateStyle, TimeZone) may be listed too: only the pinned values count.
  expect(plan.ok).toBe(false);
  expect((plan as { reason: string }).reason).toMatch(/^the source connection does not hold the session settings InterLock pins: standard_conforming_strings is "off", expected "on"(;|$)/);
  expect(await count()).toBe(2);
});

test('an approved write on a writer with standard_conforming_strings = off runs with the pinned value', async () => {
  await setOnRoles('standard_conforming_strings', 'off');
  await expect(connector(src.settings()).write("UPDATE notes SET a = 'x\\' WHERE id = $1", [1])).resolves.toEqual({ rowCount: 1 });
  expect((await src.admin.query('SELECT a FROM notes WHERE id = 1')).rows).toEqual([{ a: 'x\\' }]);
});

test('a pinned setting changed mid-session ends that connection; the next call gets a fresh, pinned one', async () => {
  const c = connector(src.settings({ pool_size: 1 }));
  const before = (await c.read('SELECT pg_catalog.pg_backend_pid() AS pid', [], BIG)).rows[0].pid;
  await expect(c.withReader((client) => client.query('SET standard_conforming_strings = off'))).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false });
  const after = await c.read("SELECT pg_catalog.pg_backend_pid() AS pid, pg_catalog.current_setting('standard_conforming_strings') AS scs", [], BIG);
  expect(after.rows[0].pid).not.toBe(before);
  expect(after.rows[0].scs).toBe('on');
});

test('the health probe refuses a source whose connections do not hold the pinned settings', async () => {
  await setOnRoles('standard_conforming_strings', 'off');
  const direct = connector(src.settings());
  const behind = connector(viaProxy());
  const probe = (c: PostgresSourceConnector) => (c as unknown as { pools: { probe(ms?: number): Promise<boolean> } }).pools.probe(3000);
  await expect(probe(direct)).resolves.toBe(true);
  await expect(probe(behind)).resolves.toBe(false);
});

describe('DateStyle: the output style is pinned, the field order is the one the database and role give other clients (rt46a D1)', () => {
  const DATES = "SELECT '01/02/03'::date::text AS d, pg_catalog.current_setting('DateStyle') AS v";
  afterEach(async () => {
    await src.admin.query(`ALTER DATABASE ${src.admin.escapeIdentifier(src.db.name)} RESET DateStyle`);
  });
  /** What a plain client (no InterLock options) of `role` reads for the same literal. */
  async function plainRead(role: string): Promise<string> {
    const plain = new Client({ host: src.host, port: src.port, database: src.db.name, user: role });
    await plain.connect();
    try {
      return (await plain.query("SELECT '01/02/03'::date::text AS d")).rows[0].d as string;
    } finally {
      await plain.end();
    }
  }
  test.each([
    ['ALTER DATABASE … SET', 'database'],
    ['ALTER ROLE … SET', 'role'],
  ] as const)('%s DateStyle = SQL, DMY: the reader, the writer and single connections read 01/02/03 as 1 February 2003 and write ISO', async (_label, where) => {
    if (where === 'database') await src.admin.query(`ALTER DATABASE ${src.admin.escapeIdentifier(src.db.name)} SET DateStyle = 'SQL, DMY'`);
    else await setOnRoles('DateStyle', 'SQL, DMY');
    // Every other client of the database and role reads the literal day first.
    expect(await plainRead(src.readerRole)).toBe('01/02/2003');
    const want = [{ d: '2003-02-01', v: 'ISO, DMY' }];
    const c = connector(src.settings());
    // Seen before: [{ d: '2003-01-02', v: 'ISO, MDY' }] — the startup option overrode the database's and role's order.
    expect((await c.read(DATES, [], BIG)).rows).toEqual(want);
    expect(await c.withReader(async (client) => (await client.query(DATES)).rows)).toEqual(want);
    for (const role of ['reader', 'writer'] as const) {
      const single = await connectSourceClient(registered(src.settings()), role);
      try {
        expect((await single.query(DATES)).rows).toEqual(want);
      } finally {
        await single.end();
      }
    }
  });
  test('without such a default the order is postgresql.conf\'s and the style ISO', async () => {
    const server = (await src.admin.query('SHOW DateStyle')).rows[0].DateStyle as string;
    const c = connector(src.settings());
    const rows = (await c.read(DATES, [], BIG)).rows;
    expect(rows).toEqual([{ d: (await src.admin.query("SELECT '01/02/03'::date::text AS d")).rows[0].d, v: server.replace(/^\w+,/, 'ISO,') }]);
  });
});
