/**
 * The user-function fixture's governance (task hfn; test/integration/sql/user-functions.test.ts,
 * red team rt41b): after the owner's objects exist, the source is rescanned, the demo identity gets
 * role `roleName` (read and describe `public.*`, read denied on `public.staff.ssn`) on `chinook`, and
 * a policy masks `public.staff.salary` (full).
 */
import pg from 'pg';
import { callTool, startGovernedEnv, type GovernedEnv } from './governed';
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

/** A `chinook` gateway whose demo identity reads as an hr analyst over objects its owner changes after the scan (red teams rt49, rt49c). */
export interface HrStaffEnv {
  env: GovernedEnv;
  /** The source's owner (superuser) connection, for DDL after the scan. */
  admin: pg.Client;
  /** The reader role's quoted name, for GRANTs. */
  reader: string;
  /** What one interlock_query call answered: status, then the refusal's code or the rows. */
  outcome(sql: string, key?: string): Promise<unknown>;
  /** The source rescanned by the operator (after the gateway's own rescans have ended). */
  rescan(): Promise<void>;
}

/** The outcome of a read the hr-analyst role is denied. */
export const HR_DENIED = { status: 200, code: 'source_role_denied' };
/** The outcome of a read through an object changed since the scan. */
export const HR_STALE = { status: 200, code: 'catalog_stale' };

/**
 * Starts a gateway (result cache off, rate limits out of the way), runs `ddl(reader)` on the source
 * as its owner, then governAsHrAnalyst with `roleName`; closes both with `close`.
 */
export async function startHrStaffEnv(ddl: (reader: string) => string, roleName: string): Promise<HrStaffEnv & { close(): Promise<void> }> {
  const env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } }, cache: { ttl_ms: 0 } } });
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  const reader = admin.escapeIdentifier(env.demo.readerRole);
  await admin.query(`SET search_path = public; ${ddl(reader)}`);
  await governAsHrAnalyst(env, roleName); // rescans
  return {
    env,
    admin,
    reader,
    async outcome(sql, key = env.apiKey) {
      const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, key);
      const res = r.body.result;
      if (!res) return { status: r.status, error: r.body.error };
      if (res.isError) return { status: r.status, code: res.structuredContent.code };
      return { status: r.status, rows: res.structuredContent.rows };
    },
    async rescan() {
      await env.gateway.rescansIdle();
      await scanSource(env.db, 'chinook');
      env.gateway.store.invalidate('*');
    },
    async close() {
      await admin.end();
      await env.close();
    },
  };
}
