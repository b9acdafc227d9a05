/**
 * Task hw: an approved write runs only against the functions, operators and row shapes it was
 * analysed and approved with. The approval's re-check analyses the write against the stored
 * catalogue; right before the statement, in the write's own transaction, the function and shape
 * guards of that analysis (src/sources/postgres/function-guard.ts, shape-guard.ts) prove that every
 * function and operator of a name it looks up is still the scanned one. A function replaced between
 * the re-check and the run (staged here by wrapping the writer connector's `write`, the seam between
 * the two steps of approveAndExecute), or an operator created after the scan that would win the
 * write's `=`, stops the write: nothing is written, the approval ends failed `catalog_stale` with an
 * operator-side cause, the agent reads the code through interlock_approval_status, and the source is
 * rescanned, so a requeued approval is analysed and approved against the new definitions. Task
 * hcast: the same guard statement compares the casts and domain constraints of the types the write
 * involves (src/sources/postgres/type-guard.ts).
 */
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';
import { requeueApproval } from '../../../src/approvals/requeue';
import { staleCatalogCause } from '../../../src/approvals/causes';
import { getApproval } from '../../../src/control/approvals';
import { loadCatalog } from '../../../src/control/catalog';
import { requireSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { SourceConnectorRegistry } from '../../../src/sources/registry';
import { createOperatorToken } from '../../../src/admin/tokens';
import type { PostgresSourceSettings } from '../../../src/sources/postgres/connector';
import errors from '../../../spec/errors-v1.json';

jest.setTimeout(120_000);

const sc = (r: { body: any }) => r.body.result.structuredContent;
const failureMessage = (code: string) => errors.approvalFailures.find((f) => f.code === code)!.message;

let env: GovernedEnv;
beforeAll(async () => {
  env = await startGovernedEnv();
  await sourceQuery(
    env,
    `CREATE FUNCTION public.hw_norm(t varchar) RETURNS varchar LANGUAGE sql IMMUTABLE AS $$ SELECT upper(t) $$;
     CREATE DOMAIN public.hw_tag AS varchar;
     INSERT INTO playlist (playlist_id, name) VALUES (9301, 'hw one'), (9302, 'hw two'), (9303, 'hw three'), (9304, 'hw four'), (9305, 'hw five');`,
  );
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
});
afterAll(async () => {
  await sourceQuery(env, 'DROP OPERATOR IF EXISTS public.= (varchar, varchar); DROP FUNCTION IF EXISTS public.hw_true_eq(varchar, varchar)').catch(() => undefined);
  await env?.close();
});

/** Queues `sql` as the demo agent (a write on playlist: queued for approval); the approval id. */
async function queue(sql: string): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, env.apiKey);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}

/** The playlists of this test, by id. */
async function names(): Promise<Array<{ playlist_id: number; name: string }>> {
  return sourceQuery(env, 'SELECT playlist_id, name FROM playlist WHERE playlist_id BETWEEN 9301 AND 9305 ORDER BY playlist_id');
}

/** hw_norm's pg_proc version now (`oid:xmin`), as the scan records it. */
async function normVersion(): Promise<string> {
  const r = await sourceQuery<{ v: string }>(env, "SELECT oid::text || ':' || xmin::text AS v FROM pg_proc WHERE proname = 'hw_norm'");
  return r[0]!.v;
}

