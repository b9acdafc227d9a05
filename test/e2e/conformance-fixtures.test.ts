/**
 * The test-only conformance fixture pack (src/fixtures/conformance-tools.ts) through the real gateway
 * and a real client (SDK v1), so what `npm run conformance:official` relies on is also covered by
 * `npm test` on Node 20: notifications on the request's SSE stream, content shapes, JSON Schema
 * 2020-12 keywords kept in tools/list, and the pack's absence unless explicitly enabled.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { startTestServer, type TestServer } from '../helpers/server';
import { CONFORMANCE_FIXTURE_TOOL_NAMES, conformanceFixtureTools } from '../../src/fixtures/conformance-tools';
import type { ToolCallContext } from '../../src/tools/types';

type Content = Array<Record<string, unknown>>;

describe('conformance fixture pack through the gateway (SDK v1 client)', () => {
  let server: TestServer;
  let client: Client;
  const logs: unknown[] = [];

  beforeAll(async () => {
    server = await startTestServer({ fixtures: true });
    client = new Client({ name: 'interlock-e2e-fixtures', version: '1.0.0' }, { capabilities: {} });
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      logs.push(n.params);
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  });
  afterAll(async () => {
    await client?.close();
    await server?.close();
  });

  test('tools/list offers every fixture, JSON Schema 2020-12 keywords intact', async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining([...CONFORMANCE_FIXTURE_TOOL_NAMES]));
    const schema = tools.find((t) => t.name === 'json_schema_2020_12_tool')!.inputSchema as Record<string, any>;
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(schema.$defs.address.$anchor).toEqual(expect.any(String));
    expect(schema.additionalProperties).toBe(false);
    expect(schema.allOf[0].anyOf).toHaveLength(2);
    expect(Object.keys(schema)).toEqual(expect.arrayContaining(['if', 'then', 'else']));
  });

  test('test_simple_text works without an arguments object and without a key', async () => {
    const r = await client.callTool({ name: 'test_simple_text' } as { name: string });
    expect(r.isError).not.toBe(true);
    expect(r.content).toEqual([{ type: 'text', text: 'This is a simple text response for testing.' }]);
  });

  test('image, audio, embedded resource and mixed content have the MCP content shapes', async () => {
    const image = (await client.callTool({ name: 'test_image_content', arguments: {} })).content as Content;
    expect(image).toEqual([{ type: 'image', mimeType: 'image/png', data: expect.any(String) }]);
    expect(Buffer.from(image[0].data as string, 'base64').subarray(1, 4).toString('latin1')).toBe('PNG');

    const audio = (await client.callTool({ name: 'test_audio_content', arguments: {} })).content as Content;
    expect(audio).toEqual([{ type: 'audio', mimeType: 'audio/wav', data: expect.any(String) }]);
    const wav = Buffer.from(audio[0].data as string, 'base64');
    expect([wav.subarray(0, 4).toString('latin1'), wav.subarray(8, 12).toString('latin1')]).toEqual(['RIFF', 'WAVE']);

    const res = (await client.callTool({ name: 'test_embedded_resource', arguments: {} })).content as Content;
    expect(res).toEqual([{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: expect.any(String) } }]);

    const mixed = (await client.callTool({ name: 'test_multiple_content_types', arguments: {} })).content as Content;
    expect(mixed.map((c) => c.type)).toEqual(['text', 'image', 'resource']);
  });

  test('test_error_handling answers a result with isError true, not a JSON-RPC error', async () => {
    const r = await client.callTool({ name: 'test_error_handling', arguments: {} });
    expect(r.isError).toBe(true);
    expect((r.content as Content)[0]).toEqual({ type: 'text', text: expect.stringMatching(/error/) });
  });

  test('test_tool_with_progress streams 0, 50, 100 of 100 for the request progressToken', async () => {
    const seen: Array<{ progress: number; total?: number }> = [];
    const r = await client.callTool({ name: 'test_tool_with_progress', arguments: {} }, undefined, {
      onprogress: (p) => {
        seen.push({ progress: p.progress, total: p.total });
      },
    });
    expect(r.isError).not.toBe(true);
    expect(seen).toEqual([
      { progress: 0, total: 100 },
      { progress: 50, total: 100 },
      { progress: 100, total: 100 },
    ]);
  });

  test('test_tool_with_logging streams three info notifications/message (handshake dialect)', async () => {
    logs.length = 0;
    const r = await client.callTool({ name: 'test_tool_with_logging', arguments: {} });
    expect(r.isError).not.toBe(true);
    expect(logs).toEqual([
      expect.objectContaining({ level: 'info', data: 'Tool execution started' }),
      expect.objectContaining({ level: 'info', data: 'Tool processing data' }),
      expect.objectContaining({ level: 'info', data: 'Tool execution completed' }),
    ]);
  });

  test('json_schema_2020_12_tool validates its arguments with the 2020-12 keywords', async () => {
    const ok = await client.callTool({ name: 'json_schema_2020_12_tool', arguments: { name: 'Ada', contactMethod: 'email', email: 'ada@example.org' } });
    expect(ok.isError).not.toBe(true);
    // contactMethod phone without a phone number fails if/then (2025-11-25: an argument error is a tool result).
    const bad = await client.callTool({ name: 'json_schema_2020_12_tool', arguments: { contactMethod: 'phone', email: 'ada@example.org' } });
    expect(bad.isError).toBe(true);
  });
});

describe('the fixture pack is opt-in', () => {
  test('startTestServer() without fixtures lists no test_* tool', async () => {
    const server = await startTestServer();
    const client = new Client({ name: 'interlock-e2e-fixtures', version: '1.0.0' }, { capabilities: {} });
    try {
      await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
      const { tools } = await client.listTools();
      const fixtureNames = new Set<string>(CONFORMANCE_FIXTURE_TOOL_NAMES);
      expect(tools.filter((t) => fixtureNames.has(t.name))).toEqual([]);
    } finally {
      await client.close();
      await server.close();
    }
  });

  test('every binding is ungoverned, canonical and not deprecated; names match the exported list', () => {
    const bindings = conformanceFixtureTools();
    expect(bindings.map((b) => b.name)).toEqual([...CONFORMANCE_FIXTURE_TOOL_NAMES]);
    for (const b of bindings) {
      expect({ governed: b.governed, deprecated: b.deprecated, canonical: b.canonical }).toEqual({ governed: false, deprecated: false, canonical: b.name });
      expect(b.inputSchema.type).toBe('object');
    }
  });

  test('test_logging_tool never logs and test_tool_with_logging does not log in the modern dialect', async () => {
    const sent: string[] = [];
    const ctx = {
      dialect: 'modern',
      protocolVersion: '2026-07-28',
      signal: new AbortController().signal,
      notify: (method: string) => sent.push(method),
    } as unknown as ToolCallContext;
    const byName = new Map(conformanceFixtureTools().map((b) => [b.name, b]));
    await byName.get('test_logging_tool')!.handler({}, ctx);
    await byName.get('test_tool_with_logging')!.handler({}, ctx);
    expect(sent).toEqual([]);
  });
});
