/**
 * The user-function fixture's governance (task hfn; test/integration/sql/user-functions.test.ts,
 * red team rt41b): after the owner's objects exist, the source is rescanned, the demo identity gets
 * role `roleName` (read and describe `public.*`, read denied on `public.staff.ssn`) on `chinook`, and
 * a policy masks `public.staff.salary` (full).
 */
import type { GovernedEnv } from './governed';
import { upsertRole } from '../../src/control/roles';
import { grantRole } from '../../src/control/grants';
import { scanSource } from '../../src/control/scan';
import { addPolicy } from '../../src/control/policies';

/** Rescans `chinook` and grants the demo identity the hr-analyst statements as `roleName`, with the salary mask. */
export async function governAsHrAnalyst(env: GovernedEnv, roleName: string): Promise<void> {
  await scanSource(env.db, 'chinook');
  await upsertRole(env.db, {
    name: roleName,
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'allow', action: 'describe', resource: 'public.*' },
      { effect: 'deny', action: 'read', resource: 'public.staff.ssn' },
    ],
  });
  await grantRole(env.db, { identityId: env.demo.identityId, roleName, sourceId: 'chinook' });
  await addPolicy(env.db, { name: 'mask-salary', applies_to: { sources: ['chinook'] }, rule: { type: 'mask_columns', columns: ['public.staff.salary'], method: 'full' } });
  env.gateway.store.invalidate('*');
}
