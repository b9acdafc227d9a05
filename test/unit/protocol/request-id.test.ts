/**
 * Request ids (h28d, hlow): "req_" + 18 base64url characters, time-ordered: six characters of time in
 * sixteenths of a second since 1970, six of a per-process random part, six of a counter that starts
 * at random each tick, so ids sort (byte order, the C collation) in the order they were made and
 * never repeat within a process.
 */
import { newRequestId } from '../../../src/protocol/dispatch';

const DIGITS = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
const decode = (s: string) => [...s].reduce((n, ch) => n * 64 + DIGITS.indexOf(ch), 0);

test('request ids keep their format, do not repeat and increase in byte order', () => {
  const ids: string[] = [];
  for (let i = 0; i < 5000; i++) ids.push(newRequestId());
  for (const id of ids) expect(id).toMatch(/^req_[A-Za-z0-9_-]{18}$/);
  expect(new Set(ids).size).toBe(5000);
  for (let i = 1; i < ids.length; i++) expect(Buffer.compare(Buffer.from(ids[i - 1]), Buffer.from(ids[i]))).toBe(-1);
});

test('a request id starts with the time it was made in sixteenths of a second', () => {
  const before = Math.floor((Date.now() * 16) / 1000);
  const id = newRequestId();
  const after = Math.floor((Date.now() * 16) / 1000);
  const tick = decode(id.slice(4, 10));
  expect(tick).toBeGreaterThanOrEqual(before);
  expect(tick).toBeLessThanOrEqual(after + 1);
});

test('an id of a later tick sorts after every id of an earlier tick', async () => {
  const a = newRequestId();
  await new Promise((r) => setTimeout(r, 130)); // at least two ticks later
  const b = newRequestId();
  expect(decode(b.slice(4, 10))).toBeGreaterThan(decode(a.slice(4, 10)));
  expect(b > a).toBe(true);
});

test('within a tick the counter characters count up by exactly one per id', () => {
  let steps = 0;
  let prev = newRequestId();
  for (let i = 0; i < 20000; i++) {
    const id = newRequestId();
    if (id.slice(4, 10) === prev.slice(4, 10)) {
      expect(decode(id.slice(16))).toBe(decode(prev.slice(16)) + 1);
      steps++;
    }
    prev = id;
  }
  expect(steps).toBeGreaterThan(0);
});

test('every id of a process carries the same process part', () => {
  const parts = new Set(Array.from({ length: 1000 }, () => newRequestId().slice(10, 16)));
  expect(parts.size).toBe(1);
});
