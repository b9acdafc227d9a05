/**
 * The wire layer of the suite: a request is an exact HTTP method, an ordered header list (names sent
 * with the casing given) and a raw body. It is sent with node:http / node:https rather than fetch,
 * because fetch silently replaces the Host header and adds `Accept: * /*` when none is given, and the
 * suite must be able to send a foreign Host and a request without Accept.
 */
import * as http from 'node:http';
import * as https from 'node:https';

/** One HTTP request exactly as the suite sends it. */
export interface WireRequest {
  method: string;
  /** Header name/value pairs in order; a `Host` entry replaces the one derived from the URL. */
  headers: Array<[string, string]>;
  /** Raw body text (UTF-8); undefined sends no body. */
  body?: string;
}

/** One HTTP response as received. `status` 0 means the connection failed (see `error`). */
export interface WireResponse {
  status: number;
  /** Header names lower-cased; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: string;
  error?: string;
}

/** Returns the value of header `name` (case-insensitive) of a request, or undefined. */
export function header(req: WireRequest, name: string): string | undefined {
  const n = name.toLowerCase();
  const hit = req.headers.find(([k]) => k.toLowerCase() === n);
  return hit?.[1];
}

/** The Host value a client derives from `url` (what is sent when a request has no Host entry). */
export function defaultHost(url: URL): string {
  return url.host;
}

/** A reusable HTTP client for one target URL. `close()` releases its keep-alive sockets. */
export interface WireClient {
  url: URL;
  send(req: WireRequest): Promise<WireResponse>;
  close(): void;
}

/** How the client treats a rate limit (HTTP 429, or the in-band rate_limited tool result): wait as asked and send the same request again. */
export interface RetryPolicy {
  /** Most extra attempts of one request after a rate limit (default 8; 0 disables retrying). */
  attempts: number;
  /** Longest single wait in milliseconds (default 60000); a longer Retry-After is cut to it. */
  maxWaitMs: number;
  /** Wait when a 429 carries no usable Retry-After (default 1000 ms). */
  defaultWaitMs: number;
  /** Called before each wait, for the run's log. */
  onWait?: (waitMs: number, attempt: number) => void;
  /** The sleep used between attempts (tests replace it). */
  sleep?: (ms: number) => Promise<void>;
}

/** The default 429 policy: up to 8 retries, each wait at most 60 s, 1 s when Retry-After is absent. */
export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, maxWaitMs: 60_000, defaultWaitMs: 1000 };

/**
 * Milliseconds to wait for a Retry-After value (RFC 9110 §10.2.3: delay-seconds or an HTTP-date),
 * or undefined when the value is absent or unreadable. `now` is the current time in ms since the epoch.
 */
