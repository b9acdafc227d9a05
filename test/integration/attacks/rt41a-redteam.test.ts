/**
 * Red team rt41a: the session's merges hnu41 (named read refusals, describe past a deny, partial rate
 * limits), hlow (describe of view columns through lineage, request ids) and h28s (the breaker's
 * closed-circuit fast path), attacked as an agent holding a key with limited roles, on real
 * PostgreSQL and over loopback.
 *
 * Each test is one attack; its comment says whether it is a finding (severity; test.failing while
 * open) or an attack the change withstands.
 */
import { startAttackEnv, query, callTool, statementsAgent, lockWaitSeen, asRole, type AttackEnv } from './harness';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, withRuntimeRole, type TestControlDb } from '../control/control-db';
import { removeSourceIn } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { applyInterlockFile } from '../../../src/declarative/apply';
import { CONFIG_EVENT_FUNCTION, GOVERNANCE_WRITE_PRIVILEGES, operatorRoleWrites, privilegesOf } from '../../../src/control/governance-privileges';
import { checkGovernancePrivileges } from '../../../src/admin/governance-db';
import { migrationNames, MIGRATIONS_DIR, MIGRATIONS_TABLE, openControlDb, runMigrations, type ControlDb } from '../../../src/control/db';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { runner } from 'node-pg-migrate';
import { ADMIN_URL, createTempDatabase } from '../../helpers/pg';
import { scanSource } from '../../../src/control/scan';
import { DENIED_MESSAGE_NO_STAR, DENIED_MESSAGE, namedDenyMessage } from '../../../src/pipeline/03-authorize';
import { SourceBreaker } from '../../../src/sources/postgres/breaker';
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { startFakePg } from '../sources/fakes';
import { SourceError } from '../../../src/sources/postgres/errors';
import { loadConfig } from '../../../src/control/config';

jest.setTimeout(300_000);

