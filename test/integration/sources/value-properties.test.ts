/**
 * Round-trip properties of the value mapping (issue 23 "Must show"): random `numeric` values,
 * `int8` values inside `jsonb`, timestamps (with and without zone, dates, BC years) and intervals
 * are sent as parameters through interlock_query, and the gateway's text must equal what
 * PostgreSQL itself writes for them (a superuser session with the pinned output settings and no
 * parsing), under the mapping: numeric and timestamps as that text, jsonb verbatim, int8 as a
 * number within ±(2^53−1) and as its digits beyond.
 */
import fc from 'fast-check';
import pg from 'pg';
import { PINNED_SESSION_SETTINGS } from '../../../src/sources/postgres/session-settings';
import { callTool, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';

let env: GovernedEnv;
let oracle: pg.Client;
const RUNS = 60;

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  try {
    const dbName = new URL(env.sourceUrl).pathname.slice(1);
    // A hostile database default; the reader's pinned settings (issue 22 pins them at startup) win.
    await admin.query(`ALTER DATABASE "${dbName}" SET DateStyle = 'SQL, DMY'; ALTER DATABASE "${dbName}" SET TimeZone = 'Asia/Kathmandu'`);
    for (const s of PINNED_SESSION_SETTINGS.filter((x) => x.family === 'output')) {
      await admin.query(`ALTER ROLE ${admin.escapeIdentifier(env.demo.readerRole)} IN DATABASE "${dbName}" SET ${s.name} = ${admin.escapeLiteral(s.value)}`);
    }
  } finally {
    await admin.end();
  }
  oracle = new pg.Client({ connectionString: env.sourceUrl, types: { getTypeParser: () => (s: string) => s } });
  await oracle.connect();
  for (const s of PINNED_SESSION_SETTINGS.filter((x) => x.family === 'output')) await oracle.query(`SET ${s.name} = ${oracle.escapeLiteral(s.value)}`);
}, 120_000);

afterAll(async () => {
  await oracle?.end();
  await env?.close();
});

/** The gateway's first text item for `sql` with `params`. */
async function viaGateway(sql: string, params: unknown[]): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey);
  const res = r.body.result;
  if (!res || res.isError) throw new Error(`interlock_query failed: ${JSON.stringify(r.body).slice(0, 400)}`);
  return res.content[0].text as string;
}

/** PostgreSQL's own text of each output column. */
async function serverText(sql: string, params: unknown[]): Promise<string[]> {
  const r = await oracle.query({ text: sql, values: params, rowMode: 'array' });
  return r.rows[0] as string[];
}

const digits = (min: number, max: number) => fc.stringMatching(new RegExp(`^[0-9]{${min},${max}}$`));

test('numeric: every digit and the scale come back as PostgreSQL writes them', async () => {
  const numeric = fc.oneof(
    fc.tuple(fc.constantFrom('', '-'), digits(1, 60), fc.option(digits(1, 40), { nil: undefined })).map(([s, i, f]) => `${s}${i}${f === undefined ? '' : `.${f}`}`),
    fc.constantFrom('NaN', 'Infinity', '-Infinity', '0.000', '-0.0'),
  );
  await fc.assert(
    fc.asyncProperty(numeric, async (n) => {
      const sql = 'SELECT $1::numeric AS v';
      const [text] = await serverText(sql, [n]);
      expect(await viaGateway(sql, [n])).toBe(`[{"v":${JSON.stringify(text)}}]`);
    }),
    { numRuns: RUNS },
  );
}, 120_000);

test('int8 inside jsonb keeps every digit; a bare int8 is a number only within ±(2^53−1)', async () => {
  const int8 = fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), fc.bigInt({ min: -(2n ** 53n) - 3n, max: 2n ** 53n + 3n }));
  await fc.assert(
    fc.asyncProperty(int8, async (b) => {
      const sql = "SELECT pg_catalog.jsonb_build_object('id', $1::int8, 'list', pg_catalog.jsonb_build_array($1::int8, 1.50)) AS j, $1::int8 AS n";
      const [j, n] = await serverText(sql, [b.toString()]);
      const safe = b <= 9007199254740991n && b >= -9007199254740991n;
      expect(await viaGateway(sql, [b.toString()])).toBe(`[{"j":${j},"n":${safe ? n : JSON.stringify(n)}}]`);
      expect(n).toBe(b.toString());
    }),
    { numRuns: RUNS },
  );
}, 120_000);

test('timestamps, timestamptz and dates come back as PostgreSQL writes them, no zone added or shifted', async () => {
  const pad = (v: number, w: number) => String(v).padStart(w, '0');
  const ts = fc
    .record({ y: fc.integer({ min: 1, max: 294275 }), bc: fc.boolean(), mo: fc.integer({ min: 1, max: 12 }), d: fc.integer({ min: 1, max: 28 }), h: fc.integer({ min: 0, max: 23 }), mi: fc.integer({ min: 0, max: 59 }), s: fc.integer({ min: 0, max: 59 }), us: fc.integer({ min: 0, max: 999999 }), off: fc.integer({ min: -15 * 60, max: 15 * 60 }) })
    .filter((r) => !r.bc || r.y <= 4713)
    .map((r) => ({
      plain: `${pad(r.y, 4)}-${pad(r.mo, 2)}-${pad(r.d, 2)} ${pad(r.h, 2)}:${pad(r.mi, 2)}:${pad(r.s, 2)}.${pad(r.us, 6)}${r.bc ? ' BC' : ''}`,
      zoned: `${pad(r.y, 4)}-${pad(r.mo, 2)}-${pad(r.d, 2)} ${pad(r.h, 2)}:${pad(r.mi, 2)}:${pad(r.s, 2)}.${pad(r.us, 6)}${r.off < 0 ? '-' : '+'}${pad(Math.floor(Math.abs(r.off) / 60), 2)}:${pad(Math.abs(r.off) % 60, 2)}${r.bc ? ' BC' : ''}`,
    }));
  await fc.assert(
    fc.asyncProperty(ts, async ({ plain, zoned }) => {
      const sql = 'SELECT $1::timestamp AS ts, $2::timestamptz AS tz, $1::timestamp::date AS d';
      const texts = await serverText(sql, [plain, zoned]);
      expect(await viaGateway(sql, [plain, zoned])).toBe(`[{"ts":${JSON.stringify(texts[0])},"tz":${JSON.stringify(texts[1])},"d":${JSON.stringify(texts[2])}}]`);
      expect(texts[1]).toMatch(/\+00( BC)?$/);
    }),
    { numRuns: RUNS },
  );
}, 120_000);

test('intervals come back as PostgreSQL writes them', async () => {
  const iv = fc
    .record({ y: fc.integer({ min: -100000, max: 100000 }), mo: fc.integer({ min: -11, max: 11 }), d: fc.integer({ min: -100000, max: 100000 }), h: fc.integer({ min: -1000, max: 1000 }), mi: fc.integer({ min: 0, max: 59 }), s: fc.integer({ min: 0, max: 59 }), us: fc.integer({ min: 0, max: 999999 }) })
    .map((r) => `${r.y} years ${r.mo} mons ${r.d} days ${r.h} hours ${r.mi} minutes ${r.s}.${String(r.us).padStart(6, '0')} seconds`);
  await fc.assert(
    fc.asyncProperty(iv, async (v) => {
      const sql = 'SELECT $1::interval AS v';
      const [text] = await serverText(sql, [v]);
      expect(await viaGateway(sql, [v])).toBe(`[{"v":${JSON.stringify(text)}}]`);
    }),
    { numRuns: RUNS },
  );
}, 120_000);
