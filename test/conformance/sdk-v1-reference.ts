/**
 * A stateless MCP server built on the official TypeScript SDK v1 (`@modelcontextprotocol/sdk` 1.32.2) as
 * its README shows it: `McpServer` with two tools registered through zod shapes (zod is the SDK's own
 * dependency), connected per request to a `StreamableHTTPServerTransport` with `sessionIdGenerator:
 * undefined` (stateless) on node:http; GET and DELETE get 405 from the route, as the SDK's stateless
 * example does. Every transport option is at its default, so there is no DNS-rebinding protection
 * (`enableDnsRebindingProtection` is off by default). The conformance package runs against it in
 * test/conformance/other-servers.test.ts (issue 30 item 5).
 */
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { listenLoopback, type ReferenceServer } from './sdk-reference';

/** One SDK v1 server (a fresh one per request, as the stateless example does). */
function v1Server(): McpServer {
  const s = new McpServer({ name: 'sdk-v1-reference', version: '1.0.0' });
  s.registerTool('list_items', { description: 'Lists the items.', inputSchema: {} }, async () => ({ content: [{ type: 'text', text: '["anvil","bucket"]' }] }));
  s.registerTool('echo', { description: 'Echoes a text.', inputSchema: { text: z.string() } }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
  return s;
}

/** Starts the SDK v1 stateless server on 127.0.0.1 with a random port. */
export async function startSdkV1Server(): Promise<ReferenceServer> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405, { 'Content-Type': 'application/json', Allow: 'POST' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null }));
      return;
    }
    void (async () => {
      const mcp = v1Server();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => {
        void transport.close();
        void mcp.close();
      });
      await mcp.connect(transport);
      // The transport reads and parses the body itself (a parse error is its own -32700).
      await transport.handleRequest(req, res);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  return listenLoopback(server);
}
