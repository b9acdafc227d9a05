/**
 * Limits per client address and per identity, in memory on each replica (issue 10, Build 6):
 *
 *  - keyless budget: requests without a valid agent key (no Bearer token, or a key that does not
 *    resolve) spend one token of their client address's bucket (`points` per `windowSeconds`,
 *    refilled continuously). It is checked before any other work (body parsing, audit), so an
 *    unauthenticated flood costs a map lookup per request. Over it: 429 with Retry-After. A token
 *    the identity resolver rejects by its form alone (IdentityResolver.rejectsByFormat: not an API
 *    key) is charged there too, once; the later gates (unverifiedKeyGate, the tools/call admission
 *    of call-limits.ts, the legacy SSE stream) skip it so that it never pays twice.
 *  - body reads (red-team F4): request bodies being received at once, per client address
 *    (`bodyReadsPerAddress`) and, for bodies over 64 KiB, in bytes per address (an eighth of the total)
 *    and across all clients (`bodyBytesInFlight`, each read counted at its declared
 *    Content-Length, or the body limit when undeclared or compressed), checked
 *    before a byte of the body is read. Over either: 429 rate_limited with Retry-After, and the
 *    connection is closed (src/transport/app.ts).
 *  - stream slots: open SSE streams (GET /mcp/sse) and in-flight tool calls (each may answer as a
 *    request-scoped SSE stream) per client address and per identity. Over a cap: 429 rate_limited
 *    with Retry-After.
 *
 * The client address is the TCP peer address; an IPv4-mapped IPv6 address counts as its IPv4
 * address and any other IPv6 address by its /64 prefix (one subscriber usually holds a whole /64).
 * Buckets are kept for at most `maxAddresses` addresses (least recently used dropped first), so
 * memory is bounded whatever the number of addresses. With N replicas a client may get up to N
 * times each figure. The deciders (takeToken, clientAddressKey) are pure.
 */
import { LRUCache } from 'lru-cache';
import { bearerToken } from '../pipeline/01-identity';
import type { IdentityResolver } from '../tools/types';

/** Settings of ClientLimits (config client_limits). */
export interface ClientLimitSettings {
  /** Requests without a valid agent key allowed per client address per window. */
  keyless: { points: number; windowSeconds: number };
  /** Open SSE streams and in-flight tool calls per client address. */
  streamsPerAddress: number;
  /** Open SSE streams and in-flight tool calls per identity. */
  streamsPerIdentity: number;
  /** Request bodies being read at once per client address (absent: DEFAULT_CLIENT_LIMITS). */
  bodyReadsPerAddress?: number;
  /** Bytes of request bodies being read at once on this replica, all addresses together (absent: DEFAULT_CLIENT_LIMITS). */
  bodyBytesInFlight?: number;
}

/** The defaults (config.ts DEFAULT_CONFIG.client_limits repeats them; docs/operators.md "Limits"). */
export const DEFAULT_CLIENT_LIMITS: Readonly<Required<ClientLimitSettings>> = Object.freeze({
  keyless: { points: 600, windowSeconds: 60 },
  streamsPerAddress: 128,
  streamsPerIdentity: 64,
  bodyReadsPerAddress: 64,
  bodyBytesInFlight: 128 * 1024 * 1024,
});

/** How long a refused stream or body read is told to wait (ms): they have no window, so this is a polite pause. */
export const STREAM_RETRY_AFTER_MS = 1000;

/** A token bucket: `tokens` available at time `at` (ms). */
export interface Bucket {
  tokens: number;
  at: number;
}

/**
 * Takes one token from `bucket` (undefined = a full bucket) at time `now` (ms), refilling
 * `points` tokens per `windowMs` continuously, capped at `points`. Returns the new bucket, whether
 * the token was granted, and when denied, the ms until one token is available.
 */
export function takeToken(bucket: Bucket | undefined, now: number, points: number, windowMs: number): { bucket: Bucket; ok: boolean; retryAfterMs: number } {
  const rate = points / windowMs;
  const tokens = bucket ? Math.min(points, bucket.tokens + Math.max(0, now - bucket.at) * rate) : points;
  if (tokens >= 1) return { bucket: { tokens: tokens - 1, at: now }, ok: true, retryAfterMs: 0 };
  return { bucket: { tokens, at: now }, ok: false, retryAfterMs: Math.max(1, Math.ceil((1 - tokens) / rate)) };
}

