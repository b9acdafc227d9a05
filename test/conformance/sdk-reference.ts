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

/** Starts the reference on 127.0.0.1 with a random port. */
export async function startReferenceServer(): Promise<ReferenceServer> {
  const handler = toNodeHandler(createMcpHandler(referenceServer));
  const server = http.createServer((req, res) => void handler(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
