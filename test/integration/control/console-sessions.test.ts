/**
 * Issue 24, item 3: the console's server-side sessions (src/console/session.ts) under the gateway's
 * least-privilege runtime role (`interlock db grant-runtime-role`): it can sign in, touch, sign
 * out and clean up sessions, but cannot rewrite who a session belongs to or when it expires.
 */
import { freshControlDb, withRuntimeRole, type TestControlDb } from './control-db';
import { openControlDb } from '../../../src/control/db';
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
  await withRuntimeRole(t, async (url) => {
    const rt = await openControlDb(url, { migrate: false, poolSize: 2 });
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
  });
});
