/**
 * Issue 24, item 3: the console's server-side sessions (src/console/session.ts) under the gateway's
 * least-privilege runtime role (`interlock db grant-runtime-role`): it can sign in, touch, sign
 * out and clean up sessions, but cannot rewrite who a session belongs to or when it expires.
 */
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { ADMIN_URL } from '../../helpers/pg';
import { freshControlDb, type TestControlDb } from './control-db';
import { grantRuntimeRole, openControlDb } from '../../../src/control/db';
import { createOperatorToken } from '../../../src/admin/tokens';
import { createConsoleSession, endConsoleSession, resolveConsoleSession } from '../../../src/console/session';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('ctl_console_sess');
});
afterAll(async () => {
  await t.cleanup();
});

test('the runtime role signs in, touches, signs out and cleans up; it cannot change a session owner or expiry', async () => {
  const role = `il_rt_${randomBytes(4).toString('hex')}`;
  const admin = new Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'rt-${role}'`);
    await grantRuntimeRole(t.db, role);
    const u = new URL(t.temp.url);
    u.username = role;
    u.password = `rt-${role}`;
    const rt = await openControlDb(u.toString(), { migrate: false, poolSize: 2 });
    try {
      const tok = await createOperatorToken(t.db, 'ops-vic');
      const timeouts = { idleSeconds: 60, absoluteSeconds: 600 };
      const s = await createConsoleSession(rt, { tokenId: tok.tokenId, operator: 'ops-vic' }, timeouts);
      expect(s.cookie).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(await resolveConsoleSession(rt, s.cookie, timeouts, true)).toEqual({ tokenId: tok.tokenId, operator: 'ops-vic', expiresAt: s.session.expiresAt });
      expect(await resolveConsoleSession(rt, s.cookie, timeouts, false)).toMatchObject({ operator: 'ops-vic' });
      await expect(rt.pool.query("UPDATE console_sessions SET operator = 'someone'")).rejects.toMatchObject({ code: '42501' });
      await expect(rt.pool.query("UPDATE console_sessions SET expires_at = now() + interval '1 year'")).rejects.toMatchObject({ code: '42501' });
      expect(await endConsoleSession(rt, s.cookie)).toBe(true);
      expect(await endConsoleSession(rt, s.cookie)).toBe(false);
      expect(await resolveConsoleSession(rt, s.cookie, timeouts, true)).toBeNull();
      // Rows ended over a day ago are deleted at the next sign-in.
      await t.db.pool.query("UPDATE console_sessions SET ended_at = now() - interval '2 days'");
      await createConsoleSession(rt, { tokenId: tok.tokenId, operator: 'ops-vic' }, timeouts);
      expect((await t.db.pool.query('SELECT count(*)::int AS n FROM console_sessions')).rows).toEqual([{ n: 1 }]);
    } finally {
      await rt.close();
    }
  } finally {
    await t.db.pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON SCHEMA public FROM ${role}`);
    await admin.query(`REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${role}`);
    await admin.query(`DROP ROLE ${role}`);
    await admin.end();
  }
});
