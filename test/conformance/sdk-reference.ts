/**
 * The official MCP TypeScript SDK v2 stateless reference server, as an implementer would write it:
 * `McpServer` with two tools registered through JSON Schema (`fromJsonSchema`), served per request by
 * `createMcpHandler` on node:http via `@modelcontextprotocol/node`, all options at their defaults.
 * The conformance suite's `mcp-stateless` profile runs against it in test/conformance/reference.test.ts.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer, createMcpHandler, fromJsonSchema } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';

/** A running reference server. */
export interface ReferenceServer {
  url: string;
  close(): Promise<void>;
}

/** Builds one server (createMcpHandler asks for a fresh one per request). */
function referenceServer(): McpServer {
  const s = new McpServer({ name: 'sdk-v2-reference', version: '1.0.0' });
  s.registerTool(
    'list_items',
    { description: 'Lists the items.', inputSchema: fromJsonSchema({ type: 'object', properties: {}, additionalProperties: false }) },
    async () => ({ content: [{ type: 'text', text: '["anvil","bucket"]' }] }),
  );
  s.registerTool(
    'echo',
    { description: 'Echoes a text.', inputSchema: fromJsonSchema<{ text: string }>({ type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false }) },
    async (args: { text: string }) => ({ content: [{ type: 'text', text: args.text }] }),
  );
  return s;
}

/** Options of `startReferenceServer`. */
export interface ReferenceOptions {
  /**
   * DNS-rebinding protection as a strict implementer adds it in front of the handler (issue 30 item 2):
   * any Host other than the exact `127.0.0.1:<port>`, and any Origin other than
   * `http://127.0.0.1:<port>` (in any letter case, RFC 6454 §4), get HTTP 403 with a plain-text body (MCP requires only the status).
   */
  hostGuard?: boolean;
}

/** Starts the reference on 127.0.0.1 with a random port. */
export async function startReferenceServer(options: ReferenceOptions = {}): Promise<ReferenceServer> {
  const handler = toNodeHandler(createMcpHandler(referenceServer));
  let own = '';
  const server = http.createServer((req, res) => {
    const origin = req.headers.origin;
    // Origins compare ASCII-case-insensitively (RFC 6454 §4): the own origin in another letter case is served.
    if (options.hostGuard && (req.headers.host !== own || (origin !== undefined && origin.toLowerCase() !== `http://${own}`))) {
      res.writeHead(403, { 'Content-Type': 'text/plain' }).end('Forbidden: host or origin not allowed');
      return;
    }
    void handler(req, res);
  });
  const running = await listenLoopback(server);
  own = new URL(running.url).host;
  return running;
}

/** Listens on 127.0.0.1 with a random port; the URL is the server's `/mcp`, and `close` also ends open connections. */
export async function listenLoopback(server: http.Server, onClose?: () => Promise<void>): Promise<ReferenceServer> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await onClose?.();
    },
  };
}