test('(1) a function replaced between the approval\'s analysis and the run: nothing is written, failed catalog_stale, the agent reads the code, the source is rescanned, and only a requeued approval runs the new body', async () => {
  const id = await queue('UPDATE playlist SET name = hw_norm(name) WHERE playlist_id = 9301');
  const before = await loadCatalog(env.db, env.demo.sourceId);
  const scannedVersion = before!.routines!.find((r) => r.name === 'hw_norm')!.version;
  expect(scannedVersion).toBe(await normVersion());

  // The seam: the re-check (and its analysis) is done when the writer is asked to write; the
  // function is replaced right then, before the write's transaction begins.
  const registry = new SourceConnectorRegistry();
  const source = await requireSource(env.db, env.demo.sourceId);
  const writer = registry.get(source.id, source.settings as unknown as PostgresSourceSettings);
  const write = writer.write.bind(writer);
  let replaced = 0;
  writer.write = async (...args: Parameters<typeof writer.write>) => {
    if (replaced++ === 0) await sourceQuery(env, "CREATE OR REPLACE FUNCTION public.hw_norm(t varchar) RETURNS varchar LANGUAGE sql IMMUTABLE AS $$ SELECT 'unreviewed'::varchar $$");
    return write(...args);
  };
  try {
    const done = await approveAndExecute(env.db, id, { operator: 'ops-hw', connectors: registry });
    expect(replaced).toBe(1);
    expect(done).toEqual({ approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) });
  } finally {
    await registry.closeAll();
  }
  // Nothing was written.
  expect(await names()).toEqual([
    { playlist_id: 9301, name: 'hw one' },
    { playlist_id: 9302, name: 'hw two' },
    { playlist_id: 9303, name: 'hw three' },
    { playlist_id: 9304, name: 'hw four' },
    { playlist_id: 9305, name: 'hw five' },
  ]);
  const stored = (await getApproval(env.db, id))!;
  expect(stored).toMatchObject({ state: 'failed', decidedBy: 'ops-hw', outcome: { error_code: 'catalog_stale' }, failure: staleCatalogCause(true) });
  expect(stored.failure!.message).toMatch(/^checked in the write's transaction right before the statement: .*Nothing was written \(rolled back\); the source was rescanned\. .*requeue it/);
  const ev = await env.db.pool.query<{ decision: string; reason_code: string | null }>("SELECT decision, reason_code FROM audit_events WHERE approval_id = $1 AND kind = 'approval' ORDER BY id", [id]);
  expect(ev.rows.map((r) => [r.decision, r.reason_code])).toEqual([
    ['queued', null],
    ['approved', null],
    ['failed', 'catalog_stale'],
  ]);

  // The agent's check of its queued write: the code and its fixed message, no server text.
  const status = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
  expect(sc(status)).toMatchObject({ approval_id: id, state: 'failed', outcome: { error_code: 'catalog_stale', message: failureMessage('catalog_stale') } });
  expect(sc(status).outcome).toEqual({ error_code: 'catalog_stale', message: failureMessage('catalog_stale') });
  expect(sc(status).message).toBe(`An operator approved it but it did not complete. ${failureMessage('catalog_stale')}`);

  // The source was rescanned: the stored catalogue records the replaced function's version.
  const after = await loadCatalog(env.db, env.demo.sourceId);
  expect(Date.parse(after!.scannedAt)).toBeGreaterThan(Date.parse(before!.scannedAt));
  expect(after!.routines!.find((r) => r.name === 'hw_norm')!.version).toBe(await normVersion());
  expect(await normVersion()).not.toBe(scannedVersion);

  // Never retried by itself; requeued and approved again, it runs the (now reviewed) new body.
  const again = await requeueApproval(env.db, id, { operator: 'ops-hw' });
  expect(await approveAndExecute(env.db, again.id, { operator: 'ops-hw' })).toEqual({ approvalId: again.id, state: 'executed', rowCount: 1 });
  expect((await names())[0]).toEqual({ playlist_id: 9301, name: 'unreviewed' });
});

test('(2) unchanged functions: the approved write runs and counts its rows exactly', async () => {
  const id = await queue('UPDATE playlist SET name = hw_norm(name) WHERE playlist_id IN (9302, 9303)');
  expect(await approveAndExecute(env.db, id, { operator: 'ops-hw' })).toEqual({ approvalId: id, state: 'executed', rowCount: 2 });
  expect((await names()).slice(1, 3)).toEqual([
    { playlist_id: 9302, name: 'unreviewed' },
    { playlist_id: 9303, name: 'unreviewed' },
  ]);
  expect((await getApproval(env.db, id))!).toMatchObject({ state: 'executed', outcome: { row_count: 2 } });
});

