/**
 * The wire budget's framer and decider (issue 10, Build 1), without a database: message headers
 * read across chunk boundaries, a DataRow over the budget or over the running total trips before
 * its body is forwarded, the idle per-message cap, malformed lengths, and the stream wrapper.
 */
import { EventEmitter } from 'node:events';
import { IDLE_MESSAGE_CAP, WireMeter, installWireGuard, readWireBudget } from '../../../src/sources/postgres/wire-budget';

/** One backend message: code, int32 length (counting itself), body. */
function msg(code: string, bodyLength: number): Buffer {
  const b = Buffer.alloc(5 + bodyLength, 0x61);
  b.write(code, 0, 'latin1');
  b.writeInt32BE(bodyLength + 4, 1);
  return b;
}

/** A message header announcing a body of `bodyLength` bytes, without the body. */
function header(code: string, bodyLength: number): Buffer {
  const b = Buffer.alloc(5);
  b.write(code, 0, 'latin1');
  b.writeInt32BE(bodyLength + 4, 1);
  return b;
}

describe('WireMeter', () => {
  test('answered counts messages that answer a command since arm, not ErrorResponse, notices, parameter status or notifications (task hidle)', () => {
    const m = new WireMeter();
    m.feed(msg('Z', 1));
    m.arm(1000);
    expect(m.answered).toBe(0);
    m.feed(Buffer.concat([msg('N', 10), msg('S', 10), msg('A', 10), msg('E', 30)]));
    expect(m.answered).toBe(0);
    m.feed(Buffer.concat([msg('1', 0), msg('2', 0)]));
    expect(m.answered).toBe(2);
    m.feed(header('D', 8).subarray(0, 3));
    expect(m.answered).toBe(2);
    m.feed(Buffer.concat([header('D', 8).subarray(3), Buffer.alloc(8)]));
    expect(m.answered).toBe(3);
    m.arm(1000);
    expect(m.answered).toBe(0);
  });

  test('forwards whole messages within the budget and counts DataRow bytes only', () => {
    const m = new WireMeter();
    m.arm(100);
    const chunk = Buffer.concat([msg('T', 30), msg('D', 20), msg('D', 20), msg('C', 10)]);
    expect(m.feed(chunk)).toEqual({ forward: chunk.length, trip: null });
    expect(m.dataRowBytes).toBe(50);
  });

  test('a DataRow over the budget trips at its header: its body is never forwarded', () => {
    const m = new WireMeter();
    m.arm(1000);
    const first = msg('D', 100);
    const big = header('D', 600 * 1024 * 1024);
    const r = m.feed(Buffer.concat([first, big, Buffer.alloc(64)]));
    expect(r.forward).toBe(first.length + 5);
    expect(r.trip).toEqual({ code: 'D', messageBytes: 600 * 1024 * 1024 + 5, totalBytes: 105, reason: 'budget' });
    expect(m.feed(Buffer.alloc(65536))).toEqual({ forward: 0, trip: null });
  });

  test('the running total trips on the DataRow that would pass the budget', () => {
    const m = new WireMeter();
    m.arm(250);
    expect(m.feed(msg('D', 95)).trip).toBeNull(); // 100
    expect(m.feed(msg('D', 95)).trip).toBeNull(); // 200
    const r = m.feed(msg('D', 95)); // would be 300
    expect(r.trip).toMatchObject({ code: 'D', totalBytes: 200, reason: 'budget' });
    expect(r.forward).toBe(5);
  });

  test('headers split across chunks (one byte at a time) are read like whole ones', () => {
    const m = new WireMeter();
    m.arm(50);
    const stream = Buffer.concat([msg('D', 20), header('D', 10_000)]);
    let forwarded = 0;
    let trip = null;
    for (let i = 0; i < stream.length; i++) {
      const r = m.feed(stream.subarray(i, i + 1));
      forwarded += r.forward;
      trip ??= r.trip;
    }
    expect(trip).toMatchObject({ code: 'D', messageBytes: 10_005 });
    expect(forwarded).toBe(25 + 5);
  });

  test('idle: any message over IDLE_MESSAGE_CAP trips; DataRows are not summed', () => {
    const m = new WireMeter();
    expect(m.feed(Buffer.concat([msg('D', 1000), msg('D', 1000)])).trip).toBeNull();
    expect(m.dataRowBytes).toBe(0);
    expect(m.feed(header('N', IDLE_MESSAGE_CAP)).trip).toMatchObject({ code: 'N', reason: 'budget' });
  });

  test('armed: a non-DataRow message larger than the budget trips too', () => {
    const m = new WireMeter();
    m.arm(4096);
    expect(m.feed(header('E', 10_000)).trip).toMatchObject({ code: 'E', reason: 'budget' });
  });

  test('a length below 4 is a protocol error', () => {
    const m = new WireMeter();
    const b = Buffer.from([0x44, 0, 0, 0, 2]);
    expect(m.feed(b).trip).toMatchObject({ reason: 'protocol' });
  });

  test('disarm resets the total; arm starts a new count', () => {
    const m = new WireMeter();
    m.arm(100);
    m.feed(msg('D', 60));
    m.disarm();
    m.arm(100);
    expect(m.feed(msg('D', 60)).trip).toBeNull();
    expect(m.dataRowBytes).toBe(65);
  });
});

describe('readWireBudget', () => {
  test('the JSON cap plus a quarter, at least 64 KiB more', () => {
    expect(readWireBudget(4 * 1024 * 1024)).toBe(5 * 1024 * 1024);
    expect(readWireBudget(1000)).toBe(1000 + 65536);
    expect(readWireBudget(0)).toBe(65536);
  });
});

describe('installWireGuard', () => {
  test('sits in front of existing data listeners, calls the armed handler once, then forwards nothing', () => {
    const stream = new EventEmitter();
    const seen: number[] = [];
    stream.on('data', (b: Buffer) => seen.push(b.length));
    const destroyed: Error[] = [];
    const guard = installWireGuard(stream, (e) => destroyed.push(e));
    const trips: string[] = [];
    guard.arm(100, (t) => trips.push(t.code));
    stream.emit('data', Buffer.concat([msg('D', 10), header('D', 1000)]));
    stream.emit('data', Buffer.alloc(1000));
    expect(seen).toEqual([15 + 5]);
    expect(trips).toEqual(['D']);
    expect(destroyed).toEqual([]);
  });

  test('a trip while idle destroys the connection', () => {
    const stream = new EventEmitter();
    stream.on('data', () => undefined);
    const destroyed: Error[] = [];
    installWireGuard(stream, (e) => destroyed.push(e));
    stream.emit('data', header('A', IDLE_MESSAGE_CAP + 10));
    expect(destroyed).toHaveLength(1);
  });

  test("an exception in pg's parser destroys the connection instead of escaping the data handler", () => {
    const stream = new EventEmitter();
    stream.on('data', () => {
      throw Object.assign(new Error('Cannot create a string longer than 0x1fffffe8 characters'), { code: 'ERR_STRING_TOO_LONG' });
    });
    const destroyed: Error[] = [];
    installWireGuard(stream, (e) => destroyed.push(e));
    expect(() => stream.emit('data', msg('D', 10))).not.toThrow();
    expect(destroyed.map((e) => (e as { code?: string }).code)).toEqual(['ERR_STRING_TOO_LONG']);
  });
});
