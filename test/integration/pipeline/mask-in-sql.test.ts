/**
 * Masks applied in SQL (src/sql/mask-sql.ts; red-team finding F1, 1 December 2026). Before, masked
 * columns travelled raw to the gateway and were masked there, so the byte cap (4 MiB of rows' JSON)
 * and the wire budget (5 MiB of DataRow bytes) counted the raw values: padding a result next to a
 * masked column and searching where `result_too_large` began gave each value's byte length (13
 * calls), and a `full`-masked column's nullness. Now where the refusal begins is the same for every
 * row whatever its masked values hold.
 */
import { applyMask } from '../../../src/sql/redaction';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';

let env: GovernedEnv;
let phones: Array<{ customer_id: number; n: number }>;
let faxes: { withFax: number; withoutFax: number };

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } as never });
  phones = await sourceQuery(env, 'SELECT customer_id, octet_length(phone) AS n FROM customer WHERE phone IS NOT NULL ORDER BY customer_id');
  const f = await sourceQuery<{ customer_id: number; has: boolean }>(env, 'SELECT customer_id, fax IS NOT NULL AS has FROM customer ORDER BY customer_id');
  faxes = { withFax: f.find((r) => r.has)!.customer_id, withoutFax: f.find((r) => !r.has)!.customer_id };
}, 120_000);
afterAll(async () => env?.close());

/** 'ok' when the padded read is answered, else the refusal's code. */
async function outcome(sql: string, id: number): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [id] }, env.apiKey);
  expect(r.status).toBe(200);
  const res = r.body.result;
  if (!res.isError) return 'ok';
  return String(res.structuredContent?.code);
}

/** The smallest padding in (lo, hi] at which `template(padding)` is refused for customer `id` (lo answered, hi refused). */
async function threshold(template: (n: number) => string, id: number, lo: number, hi: number): Promise<number> {
  expect(await outcome(template(lo), id)).toBe('ok');
  expect(await outcome(template(hi), id)).toBe('result_too_large');
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if ((await outcome(template(mid), id)) === 'ok') lo = mid;
    else hi = mid;
  }
  return hi;
}

/** Asserts that the refusal begins at the same padding for customers `a` and `b`. */
async function sameThreshold(template: (n: number) => string, a: number, b: number, lo: number, hi: number): Promise<void> {
  const t = await threshold(template, a, lo, hi);
  expect(await outcome(template(t - 1), b)).toBe('ok');
  expect(await outcome(template(t), b)).toBe('result_too_large');
}

test('the byte cap begins at the same padding for rows whose masked values differ in length', async () => {
  const a = phones[0];
  const b = phones.find((p) => p.n !== a.n)!;
  expect(b).toBeDefined();
  // Before the fix the two thresholds differed by exactly the difference of the raw lengths.
  await sameThreshold((n) => `SELECT repeat('x', ${n}) AS p, phone FROM customer WHERE customer_id = $1`, a.customer_id, b.customer_id, 4_000_000, 4_194_304);
}, 120_000);

test('a fully masked column hides its nullness from the byte cap', async () => {
  await sameThreshold((n) => `SELECT repeat('x', ${n}) AS p, fax FROM customer WHERE customer_id = $1`, faxes.withFax, faxes.withoutFax, 4_000_000, 4_194_304);
}, 120_000);

test('repeated output names beside a masked column are refused (matching by position could follow a stale catalogue)', async () => {
  // Two columns named p would also let the wire carry bytes the rows' JSON does not count.
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: "SELECT repeat('x', 10) AS p, 'y' AS p, phone FROM customer WHERE customer_id = $1", params: [1] }, env.apiKey);
  expect(r.status).toBe(200);
  expect(r.body.result.isError).toBe(true);
  expect(r.body.result.structuredContent.code).toBe('redaction_unprovable');
  expect(r.body.result.structuredContent.message).toContain('give each output column its own alias');
});

test('masked answers are unchanged: full, partial, order, parameters and a trailing comment', async () => {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT customer_id, email, phone, fax, customer_id AS id_again FROM customer WHERE customer_id <= $1 ORDER BY customer_id DESC; -- last three', params: [3] }, env.apiKey);
  expect(r.status).toBe(200);
  const sc = r.body.result.structuredContent;
  expect(sc.row_count).toBe(3);
  expect(sc.masked_columns).toEqual(['email', 'phone', 'fax']);
  const raw = await sourceQuery<{ customer_id: number; email: string }>(env, 'SELECT customer_id, email FROM customer WHERE customer_id <= 3 ORDER BY customer_id DESC');
  expect(sc.rows.map((x: { customer_id: number }) => x.customer_id)).toEqual(raw.map((x) => x.customer_id));
  for (const [i, row] of sc.rows.entries()) {
    expect(row.phone).toBe('***');
    expect(row.fax).toBe('***');
    const email = raw[i].email;
    expect(row.email).toBe(applyMask(email, 'partial'));
    expect(row.email).not.toBe(email);
  }
});
