/**
 * Browsers as MCP clients (issue 24 item 7) in headless Chromium against the real governed
 * gateway: a page served from an origin in config allowed_origins calls POST /mcp with fetch and
 * with the official SDK client (@modelcontextprotocol/sdk, bundled for the browser with esbuild),
 * so the preflight and the CORS headers are checked by the browser itself; a page from another
 * origin is refused (the browser sees no CORS answer). Needs /usr/bin/chromium; skipped when
 * absent, except under CI.
 */
import { existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { build } from 'esbuild';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';

const CHROMIUM = '/usr/bin/chromium';
const run = existsSync(CHROMIUM) || process.env.CI ? describe : describe.skip;
const ROOT = join(__dirname, '..', '..', '..');

/** The SDK v1 client and its Streamable HTTP transport as `window.McpSdk`, bundled for the browser. */
async function sdkBundle(): Promise<string> {
  const r = await build({
    stdin: {
      contents: "import { Client } from '@modelcontextprotocol/sdk/client/index.js';\nimport { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';\nwindow.McpSdk = { Client, StreamableHTTPClientTransport };\n",
      resolveDir: ROOT,
      loader: 'js',
    },
    bundle: true,
    platform: 'browser',
    format: 'iife',
    write: false,
    logLevel: 'silent',
  });
  return r.outputFiles[0].text;
}

let env: GovernedEnv;
let pages: http.Server;
let allowed: string;
let foreign: string;
let browser: Browser;
let page: Page;

run('CORS on /mcp for browser clients (headless Chromium)', () => {
  beforeAll(async () => {
    const bundle = await sdkBundle();
    pages = http.createServer((req, res) => {
      if (req.url === '/sdk.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(bundle);
      else res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>agent page</title><script src="/sdk.js"></script>');
    });
    await new Promise<void>((r) => pages.listen(0, '127.0.0.1', r));
    const port = (pages.address() as AddressInfo).port;
    // The same page server under two origins: only the 127.0.0.1 one is allow-listed.
    allowed = `http://127.0.0.1:${port}`;
    foreign = `http://localhost:${port}`;
    env = await startGovernedEnv({ config: { allowed_origins: [allowed] } as never });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] });
    page = await browser.newPage();
    page.setDefaultTimeout(15_000);
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await env?.close();
    pages?.closeAllConnections();
    await new Promise((r) => pages?.close(r));
  });

  test('preflight from the allowed origin: 204 with the methods and headers MCP clients send', async () => {
    const r = await fetch(env.url, { method: 'OPTIONS', headers: { origin: allowed, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type,mcp-protocol-version' } });
    expect(r.status).toBe(204);
    expect(Object.fromEntries([...r.headers].filter(([k]) => k.startsWith('access-control-') || k === 'vary'))).toEqual({
      'access-control-allow-origin': allowed,
      'access-control-allow-methods': 'POST',
      'access-control-allow-headers': 'Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID',
      'access-control-expose-headers': 'MCP-Protocol-Version, Mcp-Session-Id, WWW-Authenticate, Retry-After, X-Request-Id',
      'access-control-max-age': '600',
      vary: 'Origin',
    });
    expect(await r.text()).toBe('');
  });

  test('preflight from another origin: 403 ORIGIN, no CORS headers', async () => {
    const r = await fetch(env.url, { method: 'OPTIONS', headers: { origin: foreign, 'access-control-request-method': 'POST' } });
    expect(r.status).toBe(403);
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
    expect(((await r.json()) as { error: { code: number } }).error.code).toBe(-32600);
  });

  test('a page at the allowed origin calls a governed tool with fetch and reads the exposed headers', async () => {
    await page.goto(`${allowed}/`);
    const out = await page.evaluate(
      async ({ url, key }) => {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': '2025-11-25', Authorization: `Bearer ${key}` },
          body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }),
        });
        // tools/call answers as a one-event SSE stream (text/event-stream); the last data line is the response.
        const text = await r.text();
        const body = JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6));
        return { status: r.status, requestId: r.headers.get('x-request-id'), id: body.id, sources: Object.keys(JSON.parse(body.result.content[0].text)) };
      },
      { url: env.url, key: env.apiKey },
    );
    expect(out.status).toBe(200);
    expect(out.requestId).toMatch(/^req_[A-Za-z0-9_-]+$/);
    expect(out.id).toBe(7);
    expect(out.sources).toEqual(['chinook', 'handbook']);
  });

  test('the official SDK client, bundled for the browser, connects from the allowed origin and calls a tool', async () => {
    await page.goto(`${allowed}/`);
    const out = await page.evaluate(
      async ({ url, key }) => {
        const { Client, StreamableHTTPClientTransport } = (globalThis as unknown as { McpSdk: any }).McpSdk;
        const client = new Client({ name: 'browser-agent', version: '1.0.0' });
        await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
        const tools = (await client.listTools()).tools.map((t: { name: string }) => t.name);
        const res = await client.callTool({ name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT count(*)::int AS n FROM genre' } });
        const version = client.getServerVersion()?.name;
        await client.close();
        return { tools, isError: res.isError ?? false, text: res.content[0].text, version };
      },
      { url: env.url, key: env.apiKey },
    );
    expect(out.tools).toContain('interlock_query');
    expect(out.isError).toBe(false);
    expect(JSON.parse(out.text)).toEqual([{ n: 25 }]);
    expect(out.version).toBe('interlock');
  });

  test('a page at another origin cannot call the endpoint (fetch fails; the gateway refused the preflight)', async () => {
    await page.goto(`${foreign}/`);
    const out = await page.evaluate(async (url) => {
      try {
        await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }, body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' });
        return 'answered';
      } catch (e) {
        return (e as Error).name;
      }
    }, env.url);
    expect(out).toBe('TypeError');
  });
});
