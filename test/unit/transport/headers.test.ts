/**
 * The header deciders keep their last verdict (issue 13); the kept verdict must always be the one
 * a fresh computation gives, whatever the order of the values.
 */
import fc from 'fast-check';
import { acceptsRequired, hostAllowed, mediaType } from '../../../src/transport/http-headers';

const contentTypes = ['application/json', 'Application/JSON; charset=utf-8', ' text/plain ;x=1', ';', '', 'application/json;', 'application/jsonx'];
const accepts = ['application/json, text/event-stream', 'text/event-stream', '*/*', 'application/json;q=0, text/event-stream', 'application/*, text/*;q=0.5', ''];
const hosts = ['127.0.0.1:8787', 'LOCALHOST', 'evil.example', '[::1]:80', 'localhost:abc', '', 'Example.COM:1'];

test('mediaType, acceptsRequired and hostAllowed answer every sequence as they answer each value alone', () => {
  const expectedType = new Map(contentTypes.map((v) => [v, ((): string | null => { const t = v.split(';')[0].trim().toLowerCase(); return v && t.length ? t : null; })()]));
  expect(expectedType.get('Application/JSON; charset=utf-8')).toBe('application/json');
  const acceptOk = new Map([['application/json, text/event-stream', true], ['text/event-stream', false], ['*/*', true], ['application/json;q=0, text/event-stream', false], ['application/*, text/*;q=0.5', true], ['', false]]);
  const policies = [{ allowedHosts: ['localhost', '127.0.0.1', '[::1]'], allowedOrigins: [] }, { allowedHosts: ['example.com'], allowedOrigins: [] }];
  const hostOk = (h: string, p: number) => (p === 0 ? ['127.0.0.1:8787', 'LOCALHOST', '[::1]:80'].includes(h) : h === 'Example.COM:1');
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.constantFrom(...contentTypes), fc.constantFrom(...accepts), fc.constantFrom(...hosts), fc.constantFrom(0, 1)), { minLength: 1, maxLength: 30 }), (seq) => {
      for (const [ct, acc, host, p] of seq) {
        expect(mediaType(ct)).toBe(expectedType.get(ct));
        expect(acceptsRequired(acc)).toBe(acceptOk.get(acc));
        expect(hostAllowed(host, policies[p])).toBe(hostOk(host, p));
      }
    }),
    { numRuns: 200 },
  );
  expect([mediaType(undefined), acceptsRequired(undefined), hostAllowed(undefined, policies[0])]).toEqual([null, false, false]);
});
