/**
 * Real MCP clients driving an InterLock gateway over HTTP, for test/e2e/real-clients.test.ts:
 * - the official TypeScript SDK v1 (`@modelcontextprotocol/sdk` 1.32.2): Client +
 *   StreamableHTTPClientTransport, handshake dialect only;
 * - the official TypeScript SDK v2 client (`@modelcontextprotocol/client` 2.4.0) in its three
 *   version-negotiation modes: 'legacy', 'auto' and { pin: '2026-07-28' }.
 *
 * Every client gets a recording fetch: it logs each HTTP exchange (method, JSON-RPC method, the
 * MCP-Protocol-Version / Mcp-Method / Mcp-Name headers, status, content type), and it controls the
 * Authorization header per call, so one connection can make both an authenticated call and a call
 * without a key. SDK v1 always offers its latest version (2025-11-25) in initialize; `offerVersion`
 * rewrites that offer in the initialize body, which is how an older handshake version is negotiated.
 */
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type * as V2 from '@modelcontextprotocol/client' with { 'resolution-mode': 'require' };
import tools from '../../spec/mcp-tools-v1.json';

// The v2 client ships CommonJS behind its package `exports` ("require" condition). TypeScript's
// node10 resolution (tsconfig) cannot see `exports`, so the types come from the type-only import above
// and the value from require(), which Node and Jest resolve through `exports`.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const v2: typeof V2 = require('@modelcontextprotocol/client');

/** The eleven InterLock tool names (6 interlock_* and the 5 deprecated agentgate_* aliases), from spec/. */
export const INTERLOCK_TOOL_NAMES: readonly string[] = [...tools.tools.map((t) => t.name), ...tools.aliases.map((a) => a.name)];

/** One HTTP exchange as the client made it. */
export interface WireExchange {
  httpMethod: string;
  /** JSON-RPC method of the request body, when it had one. */
  rpcMethod?: string;
  /** Request id of the body, when it had one. */
  rpcId?: string | number;
  /** MCP-Protocol-Version header sent, if any. */
  protocolVersionHeader?: string;
  mcpMethodHeader?: string;
  mcpNameHeader?: string;
  /** Whether an Authorization header was sent. */
  authorized: boolean;
  status: number;
  contentType: string;
  /** WWW-Authenticate response header, if any. */
  wwwAuthenticate?: string;
  /** X-Request-Id response header (the gateway's request id, also in the audit), if any. */
  requestId?: string;
}

/** What a client call returned or threw, reduced to plain data for assertions. */
export type CallOutcome =
  | { kind: 'result'; result: { content?: unknown; structuredContent?: Record<string, unknown>; isError?: boolean; [k: string]: unknown } }
  | { kind: 'error'; name: string; message: string; code?: unknown; data?: unknown; status?: number; error: unknown };

/** A connected client with the facts a test asserts on. */
export interface ConnectedClient {
  /** e.g. "sdk-v1 (offers 2025-03-26)" or "sdk-v2 auto". */
  label: string;
  /** The protocol version the client ended up with. */
  negotiatedVersion: string | undefined;
  /** SDK v2 only: 'legacy' or 'modern'. */
  era?: string;
  /** The server's self-reported identity (initialize serverInfo, or discover _meta serverInfo). */
  serverInfo: { name: string; version: string } | undefined;
  /** Every HTTP exchange so far, in order. */
  wire: WireExchange[];
  /** Names of every listed tool (all pages). */
  listToolNames(): Promise<string[]>;
  /** Calls a tool; `apiKey: null` sends no Authorization header for this call only. */
  callTool(name: string, args: Record<string, unknown>, opts?: { apiKey?: string | null }): Promise<CallOutcome>;
  close(): Promise<void>;
}

/** Options common to both SDKs. */
export interface ConnectOptions {
  url: string;
  /** Default Authorization Bearer key for every request (null/undefined: none). */
  apiKey?: string | null;
}

type FetchFn = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/**
 * Builds the recording fetch. `state.apiKey` is read on every request, so a call can temporarily
 * change it. When `offerVersion` is set, the `protocolVersion` of an initialize request body is
 * replaced by it.
 */
function recordingFetch(wire: WireExchange[], state: { apiKey: string | null }, offerVersion?: string): FetchFn {
  return async (input, init = {}) => {
    const headers = new Headers(init.headers);
    if (state.apiKey) headers.set('authorization', `Bearer ${state.apiKey}`);
    else headers.delete('authorization');
    let body = init.body;
    let rpc: { method?: unknown; id?: unknown } | undefined;
    if (typeof body === 'string') {
      try {
        const parsed = JSON.parse(body) as Record<string, unknown>;
        if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
          rpc = parsed;
          const params = parsed.params as Record<string, unknown> | undefined;
          if (offerVersion && parsed.method === 'initialize' && params) {
            body = JSON.stringify({ ...parsed, params: { ...params, protocolVersion: offerVersion } });
          }
        }
      } catch {
        // not JSON: pass through untouched
      }
    }
    const res = await fetch(input, { ...init, headers, body });
    wire.push({
      httpMethod: (init.method ?? 'GET').toUpperCase(),
      rpcMethod: typeof rpc?.method === 'string' ? rpc.method : undefined,
      rpcId: typeof rpc?.id === 'string' || typeof rpc?.id === 'number' ? rpc.id : undefined,
      protocolVersionHeader: headers.get('mcp-protocol-version') ?? undefined,
      mcpMethodHeader: headers.get('mcp-method') ?? undefined,
      mcpNameHeader: headers.get('mcp-name') ?? undefined,
      authorized: headers.has('authorization'),
      status: res.status,
      contentType: res.headers.get('content-type') ?? '',
      wwwAuthenticate: res.headers.get('www-authenticate') ?? undefined,
      requestId: res.headers.get('x-request-id') ?? undefined,
    });
    return res;
  };
}