describe('hnu41 item 2 / hlow item 1: named refusals and describe through lineage', () => {
  let a: AttackEnv;
  const caller = (name: string, statements: Array<{ effect: string; action: string; resource: string }>) => statementsAgent(a, name, statements);
  const message = async (sql: string, key: string) => (await query(a, sql, {}, key)).sc?.message as string | undefined;
  /** describe_source rows of relations named rt41*, as `table.column` (and the parent fields when present). */
  async function described(key: string): Promise<string[]> {
    const r = await callTool(a.env, 'interlock_describe_source', { source_id: 'chinook' }, key);
    const rows = (r.body?.result?.structuredContent?.rows ?? []) as Array<Record<string, unknown>>;
    return rows
      .filter((x) => String(x.table_name).startsWith('rt41'))
      .map((x) => `${x.table_name}.${x.column_name}${x.partition_of ? ` partition_of=${x.partition_of}` : ''}${x.inherits ? ` inherits=${x.inherits}` : ''}`)
      .sort();
  }
  /** describe_access's columns of relations named rt41*, as `table.column`. */
  async function accessColumns(key: string): Promise<string[]> {
    const r = await callTool(a.env, 'interlock_describe_access', { source_id: 'chinook' }, key);
    type Entry = { table: string; columns: string[]; partitions?: Entry[] };
    const flat = (es: Entry[]): Entry[] => es.flatMap((e) => [e, ...flat(e.partitions ?? [])]);
    const tables = flat((r.body?.result?.structuredContent?.chinook?.resources?.tables ?? []) as Entry[]);
    return tables.filter((t) => t.table.startsWith('public.rt41')).flatMap((t) => t.columns.map((c) => `${t.table.slice('public.'.length)}.${c}`)).sort();
  }

  beforeAll(async () => {
    a = await startAttackEnv();
    const reader = a.admin.escapeIdentifier(a.env.demo.readerRole);
    await a.admin.query(`
      CREATE TABLE rt41p (id int, secret text);
      CREATE TABLE rt41c (extra text) INHERITS (rt41p);
      INSERT INTO rt41c VALUES (1, 'S-1', 'E-1');
      CREATE TABLE rt41t (id int NOT NULL, open text, secret text) PARTITION BY RANGE (id);
      CREATE TABLE rt41t_a PARTITION OF rt41t FOR VALUES FROM (0) TO (100);
      INSERT INTO rt41t VALUES (1, 'O-1', 'S-1');
      CREATE VIEW rt41v1 AS SELECT id, open, secret AS s1 FROM rt41t;
      CREATE VIEW rt41v2 AS SELECT id, s1 AS s2, open FROM rt41v1;
      CREATE VIEW rt41vp AS SELECT id, secret AS sp FROM rt41t_a;
      CREATE MATERIALIZED VIEW rt41mv AS SELECT id, open, secret AS sm FROM rt41t;
      CREATE VIEW rt41vc AS SELECT id, (SELECT count(*) FROM rt41t x WHERE x.secret = t.open) AS n FROM rt41t t;
      CREATE FUNCTION rt41f(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1';
      CREATE VIEW rt41vu AS SELECT id, rt41f(id) AS f FROM rt41t;
      GRANT SELECT ON rt41p, rt41c, rt41t, rt41t_a, rt41v1, rt41v2, rt41vp, rt41mv, rt41vc, rt41vu TO ${reader};`);
    await scanSource(a.env.db, 'chinook');
    a.env.gateway.store.invalidate('*');
  }, 300_000);
  afterAll(async () => a?.close());

  // Finding (low, fixed here; new with hnu41 item 2): a named refusal told the caller that a relation it
  // reads descends from the relation its deny statement names, which describe_source hides from it
  // (partition_of / inherits name only parents the caller may describe, rt1 RT1-5). The caller may
  // read the child rt41c only; its role denies `public.rt41p.secret` (describe_access lists that
  // string, but not that rt41c inherits from rt41p, nor that rt41c has a column `secret`). The read
  // of `secret` on rt41c answers "deny reading public.rt41p.secret", a missing column the common
  // text: the caller learned rt41c ⊂ rt41p and that rt41c.secret exists. Now a deny is named only
  // when it is on the relation itself or on an ancestor describe_source shows (shownAncestors,
  // src/pipeline/03-authorize.ts); otherwise the common text, as for a missing column.
  test('finding (low, fixed): a named refusal no longer discloses a child-parent link describe_source hides', async () => {
    const key = await caller('rt41-child', [
      { effect: 'allow', action: 'read', resource: 'public.rt41c' },
      { effect: 'deny', action: 'read', resource: 'public.rt41p.secret' },
    ]);
    // describe_source shows rt41c without its parent and without the column.
    expect(await described(key)).toEqual(['rt41c.extra', 'rt41c.id']);
    expect((await query(a, 'SELECT id, extra FROM rt41c', {}, key)).rows).toEqual([{ id: 1, extra: 'E-1' }]);
    const hidden = await message('SELECT secret FROM rt41c', key);
    const missing = await message('SELECT secreu FROM rt41c', key);
    expect(missing).toBe(DENIED_MESSAGE_NO_STAR);
    expect(hidden).toBe(missing); // was: namedDenyMessage(['public.rt41p.secret'], false, false)
  });

  // Finding (info, open; new with hnu41 item 2): a deny statement written with --allow-unknown-names
  // (a guard "deny this column, should it exist") is listed verbatim by describe_access whether the
  // column exists or not; a read naming it now tells the two apart (named text for an existing
  // column, the common text for a missing one: the analyzer refuses before any check). Before
  // hnu41 both answered alike. The caller learns only whether names its own deny list spells exist.
  test.failing('finding (info, open): a named refusal tells an existing denied column from a missing one the same deny list names', async () => {
    const key = await caller('rt41-unknown', [
      { effect: 'allow', action: 'read', resource: 'public.customer' },
      { effect: 'deny', action: 'read', resource: 'public.customer.email' },
      { effect: 'deny', action: 'read', resource: 'public.customer.ssn' }, // no such column
    ]);
    const access = await callTool(a.env, 'interlock_describe_access', { source_id: 'chinook' }, key);
    expect(JSON.stringify(access.body.result.structuredContent)).toContain('public.customer.ssn');
    expect(await message('SELECT email FROM customer', key)).toBe(await message('SELECT ssn FROM customer', key));
  });

  // Withstood: the named text appears only for the caller's own deny naming the column in full. A
  // wildcard deny (`public.*.secret`, `public.rt41t.*`), another identity's deny, a deny on a
  // descendant, whole-row references, DISTINCT ON and a `*` in a comment or string literal answer the
  // common texts, and nothing in them names a relation or column.
  test('withstood: wildcard denies, other identities\' denies, whole-row refs and hidden stars keep the common text', async () => {
    await caller('rt41-other', [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'deny', action: 'read', resource: 'public.rt41t.open' },
    ]);
    const wild = await caller('rt41-wild', [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'deny', action: 'read', resource: 'public.*.secret' },
      { effect: 'deny', action: 'read', resource: 'public.rt41p.*' },
    ]);
    const texts = {
      wildColumn: await message('SELECT secret FROM rt41t', wild),
      wildMissing: await message('SELECT secreu FROM rt41t', wild),
      wildRelation: await message('SELECT id FROM rt41p', wild),
      wholeRow: await message('SELECT t FROM rt41t t', wild),
      distinctOn: await message('SELECT DISTINCT ON (id) * FROM rt41t', wild),
      commentStar: await message('SELECT /* * */ secret FROM rt41t', wild),
      stringStar: await message("SELECT '*', secret FROM rt41t", wild),
      starStar: await message('SELECT * FROM rt41t', wild),
      // rt41-other's deny on rt41t.open is not this caller's: rt41t.open is read.
      otherDeny: (await query(a, 'SELECT open FROM rt41t', {}, wild)).rows,
    };
    expect(texts).toEqual({
      wildColumn: DENIED_MESSAGE_NO_STAR,
      wildMissing: DENIED_MESSAGE_NO_STAR,
      wildRelation: DENIED_MESSAGE_NO_STAR,
      wholeRow: DENIED_MESSAGE_NO_STAR,
      distinctOn: DENIED_MESSAGE_NO_STAR, // `DISTINCT ON (a) *` loses the star advice (documented), nothing more
      commentStar: DENIED_MESSAGE_NO_STAR,
      stringStar: DENIED_MESSAGE_NO_STAR,
      starStar: DENIED_MESSAGE,
      otherDeny: [{ open: 'O-1' }],
    });
    // A deny on the partition's column and a read of the parent: refused, the deny unnamed (a
    // descendant's deny is not named through the parent).
    const part = await caller('rt41-part', [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'deny', action: 'read', resource: 'public.rt41t_a.secret' },
    ]);
    expect(await message('SELECT secret FROM rt41t', part)).toBe(DENIED_MESSAGE_NO_STAR);
    expect(await message('SELECT secret FROM rt41t_a', part)).toBe(namedDenyMessage(['public.rt41t_a.secret'], false, false));
  });

  // Withstood: describe and read agree both ways for views over views, a view over a partition, a
  // materialized view, a view whose column is fed by a denied column through a subquery and a view
  // column of unprovable lineage (a function outside pg_catalog, refused under any read deny): every
  // column describe_source / describe_access list reads, and every column they hide is refused.
  test('withstood: describe_source, describe_access and reads agree on views over views, partitions and materialized views', async () => {
    const key = await caller('rt41-views', [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'deny', action: 'read', resource: 'public.rt41t.secret' },
    ]);
    const cols: Record<string, string[]> = {
      rt41t: ['id', 'open', 'secret'],
      rt41t_a: ['id', 'open', 'secret'],
      rt41v1: ['id', 'open', 's1'],
      rt41v2: ['id', 's2', 'open'],
      rt41vp: ['id', 'sp'],
      rt41mv: ['id', 'open', 'sm'],
      rt41vc: ['id', 'n'],
      rt41vu: ['id', 'f'], // f: through a pure user function (hfn: its body reads nothing, so the lineage is id's)
    };
    const readable: string[] = [];
    for (const [t, cs] of Object.entries(cols)) for (const c of cs) if ((await query(a, `SELECT ${c} FROM ${t}`, {}, key)).kind === 'rows') readable.push(`${t}.${c}`);
    readable.sort();
    const source = (await described(key)).filter((x) => Object.keys(cols).includes(x.split('.')[0])).map((x) => x.split(' ')[0]);
    const access = (await accessColumns(key)).filter((x) => Object.keys(cols).includes(x.split('.')[0]));
    expect({ source, access }).toEqual({ source: readable, access: readable });
    // What the lineage decides, spelled out: every path to rt41t.secret is refused.
    expect(readable).toEqual(['rt41mv.id', 'rt41mv.open', 'rt41t.id', 'rt41t.open', 'rt41t_a.id', 'rt41t_a.open', 'rt41v1.id', 'rt41v1.open', 'rt41v2.id', 'rt41v2.open', 'rt41vc.id', 'rt41vp.id', 'rt41vu.f', 'rt41vu.id']);
  });

  // Measure (not asserted): describe of a source with ~500 views as an agent holding a read deny
  // (viewColumnDenied analyses each view column once per catalogue snapshot, then decides its
  // lineage per call). Logged for the report.
  test('measure: describe_source and describe_access over 500 views with a read deny', async () => {
    // RT41A_VIEWS overrides the count for a larger one-off measurement (the report's 2000-view figure).
    const n = Number(process.env.RT41A_VIEWS ?? 500);
    await a.admin.query(`DO $$ BEGIN FOR i IN 1..${n} LOOP
      EXECUTE format('CREATE VIEW rt41w%s AS SELECT id, open, secret AS s%s, id + %s AS k FROM rt41t', i, i, i);
      EXECUTE format('GRANT SELECT ON rt41w%s TO %I', i, '${a.env.demo.readerRole}');
    END LOOP; END $$;`);
    await scanSource(a.env.db, 'chinook');
    a.env.gateway.store.invalidate('*');
    const key = await caller('rt41-many', [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'deny', action: 'read', resource: 'public.rt41t.secret' },
    ]);
    // The same describe for a caller without any read deny (viewColumnDenied answers at once), rounds alternating.
    const plain = await caller('rt41-many-plain', [{ effect: 'allow', action: 'read', resource: 'public.*' }]);
    const times: Record<string, number[]> = {};
    const rows: Record<string, number> = {};
    for (let round = 0; round < 5; round++) {
      for (const [who, k] of [['deny', key], ['plain', plain]] as const) {
        for (const tool of ['interlock_describe_source', 'interlock_describe_access']) {
          const t0 = performance.now();
          const r = await callTool(a.env, tool, { source_id: 'chinook' }, k);
          (times[`${who} ${tool.slice('interlock_describe_'.length)}`] ??= []).push(Math.round(performance.now() - t0));
          if (tool === 'interlock_describe_source') rows[who] = (r.body?.result?.structuredContent?.rows ?? []).filter((x: { table_name: string }) => x.table_name.startsWith('rt41w')).length;
        }
      }
    }
    // 500 views × 3 visible columns (s<i> hidden through its lineage) for the deny; all 4 without.
    expect(rows).toEqual({ deny: 3 * n, plain: 4 * n });
    // eslint-disable-next-line no-console
    console.log(`rt41a describe over ${n} views (ms per call, first = cold snapshot; load ${require('node:os').loadavg()[0].toFixed(1)}): ${JSON.stringify(times)}`);
  });
});

