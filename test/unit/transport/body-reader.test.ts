/**
 * utf8BodyReader (src/transport/body.ts) reads a body framed by its Content-Length (no
 * Transfer-Encoding, no Content-Encoding) directly from the stream, and every other body through
 * body-parser's raw() reader (issue 29: the refusal at capacity's cost). Both ways must give the
 * same result: each request below is sent, byte for byte, to a listener whose handler is
 * utf8BodyReader and to one whose handler is the reader before the direct read (body-parser for
 * every body), and the two outcomes (the decoded text, or the error's type and status) must be
 * equal; a last test pins the expected outcomes themselves.
 */
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { utf8BodyReader, type BodyReader } from '../../../src/transport/body';

const LIMIT = 64;

/** The reader as it was before the direct read: body-parser's raw() for every body, then UTF-8. */
function bodyParserReader(limit: number): BodyReader {
  const raw = express.raw({ type: () => true, limit }) as unknown as BodyReader;
  const utf8 = new TextDecoder('utf-8');
  return (req, res, next) =>
    raw(req, res, (err) => {
      if (!err && Buffer.isBuffer(req.body)) req.body = utf8.decode(req.body);
      next(err);
    });
}

/** A listener that answers each request with what `reader` made of its body, as JSON; `seen` gets each outcome (also of requests whose client left). */
async function listener(reader: BodyReader, seen: unknown[]): Promise<{ port: number; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    reader(req, res, (err?: unknown) => {
      const e = err as { type?: string; status?: number } | undefined;
      const outcome = e ? { error: e.type, status: e.status } : { body: (req as { body?: unknown }).body ?? null };
      seen.push(outcome);
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(outcome));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise((r) => server.close(() => r())) };
}

/** Sends `parts` (written one by one, a pause between them) and resolves with the answer's body, or '' when the connection closed without one. */
function send(port: number, parts: Array<string | Buffer>, end = false): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
      const i = got.indexOf('\r\n\r\n');
      const m = /content-length: (\d+)/i.exec(got.toString('latin1'));
      if (i >= 0 && m && got.length >= i + 4 + Number(m[1])) {
        s.destroy();
        resolve(got.subarray(i + 4, i + 4 + Number(m[1])).toString('utf8'));
      }
    });
    s.on('close', () => resolve(''));
    s.on('error', () => undefined);
    (async () => {
      for (const p of parts) {
        s.write(p);
        await new Promise((r) => setTimeout(r, 20));
      }
      if (end) s.end();
    })();
  });
}

const head = (headers: string[]) => `POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.join('\r\n')}${headers.length ? '\r\n' : ''}\r\n`;
const gz = zlib.gzipSync(Buffer.from('{"zipped":true}'));

/** Each case: the parts written, and whether the client half-closes after them (a body cut short). */
const CASES: Record<string, { parts: Array<string | Buffer>; end?: boolean }> = {
  'framed JSON': { parts: [head(['Content-Type: application/json', 'Content-Length: 13']) + '{"a":"\u00e9"}'.padEnd(12, ' ')] },
  'framed, in three writes': { parts: [head(['Content-Length: 11']), '{"a":', '1', '23}  '.slice(0, 4) + ' '] },
  'framed, empty': { parts: [head(['Content-Type: application/json', 'Content-Length: 0'])] },
  'framed, byte order mark dropped': { parts: [Buffer.concat([Buffer.from(head(['Content-Length: 5'])), Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{}')])] },
  'framed, malformed UTF-8': { parts: [Buffer.concat([Buffer.from(head(['Content-Length: 4'])), Buffer.from([0x22, 0xc3, 0x28, 0x22])])] },
  'framed, latin1 charset read as UTF-8': { parts: [Buffer.concat([Buffer.from(head(['Content-Type: application/json; charset=latin1', 'Content-Length: 4'])), Buffer.from('"é"', 'utf8')])] },
  'framed, identity encoding': { parts: [head(['Content-Encoding: Identity', 'Content-Length: 2']) + '{}'] },
  'framed, exactly the limit': { parts: [head([`Content-Length: ${LIMIT}`]) + 'x'.repeat(LIMIT)] },
  'framed, over the limit': { parts: [head([`Content-Length: ${LIMIT + 1}`]) + 'x'.repeat(LIMIT + 1)] },
  'chunked': { parts: [head(['Transfer-Encoding: chunked']) + '2\r\n{}\r\n0\r\n\r\n'] },
  'chunked, over the limit': { parts: [head(['Transfer-Encoding: chunked']) + `${(LIMIT + 1).toString(16)}\r\n${'y'.repeat(LIMIT + 1)}\r\n0\r\n\r\n`] },
  'gzip': { parts: [Buffer.concat([Buffer.from(head(['Content-Encoding: gzip', `Content-Length: ${gz.length}`])), gz])] },
  'unknown encoding': { parts: [head(['Content-Encoding: compress', 'Content-Length: 2']) + '{}'] },
  'no body': { parts: [head([])] },
  'framed, cut short': { parts: [head(['Content-Length: 40']) + '{"half":'], end: true },
};

let direct: { port: number; close(): Promise<void> };
let reference: { port: number; close(): Promise<void> };
const seenDirect: unknown[] = [];
const seenReference: unknown[] = [];

beforeAll(async () => {
  direct = await listener(utf8BodyReader(LIMIT), seenDirect);
  reference = await listener(bodyParserReader(LIMIT), seenReference);
});
afterAll(async () => {
  await direct.close();
  await reference.close();
});

test.each(Object.keys(CASES))('%s: the same outcome as body-parser', async (name) => {
  const c = CASES[name];
  const [a, b] = await Promise.all([send(direct.port, c.parts, c.end), send(reference.port, c.parts, c.end)]);
  expect(a).toBe(b);
  if (name === 'framed, cut short') {
    // The client left: no answer; the outcome the reader gave is the aborted request, both ways.
    await new Promise((r) => setTimeout(r, 100));
    expect(a).toBe('');
    expect(seenDirect.at(-1)).toStrictEqual(seenReference.at(-1));
    expect(seenDirect.at(-1)).toStrictEqual({ error: 'request.aborted', status: 400 });
  } else expect(a).not.toBe('');
});

test('the expected outcomes (so that two broken readers cannot agree)', async () => {
  const outcome = async (name: string) => JSON.parse(await send(direct.port, CASES[name].parts, CASES[name].end));
  expect(await outcome('framed JSON')).toEqual({ body: '{"a":"\u00e9"}'.padEnd(12, ' ') });
  expect(await outcome('framed, empty')).toEqual({ body: '' });
  expect(await outcome('framed, byte order mark dropped')).toEqual({ body: '{}' });
  expect(await outcome('framed, malformed UTF-8')).toEqual({ body: '"\ufffd("' });
  expect(await outcome('framed, over the limit')).toEqual({ error: 'entity.too.large', status: 413 });
  expect(await outcome('chunked, over the limit')).toEqual({ error: 'entity.too.large', status: 413 });
  expect(await outcome('gzip')).toEqual({ body: '{"zipped":true}' });
  expect(await outcome('unknown encoding')).toEqual({ error: 'encoding.unsupported', status: 415 });
  expect(await outcome('no body')).toEqual({ body: null });
});