/** Reduces a thrown client error to plain data; keeps the original for instanceof checks. */
function describeError(error: unknown): CallOutcome {
  const e = error as { name?: unknown; message?: unknown; code?: unknown; data?: unknown; status?: unknown };
  return {
    kind: 'error',
    name: typeof e?.name === 'string' ? e.name : typeof error,
    message: typeof e?.message === 'string' ? e.message : String(error),
    code: e?.code,
    data: e?.data,
    status: typeof e?.status === 'number' ? e.status : undefined,
    error,
  };
}

/** Runs `fn` with the fetch wrapper's key set to `apiKey` (when given), then restores it. */
async function withKey<T>(state: { apiKey: string | null }, apiKey: string | null | undefined, fn: () => Promise<T>): Promise<T> {
  if (apiKey === undefined) return fn();
  const saved = state.apiKey;
  state.apiKey = apiKey;
  try {
    return await fn();
  } finally {
    state.apiKey = saved;
  }
}

/**
 * Connects the official SDK v1 client (handshake dialect). `offerVersion` replaces the version the
 * SDK offers in initialize (it always offers 2025-11-25); the negotiated version is the one the
 * transport adopted from the initialize result (it then sends it as MCP-Protocol-Version).
 */
export async function connectSdkV1(opts: ConnectOptions & { offerVersion?: string }): Promise<ConnectedClient> {
  const wire: WireExchange[] = [];
  const state = { apiKey: opts.apiKey ?? null };
  const transport = new TransportV1(new URL(opts.url), { fetch: recordingFetch(wire, state, opts.offerVersion) });
  const client = new ClientV1({ name: 'interlock-e2e-sdk-v1', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  const info = client.getServerVersion();
  return {
    label: `sdk-v1${opts.offerVersion ? ` (offers ${opts.offerVersion})` : ''}`,
    negotiatedVersion: transport.protocolVersion,
    serverInfo: info ? { name: info.name, version: info.version } : undefined,
    wire,
    async listToolNames() {
      const names: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor ? { cursor } : undefined);
        names.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
      } while (cursor);
      return names;
    },
    async callTool(name, args, callOpts = {}) {
      return withKey(state, callOpts.apiKey, async () => {
        try {
          const result = await client.callTool({ name, arguments: args });
          return { kind: 'result', result: result as Extract<CallOutcome, { kind: 'result' }>['result'] };
        } catch (error) {
          return describeError(error);
        }
      });
    },
    close: () => client.close(),
  };
}

/** The three version-negotiation modes of the SDK v2 client exercised here. */
export type V2Mode = 'legacy' | 'auto' | { pin: string };

/** Human-readable name of a v2 mode, e.g. "pin 2026-07-28". */
export function v2ModeLabel(mode: V2Mode): string {
  return typeof mode === 'string' ? mode : `pin ${mode.pin}`;
}

/**
 * Connects the official SDK v2 client with `versionNegotiation.mode`. 'legacy' runs the 2025
 * initialize handshake; 'auto' probes with server/discover and adopts 2026-07-28 when offered;
 * a pin requires the pinned version from server/discover.
 */
export async function connectSdkV2(opts: ConnectOptions & { mode: V2Mode }): Promise<ConnectedClient> {
  const wire: WireExchange[] = [];
  const state = { apiKey: opts.apiKey ?? null };
  const transport = new v2.StreamableHTTPClientTransport(new URL(opts.url), { fetch: recordingFetch(wire, state) });
  const client = new v2.Client({ name: 'interlock-e2e-sdk-v2', version: '1.0.0' }, { capabilities: {}, versionNegotiation: { mode: opts.mode } });
  await client.connect(transport);
  const info = client.getServerVersion();
  return {
    label: `sdk-v2 ${v2ModeLabel(opts.mode)}`,
    negotiatedVersion: client.getNegotiatedProtocolVersion(),
    era: client.getProtocolEra(),
    serverInfo: info ? { name: info.name, version: info.version } : undefined,
    wire,
    async listToolNames() {
      const names: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor ? { cursor } : undefined, { cacheMode: 'bypass' });
        names.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
      } while (cursor);
      return names;
    },
    async callTool(name, args, callOpts = {}) {
      return withKey(state, callOpts.apiKey, async () => {
        try {
          const result = await client.callTool({ name, arguments: args });
          return { kind: 'result', result: result as Extract<CallOutcome, { kind: 'result' }>['result'] };
        } catch (error) {
          return describeError(error);
        }
      });
    },
    close: () => client.close(),
  };
}

/** The v2 package's exports (error classes for instanceof checks, version constants). */
export const sdkV2 = v2;
