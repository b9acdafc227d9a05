/**
 * The result cache's key (src/pipeline/cache.ts, issue 28 item 3): the sha-256 of the JSON text of
 * its parts (one crypto.hash call), the same key the Hash-object form gave; it changes with every
 * part, the source's generation and clear().
 */
import { createHash } from 'node:crypto';
import { hitOutcome, isStoredOutcome, ResultCache, STORED_ANSWER_MAX_CHARS, type CachedResult } from '../../../src/pipeline/cache';
import { rowsText } from '../../../src/pipeline/rows-json';

const parts = { sourceId: 'db', sql: 'SELECT * FROM track WHERE track_id = $1', params: [42], maxRows: 100, accessFingerprint: '[{"allow":[]},"r"]' };
const result = { rows: [{ a: 1 }], truncated: false, maskedColumns: [] };

describe('ResultCache.key', () => {
  test('the key is the base64url sha-256 of the parts, generation and epoch as JSON (as before the one-shot hash)', () => {
    const c = new ResultCache();
    const text = JSON.stringify(['db', 0, 0, parts.sql, [42], 100, parts.accessFingerprint]);
    expect(c.key(parts)).toBe(createHash('sha256').update(text).digest('base64url'));
    expect(c.key(parts)).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  test('every part, an invalidated source and clear() give another key', () => {
    const c = new ResultCache();
    const k = c.key(parts);
    const others = [
      c.key({ ...parts, sourceId: 'db2' }),
      c.key({ ...parts, sql: `${parts.sql} ` }),
      c.key({ ...parts, params: ['42'] }),
      c.key({ ...parts, maxRows: 99 }),
      c.key({ ...parts, accessFingerprint: '[]' }),
    ];
    expect(new Set([k, ...others]).size).toBe(6);
    c.invalidateSource('db');
    const afterWrite = c.key(parts);
    expect(afterWrite).not.toBe(k);
    c.clear();
    expect(c.key(parts)).not.toBe(afterWrite);
    expect(c.key(parts)).not.toBe(k);
  });

  test('an entry stored under a key is found by the same parts only', () => {
    const c = new ResultCache({ ttlMs: 60_000, maxBytes: 1_000_000 });
    c.set(c.key(parts), result);
    expect(c.get(c.key(parts))).toBe(result);
    expect(c.get(c.key({ ...parts, params: [43] }))).toBeUndefined();
  });
});

describe('stored answers (issue 28): kept as final bytes only when small, and counted against the budget', () => {
  test('a small entry counts five times its rows text; a large one its rows text once', () => {
    const small: CachedResult = { rows: [{ a: 'x'.repeat(90) }], truncated: false, maskedColumns: [] };
    const smallBytes = Buffer.byteLength(JSON.stringify(small.rows));
    // Room for exactly two small entries (5 × their text each): a third evicts the first.
    const c = new ResultCache({ ttlMs: 60_000, maxBytes: smallBytes * 5 * 2 });
    c.set('k1', small);
    c.set('k2', { ...small, rows: [{ a: 'y'.repeat(90) }] });
    expect(c.size).toBe(2);
    c.set('k3', { ...small, rows: [{ a: 'z'.repeat(90) }] });
    expect(c.size).toBe(2);
    expect(c.get('k1')).toBeUndefined();
    const bigRows = [{ a: 'b'.repeat(STORED_ANSWER_MAX_CHARS) }];
    const big = new ResultCache({ ttlMs: 60_000, maxBytes: Buffer.byteLength(JSON.stringify(bigRows)) });
    big.set('b', { rows: bigRows, truncated: false, maskedColumns: [] });
    expect(big.size).toBe(1);
  });

  test('every hit on an entry gets one outcome; only a small one is kept for its bytes', () => {
    const small: CachedResult = { rows: [{ a: 1 }], truncated: false, maskedColumns: [] };
    const big: CachedResult = { rows: [{ a: 'b'.repeat(STORED_ANSWER_MAX_CHARS) }], truncated: false, maskedColumns: [] };
    for (const [entry, kept] of [[small, true], [big, false]] as const) {
      const o = hitOutcome(entry, () => ({ kind: 'result', content: [{ type: 'text', text: rowsText(entry.rows) }] }));
      expect(hitOutcome(entry, () => { throw new Error('built twice'); })).toBe(o);
      expect(isStoredOutcome(o)).toBe(kept);
    }
  });
});

describe('expired entries (issue 28, h28k): dropped by a later store, not held until read or evicted', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  test('a store after the time to live drops every expired entry; live ones stay and get() answers as before', async () => {
    const c = new ResultCache({ ttlMs: 20, maxBytes: 1_000_000 });
    for (let i = 0; i < 50; i++) c.set(`old${i}`, { ...result, rows: [{ a: i }] });
    expect(c.size).toBe(50);
    await sleep(80);
    // Nothing was read: before, all 50 stayed (size 51) until the byte budget evicted them.
    c.set('new', result);
    expect(c.size).toBe(1);
    expect(c.get('new')).toBe(result);
    expect(c.get('old0')).toBeUndefined();
  });

  test('entries within their time to live are never dropped by the sweep', async () => {
    const c = new ResultCache({ ttlMs: 60_000, maxBytes: 1_000_000 });
    c.set('a', result);
    await sleep(10);
    c.set('b', result);
    expect(c.size).toBe(2);
    expect(c.get('a')).toBe(result);
    expect(c.get('b')).toBe(result);
  });
});

describe('the time to live is read from the clock itself (issue 28, p49: ttlResolution 0)', () => {
  test('stores and lookups arm no timer (lru-cache kept its clock reading with a 1 ms setTimeout per store)', () => {
    const c = new ResultCache({ ttlMs: 1, maxBytes: 1_000_000 });
    const spy = jest.spyOn(global, 'setTimeout');
    try {
      for (let i = 0; i < 20; i++) {
        const k = c.key({ ...parts, params: [i] });
        expect(c.get(k)).toBeUndefined();
        c.set(k, result);
      }
      expect(spy).toHaveBeenCalledTimes(0);
    } finally {
      spy.mockRestore();
    }
  });

  test('an entry past its time to live is not answered while the event loop is busy (no timer has refreshed a clock)', () => {
    const c = new ResultCache({ ttlMs: 2, maxBytes: 1_000_000 });
    const k = c.key(parts);
    c.set(k, result);
    expect(c.get(k)).toBe(result);
    const until = performance.now() + 10;
    while (performance.now() < until) {
      // a synchronous stretch longer than the time to live: no timer runs meanwhile
    }
    expect(c.get(k)).toBeUndefined();
  });
});
