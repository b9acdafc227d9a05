/**
 * A minimal MCP-over-HTTP client for the benches: node:http with a keep-alive Agent, no SDK, no
 * fetch (undici's own pooling and stream machinery would be part of what is measured). It posts
 * one JSON-RPC message and returns the status, the body text (the last `data:` event when the
 * answer is an SSE stream) and the time to the response headers.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { closedLoop, type LoadRun } from './load';

/** The answer to one POST. Times in milliseconds from the moment the request was written. */
export interface PostResult {
  status: number;
  /** The JSON-RPC message text (for SSE: the data of the last event). */
  text: string;
  /** Bytes of the HTTP body as received. */
  bytes: number;
  /** Time to the response head (status line and headers). */
  ttfbMs: number;
  /** Time to the end of the body. */
  totalMs: number;
}

/** Protocol version the benches speak: the 2025-11-25 handshake dialect (stateless: no initialize needed per request). */
export const BENCH_PROTOCOL_VERSION = '2025-11-25';

/** A keep-alive client bound to one MCP endpoint URL. */
export class McpHttpClient {
  readonly agent: http.Agent;
  private readonly host: string;
  private readonly port: number;
  private readonly path: string;
  private readonly hostHeader: string;
  private nextId = 1;

  /**
   * @param url the MCP endpoint (http://127.0.0.1:PORT/mcp)
   * @param opts.apiKey sent as `Authorization: Bearer` when given
   * @param opts.maxSockets upper bound of keep-alive connections (set it to the concurrency)
   */
  constructor(readonly url: string, private readonly opts: { apiKey?: string; maxSockets?: number } = {}) {
    const u = new URL(url);
    this.host = u.hostname.replace(/^\[(.*)\]$/, '$1');
    this.port = Number(u.port || 80);
    this.path = u.pathname + u.search;
    this.hostHeader = u.host;
    this.agent = new http.Agent({ keepAlive: true, maxSockets: opts.maxSockets ?? 64, maxFreeSockets: opts.maxSockets ?? 64, scheduling: 'fifo' });
  }

  /** Posts a raw body with the given extra headers. Rejects on network errors only (any HTTP status resolves). */
  post(body: string, headers: Record<string, string> = {}): Promise<PostResult> {
    const payload = Buffer.from(body, 'utf8');
    const h: Record<string, string | number> = {
      host: this.hostHeader,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'content-length': payload.length,
      ...headers,
    };
    if (this.opts.apiKey) h.authorization = `Bearer ${this.opts.apiKey}`;
    return new Promise<PostResult>((resolve, reject) => {
      const t0 = performance.now();
      const req = http.request({ host: this.host, port: this.port, path: this.path, method: 'POST', agent: this.agent, headers: h }, (res) => {
        const ttfbMs = performance.now() - t0;
        const chunks: Buffer[] = [];
        let bytes = 0;
        res.on('data', (c: Buffer) => {
          chunks.push(c);
          bytes += c.length;
        });
        res.on('error', reject);
        res.on('end', () => {
          const totalMs = performance.now() - t0;
          const raw = chunks.length === 1 ? chunks[0].toString('utf8') : Buffer.concat(chunks, bytes).toString('utf8');
          const ct = String(res.headers['content-type'] ?? '');
          resolve({ status: res.statusCode ?? 0, text: ct.startsWith('text/event-stream') ? lastSseData(raw) : raw, bytes, ttfbMs, totalMs });
        });
      });
      req.on('error', reject);
      req.end(payload);
    });
  }

  /** Sends one JSON-RPC request in the handshake dialect and returns the raw answer. */
  rpc(method: string, params: Record<string, unknown> = {}, extraHeaders: Record<string, string> = {}): Promise<PostResult> {
    const body = JSON.stringify({ jsonrpc: '2.0', id: this.nextId++, method, params });
    return this.post(body, { 'mcp-protocol-version': BENCH_PROTOCOL_VERSION, ...extraHeaders });
  }

  /** tools/call of `name` with `args`; resolves to the raw answer. */
  callTool(name: string, args: Record<string, unknown>): Promise<PostResult> {
    return this.rpc('tools/call', { name, arguments: args });
  }

  /** Closes the kept-alive sockets. */
  close(): void {
    this.agent.destroy();
  }
}

/** The data of the last `data:` line of an SSE body (the final JSON-RPC message), or the body unchanged. */
export function lastSseData(raw: string): string {
  const i = raw.lastIndexOf('\ndata: ');
  const start = i >= 0 ? i + 7 : raw.startsWith('data: ') ? 6 : -1;
  if (start < 0) return raw;
  const end = raw.indexOf('\n', start);
  return end < 0 ? raw.slice(start) : raw.slice(start, end);
}

/**
 * Parses a tools/call answer and returns its structuredContent, throwing with the answer's text
 * when it is a JSON-RPC error or a tool result with isError (a bench must not time refusals).
 */
export function structuredResult(r: PostResult): Record<string, unknown> {
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text.slice(0, 300)}`);
  const msg = JSON.parse(r.text) as { result?: { isError?: boolean; structuredContent?: Record<string, unknown> }; error?: unknown };
  if (msg.error || !msg.result) throw new Error(`JSON-RPC error: ${r.text.slice(0, 300)}`);
  if (msg.result.isError) throw new Error(`tool error: ${JSON.stringify(msg.result.structuredContent ?? msg.result).slice(0, 300)}`);
  return msg.result.structuredContent ?? {};
}

/**
 * Closed-loop tools/list calls at concurrency `c` on one keep-alive client (each answer must be
 * HTTP 200 holding the tools array, or the run fails).
 */
export async function runToolsList(url: string, apiKey: string, c: number, opts: { durationMs: number; warmupMs: number }): Promise<LoadRun> {
  const client = new McpHttpClient(url, { apiKey, maxSockets: c });
  try {
    return await closedLoop({ concurrency: c, ...opts, op: async () => {
      const r = await client.rpc('tools/list');
      if (r.status !== 200 || !r.text.includes('"tools"')) throw new Error(`tools/list: HTTP ${r.status} ${r.text.slice(0, 200)}`);
    } });
  } finally {
    client.close();
  }
}