let lastRemote = '';
let lastKey = '';

/**
 * The key a client address counts under: IPv4 as is ("::ffff:1.2.3.4" → "1.2.3.4"), IPv6 by its
 * /64 prefix ("2001:db8:1:2:aaaa::1" → "2001:db8:1:2::/64"), "unknown" when there is none. Pure;
 * the last address's key is kept (a POST /mcp asks up to three times for the same peer; issue 28 item 3).
 */
export function clientAddressKey(remote: string | undefined): string {
  if (!remote) return 'unknown';
  if (remote === lastRemote) return lastKey;
  const key = addressKey(remote);
  lastRemote = remote;
  lastKey = key;
  return key;
}

function addressKey(remote: string): string {
  const a = remote.toLowerCase();
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(a);
  if (mapped) return mapped[1];
  if (!a.includes(':')) return a;
  // Expand "::" to get the first four hextets.
  const [head, tail] = a.split('::', 2);
  const h = head ? head.split(':') : [];
  const t = tail !== undefined ? (tail ? tail.split(':') : []) : [];
  const groups = tail !== undefined ? [...h, ...Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t] : h;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}

/** A refused slot or token: when to retry and which limit refused. */
export interface LimitRefusal {
  ok: false;
  retryAfterMs: number;
  /** keyless budget; stream slots per address or identity; body reads per address or in total bytes. */
  scope: 'keyless' | 'address' | 'identity' | 'body-address' | 'body-total';
}

/** Request bodies of at most this many bytes (64 KiB) count only against their address's number of body reads, never against the byte caps. */
export const SMALL_BODY_BYTES = 64 * 1024;

/** The in-memory limits of one replica. */
export class ClientLimits {
  private readonly buckets: LRUCache<string, Bucket>;
  private readonly perAddress = new Map<string, number>();
  private readonly perIdentity = new Map<string, number>();
  private readonly bodiesPerAddress = new Map<string, number>();
  private readonly bodyBytesPerAddress = new Map<string, number>();
  private bodyBytes = 0;
  private readonly now: () => number;

  /** `maxAddresses` bounds the keyless buckets kept (default 100 000); `now` is for tests. */
  constructor(readonly settings: ClientLimitSettings = DEFAULT_CLIENT_LIMITS, opts: { maxAddresses?: number; now?: () => number } = {}) {
    this.buckets = new LRUCache({ max: opts.maxAddresses ?? 100_000 });
    this.now = opts.now ?? Date.now;
  }

  /** Spends one keyless token of `address` (a clientAddressKey). */
  takeKeyless(address: string): { ok: true } | LimitRefusal {
    const { points, windowSeconds } = this.settings.keyless;
    const r = takeToken(this.buckets.get(address), this.now(), points, windowSeconds * 1000);
    this.buckets.set(address, r.bucket);
    return r.ok ? { ok: true } : { ok: false, retryAfterMs: r.retryAfterMs, scope: 'keyless' };
  }

  /**
   * The refusal `takeKeyless(address)` would answer now, without spending a token: null while the
   * address has budget left. For routes that charge only requests whose key did not resolve, and
   * must refuse before looking a key up once the budget is spent (the admin API: red team rt49b D3).
   */
  keylessSpent(address: string): LimitRefusal | null {
    const { points, windowSeconds } = this.settings.keyless;
    const r = takeToken(this.buckets.get(address), this.now(), points, windowSeconds * 1000);
    return r.ok ? null : { ok: false, retryAfterMs: r.retryAfterMs, scope: 'keyless' };
  }