test("(3) an operator created after the scan in a path schema that would win the write's = (exact varchar match over the built-in): refused catalog_stale, nothing written", async () => {
  const id = await queue("UPDATE playlist SET name = 'hw matched' WHERE name = 'hw four'");
  // Run, it would match every row: public.=(varchar, varchar) beats pg_catalog.=(text, text) for a varchar column.
  await sourceQuery(
    env,
    `CREATE FUNCTION public.hw_true_eq(varchar, varchar) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT true $$;
     CREATE OPERATOR public.= (leftarg = varchar, rightarg = varchar, function = public.hw_true_eq);`,
  );
  // Every playlist as it is (compared by id only: no varchar = while the operator exists).
  const all = () => sourceQuery(env, 'SELECT playlist_id, name FROM playlist ORDER BY playlist_id');
  const before = await all();
  expect(before.length).toBeGreaterThan(5);
  try {
    const done = await approveAndExecute(env.db, id, { operator: 'ops-hw' });
    expect(done).toEqual({ approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) });
    expect(await all()).toEqual(before);
    expect((await names())[3]).toEqual({ playlist_id: 9304, name: 'hw four' });
    const status = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
    expect(sc(status).outcome).toEqual({ error_code: 'catalog_stale', message: failureMessage('catalog_stale') });
    // The rescan recorded the new operator.
    const after = await loadCatalog(env.db, env.demo.sourceId);
    expect((after!.operatorCode ?? []).some((o) => o[1] === '=')).toBe(true);
  } finally {
    await sourceQuery(env, 'DROP OPERATOR public.= (varchar, varchar); DROP FUNCTION public.hw_true_eq(varchar, varchar)');
  }
});

test("(4) approved through the gateway's admin API with a snapshot older than a CREATE OR REPLACE: failed catalog_stale, nothing written, rescanned by the gateway's one-at-a-time rescan (its store's snapshot dropped)", async () => {
  const token = (await createOperatorToken(env.db, 'ops-hw-api')).secret;
  const id = await queue('UPDATE playlist SET name = hw_norm(name) WHERE playlist_id = 9305');
  // Replaced after the scan and before the approval: the approval's re-check analyses the old snapshot.
  await sourceQuery(env, "CREATE OR REPLACE FUNCTION public.hw_norm(t varchar) RETURNS varchar LANGUAGE sql IMMUTABLE AS $$ SELECT 'replaced again'::varchar $$");
  const marked = jest.spyOn(env.gateway.store, 'markCatalogStale');
  try {
    const r = await fetch(new URL(`/admin/v1/approvals/${id}/approve`, env.url).toString(), { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
    expect({ status: r.status, json: await r.json() }).toEqual({ status: 200, json: { id, approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) } });
    expect(marked).toHaveBeenCalledWith(env.demo.sourceId);
  } finally {
    marked.mockRestore();
  }
  expect((await names())[4]).toEqual({ playlist_id: 9305, name: 'hw five' });
  expect((await loadCatalog(env.db, env.demo.sourceId))!.routines!.find((x) => x.name === 'hw_norm')!.version).toBe(await normVersion());
  const status = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
  expect(sc(status).outcome).toEqual({ error_code: 'catalog_stale', message: failureMessage('catalog_stale') });
});

test('(5) task hcast: a domain CHECK added after the scan to a type the write casts to: failed catalog_stale, nothing written', async () => {
  const id = await queue("UPDATE playlist SET name = ('hw tagged'::hw_tag)::varchar WHERE playlist_id = 9303");
  const before = await names();
  await sourceQuery(env, "ALTER DOMAIN public.hw_tag ADD CONSTRAINT hw_c CHECK (VALUE <> 'hw tagged')");
  try {
    // Without the type guard the write runs and fails on the new CHECK (23514), an upstream failure.
    const done = await approveAndExecute(env.db, id, { operator: 'ops-hw' });
    expect(done).toEqual({ approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) });
    expect(await names()).toEqual(before);
    // The rescan recorded the constraint's version.
    const after = await loadCatalog(env.db, env.demo.sourceId);
    const [tag] = await sourceQuery<{ o: string }>(env, "SELECT 'public.hw_tag'::regtype::oid::text AS o");
    expect((after!.castVersions ?? []).find((v) => String(v[0]) === tag!.o)?.[1]).toMatch(/^d[0-9]+:[0-9]+$/);
  } finally {
    await sourceQuery(env, 'ALTER DOMAIN public.hw_tag DROP CONSTRAINT hw_c');
  }
});
