/**
 * Real MCP clients against a running InterLock (test/helpers/server.ts, 127.0.0.1, free port):
 * - official SDK v1 1.32.2, negotiating each handshake version 2025-03-26, 2025-06-18, 2025-11-25;
 * - official SDK v2 client 2.4.0 in 'legacy', 'auto' and { pin: '2026-07-28' } modes.
 * Each client connects, lists the tools (all eleven InterLock names), calls interlock_list_sources
 * with the valid key (success) and interlock_query without an Authorization header (refusal).
 *
 * Contract: "Clients … need nothing InterLock-specific: they negotiate with initialize as usual";
 * refusals are tool results with isError true in the handshake dialect and JSON-RPC errors with the
 * HTTP status in the modern dialect ("Tool results for refusals and queued writes").
 */
import { startTestServer, type TestServer } from '../helpers/server';
import {
  connectSdkV1,
  connectSdkV2,
  INTERLOCK_TOOL_NAMES,
  sdkV2,
  v2ModeLabel,
  type CallOutcome,
  type ConnectedClient,
  type V2Mode,
} from '../helpers/clients';
import { LATEST_PROTOCOL_VERSION as SDK_V1_LATEST } from '@modelcontextprotocol/sdk/types.js';
import protocol from '../../spec/protocol-v1.json';

const GOVERNED_CALL = { name: 'interlock_query', args: { source_id: 'demo', sql: 'SELECT 1' } };

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

/** Asserts the parts every client shares: identity, tool names, success path. */
async function assertCatalogueAndSuccess(client: ConnectedClient): Promise<void> {
  expect(client.serverInfo).toEqual({ name: protocol.serverInfo.name, version: protocol.serverInfo.version });

  const names = await client.listToolNames();
  expect(names).toEqual(expect.arrayContaining([...INTERLOCK_TOOL_NAMES]));
  expect(INTERLOCK_TOOL_NAMES).toHaveLength(12);

  const ok = await client.callTool('interlock_list_sources', {}, { apiKey: server.apiKey });
  if (ok.kind !== 'result') throw new Error(`interlock_list_sources failed in ${client.label}: ${ok.message}`);
  expect(ok.result.isError).not.toBe(true);
  const content = ok.result.content as Array<{ type: string; text?: string }>;
  const text = content.find((c) => c.type === 'text')?.text;
  expect(typeof text).toBe('string');
  const parsed: unknown = JSON.parse(text as string);
  expect(parsed).not.toBeNull();
  expect(typeof parsed).toBe('object');
  expect(Array.isArray(parsed)).toBe(false);
  // The test server grants the agent the "demo" source only.
  expect(Object.keys(parsed as object)).toEqual(['demo']);
}

/** Handshake dialect: the refusal is a tool result, isError true, with status/code in structuredContent. */
function assertHandshakeRefusal(outcome: CallOutcome, label: string): void {
  if (outcome.kind !== 'result') throw new Error(`${label}: expected a tool result, got ${outcome.name}: ${outcome.message}`);
  expect(outcome.result.isError).toBe(true);
  expect(outcome.result.structuredContent).toEqual(expect.objectContaining({ status: 'unauthorized', code: 'missing_api_key' }));
  const content = outcome.result.content as Array<{ type: string; text?: string }>;
  expect(content.some((c) => c.type === 'text' && typeof c.text === 'string' && c.text.length > 0)).toBe(true);
}

describe('SDK v1 @modelcontextprotocol/sdk 1.32.2 (handshake dialect)', () => {
  test('the SDK offers 2025-11-25 on its own, so older versions need the rewritten offer', () => {
    expect(SDK_V1_LATEST).toBe('2025-11-25');
  });

  describe.each(['2025-03-26', '2025-06-18', '2025-11-25'])('negotiating %s', (version) => {
    let client: ConnectedClient;
    beforeAll(async () => {
      client = await connectSdkV1({ url: server.url, offerVersion: version === SDK_V1_LATEST ? undefined : version });
    });
    afterAll(async () => {
      await client?.close();
    });

    test('initialize agrees on the offered version and the client sends it on every later request', () => {
      expect(client.negotiatedVersion).toBe(version);
      const [init, ...rest] = client.wire;
      expect(init).toEqual(expect.objectContaining({ httpMethod: 'POST', rpcMethod: 'initialize', status: 200 }));
      expect(init.protocolVersionHeader).toBeUndefined();
      expect(rest.length).toBeGreaterThan(0);
      for (const ex of rest) expect(ex.protocolVersionHeader).toBe(version);
      expect(rest).toEqual(expect.arrayContaining([expect.objectContaining({ rpcMethod: 'notifications/initialized', status: 202 })]));
    });

    test('lists the eleven InterLock tools and calls interlock_list_sources with the key', async () => {
      await assertCatalogueAndSuccess(client);
    });

    test('a governed tool without Authorization is a tool result: isError, unauthorized / missing_api_key', async () => {
      const outcome = await client.callTool(GOVERNED_CALL.name, GOVERNED_CALL.args, { apiKey: null });
      assertHandshakeRefusal(outcome, client.label);
      const call = client.wire.filter((w) => w.rpcMethod === 'tools/call').pop();
      expect(call).toEqual(expect.objectContaining({ authorized: false, status: 200 }));
    });

    test("the SDK's background GET /mcp (server stream) got 405 and the session carried on", async () => {
      // The SDK opens that stream without awaiting it after notifications/initialized.
      for (let i = 0; i < 50 && !client.wire.some((w) => w.httpMethod === 'GET'); i++) await new Promise((r) => setTimeout(r, 20));
      expect(client.wire.filter((w) => w.httpMethod === 'GET')).toEqual([expect.objectContaining({ status: 405, protocolVersionHeader: version })]);
    });
  });
});

