/**
 * The capacity limiter's token memory (issue 29) hashes a keep-alive connection's token once
 * (issue 28 item 3): noteToken, called on every admitted governed call, reuses the hash kept with
 * the request's socket (`scope`), as refuseKnown does, and a different token on the same socket is
 * hashed again and remembered under its own key.
 */

type CapacityModule = typeof import('../../../src/transport/capacity');

/** The capacity module loaded afresh with node:crypto's one-shot hash (or, before Node 20.12, createHash) counted. */
function withCountedHashes(): { mod: CapacityModule; hashes: () => number; restore: () => void } {
  // The module object itself (an `import * as` copy would not see the spy).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const c = require('node:crypto') as Record<string, unknown>;
  const name = typeof c.hash === 'function' ? 'hash' : 'createHash';
  const spy = jest.spyOn(c as Record<string, (...a: unknown[]) => unknown>, name);
  let mod!: CapacityModule;
  jest.isolateModules(() => {
    mod = require('../../../src/transport/capacity') as CapacityModule;
  });
  return { mod, hashes: () => spy.mock.calls.length, restore: () => spy.mockRestore() };
}

test('noteToken with a scope hashes the token once per scope and token; refuseKnown finds what it noted', () => {
  const { mod, hashes, restore } = withCountedHashes();
  const l = new mod.CapacityLimiter({ ...mod.DEFAULT_CAPACITY, initialLimit: 1, minLimit: 1, maxLimit: 1, queueSize: 0 }, { now: () => 0, eventLoopDelayMs: () => 0 });
  try {
    const socket = {};
    const start = hashes();
    for (let i = 0; i < 5; i++) l.noteToken('tok-a', { id: 'a', keyId: 'ka' }, socket);
    expect(hashes() - start).toBe(1);
    // Without a scope, every call hashes (the /v1 and legacy routes pass none).
    l.noteToken('tok-a', { id: 'a', keyId: 'ka' });
    expect(hashes() - start).toBe(2);
    // Another token on the same socket: hashed, remembered under its own key.
    l.noteToken('tok-b', { id: 'b', keyId: 'kb' }, socket);
    expect(hashes() - start).toBe(3);
    // Full (queue 0): both tokens are refused before identity resolution, by what noteToken kept.
    const held = l.acquire(undefined, 'x');
    expect(mod.isCapacityRefusal(held as never)).toBe(false);
    expect(l.refuseKnown('tok-a', socket)?.caller).toEqual({ id: 'a', keyId: 'ka' });
    expect(l.refuseKnown('tok-b', socket)?.caller).toEqual({ id: 'b', keyId: 'kb' });
    expect(l.refuseKnown('tok-c', socket)).toBeNull();
    (held as { release(): void }).release();
  } finally {
    l.close();
    restore();
  }
});