export function retryAfterMs(value: string | undefined, now: number = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * Milliseconds to wait when `res` is the contract's in-band rate-limit refusal: an HTTP 200 answer
 * whose (last) JSON-RPC message is a tool result with `structuredContent.status` "rate_limited"
 * (the handshake dialect's refusal shape; contract: Governance And Errors), waiting its
 * `retry_after_ms` (capped by the caller). Undefined for any other answer, JSON or SSE.
 */
export function inBandRateLimitMs(res: WireResponse): number | undefined {
  if (res.status !== 200 || !res.body.includes('rate_limited')) return undefined;
  const ct = (res.headers['content-type'] ?? '').toLowerCase();
  const texts = ct.startsWith('text/event-stream')
    ? res.body.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim())
    : [res.body];
  const last = texts.at(-1);
  if (!last) return undefined;
  try {
    const msg = JSON.parse(last) as { result?: { structuredContent?: { status?: unknown; retry_after_ms?: unknown } } };
    const sc = msg.result?.structuredContent;
    if (!sc || sc.status !== 'rate_limited') return undefined;
    return typeof sc.retry_after_ms === 'number' && Number.isFinite(sc.retry_after_ms) && sc.retry_after_ms >= 0 ? sc.retry_after_ms : 1000;
  } catch {
    return undefined;
  }
}

/**
 * Creates a client sending every request to `url` (http: or https:), with a per-request timeout in
 * milliseconds. A rate limit is not a verdict: on an HTTP 429 the client waits for its Retry-After,
 * and on the in-band rate_limited tool result (inBandRateLimitMs) for its retry_after_ms, then sends
 * the same request again (`retry`), so a run never fails on the host's own rate limit; the last
 * answer is returned when the attempts run out.
 */
export function createClient(url: string, timeoutMs = 15000, retry: RetryPolicy = DEFAULT_RETRY): WireClient {
  const target = new URL(url);
  const mod = target.protocol === 'https:' ? https : http;
  const agent = new mod.Agent({ keepAlive: true, maxSockets: 4 });
  const sleep = retry.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const send = async (req: WireRequest): Promise<WireResponse> => {
    let res = await sendOnce(req);
    const limited = (r: WireResponse) => r.status === 429 || inBandRateLimitMs(r) !== undefined;
    for (let attempt = 1; limited(res) && attempt <= retry.attempts; attempt++) {
      const wait = Math.min(retry.maxWaitMs, res.status === 429 ? (retryAfterMs(res.headers['retry-after']) ?? retry.defaultWaitMs) : inBandRateLimitMs(res)!);
      retry.onWait?.(wait, attempt);
      await sleep(wait);
      res = await sendOnce(req);
    }
    return res;
  };
  const sendOnce = (req: WireRequest): Promise<WireResponse> =>
    new Promise((resolve) => {
      const body = req.body === undefined ? undefined : Buffer.from(req.body, 'utf8');
      // Names keep the casing given; the suite never sends one header name twice.
      const headers: Record<string, string> = {};
      for (const [k, v] of req.headers) headers[k] = v;
      const hasHost = req.headers.some(([k]) => k.toLowerCase() === 'host');
      const r = mod.request(
        {
          protocol: target.protocol,
          hostname: target.hostname.replace(/^\[(.*)\]$/, '$1'),
          port: target.port,
          path: target.pathname + target.search,
          method: req.method,
          agent,
          timeout: timeoutMs,
          headers,
          // An explicit Host entry replaces the one node derives from the URL.
          setHost: !hasHost,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const out: Record<string, string> = {};
            for (const [k, v] of Object.entries(res.headers)) {
              if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
            }
            resolve({ status: res.statusCode ?? 0, headers: out, body: Buffer.concat(chunks).toString('utf8') });
          });
          res.on('error', (e) => resolve({ status: 0, headers: {}, body: '', error: e.message }));
        },
      );
      if (body !== undefined) r.setHeader('Content-Length', String(body.length));
      r.on('timeout', () => r.destroy(new Error(`no response within ${timeoutMs} ms`)));
      r.on('error', (e) => resolve({ status: 0, headers: {}, body: '', error: e.message }));
      r.end(body);
    });
  return { url: target, send, close: () => agent.destroy() };
}

/** Renders a request as the lines a reader needs to replay it (curl-like, exact header casing). */
export function formatRequest(req: WireRequest, url: URL): string {
  const lines = [`${req.method} ${url.pathname}${url.search}`];
  if (!req.headers.some(([k]) => k.toLowerCase() === 'host')) lines.push(`Host: ${url.host}   (derived from the URL)`);
  for (const [k, v] of req.headers) lines.push(`${k}: ${v}`);
  lines.push('');
  lines.push(req.body === undefined ? '(no body)' : req.body === '' ? '(empty body)' : req.body);
  return lines.join('\n');
}

/** Renders a response compactly (status, the headers that matter to the contract, body). */
export function formatResponse(res: WireResponse): string {
  if (res.status === 0) return `(no response: ${res.error ?? 'unknown error'})`;
  const keep = ['content-type', 'allow', 'www-authenticate', 'mcp-session-id'];
  const lines = [`HTTP ${res.status}`];
  for (const k of keep) if (res.headers[k] !== undefined) lines.push(`${k}: ${res.headers[k]}`);
  lines.push('');
  lines.push(res.body.length > 2000 ? res.body.slice(0, 2000) + ' …' : res.body || '(empty body)');
  return lines.join('\n');
}
