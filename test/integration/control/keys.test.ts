/** API keys and DbIdentityResolver against a real control database. */
import crypto from 'node:crypto';
import { freshControlDb, type TestControlDb } from './control-db';
import { API_KEY_PATTERN, createApiKey, DbIdentityResolver, hashApiKey, listApiKeys, revokeApiKey } from '../../../src/control/keys';
import { createIdentity, disableIdentity, enableIdentity } from '../../../src/control/identities';
import { getKeyPepper, openControlDb } from '../../../src/control/db';
import { openHeldControlDb } from '../../helpers/held-control-db';
import { identityStep } from '../../../src/pipeline/01-identity';
import type { ToolCallContext } from '../../../src/pipeline/types';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('ctl_keys');
});
afterAll(async () => {
  await t.cleanup();
});

describe('API keys', () => {
  test('secret format: ilk_ + 43 base64url characters (32 random bytes = 256 bits), distinct every time', async () => {
    const idn = await createIdentity(t.db, 'format-agent');
    const secrets = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const k = await createApiKey(t.db, idn.id);
      expect(k.secret).toMatch(API_KEY_PATTERN);
      expect(Buffer.from(k.secret.slice(4), 'base64url').length).toBe(32);
      expect(k.keyId).toMatch(/^key_[0-9a-f]{20}$/);
      expect(k.prefix).toBe(k.secret.slice(0, 10));
      expect(k.expiresAt).toBeNull();
      secrets.add(k.secret);
    }
    expect(secrets.size).toBe(20);
  });

  test('only the keyed hash is stored: the secret appears nowhere in the database', async () => {
    const idn = await createIdentity(t.db, 'hash-agent');
    const k = await createApiKey(t.db, idn.id);
    const rows = await t.db.pool.query('SELECT * FROM api_keys WHERE id = $1', [k.keyId]);
    expect(rows.rowCount).toBe(1);
    const row = rows.rows[0];
    expect(row.hash).toEqual(hashApiKey(t.db.keyPepper!, k.secret));
    expect((row.hash as Buffer).length).toBe(32);
    // Not an unkeyed hash either.
    expect((row.hash as Buffer).equals(crypto.createHash('sha256').update(k.secret).digest())).toBe(false);
    // Grep every text rendering of every control table for the secret and its random part.
    const dump = await t.db.pool.query<{ t: string }>(
      `SELECT string_agg(x::text, E'\\n') AS t FROM (
         SELECT row_to_json(a)::text AS x FROM api_keys a UNION ALL SELECT row_to_json(s)::text FROM settings s
         UNION ALL SELECT row_to_json(i)::text FROM identities i UNION ALL SELECT row_to_json(e)::text FROM audit_events e) q`,
    );
    expect(dump.rows[0].t).not.toContain(k.secret);
    expect(dump.rows[0].t).not.toContain(k.secret.slice(10));
    const listed = await listApiKeys(t.db, { identityId: idn.id });
    expect(JSON.stringify(listed)).not.toContain(k.secret.slice(10));
    expect(listed).toEqual([
      { id: k.keyId, identityId: idn.id, identityName: 'hash-agent', prefix: k.prefix, createdAt: expect.any(String), expiresAt: null, revokedAt: null, lastUsedAt: null, status: 'active' },
    ]);
  });

  test('resolver: valid key → identity; wrong, malformed, revoked, expired keys and disabled identities → null', async () => {
    const idn = await createIdentity(t.db, 'resolver-agent');
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    const k = await createApiKey(t.db, idn.id);
    expect(await resolver.resolve(k.secret)).toEqual({ id: idn.id, name: 'resolver-agent', keyId: k.keyId });

    // Same format, different secret; and malformed inputs.
    const flipped = k.secret.slice(0, -1) + (k.secret.endsWith('A') ? 'B' : 'A');
    expect(await resolver.resolve(flipped)).toBeNull();
    for (const bad of ['', 'ilk_', 'Bearer ' + k.secret, k.secret + ' ', k.secret.toUpperCase(), 'x'.repeat(5000)]) {
      expect(await resolver.resolve(bad)).toBeNull();
    }

    // Revocation.
    const revoked = await revokeApiKey(t.db, k.keyId);
    expect(revoked.status).toBe('revoked');
    expect(await resolver.resolve(k.secret)).toBeNull();
    const again = await revokeApiKey(t.db, k.keyId);
    expect(again.revokedAt).toBe(revoked.revokedAt);

    // Expiry.
    const k2 = await createApiKey(t.db, idn.id, { expiresAt: new Date(Date.now() + 60_000) });
    expect(await resolver.resolve(k2.secret)).not.toBeNull();
    await t.db.pool.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [k2.keyId]);
    expect(await resolver.resolve(k2.secret)).toBeNull();
    expect((await listApiKeys(t.db, { identityId: idn.id })).find((x) => x.id === k2.keyId)!.status).toBe('expired');

    // Disabled identity.
    const k3 = await createApiKey(t.db, idn.id);
    expect(await resolver.resolve(k3.secret)).not.toBeNull();
    await disableIdentity(t.db, 'resolver-agent');
    expect(await resolver.resolve(k3.secret)).toBeNull();
    await enableIdentity(t.db, 'resolver-agent');
    expect(await resolver.resolve(k3.secret)).toEqual({ id: idn.id, name: 'resolver-agent', keyId: k3.keyId });
  });

  test('creating keys: past expiry, unknown and disabled identities are refused', async () => {
    const idn = await createIdentity(t.db, 'refuse-agent');
    await expect(createApiKey(t.db, idn.id, { expiresAt: new Date(Date.now() - 1000) })).rejects.toThrow(/expiry must be in the future/);
    await expect(createApiKey(t.db, 'idn_00000000000000000000')).rejects.toMatchObject({ kind: 'not_found' });
    await disableIdentity(t.db, idn.id);
    await expect(createApiKey(t.db, idn.id)).rejects.toMatchObject({ kind: 'conflict', message: 'identity "refuse-agent" is disabled: enable it before creating keys' });
    await expect(revokeApiKey(t.db, 'key_00000000000000000000')).rejects.toMatchObject({ kind: 'not_found' });
  });

  test('timing-safe path: the stored and computed hashes are compared with crypto.timingSafeEqual, hit or miss', async () => {
    const idn = await createIdentity(t.db, 'timing-agent');
    const k = await createApiKey(t.db, idn.id);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    const spy = jest.spyOn(crypto, 'timingSafeEqual');
    try {
      expect(await resolver.resolve(k.secret)).not.toBeNull();
      expect(spy).toHaveBeenCalledTimes(1);
      const [a, b] = spy.mock.calls[0] as unknown as [Buffer, Buffer];
      expect(a.length).toBe(32);
      expect(b.equals(hashApiKey(t.db.keyPepper!, k.secret))).toBe(true);
      spy.mockClear();
      const unknown = 'ilk_' + crypto.randomBytes(32).toString('base64url');
      expect(await resolver.resolve(unknown)).toBeNull();
      expect(spy).toHaveBeenCalledTimes(1);
    } finally {
      spy.mockRestore();
    }
  });

  test('a flood of made-up keys costs at most the miss budget of control-database lookups; valid keys, and a key created meanwhile, still resolve', async () => {
    const idn = await createIdentity(t.db, 'flood-agent');
    const k = await createApiKey(t.db, idn.id);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    expect(await resolver.resolve(k.secret)).toMatchObject({ id: idn.id }); // loads the known-key set
    const lookups = () => spy.mock.calls.filter(([q]) => typeof q === 'string' && q.includes('FROM api_keys k JOIN identities')).length;
    const reloads = () => spy.mock.calls.filter(([q]) => typeof q === 'string' && q.includes("encode(hash, 'base64')")).length;
    const spy = jest.spyOn(t.db.pool, 'query');
    try {
      const junk = Array.from({ length: 600 }, () => 'ilk_' + crypto.randomBytes(32).toString('base64url'));
      const results = await Promise.all(junk.map((j) => resolver.resolve(j)));
      expect(results.every((r) => r === null)).toBe(true);
      // The burst (40) is looked up; past it, at most one reload of the set per second instead of a lookup each.
      expect(lookups()).toBeLessThanOrEqual(45);
      expect(reloads()).toBeLessThanOrEqual(3);
      // Valid keys are unaffected: found in the set, then looked up.
      expect(await resolver.resolve(k.secret)).toMatchObject({ id: idn.id });
      // A key created after the set was loaded, with no notification and the budget spent: found once the set is reloaded (at most a second).
      const late = await createApiKey(t.db, idn.id);
      let found = await resolver.resolve(late.secret);
      for (let i = 0; i < 30 && !found; i++) {
        await new Promise((r) => setTimeout(r, 100));
        found = await resolver.resolve(late.secret);
      }
      expect(found).toMatchObject({ id: idn.id, keyId: late.keyId });
      // invalidate() (what a change notification calls) makes the next resolution reload the set.
      const later = await createApiKey(t.db, idn.id);
      resolver.invalidate();
      spy.mockClear();
      expect(await resolver.resolve(later.secret)).toMatchObject({ keyId: later.keyId });
      expect(reloads()).toBe(1);
      // A revoked key leaves the set and is refused.
      await revokeApiKey(t.db, later.keyId);
      resolver.invalidate();
      expect(await resolver.resolve(later.secret)).toBeNull();
    } finally {
      spy.mockRestore();
    }
  });

  test('when the usable keys cannot be read, every key is looked up and the read is retried with a backoff, not on every request', async () => {
    const idn = await createIdentity(t.db, 'backoff-agent');
    const k = await createApiKey(t.db, idn.id);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    const original = t.db.pool.query.bind(t.db.pool) as (...a: unknown[]) => Promise<unknown>;
    let reads = 0;
    const spy = jest.spyOn(t.db.pool, 'query').mockImplementation(((q: unknown, ...rest: unknown[]) => {
      if (typeof q === 'string' && q.includes("encode(hash, 'base64')")) {
        reads++;
        return Promise.reject(Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' }));
      }
      return original(q, ...rest);
    }) as never);
    try {
      for (let i = 0; i < 50; i++) expect(await resolver.resolve(k.secret)).toMatchObject({ id: idn.id });
      expect(await resolver.resolve('ilk_' + crypto.randomBytes(32).toString('base64url'))).toBeNull();
      expect(reads).toBe(1);
    } finally {
      spy.mockRestore();
    }
  });

  test('positive results are cached at most cacheTtlMs; invalidate() drops them at once', async () => {
    const idn = await createIdentity(t.db, 'cache-agent');
    const k = await createApiKey(t.db, idn.id);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 300 });
    expect(await resolver.resolve(k.secret)).not.toBeNull();
    // The cache is keyed by a salted digest (44 base64 characters), never by the secret.
    const keys = [...(resolver as unknown as { cache: Map<string, unknown> }).cache.keys()];
    expect(keys).toHaveLength(1);
    expect(keys[0]).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(keys[0]).not.toContain(k.secret);
    await revokeApiKey(t.db, k.keyId);
    // Within the bound the cached answer may still be served …
    expect(await resolver.resolve(k.secret)).not.toBeNull();
    // … but never after it.
    await new Promise((r) => setTimeout(r, 350));
    expect(await resolver.resolve(k.secret)).toBeNull();

    const k2 = await createApiKey(t.db, idn.id);
    expect(await resolver.resolve(k2.secret)).not.toBeNull();
    await revokeApiKey(t.db, k2.keyId);
    resolver.invalidate();
    expect(await resolver.resolve(k2.secret)).toBeNull();
    // The bound is capped at 5 s whatever is asked.
    expect((new DbIdentityResolver(t.db, { cacheTtlMs: 60_000 }) as unknown as { cacheTtlMs: number }).cacheTtlMs).toBe(5000);
  });

  // Issue 28 item 3 (h28j): step 1 answers a key the cache holds without a promise (resolveNow), with the
  // cache's own bound; the socket keeps only the digest of its last key, so another key on it is its own.
  test('a cached key resolves synchronously (resolveNow, identityStep), within the same bound; another key on the same socket is its own', async () => {
    const idn = await createIdentity(t.db, 'now-agent');
    const k = await createApiKey(t.db, idn.id);
    const other = await createApiKey(t.db, (await createIdentity(t.db, 'now-other')).id);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 300 });
    const socket = {};
    const ctxOf = (apiKey: string) => ({ apiKey, identity: null }) as unknown as ToolCallContext;
    expect(resolver.resolveNow(k.secret, socket)).toBeUndefined();
    const first = ctxOf(k.secret);
    const missed = identityStep(first, resolver, socket);
    expect(missed).toBeInstanceOf(Promise);
    expect(await missed).toBeNull();
    const ctx = ctxOf(k.secret);
    expect(identityStep(ctx, resolver, socket)).toBeNull();
    expect(ctx.identity).toEqual({ id: idn.id, name: 'now-agent', keyId: k.keyId });
    expect(ctx.identity).not.toBe(first.identity);
    expect(resolver.resolveNow(other.secret, socket)).toBeUndefined();
    expect(await resolver.resolve(other.secret)).not.toBeNull();
    expect(resolver.resolveNow(other.secret, socket)?.name).toBe('now-other');
    expect(resolver.resolveNow(k.secret, socket)?.name).toBe('now-agent');
    expect(resolver.resolveNow(k.secret)?.name).toBe('now-agent');
    expect(resolver.resolveNow(`ilk_${'A'.repeat(43)}`, socket)).toBeUndefined();
    // A notification drops the cache at once: the revoked key goes back to the database and is refused.
    await revokeApiKey(t.db, k.keyId);
    resolver.invalidate();
    expect(resolver.resolveNow(k.secret, socket)).toBeUndefined();
    const revoked = ctxOf(k.secret);
    expect(await identityStep(revoked, resolver, socket)).toEqual({ kind: 'refusal', code: 'invalid_api_key' });
    expect(revoked.identity).toBeNull();
    // Past the bound, never from memory.
    expect(await resolver.resolve(other.secret)).not.toBeNull();
    await new Promise((r) => setTimeout(r, 350));
    expect(resolver.resolveNow(other.secret, socket)).toBeUndefined();
  });

  // Task hrr (red team rt40's race, in the API-key resolver): a lookup that read the key before its
  // revoke committed and returned after the notification's invalidate() stored the revoked key, so
  // it kept resolving for the cache's lifetime. Now a resolution is cached only when no invalidate()
  // happened while it ran.
  test('a resolution racing the revoke notification is not cached', async () => {
    const idn = await createIdentity(t.db, 'race-agent');
    const k = await createApiKey(t.db, idn.id);
    // The key lookup's answer reaches the resolver late (a busy event loop or network): held until released, after the query ran.
    const { db, release, ran: lookedUp } = await openHeldControlDb(t.temp.url, (sql) => sql.includes('FROM api_keys k JOIN identities'));
    try {
      const resolver = new DbIdentityResolver(db, { cacheTtlMs: 5000 });
      const inFlight = resolver.resolve(k.secret);
      await lookedUp;
      await revokeApiKey(t.db, k.keyId);
      resolver.invalidate();
      release();
      const first = await inFlight;
      const next = await resolver.resolve(k.secret);
      expect({ first: first?.name ?? null, next: next?.name ?? null }).toEqual({ first: 'race-agent', next: null });
    } finally {
      release();
      await db.close();
    }
  });

  test('last_used_at is set on use and not rewritten within the interval', async () => {
    const idn = await createIdentity(t.db, 'lastused-agent');
    const k = await createApiKey(t.db, idn.id);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    await resolver.resolve(k.secret);
    await resolver.flush();
    const first = (await t.db.pool.query('SELECT last_used_at FROM api_keys WHERE id = $1', [k.keyId])).rows[0].last_used_at as Date;
    expect(first).toBeInstanceOf(Date);
    // A second resolver (another replica) within the minute does not rewrite it.
    const other = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    await other.resolve(k.secret);
    await resolver.resolve(k.secret);
    await Promise.all([other.flush(), resolver.flush()]);
    const second = (await t.db.pool.query('SELECT last_used_at FROM api_keys WHERE id = $1', [k.keyId])).rows[0].last_used_at as Date;
    expect(second.getTime()).toBe(first.getTime());
  });

  test('last_used_at is written in batches: nothing per call, one UPDATE for every key used within the flush delay', async () => {
    const idn = await createIdentity(t.db, 'batch-agent');
    const keys = [await createApiKey(t.db, idn.id), await createApiKey(t.db, idn.id), await createApiKey(t.db, idn.id)];
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0, lastUsedFlushMs: 60_000 });
    const spy = jest.spyOn(t.db.pool, 'query');
    try {
      for (const k of keys) expect(await resolver.resolve(k.secret)).not.toBeNull();
      const writes = () => spy.mock.calls.filter((c) => /^\s*UPDATE/i.test(String(c[0]))).length;
      expect(writes()).toBe(0);
      const before = await t.db.pool.query('SELECT count(*)::int AS n FROM api_keys WHERE identity_id = $1 AND last_used_at IS NOT NULL', [idn.id]);
      expect(before.rows[0].n).toBe(0);
      await resolver.close();
      expect(writes()).toBe(1);
    } finally {
      spy.mockRestore();
    }
    const after = await t.db.pool.query('SELECT count(*)::int AS n FROM api_keys WHERE identity_id = $1 AND last_used_at IS NOT NULL', [idn.id]);
    expect(after.rows[0].n).toBe(3);
  });

  test('once the pepper exists, a session holding its first-use lock delays no start (nothing is written, no lock is taken)', async () => {
    const { Client } = await import('pg');
    const holder = new Client({ connectionString: t.temp.url });
    await holder.connect();
    try {
      await holder.query("SELECT pg_advisory_lock(hashtext('interlock_key_pepper'))");
      const db = await openControlDb(t.temp.url, { migrate: false });
      try {
        let timer: NodeJS.Timeout | undefined;
        const pepper = await Promise.race([getKeyPepper(db), new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('pepper resolution waited on the lock')), 5000)))]).finally(() => clearTimeout(timer));
        expect(pepper.equals(await getKeyPepper(t.db))).toBe(true);
      } finally {
        await db.close();
      }
    } finally {
      await holder.end();
    }
  });

  test('a different configured pepper is refused instead of silently invalidating every key', async () => {
    await expect(openControlDb(t.temp.url, { keyPepper: 'x'.repeat(40) })).rejects.toMatchObject({ kind: 'conflict' });
    await expect(openControlDb(t.temp.url, { keyPepper: 'short' })).rejects.toMatchObject({ kind: 'validation' });
  });
});