describe('h28s: the closed-circuit fast path of the source breaker', () => {
  const failure = () => new SourceError('source_unavailable', { sourceFailure: true });
  const own = () => new SourceError('execution_failed', { sourceFailure: false, sqlState: '42703' });
  const settle = (b: SourceBreaker, err: SourceError | null) => b.run(() => (err ? Promise.reject(err) : Promise.resolve(1))).then(() => 'ok', (e: SourceError) => e.code);
  const breaker = (resetMs = 60_000) => new SourceBreaker('rt41a', 3, resetMs, () => new SourceError('execution_failed', { sourceFailure: true }));

  // Withstood: fast-path failures count (threshold opens the circuit, later calls are refused without
  // running), a synchronous throw counts like a rejection, and one identity's bad statements (the
  // statement's own errors) neither count nor let a down source's failures be forgotten by others'.
  test('withstood: source failures on the fast path open the circuit; statement errors do not', async () => {
    const b = breaker();
    for (let i = 0; i < 10; i++) expect(await settle(b, own())).toBe('execution_failed');
    expect(b.state()).toBe('closed');
    expect(await settle(b, failure())).toBe('source_unavailable');
    expect(await b.run(() => { throw failure(); }).catch((e: SourceError) => e.code)).toBe('source_unavailable');
    expect(b.state()).toBe('closed');
    expect(await settle(b, failure())).toBe('source_unavailable');
    expect(b.state()).toBe('open');
    let ran = 0;
    expect(await b.run(async () => { ran++; return 1; }).catch((e: SourceError) => e.code)).toBe('circuit_open');
    expect(ran).toBe(0);
    b.shutdown();
  });

  // Withstood: half-open lets exactly one probe through however many calls arrive at once; a failed
  // probe reopens; a call begun while closed that fails after the circuit went half-open reopens it.
  test('withstood: one half-open probe among concurrent calls', async () => {
    const b = breaker(50);
    for (let i = 0; i < 3; i++) await settle(b, failure());
    expect(b.state()).toBe('open');
    await new Promise((r) => setTimeout(r, 120));
    expect(b.state()).toBe('half_open');
    let ran = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const calls = Array.from({ length: 20 }, () => b.run(async () => { ran++; await gate; throw failure(); }).catch((e: SourceError) => e.code));
    release();
    const codes = await Promise.all(calls);
    expect({ ran, probe: codes.filter((c) => c === 'source_unavailable').length, refused: codes.filter((c) => c === 'circuit_open').length, state: b.state() }).toEqual({ ran: 1, probe: 1, refused: 19, state: 'open' });
    b.shutdown();
  });

  // Finding (low, fixed here; older than h28s: opossum's error filter did the same before): pg-pool's wait
  // for a free connection ('timeout exceeded when trying to connect' → source_busy, sourceFailure
  // false) counts as a success and resets the consecutive-failure count. A source that stops
  // answering (packets dropped) under more concurrent calls than the pool holds gives, per
  // connect-timeout round, pool_size connect failures then the waiters' source_busy: with
  // pool_size below failure_threshold (the writer pool holds min(2, pool_size); defaults 5 and 5)
  // the count never reaches the threshold, the circuit never opens, and every caller waits its
  // connect timeout while the source is down. Shown on a real pg-pool against a server that accepts
  // TCP and never answers (before: 4 rounds of [source_unavailable, source_busy, source_busy], still
  // closed). Now local saturation neither counts nor resets on the closed circuit's path
  // (isSaturation, src/sources/postgres/breaker.ts); the half-open probe still goes through opossum's
  // fire(), where a source_busy passes the error filter, but the probe is then the only call.
  test('finding (low, fixed): a silent source under more calls than the pool holds opens the circuit', async () => {
    const fake = await startFakePg({ kind: 'silent' });
    const c = new PostgresSourceConnector('rt41a-silent', { host: '127.0.0.1', port: fake.port, database: 'postgres', reader: { user: 'postgres' }, pool_size: 1, connect_timeout_ms: 300, breaker: { failure_threshold: 2, reset_timeout_ms: 60_000 } });
    const rounds: string[][] = [];
    try {
      for (let round = 0; round < 4 && c.breakerState() === 'closed'; round++) {
        rounds.push(await Promise.all(Array.from({ length: 3 }, () => c.read('SELECT 1', [], { maxRows: 1, maxBytes: 1e4 }).then(() => 'ok', (e: SourceError) => e.code))));
      }
      // eslint-disable-next-line no-console
      console.log(`rt41a silent source rounds: ${JSON.stringify(rounds)}, breaker ${c.breakerState()}`);
      expect(c.breakerState()).toBe('open');
    } finally {
      await c.close();
      await fake.close();
    }
  });
});

