/**
 * Discovery filtered by row rules through the real gateway (issue 27 item 3): the gateway wires the
 * source's reader and the row-view provisioner into the discovery tools, so over MCP two API keys of
 * identities with different attributes find different documents of one mapped ruled table, and an
 * identity without the attribute finds none of them.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { createIdentity, setIdentityAttributes } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { getSource, putSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { indexSource } from '../../../src/discovery/indexer';

let env: GovernedEnv;
const keys: Record<string, string> = {};

beforeAll(async () => {
  env = await startGovernedEnv();
  const su = new pg.Client({ connectionString: env.sourceUrl });
  await su.connect();
  try {
    await su.query(`CREATE TABLE rr_docs (id int PRIMARY KEY, region text NOT NULL, title text, body text);
      INSERT INTO rr_docs SELECT g, (ARRAY['eu','us'])[1 + g % 2], 'doc ' || g, 'qzvdoc entry ' || g FROM generate_series(1, 6) g;
      GRANT SELECT ON rr_docs TO "${env.demo.readerRole}";`);
  } finally {
    await su.end();
  }
  const s = (await getSource(env.db, 'chinook'))!;
  await putSource(env.db, { id: s.id, type: s.type, name: s.name, settings: { ...s.settings, document_tables: [{ table: 'public.rr_docs', id_column: 'id', title_column: 'title', body_column: 'body' }] } });
  await scanSource(env.db, 'chinook');
  await indexSource(env.db, 'chinook');
  await upsertRole(env.db, { name: 'rr-disc', statements: [{ effect: 'allow', action: 'discover', resource: '*' }, { effect: 'allow', action: 'read', resource: 'public.rr_docs', rows: 'region = ANY(identity.regions)' }] });
  for (const [name, regions] of [['eu-agent', ['eu']], ['us-agent', ['us']], ['no-agent', null]] as const) {
    const id = await createIdentity(env.db, name);
    if (regions) await setIdentityAttributes(env.db, name, { regions });
    await grantRole(env.db, { identityId: id.id, roleName: 'rr-disc', sourceId: 'chinook' });
    keys[name] = (await createApiKey(env.db, id.id)).secret;
  }
  env.gateway.store.invalidate('*');
}, 120_000);
afterAll(async () => env?.close());

async function found(who: string): Promise<string[]> {
  const r = await callTool(env, 'interlock_discover', { source_id: 'chinook', query: 'qzvdoc', limit: 50 }, keys[who]);
  expect(r.status).toBe(200);
  return (r.body.result.structuredContent.hits as Array<{ asset_id: string }>).map((h) => h.asset_id).sort();
}

test('each identity finds the documents of its own rows; one without the attribute finds none', async () => {
  expect(await found('eu-agent')).toEqual(['chinook:public.rr_docs/2', 'chinook:public.rr_docs/4', 'chinook:public.rr_docs/6']);
  expect(await found('us-agent')).toEqual(['chinook:public.rr_docs/1', 'chinook:public.rr_docs/3', 'chinook:public.rr_docs/5']);
  expect(await found('no-agent')).toEqual([]);
});
