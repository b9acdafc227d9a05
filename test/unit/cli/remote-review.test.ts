/**
 * `interlock --server … approval show|approve` read the review from GET /admin/v1/approvals/{id}/review;
 * against a gateway from before that route (404 unknown_route) they fall back to the record alone,
 * saying why there is no plan, and any other error stays an error.
 */
import { remoteBackend } from '../../../src/admin/client';
import { ControlError } from '../../../src/control/errors';

const record = { id: 'apr_0123456789abcdef01234567', state: 'pending', classification: { statement: 'DeleteStmt' }, sql: 'DELETE FROM t WHERE id = $1', params: [1] };
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

test('the review route answers: its body as is (a gateway from before the requester warning: requester null)', async () => {
  const review = { approval: record, destructive: true, estimate: 3, plan: { ok: true, lines: ['Delete on t  (cost=0.00..1.00 rows=0 width=0)'] } };
  const warned = { ...review, requester: { code: 'key_revoked', message: 'Approving will not run this write: …' } };
  const seen: string[] = [];
  let body: unknown = warned;
  const b = remoteBackend('http://gw.example:8787', 'ilo_x', async (url) => {
    seen.push(url);
    return json(200, body);
  });
  expect(await b.reviewApproval(record.id)).toEqual(warned);
  body = review;
  expect(await b.reviewApproval(record.id)).toEqual({ ...review, requester: null });
  expect(seen).toEqual([1, 2].map(() => `http://gw.example:8787/admin/v1/approvals/${record.id}/review`));
});

test('an older gateway (404 unknown_route): the record, destructive from its classification, no estimate and why', async () => {
  const b = remoteBackend('http://gw.example:8787', 'ilo_x', async (url) =>
    url.endsWith('/review') ? json(404, { error: 'not_found', code: 'unknown_route', message: 'No such admin route (or method)' }) : json(200, record),
  );
  expect(await b.reviewApproval(record.id)).toEqual({
    approval: record,
    destructive: true,
    estimate: null,
    plan: { ok: false, reason: 'the gateway has no approval review (GET /admin/v1/approvals/{id}/review): upgrade it for the plan and row estimate' },
    requester: null,
  });
});

test('an unknown approval stays not_found', async () => {
  const b = remoteBackend('http://gw.example:8787', 'ilo_x', async () => json(404, { error: 'not_found', code: 'not_found', message: `approval ${record.id} not found` }));
  await expect(b.reviewApproval(record.id)).rejects.toEqual(new ControlError('not_found', `approval ${record.id} not found`));
});