describe('CI at 2d26268: a connect attempt pg-pool starts for a waiter that then gives up', () => {
  // Finding (low, fixed; the previous test failed once in CI on it): when a connect attempt fails,
  // pg-pool hands the freed slot to the first waiter by starting a new connect for it; when that
  // waiter's own wait times out first, the new attempt's failure reaches no caller, and it holds the
  // pool's slot for another connect timeout. Against a source that accepts TCP and never answers,
  // every later caller waited behind such orphaned attempts and got `source_busy` (local
  // saturation, not counted): the circuit never opened. Shown here without racing timers: the
  // second and third calls start half a connect timeout after the first, so the first's failure
  // always frees the slot while they wait (before: [source_unavailable, source_busy, source_busy]
  // and then only source_busy, closed). Now a wait that times out while none of the pool's
  // connections is connected is the source failing (`source_unavailable`, counts).
  test('finding (low, fixed): waits behind unanswered connect attempts count against the source', async () => {
    const fake = await startFakePg({ kind: 'silent' });
    const c = new PostgresSourceConnector('ci-orphan', { host: '127.0.0.1', port: fake.port, database: 'postgres', reader: { user: 'postgres' }, pool_size: 1, connect_timeout_ms: 300, breaker: { failure_threshold: 3, reset_timeout_ms: 60_000 } });
    const read = () => c.read('SELECT 1', [], { maxRows: 1, maxBytes: 1e4 }).then(() => 'ok', (e: SourceError) => e.code);
    try {
      const first = read();
      await new Promise((r) => setTimeout(r, 150));
      const codes = await Promise.all([first, read(), read()]);
      expect(codes).toEqual(['source_unavailable', 'source_unavailable', 'source_unavailable']);
      expect(c.breakerState()).toBe('open');
    } finally {
      await c.close();
      await fake.close();
    }
  });
});

