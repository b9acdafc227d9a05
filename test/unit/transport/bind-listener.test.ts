/**
 * bindListener (src/server.ts; task nu48fix item 1): `interlock demo` binds its port before anything
 * else. A taken port rejects with EADDRINUSE and leaves nothing listening; a bound listener answers
 * 503 `unavailable` with Retry-After until a gateway takes it over.
 */
import { createServer, type Server } from 'node:net';
import { bindListener } from '../../../src/server';

test('a taken port rejects with EADDRINUSE; a free one answers 503 unavailable (Retry-After: 1) until taken over', async () => {
  const busy: Server = createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', () => resolve()));
  const port = (busy.address() as { port: number }).port;
  try {
    await expect(bindListener({ host: '127.0.0.1', port })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  } finally {
    await new Promise<void>((resolve) => busy.close(() => resolve()));
  }
  const held = await bindListener({ host: '127.0.0.1', port: 0 });
  try {
    const res = await fetch(`http://127.0.0.1:${(held.address() as { port: number }).port}/mcp`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json', connection: 'close' } });
    expect({ status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.json() }).toEqual({
      status: 503,
      retryAfter: '1',
      body: { error: 'unavailable', code: 'unavailable', message: 'InterLock is starting: try again in a moment' },
    });
  } finally {
    held.closeAllConnections();
    await new Promise<void>((resolve) => held.close(() => resolve()));
  }
});
