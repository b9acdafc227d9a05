/**
 * The reference server of scenario 3, run as a child process: the official MCP TypeScript SDK v2
 * (`@modelcontextprotocol/server` createMcpHandler + `@modelcontextprotocol/node` toNodeHandler)
 * on node:http, serving the same eleven tool definitions as InterLock's tools/list (from
 * generated/tool-catalogue.json) through a low-level Server's tools/list handler. Prints
 * "READY <url>" when listening, or "SKIP <reason>" and exits 3 when the SDK packages are not
 * installed. BENCH_SDK_V2_DIR may name a directory whose node_modules holds them (a copy installed
 * outside this repository); otherwise they resolve from the repository's node_modules.
 * Environment: BENCH_SDK_RESPONSE_MODE = json (default) | auto | sse.
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import catalogue from '../../generated/tool-catalogue.json';

/** The parts of the SDK this bench uses (typed locally: the packages may be absent at type-check time). */
interface SdkServerModule {
  createMcpHandler(factory: () => unknown, options?: Record<string, unknown>): { fetch: unknown };
  Server: new (info: { name: string; version: string }, options: Record<string, unknown>) => { setRequestHandler(method: string, handler: () => unknown): void };
}
interface SdkNodeModule {
  toNodeHandler(handler: unknown): (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void>;
}

/** The tools/list entries exactly as InterLock serves them (name, title, description, inputSchema). */
export function catalogueTools(): Array<Record<string, unknown>> {
  return catalogue.tools.map((t) => {
    const out: Record<string, unknown> = { name: t.name, description: t.description, inputSchema: t.inputSchema };
    if ((t as { title?: string }).title) out.title = (t as { title?: string }).title;
    return out;
  });
}

/** The version of an installed package (its package.json is not in its `exports`, so it is found from the entry point). */
function packageVersion(req: NodeJS.Require, name: string): string {
  let dir = path.dirname(req.resolve(name));
  for (let i = 0; i < 5; i++, dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === name) return pkg.version ?? '?';
    } catch {
      // keep walking up
    }
  }
  return '?';
}

function load(): { server: SdkServerModule; node: SdkNodeModule; version: string } | string {
  const base = process.env.BENCH_SDK_V2_DIR ? path.join(path.resolve(process.env.BENCH_SDK_V2_DIR), 'package.json') : path.join(__dirname, '..', '..', 'package.json');
  const req = createRequire(base);
  try {
    const server = req('@modelcontextprotocol/server') as SdkServerModule;
    const node = req('@modelcontextprotocol/node') as SdkNodeModule;
    return { server, node, version: `@modelcontextprotocol/server@${packageVersion(req, '@modelcontextprotocol/server')} + @modelcontextprotocol/node@${packageVersion(req, '@modelcontextprotocol/node')}` };
  } catch (err) {
    return `the SDK v2 server packages are not installed (${(err as Error).message.split('\n')[0]}); add @modelcontextprotocol/server@2.4.0 and @modelcontextprotocol/node@2.1.2`;
  }
}

function main(): void {
  const sdk = load();
  if (typeof sdk === 'string') {
    process.stdout.write(`SKIP ${sdk}\n`);
    process.exit(3);
  }
  const tools = catalogueTools();
  const responseMode = process.env.BENCH_SDK_RESPONSE_MODE ?? 'json';
  // createMcpHandler asks the factory for a fresh server per HTTP request (its stateless design).
  const handler = sdk.server.createMcpHandler(
    () => {
      const s = new sdk.server.Server({ name: 'sdk-v2-reference', version: '1.0.0' }, { capabilities: { tools: {} } });
      s.setRequestHandler('tools/list', () => ({ tools }));
      return s;
    },
    { responseMode },
  );
  const nodeHandler = sdk.node.toNodeHandler(handler);
  const server = http.createServer((req, res) => void nodeHandler(req, res));
  server.keepAliveTimeout = 65_000;
  server.listen(0, '127.0.0.1', () => {
    const port = (server.address() as AddressInfo).port;
    process.stdout.write(`SDK ${sdk.version} responseMode=${responseMode}\nREADY http://127.0.0.1:${port}/mcp\n`);
  });
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
  process.on('disconnect', () => process.exit(0));
}

if (require.main === module) main();