describe('red team rt42b: a wait that times out after the gateway dropped its own connection', () => {
  // Finding (low, fixed): since cc6dc96 a pool wait that times out while none of the pool's
  // connections is connected counts against the source. An agent that makes the gateway drop its
  // own connections (a cancel, an oversized result) empties the pool's connected set; a waiter whose
  // wait then times out while the replacement is still connecting was counted as the source failing
  // although a connection had just been made. Now a connection made within the wait (connect
  // timeout) keeps such a wait `source_busy` (local saturation, not counted). Staged with a fake
  // server whose first session starts and later ones never answer: call A holds the one connection,
  // B waits, A is cancelled (its connection dropped), B's replacement connect hangs and B's wait
  // times out (before: source_unavailable, counted).
  test('finding (low, fixed): a waiter behind a connection the gateway dropped is busy, not a source failure', async () => {
    const fake = await startFakePg({ kind: 'silent_after_first' });
    const c = new PostgresSourceConnector('rt42b-drop', { host: '127.0.0.1', port: fake.port, database: 'postgres', reader: { user: 'postgres' }, pool_size: 1, connect_timeout_ms: 400, breaker: { failure_threshold: 1, reset_timeout_ms: 60_000 } });
    const read = (signal?: AbortSignal) => c.read('SELECT 1', [], { maxRows: 1, maxBytes: 1e4, ...(signal ? { signal } : {}) }).then(() => 'ok', (e: SourceError) => e.code);
    try {
      const abort = new AbortController();
      const a = read(abort.signal);
      while (fake.queries === 0) await new Promise((r) => setTimeout(r, 5));
      const b = read();
      await new Promise((r) => setTimeout(r, 50));
      abort.abort();
      expect(await Promise.all([a, b])).toEqual(['cancelled', 'source_busy']);
      expect(c.breakerState()).toBe('closed');
    } finally {
      await c.close();
      await fake.close();
    }
  });
});

