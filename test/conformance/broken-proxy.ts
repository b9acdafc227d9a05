/**
 * An HTTP proxy in front of a real server that breaks the contract on purpose, one mutation at a
 * time, so tests can prove the conformance suite notices. It changes requests on their way in and
 * answers on their way out; it never touches src/.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A request as the proxy sees it: method, headers (names lower-cased), raw body and its JSON when it parses. */
export interface ProxyRequest {
  method: string;
  headers: Record<string, string>;
  body: string;
  json?: unknown;
}

/** An answer the proxy sends back (headers lower-cased). */
export interface ProxyResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One deliberate defect. Hooks may rewrite the request, answer it themselves, or rewrite the answer. */
export interface Mutation {
  name: string;
  /** Return a ProxyResponse to answer without the server, a ProxyRequest to forward instead, or undefined to forward as is. */
  onRequest?(req: ProxyRequest, forward: (r: ProxyRequest) => Promise<ProxyResponse>): Promise<ProxyResponse | ProxyRequest | undefined> | ProxyResponse | ProxyRequest | undefined;
  /** Rewrites the server's answer. */
  onResponse?(req: ProxyRequest, res: ProxyResponse): ProxyResponse;
}

/** A running proxy. */
export interface BrokenProxy {
  url: string;
  close(): Promise<void>;
}

/** Options of startBrokenProxy. */
export interface ProxyOptions {
  /**
   * Applied to every answer of the server, before the mutation sees it: the repairs of known disagreements
   * between the server and the spec (see repairInterLock), so a test can judge the rest of its behaviour.
   */
  repair?: (forwarded: ProxyRequest, res: ProxyResponse) => ProxyResponse;
}

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

function forwardTo(target: URL): (r: ProxyRequest) => Promise<ProxyResponse> {
  return (r) =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(r.headers)) if (!HOP.has(k)) headers[k] = v;
      const body = r.body === '' && (r.method === 'GET' || r.method === 'DELETE') ? undefined : Buffer.from(r.body, 'utf8');
      if (body) headers['content-length'] = String(body.length);
      const up = http.request(
        { hostname: target.hostname, port: target.port, path: target.pathname, method: r.method, headers, setHost: !('host' in headers) },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const out: Record<string, string> = {};
            for (const [k, v] of Object.entries(res.headers)) if (v !== undefined && !HOP.has(k)) out[k] = Array.isArray(v) ? v.join(', ') : v;
            resolve({ status: res.statusCode ?? 502, headers: out, body: Buffer.concat(chunks).toString('utf8') });
          });
        },
      );
      up.on('error', reject);
      up.end(body);
    });
}

/** Starts a proxy on 127.0.0.1 forwarding to `targetUrl` with `mutation` applied; its url has the target's path. */
export async function startBrokenProxy(targetUrl: string, mutation: Mutation, opts: ProxyOptions = {}): Promise<BrokenProxy> {
  const target = new URL(targetUrl);
  const direct = forwardTo(target);
  const repair = opts.repair;
  const forward = repair ? async (r: ProxyRequest) => repair(r, await direct(r)) : direct;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
        const body = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(body);
        } catch {
          json = undefined;
        }
        const incoming: ProxyRequest = { method: req.method ?? 'GET', headers, body, json };
        let answer: ProxyResponse;
        const hook = mutation.onRequest ? await mutation.onRequest(incoming, forward) : undefined;
        if (hook && 'status' in hook) answer = hook;
        else answer = await forward(hook ?? incoming);
        if (mutation.onResponse) answer = mutation.onResponse(incoming, answer);
        const out = Buffer.from(answer.body, 'utf8');
        res.writeHead(answer.status, { ...answer.headers, 'content-length': String(out.length) });
        res.end(out);
      })().catch((e: unknown) => {
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`broken proxy: ${String(e)}`);
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}${target.pathname}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

// ------------------------------------------------------------------ helpers for mutations

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The JSON-RPC method of a single-message request, if any. */
export function methodOf(req: ProxyRequest): string | undefined {
  return isObj(req.json) && typeof req.json.method === 'string' ? req.json.method : undefined;
}

/**
 * Rewrites the JSON-RPC message of an answer with `f`: the body of application/json, or the data of
 * each event of text/event-stream. Left alone when it is neither.
 */
