/**
 * The live hierarchy check before a read (issue 22 item 1, src/pipeline/hierarchy-check.ts): who is
 * checked, what the server is asked, and how a changed tree re-decides steps 3 and 4.
 */
import type { Policy } from '../../../generated/policy-v1';
import type { SourceRole } from '../../../generated/role-v1';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { RelationName, SourceCatalog } from '../../../src/sql/catalog-types';
import { relationKey, type LiveRelationTree } from '../../../src/sql/hierarchy';
import { policyStep } from '../../../src/pipeline/04-policy';
import { checkHierarchy } from '../../../src/pipeline/hierarchy-check';
import { namedDenyMessage } from '../../../src/pipeline/03-authorize';
import type { QueryConnector } from '../../../src/pipeline/07-execute';

beforeAll(() => initSqlParser());

const col = (name: string) => ({ name, dataType: 'text' });
/** At scan time `late` was an ordinary table; `m` a partitioned table with partition `m1`. */
const CATALOG: SourceCatalog = {
  relations: [
    { schema: 'public', name: 'm', kind: 'partitioned_table', columns: [col('id'), col('v')], partition: false, parents: [], ancestors: [] },
    { schema: 'public', name: 'm1', kind: 'table', columns: [col('id'), col('v')], partition: true, parents: [{ schema: 'public', name: 'm' }], ancestors: [{ schema: 'public', name: 'm' }] },
    { schema: 'public', name: 'late', kind: 'table', columns: [col('id'), col('v')], partition: false, parents: [], ancestors: [] },
  ],
  functions: [],
  searchPath: ['public'],
  scannedAt: '2026-12-03T00:00:00Z',
  truncated: false,
};
const SUBJECT = { identityId: 'i', identityName: 'agent', roles: ['r'], sourceId: 's' };
const MASK: Policy = { name: 'mask-v', rule: { type: 'mask_columns', columns: ['public.m.v'], method: 'full' } };
const ev = (statements: SourceRole['statements']) => new AccessEvaluator([{ sourceId: 's', role: { name: 'r', statements } }]);
const ALL: SourceRole['statements'] = [{ effect: 'allow', action: 'read', resource: 'public.*' }];

/** A connector answering relationTrees from `live` (or failing with `fail`), recording what it was asked. */
function connector(live: Record<string, LiveRelationTree>, fail?: Error): QueryConnector & { asked: RelationName[][] } {
  const asked: RelationName[][] = [];
  return {
    asked,
    read: () => Promise.reject(new Error('not used')),
    relationTrees: async (relations) => {
      asked.push([...relations]);
      if (fail) throw fail;
      return new Map(relations.map((r) => [relationKey(r.schema, r.name), live[r.name] ?? { ancestors: [], descendants: [] }]));
    },
  };
}

async function check(sql: string, statements: SourceRole['statements'], policies: Policy[], c: QueryConnector) {
  const analysis = analyzeSql(sql, CATALOG);
  if (!analysis.ok) throw new Error(analysis.message);
  const pol = policyStep(policies, SUBJECT, analysis, CATALOG, new Date());
  if (!pol.ok) throw new Error('policy refused');
  return { before: pol.restrictions, result: await checkHierarchy({ connector: c, evaluator: ev(statements), sourceId: 's', analysis, catalog: CATALOG, policies, subject: SUBJECT, now: new Date(), restrictions: pol.restrictions, identityId: 'i' }) };
}

test('a table attached under a masked parent after the scan is masked on the next read', async () => {
  const c = connector({ late: { ancestors: [{ schema: 'public', name: 'm' }], descendants: [] } });
  const { before, result } = await check('SELECT id, v FROM late', ALL, [MASK], c);
  expect(before.masks).toEqual([]);
  expect(c.asked).toEqual([[{ schema: 'public', name: 'late' }]]);
  expect(result).toMatchObject({ ok: true, changed: true });
  if (!result.ok) throw new Error('refused');
  expect(result.restrictions.masks).toEqual([{ column: { schema: 'public', table: 'late', column: 'v' }, method: 'full' }]);
});

test('a column deny on the new parent refuses the read', async () => {
  const c = connector({ late: { ancestors: [{ schema: 'public', name: 'm' }], descendants: [] } });
  const { result } = await check('SELECT v FROM late', [...ALL, { effect: 'deny', action: 'read', resource: 'public.m.v' }], [], c);
  // The parent's deny statement names the column: the refusal names it (task hnu41 item 2).
  expect(result).toEqual({ ok: false, outcome: { kind: 'refusal', code: 'source_role_denied', message: namedDenyMessage(['public.m.v'], false, false) } });
});

test('an unchanged tree keeps the restrictions; a caller without denies or masks is not checked at all', async () => {
  const same = connector({ m1: { ancestors: [{ schema: 'public', name: 'm' }], descendants: [] } });
  const { before, result } = await check('SELECT id, v FROM m1', ALL, [MASK], same);
  expect(result).toEqual({ ok: true, changed: false, restrictions: before });
  const open = connector({ late: { ancestors: [{ schema: 'public', name: 'm' }], descendants: [] } });
  const r2 = await check('SELECT id, v FROM late', ALL, [], open);
  expect(r2.result).toEqual({ ok: true, changed: false, restrictions: r2.before });
  expect(open.asked).toEqual([]);
});

test('when the server cannot be asked the read is refused with the connector failure, never run unchecked', async () => {
  const down = connector({}, Object.assign(new Error('boom 10.0.0.1:5432'), { code: 'circuit_open' }));
  expect((await check('SELECT id FROM late', ALL, [MASK], down)).result).toEqual({ ok: false, outcome: { kind: 'refusal', code: 'circuit_open' }, unreachable: true });
  const odd = connector({}, new Error('hierarchy answer incomplete'));
  expect((await check('SELECT id FROM late', ALL, [MASK], odd)).result).toEqual({ ok: false, outcome: { kind: 'tool_error', code: 'tool_execution_failed' }, unreachable: true });
});

test('the cheap standalone probe is asked for only when the catalogue places no touched relation in a tree', async () => {
  const probes: Array<boolean | undefined> = [];
  const c: QueryConnector = {
    read: () => Promise.reject(new Error('not used')),
    relationTrees: async (relations, opts) => {
      probes.push(opts.probe);
      return new Map(relations.map((r) => [relationKey(r.schema, r.name), r.name === 'm1' ? { ancestors: [{ schema: 'public', name: 'm' }], descendants: [] } : r.name === 'm' ? { ancestors: [], descendants: [{ schema: 'public', name: 'm1' }] } : { ancestors: [], descendants: [] }]));
    },
  };
  await check('SELECT id FROM late', ALL, [MASK], c);
  await check('SELECT id FROM m1', ALL, [MASK], c);
  await check('SELECT l.id FROM late l JOIN m ON m.id = l.id', ALL, [MASK], c);
  expect(probes).toEqual([true, false, false]);
});