describe('hnu41 item 4: partial rate limits', () => {
  // Withstood: a rate limit given in part takes the other field from the layer below; a points of 0
  // (or a negative or fractional one, a window of 0) is refused, never read as unlimited or as 0.
  test('withstood: points alone, window alone, zero and junk', () => {
    const base = loadConfig({ env: {} });
    expect(loadConfig({ env: {}, overrides: { rate_limits: { per_identity: { points: 7 } } } as never }).rate_limits.per_identity).toEqual({ points: 7, window_seconds: base.rate_limits.per_identity.window_seconds });
    expect(loadConfig({ env: { INTERLOCK_RATE_LIMIT_SOURCE_WINDOW_SECONDS: '5' } }).rate_limits.per_source).toEqual({ points: base.rate_limits.per_source.points, window_seconds: 5 });
    expect(loadConfig({ env: {}, overrides: { client_limits: { keyless: { window_seconds: 9 } } } as never }).client_limits.keyless).toEqual({ points: base.client_limits.keyless.points, window_seconds: 9 });
    for (const bad of [{ points: 0 }, { points: -1 }, { points: 1.5 }, { window_seconds: 0 }, { points: '5' }, { points: null }]) {
      expect(() => loadConfig({ env: {}, overrides: { rate_limits: { per_identity: bad } } as never })).toThrow();
    }
    expect(() => loadConfig({ env: { INTERLOCK_RATE_LIMIT_IDENTITY_POINTS: '0' } })).toThrow();
  });
});

describe('hlow item 4: a source removal racing an apply that adds a claim rule naming it', () => {
  let t: TestControlDb;
  beforeAll(async () => {
    t = await freshControlDb('rt41a_claim');
    await t.db.pool.query(`INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('s1', 'postgres', 's1', '', true, '{}')`);
    await upsertRole(t.db, { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] }, {}, { allowUnknownNames: true });
  });
  afterAll(async () => t?.cleanup());

  // Finding (low, fixed here; the race is older than hlow, hlow's guarantee made it matter): `source
  // remove --force` (CLI, DELETE /admin/v1/sources/{id}) took no part in apply's lock. An apply
  // adding a claim mapping rule naming the source, run while the removal's transaction was open,
  // still saw the source (its plan checks the rule's source exists), wrote the rule and committed;
  // the removal had found no rule to untie and committed too: a claim mapping rule outlived its
  // source, and would give role r on any source added later as s1 (what hlow item 4 prevents).
  // Now removeSourceIn takes apply's transaction lock first, so the two run one after the other: the
  // apply then finds no source s1 and is refused.
  test('finding (low, fixed): no claim rule outlives its source when an apply races the removal', async () => {
    const c = await t.db.pool.connect();
    try {
      await c.query('BEGIN');
      const removal = removeSourceIn(c, 's1', { operator: 'ops-rm', force: true });
      await removal;
      const doc = { version: 1, claim_mappings: [{ issuer: 'https://idp.rt41a.example', role_grants: [{ claim: 'groups', value: 'a', role: 'r', source: 's1' }] }] };
      const applying = applyInterlockFile(t.db, { document: doc as never }, { operator: 'ops-apply', scan: false }).then(
        () => 'applied',
        (e: Error) => `${e.constructor.name}: ${e.message}`,
      );
      // The apply either finishes (the race) or waits for the removal's transaction.
      await Promise.race([applying, lockWaitSeen(t.db.pool)]);
      await c.query('COMMIT');
      expect(await applying).toBe('ValidationError: claim mapping https://idp.rt41a.example: rule groups=a → role r on s1: no source "s1" in the file or the control plane');
    } finally {
      c.release();
    }
    const rules = await t.db.pool.query<{ role_grants: Array<{ source: string }> }>('SELECT role_grants FROM claim_mappings');
    const sources = await t.db.pool.query('SELECT id FROM sources');
    expect({ sources: sources.rowCount, rulesNamingS1: rules.rows.flatMap((m) => m.role_grants).filter((g) => g.source === 's1').length }).toEqual({ sources: 0, rulesNamingS1: 0 });
  });
});