export function rewriteJson(res: ProxyResponse, f: (body: Obj) => Obj): ProxyResponse {
  const ct = res.headers['content-type'] ?? '';
  const apply = (text: string): string => {
    try {
      const parsed: unknown = JSON.parse(text);
      return isObj(parsed) ? JSON.stringify(f(parsed)) : text;
    } catch {
      return text;
    }
  };
  if (ct.startsWith('application/json')) return { ...res, body: apply(res.body) };
  if (ct.startsWith('text/event-stream')) {
    return { ...res, body: res.body.split('\n').map((line) => (line.startsWith('data: ') ? 'data: ' + apply(line.slice(6)) : line)).join('\n') };
  }
  return res;
}

/** The JSON of a request body (re-read, since a mutation may have rewritten the body), or undefined. */
function jsonOf(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

const jsonAnswer = (status: number, body: unknown): ProxyResponse => ({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/**
 * Known disagreements between InterLock (src/) and the settled spec, repaired on the way back so the
 * suite's own tests can hold InterLock to everything else. Each is reported, and pinned in suite.test.ts
 * by an `it.failing` test that states the spec's answer: once src/ is fixed that test passes, jest reports
 * it, and the repair is deleted here.
 */
export const INTERLOCK_REPAIRS: Record<string, (forwarded: ProxyRequest, res: ProxyResponse) => ProxyResponse> = {};

/** Applies every repair of INTERLOCK_REPAIRS. */
export function repairInterLock(forwarded: ProxyRequest, res: ProxyResponse): ProxyResponse {
  return Object.values(INTERLOCK_REPAIRS).reduce((r, f) => f(forwarded, r), res);
}

const MODERN = '2026-07-28';
const META_PV = 'io.modelcontextprotocol/protocolVersion';
const SUPPORTED = ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'];

/** The deliberately broken variants, each named after the defect it introduces. */
export const MUTATIONS: Record<string, Mutation> = {
  /** Checks "version supported" before "header equals _meta": MPV 2026-07-28 with _meta v999 gets -32022, not -32020. */
  precedenceSwapped: {
    name: '-32022 before -32020 (MPV 2026-07-28, _meta v999 → -32022)',
    onRequest(req) {
      const j = req.json;
      const meta = isObj(j) && isObj(j.params) && isObj(j.params._meta) ? j.params._meta : undefined;
      const pv = meta?.[META_PV];
      if (req.method === 'POST' && req.headers['mcp-protocol-version'] === MODERN && typeof pv === 'string' && !SUPPORTED.includes(pv) && isObj(j) && 'id' in j) {
        return {
          status: 400,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', id: j.id, error: { code: -32022, message: 'Unsupported protocol version', data: { supported: SUPPORTED, requested: pv } } }),
        };
      }
      return undefined;
    },
  },
  /** Errors answered with HTTP 200 carry id null instead of the request id. */
  nullIdIn200Errors: {
    name: 'id: null in HTTP 200 error answers',
    onResponse: (_req, res) => (res.status === 200 ? rewriteJson(res, (b) => ('error' in b ? { ...b, id: null } : b)) : res),
  },
  /** Batches are split, forwarded one by one, and answered as a JSON array. */
  batchesAccepted: {
    name: 'batches accepted (split and forwarded)',
    async onRequest(req, forward): Promise<ProxyResponse | undefined> {
      if (req.method !== 'POST' || !Array.isArray(req.json) || req.json.length === 0) return undefined;
      const answers: unknown[] = [];
      for (const item of req.json) {
        const r = await forward({ ...req, body: JSON.stringify(item), json: item });
        if (r.body !== '') answers.push(JSON.parse(r.body));
      }
      return answers.length === 0 ? { status: 202, headers: {}, body: '' } : { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(answers) };
    },
  },
  /** GET /mcp opens an (empty) event stream instead of 405. */
  getAnswered200: {
    name: 'GET answered 200',
    onRequest: (req) => (req.method === 'GET' ? { status: 200, headers: { 'content-type': 'text/event-stream' }, body: '' } : undefined),
  },
  /** tools/list results carry nextCursor: null. */
  nextCursorNull: {
    name: 'nextCursor: null added to tools/list',
    onResponse: (req, res) => (methodOf(req) === 'tools/list' ? rewriteJson(res, (b) => (isObj(b.result) ? { ...b, result: { ...b.result, nextCursor: null } } : b)) : res),
  },
  /** ping answers {resultType: "complete"} instead of {}. */
  pingWithResultType: {
    name: 'ping answered with resultType',
    onResponse: (req, res) => (methodOf(req) === 'ping' ? rewriteJson(res, (b) => (isObj(b.result) ? { ...b, result: { ...b.result, resultType: 'complete' } } : b)) : res),
  },
  /** The Origin header is dropped before the server sees it. */
  originUnchecked: {
    name: 'Origin not checked (stripped before forwarding)',
    onRequest: (req) => {
      const { origin: _o, ...rest } = req.headers;
      return { ...req, headers: rest };
    },
  },
  /** Mcp-Name is replaced by params.name, so a mismatch is never seen. */
  mcpNameUncompared: {
    name: 'Mcp-Name not compared (rewritten to params.name)',
    onRequest: (req) => {
      const j = req.json;
      if (methodOf(req) !== 'tools/call' || req.headers['mcp-name'] === undefined || !isObj(j) || !isObj(j.params) || typeof j.params.name !== 'string') return undefined;
      return { ...req, headers: { ...req.headers, 'mcp-name': j.params.name } };
    },
  },
  /** A request for an unknown method is taken for a notification: 202 with no body. */
  accepted202ForRequests: {
    name: '202 answer to a request (unknown methods)',
    onResponse: (req, res) => {
      const m = methodOf(req);
      if (m === undefined || !isObj(req.json) || !('id' in req.json)) return res;
      const b = (() => {
        try {
          return JSON.parse(res.body) as unknown;
        } catch {
          return undefined;
        }
      })();
      return isObj(b) && isObj(b.error) && b.error.code === -32601 ? { status: 202, headers: {}, body: '' } : res;
    },
  },
  /** 401 answers lose WWW-Authenticate. */
  noWwwAuthenticate: {
    name: 'missing WWW-Authenticate on 401',
    onResponse: (_req, res) => {
      if (res.status !== 401) return res;
      const { ['www-authenticate']: _w, ...rest } = res.headers;
      return { ...res, headers: rest };
    },
  },
  /** Modern tools/list results lose ttlMs. */
  noTtlInModernToolsList: {
    name: 'ttlMs missing in modern tools/list',
    onResponse: (req, res) =>
      methodOf(req) === 'tools/list' && req.headers['mcp-protocol-version'] === MODERN
        ? rewriteJson(res, (b) => {
            if (!isObj(b.result)) return b;
            const { ttlMs: _t, ...result } = b.result;
            return { ...b, result };
          })
        : res,
  },
  /** initialize answers 2026-07-28 whatever was requested. */
  initializeAnswers2026: {
    name: 'initialize answering 2026-07-28',
    onResponse: (req, res) => (methodOf(req) === 'initialize' ? rewriteJson(res, (b) => (isObj(b.result) ? { ...b, result: { ...b.result, protocolVersion: MODERN } } : b)) : res),
  },
  /** Host is rewritten to the server's own, so a foreign Host passes. */
  hostUnchecked: {
    name: 'Host not checked (rewritten before forwarding)',
    onRequest: (req) => ({ ...req, headers: { ...req.headers, host: 'localhost' } }),
  },
  /** Responses to initialize issue an Mcp-Session-Id. */
  sessionIssued: {
    name: 'Mcp-Session-Id issued on initialize',
    onResponse: (req, res) => (methodOf(req) === 'initialize' ? { ...res, headers: { ...res.headers, 'mcp-session-id': 'sess-1' } } : res),
  },
  /** Integer ids come back as strings. */
  idStringified: {
    name: 'integer ids echoed as strings',
    onResponse: (_req, res) => rewriteJson(res, (b) => (typeof b.id === 'number' ? { ...b, id: String(b.id) } : b)),
  },
  /** An Accept that lacks text/event-stream is completed before forwarding. */
  acceptUnchecked: {
    name: 'Accept not checked (completed before forwarding)',
    onRequest: (req) => ({ ...req, headers: { ...req.headers, accept: 'application/json, text/event-stream' } }),
  },
  /** Handshake refusals come back as JSON-RPC errors instead of tool results. */
  handshakeRefusalAsError: {
    name: 'handshake refusal as JSON-RPC error',
    onResponse: (req, res) =>
      methodOf(req) === 'tools/call' && req.headers['mcp-protocol-version'] !== MODERN
        ? rewriteJson(res, (b) => {
            const r = b.result;
            if (!isObj(r) || r.isError !== true || !isObj(r.structuredContent) || r.structuredContent.status !== 'unauthorized') return b;
            return { jsonrpc: '2.0', id: b.id, error: { code: -32602, message: 'unauthorized', data: r.structuredContent } };
          })
        : res,
  },
  /** Streamed tools/call answers carry SSE event ids (which invite a resumption GET that gets 405). */
  sseEventIds: {
    name: 'event ids in the tools/call event stream',
    onResponse: (_req, res) => ((res.headers['content-type'] ?? '').startsWith('text/event-stream') ? { ...res, body: res.body.replace(/^event: message$/gm, 'id: 1\nevent: message') } : res),
  },
  // ---- defects at the former open points the spec has since settled

  /** Integer ids beyond 32 bits are refused like invalid ids, although every |id| <= 2^53-1 is valid. */
  safeIdsRefused: {
    name: 'safe integer ids beyond 32 bits refused (400 -32600 id null)',
    onRequest: (req) => {
      const j = req.json;
      if (req.method !== 'POST' || !isObj(j) || typeof j.id !== 'number' || Math.abs(j.id) < 2 ** 31) return undefined;
      return jsonAnswer(400, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid request' } });
    },
  },
  /** An empty method name is taken for an unknown method: -32601 in-band for a request, 202 for a notification. */
  emptyMethodUnknown: {
    name: 'empty method "" answered as an unknown method (-32601)',
    onRequest: (req) => {
      const j = req.json;
      if (req.method !== 'POST' || !isObj(j) || j.jsonrpc !== '2.0' || j.method !== '') return undefined;
      if (!('id' in j)) return { status: 202, headers: {}, body: '' };
      return jsonAnswer(200, { jsonrpc: '2.0', id: j.id, error: { code: -32601, message: 'Method not found' } });
    },
  },
  /** Origin compared exactly: the own origin in another letter case, or with a trailing slash, is refused. */
  originCaseSensitive: {
    name: 'Origin compared case-sensitively, trailing slash significant',
    onRequest: (req) => {
      const origin = req.headers.origin;
      const own = `http://${req.headers.host ?? ''}`;
      if (origin === undefined || origin === own || origin.toLowerCase().replace(/\/$/, '') !== own.toLowerCase()) return undefined;
      return jsonAnswer(403, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Forbidden: the Origin is not allowed' } });
    },
  },
  /** Host names compared case-sensitively: LOCALHOST is refused. */
  hostCaseSensitive: {
    name: 'Host compared case-sensitively',
    onRequest: (req) => (/[A-Z]/.test(req.headers.host ?? '') ? jsonAnswer(403, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Forbidden' } }) : undefined),
  },
  /** A body starting with a UTF-8 byte order mark is a parse error. */
  bomRejected: {
    name: 'leading byte order mark rejected (400 -32700)',
    onRequest: (req) => (req.method === 'POST' && req.body.startsWith('\ufeff') ? jsonAnswer(400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }) : undefined),
  },
  /** Another scheme, or Bearer with no token, is read as an invalid key instead of a missing one. */
  otherSchemeAsInvalidKey: {
    name: 'non-Bearer Authorization and empty tokens answered invalid_api_key',
    onRequest: (req) => {
      const auth = req.headers.authorization;
      if (auth === undefined || /^\s*bearer\s+\S+\s*$/i.test(auth)) return undefined;
      return { ...req, headers: { ...req.headers, authorization: 'Bearer ilk_not_a_key_from_the_broken_proxy' } };
    },
  },
  /** initialize with missing or mistyped params members is served, the gaps filled in. */
  incompleteInitializeServed: {
    name: 'initialize without capabilities/clientInfo served',
    onRequest: (req) => {
      const j = req.json;
      if (methodOf(req) !== 'initialize' || !isObj(j)) return undefined;
      const p = isObj(j.params) ? j.params : {};
      const params = {
        ...p,
        protocolVersion: typeof p.protocolVersion === 'string' ? p.protocolVersion : '2025-03-26',
        capabilities: isObj(p.capabilities) ? p.capabilities : {},
        clientInfo: isObj(p.clientInfo) ? p.clientInfo : { name: 'filled-in', version: '0' },
      };
      const json = { ...j, params };
      return { ...req, body: JSON.stringify(json), json };
    },
  },
  /** A non-object params.arguments is read as {}, so AUTH and the tool run instead of -32602. */
  nonObjectArgumentsAsEmpty: {
    name: 'non-object params.arguments read as {}',
    onRequest: (req) => {
      const j = req.json;
      if (methodOf(req) !== 'tools/call' || !isObj(j) || !isObj(j.params) || !('arguments' in j.params) || isObj(j.params.arguments)) return undefined;
      const json = { ...j, params: { ...j.params, arguments: {} } };
      return { ...req, body: JSON.stringify(json), json };
    },
  },
  /** No mutation: the proxy itself must not break anything. */
  identity: { name: 'identity (control)' },
};