  /**
   * Opens one stream slot for `address` and, when known, `identityId`. Returns `release` (call it
   * exactly once when the stream or call ends; later calls do nothing) or the refusal.
   */
  openStream(address: string, identityId: string | null): { ok: true; release: () => void } | LimitRefusal {
    if ((this.perAddress.get(address) ?? 0) >= this.settings.streamsPerAddress) return { ok: false, retryAfterMs: STREAM_RETRY_AFTER_MS, scope: 'address' };
    if (identityId !== null && (this.perIdentity.get(identityId) ?? 0) >= this.settings.streamsPerIdentity) return { ok: false, retryAfterMs: STREAM_RETRY_AFTER_MS, scope: 'identity' };
    bump(this.perAddress, address, 1);
    if (identityId !== null) bump(this.perIdentity, identityId, 1);
    return {
      ok: true,
      release: once(() => {
        bump(this.perAddress, address, -1);
        if (identityId !== null) bump(this.perIdentity, identityId, -1);
      }),
    };
  }

  /**
   * Admits one request body of at most `bytes` bytes from `address` before it is read. Returns
   * `release` (call it once the body is read or the request is over; later calls do nothing), or
   * the refusal: `body-address` when the address already has bodyReadsPerAddress bodies in flight,
   * or a large body would take the address past an eighth of bodyBytesInFlight; `body-total` when a
   * large body would take the replica over bodyBytesInFlight (a single body is always admitted when
   * nothing else is in flight, so a limit below the body limit cannot block every request).
   * Bodies of at most SMALL_BODY_BYTES (every ordinary tool call) count only against the address's
   * number of reads: clients that declare large bodies and stall (each held up to the request
   * timeout) cannot lock the replica's small requests out, and filling the total takes at least
   * eight addresses.
   */
  openBodyRead(address: string, bytes: number): { ok: true; release: () => void } | LimitRefusal {
    const perAddress = this.settings.bodyReadsPerAddress ?? DEFAULT_CLIENT_LIMITS.bodyReadsPerAddress;
    const total = this.settings.bodyBytesInFlight ?? DEFAULT_CLIENT_LIMITS.bodyBytesInFlight;
    if ((this.bodiesPerAddress.get(address) ?? 0) >= perAddress) return { ok: false, retryAfterMs: STREAM_RETRY_AFTER_MS, scope: 'body-address' };
    const counted = bytes > SMALL_BODY_BYTES ? bytes : 0;
    if (counted > 0) {
      const mine = this.bodyBytesPerAddress.get(address) ?? 0;
      if (mine > 0 && mine + counted > Math.floor(total / 8)) return { ok: false, retryAfterMs: STREAM_RETRY_AFTER_MS, scope: 'body-address' };
      if (this.bodyBytes > 0 && this.bodyBytes + counted > total) return { ok: false, retryAfterMs: STREAM_RETRY_AFTER_MS, scope: 'body-total' };
    }
    bump(this.bodiesPerAddress, address, 1);
    if (counted > 0) bump(this.bodyBytesPerAddress, address, counted);
    this.bodyBytes += counted;
    return {
      ok: true,
      release: once(() => {
        bump(this.bodiesPerAddress, address, -1);
        if (counted > 0) bump(this.bodyBytesPerAddress, address, -counted);
        this.bodyBytes -= counted;
      }),
    };
  }

  /** Request bodies being read now: per address (count), total reads and reserved bytes (for tests and metrics). */
  bodyReads(): { addresses: number; reads: number; bytes: number } {
    let reads = 0;
    for (const n of this.bodiesPerAddress.values()) reads += n;
    return { addresses: this.bodiesPerAddress.size, reads, bytes: this.bodyBytes };
  }

  /** Open slots now (for tests and metrics). */
  openStreams(): { addresses: number; identities: number; total: number } {
    let total = 0;
    for (const n of this.perAddress.values()) total += n;
    return { addresses: this.perAddress.size, identities: this.perIdentity.size, total };
  }
}

/** `fn` callable once: later calls do nothing. */
function once(fn: () => void): () => void {
  let open = true;
  return () => {
    if (!open) return;
    open = false;
    fn();
  };
}

function bump(m: Map<string, number>, k: string, d: number): void {
  const n = (m.get(k) ?? 0) + d;
  if (n <= 0) m.delete(k);
  else m.set(k, n);
}