describe('SDK v2 @modelcontextprotocol/client 2.4.0', () => {
  const modes: Array<{ mode: V2Mode; version: string; era: 'legacy' | 'modern' }> = [
    { mode: 'legacy', version: '2025-11-25', era: 'legacy' },
    { mode: 'auto', version: '2026-07-28', era: 'modern' },
    { mode: { pin: '2026-07-28' }, version: '2026-07-28', era: 'modern' },
  ];

  describe.each(modes)('versionNegotiation $mode', ({ mode, version, era }) => {
    let client: ConnectedClient;
    beforeAll(async () => {
      client = await connectSdkV2({ url: server.url, mode });
    });
    afterAll(async () => {
      await client?.close();
    });

    test(`connects in the ${era} era at ${version}`, () => {
      expect(client.label).toBe(`sdk-v2 ${v2ModeLabel(mode)}`);
      expect(client.era).toBe(era);
      expect(client.negotiatedVersion).toBe(version);
      const first = client.wire[0];
      if (era === 'legacy') {
        expect(first).toEqual(expect.objectContaining({ rpcMethod: 'initialize', status: 200 }));
        expect(client.wire.some((w) => w.rpcMethod === 'server/discover')).toBe(false);
      } else {
        // auto and pin both probe with server/discover and never send initialize.
        expect(first).toEqual(
          expect.objectContaining({ rpcMethod: 'server/discover', protocolVersionHeader: '2026-07-28', mcpMethodHeader: 'server/discover', status: 200 }),
        );
        expect(client.wire.some((w) => w.rpcMethod === 'initialize')).toBe(false);
      }
    });

    test('lists the eleven InterLock tools and calls interlock_list_sources with the key', async () => {
      await assertCatalogueAndSuccess(client);
      if (era === 'modern') {
        for (const ex of client.wire) {
          expect(ex.protocolVersionHeader).toBe('2026-07-28');
          expect(ex.mcpMethodHeader).toBe(ex.rpcMethod);
        }
        const call = client.wire.find((w) => w.rpcMethod === 'tools/call');
        expect(call?.mcpNameHeader).toBe('interlock_list_sources');
      }
    });

    if (era === 'legacy') {
      test('a governed tool without Authorization is a tool result: isError, unauthorized / missing_api_key', async () => {
        const outcome = await client.callTool(GOVERNED_CALL.name, GOVERNED_CALL.args, { apiKey: null });
        assertHandshakeRefusal(outcome, client.label);
      });
    } else {
      test('a governed tool without Authorization: HTTP 401 + WWW-Authenticate; the client throws SdkHttpError carrying the JSON-RPC error', async () => {
        const outcome = await client.callTool(GOVERNED_CALL.name, GOVERNED_CALL.args, { apiKey: null });
        const call = client.wire.filter((w) => w.rpcMethod === 'tools/call').pop();
        expect(call).toEqual(expect.objectContaining({ authorized: false, status: 401, mcpNameHeader: GOVERNED_CALL.name }));
        expect(call?.wwwAuthenticate).toMatch(/^Bearer\b/);

        // What the v2 client exposes, exactly: on a non-400 HTTP error it does not parse the body into a
        // ProtocolError; it throws SdkHttpError(ClientHttpNotImplemented) with {status, statusText, text}.
        if (outcome.kind !== 'error') throw new Error(`${client.label}: expected an error, got a result ${JSON.stringify(outcome.result)}`);
        expect(outcome.error).toBeInstanceOf(sdkV2.SdkHttpError);
        expect(outcome.code).toBe(sdkV2.SdkErrorCode.ClientHttpNotImplemented);
        const data = outcome.data as { status: number; statusText: string; text: string };
        expect(data.status).toBe(401);
        const body = JSON.parse(data.text) as { jsonrpc: string; id: unknown; error: { code: number; message: string; data: Record<string, unknown> } };
        expect(body.jsonrpc).toBe('2.0');
        expect(typeof body.id).toBe('number');
        expect(body.error.code).toBe(-32602);
        expect(body.error.data).toEqual(expect.objectContaining({ status: 'unauthorized', code: 'missing_api_key' }));
        expect(outcome.message).toContain('missing_api_key');
      });
    }
  });
});