describe('hlow item 4: the privileges the source family gained', () => {
  // Finding (low, fixed by task hpriv, migration 20261213190000000; hostile operator; new with hlow
  // 0b30017): to untie claim rules on a forced removal, the `source` governance family gained UPDATE
  // on claim_mappings, the whole row. A database role granted the source family only
  // (checkGovernancePrivileges decides writes per family, so such a role is a supported
  // least-privilege setup) could therefore rewrite any claim mapping's role_grants, e.g. add a rule
  // giving an IdP group any role on any source: a write of the claim-mapping family (apply's), not a
  // source's. Now the untying is done by the SECURITY DEFINER function
  // interlock_untie_removed_source_claim_rules, which only takes out the rules naming a source already
  // removed (EXECUTE for the source family), as interlock_reject_removed_source_approvals does for
  // approvals (red team rtop finding 4).
  test('finding (low, fixed): the source family may not rewrite any claim mapping rule', () => {
    expect(GOVERNANCE_WRITE_PRIVILEGES.source.filter((p) => p[0] === 'claim_mappings')).toEqual([]);
  });

  describe('a role given the source family only', () => {
    let t: TestControlDb;
    let role: { role: string; url: string };
    const IDP = 'https://idp.hpriv.example';
    const OTHER = 'https://other.hpriv.example';
    const rule = (value: string, source: string) => ({ claim: 'groups', value, role: 'r', source });
    /** Grants `name` what the source family's writes need (privilegesOf('source')), reading the tables source removal reads. */
    async function grantSourceFamily(db: ControlDb, name: string): Promise<void> {
      const r = `"${name}"`;
      await db.pool.query(`GRANT CONNECT ON DATABASE "${t.temp.name}" TO ${r}; GRANT USAGE ON SCHEMA public TO ${r}`);
      for (const [table, writes] of Object.entries(operatorRoleWrites(privilegesOf('source'), ['approvals', 'claim_mappings', 'interlock_migrations']))) {
        await db.pool.query(`GRANT SELECT ON ${table} TO ${r}`);
        if (writes) await db.pool.query(`GRANT ${writes} ON ${table} TO ${r}`);
      }
      // interlock_audit_append_v2 appends config events only for a session role that may INSERT into grants (migration 20261208220000000).
      await db.pool.query(`GRANT INSERT ON grants TO ${r}`);
      for (const fn of [CONFIG_EVENT_FUNCTION, ...privilegesOf('source').filter((p) => p[1] === 'EXECUTE').map((p) => p[0])]) await db.pool.query(`GRANT EXECUTE ON FUNCTION ${fn} TO ${r}`);
    }
    beforeAll(async () => {
      t = await freshControlDb('rt41a_priv');
      for (const id of ['s1', 's2']) await t.db.pool.query(`INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ($1, 'postgres', $1, '', true, '{}')`, [id]);
      await upsertRole(t.db, { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] }, {}, { allowUnknownNames: true });
      await t.db.pool.query('INSERT INTO claim_mappings (issuer, identity_claim, role_grants) VALUES ($1, $2, $3), ($4, NULL, $5)', [
        IDP, 'email', JSON.stringify([rule('a', 's1'), rule('b', 's2'), rule('c', 's1')]),
        OTHER, JSON.stringify([rule('d', 's2')]),
      ]);
      role = await createGrantedLoginRole(t, 'il_hpriv', grantSourceFamily);
    });
    afterAll(async () => {
      if (role) await dropLoginRole(t, role.role);
      await t?.cleanup();
    });

    test('it may make source writes (checked per family), not claim mapping writes', async () => {
      const db = await openControlDb(role.url, { migrate: false, pepperOnlyIfReadable: true });
      try {
        const families = await checkGovernancePrivileges(db);
        expect({ source: families.has('source'), apply: families.has('apply') }).toEqual({ source: true, apply: false });
      } finally {
        await db.close();
      }
      const code = await asRole(role.url, (c) =>
        c.query(`UPDATE claim_mappings SET role_grants = '[{"claim":"groups","value":"evil","role":"r","source":"s2"}]'::jsonb WHERE issuer = $1`, [OTHER]).then(
          () => 'ok',
          (e: { code?: string }) => e.code,
        ),
      );
      expect(code).toBe('42501');
      expect((await t.db.pool.query('SELECT role_grants FROM claim_mappings WHERE issuer = $1', [OTHER])).rows).toEqual([{ role_grants: [rule('d', 's2')] }]);
    });

    test('the untying function refuses a source that still exists, and callers without EXECUTE', async () => {
      const call = (c: pg.Client) => c.query("SELECT * FROM interlock_untie_removed_source_claim_rules('s1')").then(() => 'ok', (e: { code?: string }) => e.code);
      expect(await asRole(role.url, call)).toBe('55000');
      expect(await withRuntimeRole(t, (url) => asRole(url, call))).toBe('42501');
      expect((await t.db.pool.query('SELECT issuer, role_grants FROM claim_mappings ORDER BY issuer')).rows).toEqual([
        { issuer: IDP, role_grants: [rule('a', 's1'), rule('b', 's2'), rule('c', 's1')] },
        { issuer: OTHER, role_grants: [rule('d', 's2')] },
      ]);
    });

    test('the migration takes UPDATE of claim_mappings from a role that held it for the source family only, and gives EXECUTE of the function to both', async () => {
      const temp = await createTempDatabase('hpriv_mig');
      const target = '20261213190000000_untie-claim-rules-function_hpriv';
      const [famOnly, applier] = ['il_hpf', 'il_hpa'].map((p) => `${p}_${randomBytes(4).toString('hex')}`);
      const admin = new pg.Client({ connectionString: ADMIN_URL });
      await admin.connect();
      const c = new pg.Client({ connectionString: temp.url });
      await c.connect();
      try {
        const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
        await runner({ dbClient: c, dir: MIGRATIONS_DIR, migrationsTable: MIGRATIONS_TABLE, direction: 'up', count: migrationNames().indexOf(target), singleTransaction: true, logger: quiet });
        for (const r of [famOnly, applier]) await admin.query(`CREATE ROLE ${r}`);
        await c.query(`GRANT SELECT, UPDATE ON claim_mappings TO ${famOnly}; GRANT SELECT, INSERT, UPDATE, DELETE ON claim_mappings TO ${applier}`);
        expect(await runMigrations(temp.url)).toEqual(migrationNames().slice(migrationNames().indexOf(target)));
        const may = await c.query(
          `SELECT r, has_any_column_privilege(r, 'claim_mappings', 'UPDATE') AS u, has_table_privilege(r, 'claim_mappings', 'SELECT') AS s,
                  has_function_privilege(r, 'interlock_untie_removed_source_claim_rules(text)', 'EXECUTE') AS x
             FROM unnest($1::text[]) AS r ORDER BY array_position($1::text[], r)`,
          [[famOnly, applier]],
        );
        expect(may.rows).toEqual([
          { r: famOnly, u: false, s: true, x: true },
          { r: applier, u: true, s: true, x: true },
        ]);
        expect((await c.query("SELECT has_function_privilege('public', 'interlock_untie_removed_source_claim_rules(text)', 'EXECUTE') AS p")).rows).toEqual([{ p: false }]);
      } finally {
        await c.query('REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ' + [famOnly, applier].join(', ')).catch(() => undefined);
        await c.query('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ' + [famOnly, applier].join(', ')).catch(() => undefined);
        await c.end();
        await temp.drop();
        for (const r of [famOnly, applier]) await admin.query(`DROP ROLE IF EXISTS ${r}`);
        await admin.end();
      }
    });

    test('a forced removal through it takes out exactly the rules naming the source, each mapping audited', async () => {
      const removal = await asRole(role.url, async (c) => {
        await c.query('BEGIN');
        const out = await removeSourceIn(c, 's1', { operator: 'ops-hpriv', force: true });
        await c.query('COMMIT');
        return out;
      });
      expect(removal.claimRulesUntied).toEqual([IDP]);
      expect((await t.db.pool.query('SELECT issuer, identity_claim, role_grants FROM claim_mappings ORDER BY issuer')).rows).toEqual([
        { issuer: IDP, identity_claim: 'email', role_grants: [rule('b', 's2')] },
        { issuer: OTHER, identity_claim: null, role_grants: [rule('d', 's2')] },
      ]);
      const events = await t.db.pool.query("SELECT decision, operator, source_id, details - 'digest' AS details FROM audit_events WHERE kind = 'config' AND decision = 'claim_mapping_updated' ORDER BY id");
      expect(events.rows).toEqual([
        { decision: 'claim_mapping_updated', operator: 'ops-hpriv', source_id: 's1', details: { issuer: IDP, reason: 'source_removed', removed: [rule('a', 's1'), rule('c', 's1')] } },
      ]);
    });
  });
});
