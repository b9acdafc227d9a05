/**
 * Puts the conformance suite's sql-gateway fixture (conformance/sql/fixture.ts) into a governed test
 * environment's source database: the `icf_` relations, SELECT for the source's reader role, a source
 * role `icf-reader` (reads of the parents icf_parts and icf_base only: their grants cover partitions and
 * children) granted to the demo identity, a full mask on the `email` of icf_people, icf_parts and icf_base, and a rescan
 * of the source's catalog so the gateway knows the new relations. For the `rows` class (issue 30) it also
 * makes the identity `icf-tenant-a` (attribute `tenant` = "a") with a key and the role `icf-tenant-a`:
 * read on icf_items, and on icf_rows with the row rule `tenant = identity.tenant` (docs/row-rules.md).
 */
import pg from 'pg';
import type { GovernedEnv } from './governed';
import { createFixture } from '../../conformance/sql/fixture';
import { upsertRole } from '../../src/control/roles';
import { grantRole } from '../../src/control/grants';
import { addPolicies } from '../../src/control/policies';
import { scanSource } from '../../src/control/scan';
import { createIdentity, setIdentityAttributes } from '../../src/control/identities';
import { createApiKey } from '../../src/control/keys';

/** What provisionConformanceFixture made for the rows class. */
export interface ConformanceFixture {
  /** The key of `icf-tenant-a`, which may read only the rows of icf_rows where tenant = 'a'. */
  restrictedApiKey: string;
}

/** Provisions the fixture in `env`'s source database. */
export async function provisionConformanceFixture(env: GovernedEnv): Promise<ConformanceFixture> {
  await createFixture(env.sourceUrl, new URL(env.sourceUrl).pathname.slice(1));
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  try {
    await admin.query(`GRANT SELECT ON icf_items, icf_people, icf_log, icf_parts, icf_parts_a, icf_parts_b, icf_parts_b_one, icf_parts_def, icf_base, icf_kid, icf_rows TO "${env.demo.readerRole}"`);
  } finally {
    await admin.end();
  }
  // Scanned before the roles and policies that name the fixture's tables (task hnu4a: names are checked against the catalogue).
  await scanSource(env.db, env.demo.sourceId);
  await upsertRole(env.db, {
    name: 'icf-reader',
    description: 'conformance sql-gateway fixture',
    statements: ['icf_items', 'icf_people', 'icf_log', 'icf_parts', 'icf_base'].map((t) => ({ effect: 'allow', action: 'read', resource: `public.${t}` })),
  });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'icf-reader', sourceId: env.demo.sourceId });
  await addPolicies(env.db, [{ name: 'icf-mask-email', description: 'conformance fixture', applies_to: {}, rule: { type: 'mask_columns', columns: ['public.icf_people.email', 'public.icf_parts.email', 'public.icf_base.email'], method: 'full' } }]);
  await upsertRole(env.db, {
    name: 'icf-tenant-a',
    description: 'conformance sql-gateway rows class: tenant a only',
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.icf_items' },
      { effect: 'allow', action: 'read', resource: 'public.icf_rows', rows: 'tenant = identity.tenant' },
    ],
  });
  const tenantA = await createIdentity(env.db, 'icf-tenant-a');
  await setIdentityAttributes(env.db, 'icf-tenant-a', { tenant: 'a' });
  await grantRole(env.db, { identityId: tenantA.id, roleName: 'icf-tenant-a', sourceId: env.demo.sourceId });
  const restrictedApiKey = (await createApiKey(env.db, tenantA.id)).secret;
  return { restrictedApiKey };
}