/**
 * How many bytes a request's body is counted at while it is read (ClientLimits.openBodyRead), from
 * its headers (lower-case names): null for a request without a body (no Transfer-Encoding and no or
 * a zero Content-Length); the declared Content-Length, at most `limit`; `limit` (the largest body
 * accepted, after inflation) when the length is undeclared (chunked), not a number, or the body is
 * compressed (Content-Encoding other than identity: it may inflate up to the limit). Pure.
 */
export function bodyReservation(headers: { 'content-length'?: string; 'transfer-encoding'?: string; 'content-encoding'?: string }, limit: number): number | null {
  const cl = headers['content-length'];
  const te = headers['transfer-encoding'];
  if (te === undefined && (cl === undefined || cl.trim() === '0')) return null;
  const ce = headers['content-encoding'];
  if (ce !== undefined && ce.trim().toLowerCase() !== 'identity') return limit;
  const n = te === undefined && cl !== undefined && /^\s*\d+\s*$/.test(cl) ? Number(cl) : limit;
  return Math.min(n, limit);
}

/** The people-facing message of a refusal by a client limit. */
export function limitMessage(r: LimitRefusal): string {
  const wait = `wait ${r.retryAfterMs} ms before trying again`;
  if (r.scope === 'keyless') return `Too many requests without a valid API key from this address; ${wait}.`;
  if (r.scope === 'body-address') return `Too many request bodies being received from this client address; ${wait}.`;
  if (r.scope === 'body-total') return `Too many request bytes being received by this server; ${wait}.`;
  return `Too many open streams or in-flight calls for this ${r.scope === 'address' ? 'client address' : 'identity'}; ${wait}.`;
}

/** Where a keyless refusal is counted (KeylessAuditAggregator.note). */
export interface KeylessCounter {
  note(address: string, r: { reason: string; tool: string; route: string }): void;
}

/**
 * For a request that carries a Bearer token no tools/call will check (initialize, ping, tools/list,
 * notifications, the legacy catalogue route): unless the token resolves to an identity, the request
 * spends the address's keyless budget like a request without one (issue 10 Build 6; red-team F4:
 * `Bearer junk` must not bypass the limit). Resolves to the refusal when over budget, else null.
 */
export async function unverifiedKeyGate(
  limits: ClientLimits | undefined,
  audit: KeylessCounter | undefined,
  resolver: IdentityResolver,
  apiKey: string | undefined,
  address: string,
  route: string,
): Promise<LimitRefusal | null> {
  if (!limits || !apiKey) return null;
  // Charged up front by keylessGate.
  if (resolver.rejectsByFormat?.(apiKey)) return null;
  if (await resolver.resolve(apiKey).catch(() => null)) return null;
  const r = limits.takeKeyless(address);
  if (r.ok) return null;
  audit?.note(address, { reason: 'rate_limited', tool: '-', route });
  return r;
}

/**
 * True when the request's Bearer token was charged to the keyless budget by keylessGate because
 * `resolver` rejects it by its form (so later gates must not charge it again).
 */
export function chargedUpFront(resolver: IdentityResolver | undefined, apiKey: string | null | undefined): boolean {
  return !!apiKey && !!resolver?.rejectsByFormat?.(apiKey);
}

/**
 * The keyless gate of one HTTP request, before its body is read: a request carrying no Bearer
 * token, or one `resolver` rejects by its form alone (red-team F4: `Bearer junk` must not skip
 * the budget), spends one token of its client address. Returns null to proceed, or the refusal
 * (already counted in `audit` as a rate_limited keyless refusal of `route`). No limits → always null.
 */
export function keylessGate(
  limits: ClientLimits | undefined,
  audit: KeylessCounter | undefined,
  req: { headers: { authorization?: string }; socket: { remoteAddress?: string } },
  route: string,
  resolver?: IdentityResolver,
): LimitRefusal | null {
  if (!limits) return null;
  const token = bearerToken(req.headers.authorization);
  if (token && !chargedUpFront(resolver, token)) return null;
  const address = clientAddressKey(req.socket.remoteAddress);
  const r = limits.takeKeyless(address);
  if (r.ok) return null;
  audit?.note(address, { reason: 'rate_limited', tool: '-', route });
  return r;
}
