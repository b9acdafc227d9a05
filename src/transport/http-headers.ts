/**
 * Header parsing for the MCP endpoint: media types, Accept ranges, the Mcp-Name Base64 form, and
 * Host/Origin checks (contract: Transport, "Required in both dialects"; decisions 13, 14).
 */
import protocol from '../../spec/protocol-v1.json';

/** Lower-cased media type without parameters ("Application/JSON; charset=utf-8" → "application/json"), or null. */
export function mediaType(value: string | undefined): string | null {
  if (!value) return null;
  // Clients send the same Content-Type on every request: the last answer is kept (a pure function of it).
  if (value === lastMediaTypeOf) return lastMediaType;
  const semi = value.indexOf(';');
  const t = (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase();
  lastMediaTypeOf = value;
  lastMediaType = t.length ? t : null;
  return lastMediaType;
}
let lastMediaTypeOf: string | undefined;
let lastMediaType: string | null = null;

/** One Accept range with its q value. */
interface AcceptRange {
  type: string;
  subtype: string;
  q: number;
}

function parseAccept(value: string): AcceptRange[] {
  return value
    .split(',')
    .map((part) => {
      const [range, ...params] = part.split(';');
      const [type, subtype] = range.trim().toLowerCase().split('/');
      let q = 1;
      for (const p of params) {
        const [k, v] = p.split('=').map((s) => s.trim().toLowerCase());
        if (k === 'q') q = Number.isFinite(Number(v)) ? Number(v) : 0;
      }
      return { type: type ?? '', subtype: subtype ?? '', q };
    })
    .filter((r) => r.type && r.subtype);
}

/** True when the Accept header value admits `wanted` (e.g. "text/event-stream") with q > 0; `*` ranges count. */
export function acceptsMediaType(accept: string | undefined, wanted: string): boolean {
  if (!accept) return false;
  const [wt, ws] = wanted.split('/');
  let best: AcceptRange | null = null;
  let bestSpecificity = -1;
  for (const r of parseAccept(accept)) {
    const matches = (r.type === '*' || r.type === wt) && (r.subtype === '*' || r.subtype === ws);
    if (!matches) continue;
    const specificity = (r.type === '*' ? 0 : 1) + (r.subtype === '*' ? 0 : 1);
    if (specificity > bestSpecificity) {
      best = r;
      bestSpecificity = specificity;
    }
  }
  return best !== null && best.q > 0;
}

/** True when Accept covers every media type the contract requires (application/json and text/event-stream). */
export function acceptsRequired(accept: string | undefined): boolean {
  // Clients send the same Accept on every request: the last value's verdict is kept (a pure function of it).
  if (accept !== undefined && accept === lastAccept) return lastAcceptVerdict;
  const verdict = protocol.http.requiredAccept.every((m) => acceptsMediaType(accept, m));
  lastAccept = accept;
  lastAcceptVerdict = verdict;
  return verdict;
}
let lastAccept: string | undefined;
let lastAcceptVerdict = false;

/**
 * Decodes an Mcp-Name (or Mcp-Param-*) value: trims surrounding whitespace, and decodes the
 * `=?base64?…?=` form (lowercase markers only; an uppercase marker is read literally).
 * Returns null for invalid Base64 or a value that is not visible ASCII (rule MCP-NAME → -32020).
 */
export function decodeMirroredHeader(raw: string): string | null {
  // Clients send the same Mcp-Name for a run of calls: the last value's answer is kept (a pure function of it; h28e).
  if (raw === lastMirrored) return lastMirroredDecoded;
  const decoded = decodeMirrored(raw);
  lastMirrored = raw;
  lastMirroredDecoded = decoded;
  return decoded;
}
let lastMirrored: string | undefined;
let lastMirroredDecoded: string | null = null;

/** decodeMirroredHeader without its last-value memo. */
function decodeMirrored(raw: string): string | null {
  const v = raw.trim();
  const { base64Prefix, base64Suffix } = protocol.headers;
  if (v.startsWith(base64Prefix) && v.endsWith(base64Suffix) && v.length >= base64Prefix.length + base64Suffix.length) {
    const b64 = v.slice(base64Prefix.length, v.length - base64Suffix.length);
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) return null;
    const decoded = Buffer.from(b64, 'base64').toString('utf8');
    if (Buffer.from(decoded, 'utf8').toString('base64') !== b64) return null;
    return decoded;
  }
  if (!/^[\x20-\x7e]*$/.test(v)) return null;
  return v;
}

/** The hostname part of a Host header ("127.0.0.1:8787" → "127.0.0.1", "[::1]:80" → "[::1]"), lower-cased. */
export function hostName(host: string | undefined): string | null {
  if (!host) return null;
  const h = host.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    if (end < 0) return null;
    const rest = h.slice(end + 1);
    return rest === '' || /^:\d{1,5}$/.test(rest) ? h.slice(0, end + 1) : null;
  }
  const colon = h.lastIndexOf(':');
  if (colon < 0) return h;
  // A port must be digits; anything else makes the Host header invalid.
  return /^\d{1,5}$/.test(h.slice(colon + 1)) ? h.slice(0, colon) : null;
}

/** Operator settings for the DNS-rebinding and cross-origin guards. */
export interface OriginPolicy {
  /** Host names accepted in the Host header; "any" disables the check (only sensible behind a proxy that checks it). */
  allowedHosts: string[] | 'any';
  /** Origins (scheme://host[:port]) accepted besides the request's own origin. */
  allowedOrigins: string[];
}

/** Default policy when bound to loopback: localhost, 127.0.0.1 and [::1] on any port (decision 14). */
export function defaultOriginPolicy(): OriginPolicy {
  return { allowedHosts: [...protocol.http.defaultAllowedHosts], allowedOrigins: [] };
}

/** Rule HOST: true when the Host header names an allowed host. */
export function hostAllowed(host: string | undefined, policy: OriginPolicy): boolean {
  if (policy.allowedHosts === 'any') return true;
  // Clients send the same Host on every request: the last verdict per allow-list is kept.
  if (host !== undefined && host === lastHost && policy.allowedHosts === lastHostList) return lastHostVerdict;
  const name = hostName(host);
  let hosts = lowerCasedHosts.get(policy.allowedHosts);
  if (!hosts) {
    hosts = new Set(policy.allowedHosts.map((h) => h.toLowerCase()));
    lowerCasedHosts.set(policy.allowedHosts, hosts);
  }
  lastHost = host;
  lastHostList = policy.allowedHosts;
  lastHostVerdict = name !== null && hosts.has(name);
  return lastHostVerdict;
}
let lastHost: string | undefined;
let lastHostList: readonly string[] | undefined;
let lastHostVerdict = false;
// The lower-cased allow-list per policy array, built once (policies are not mutated in place).
const lowerCasedHosts = new WeakMap<readonly string[], ReadonlySet<string>>();

/** Rule ORIGIN: true when Origin is absent, equals the request's own origin, or is allow-listed. */
export function originAllowed(origin: string | undefined, host: string | undefined, scheme: string, policy: OriginPolicy): boolean {
  if (origin === undefined) return true;
  const o = normalOrigin(origin);
  if (host && o === `${scheme}://${host.trim().toLowerCase()}`) return true;
  return policy.allowedOrigins.some((a) => normalOrigin(a) === o);
}

/** An origin as rule ORIGIN compares it: trimmed, lower-cased, one trailing slash dropped. */
function normalOrigin(origin: string): string {
  return origin.trim().toLowerCase().replace(/\/$/, '');
}

/**
 * The Origin as an explicit entry of the operator's MCP origin allowlist (config allowed_origins),
 * or null: absent, the request's own origin only, or foreign. Only these get CORS headers (issue 24
 * item 7); a same-origin page needs none, and a foreign Origin is refused by rule ORIGIN.
 * Returns the Origin value as the browser sent it (CORS compares it byte for byte).
 */
export function corsOrigin(origin: string | undefined, policy: OriginPolicy): string | null {
  if (origin === undefined || policy.allowedOrigins.length === 0) return null;
  const o = normalOrigin(origin);
  return policy.allowedOrigins.some((a) => normalOrigin(a) === o) ? origin.trim() : null;
}

const CORS = protocol.http.cors;
const EXPOSE_HEADERS = CORS.exposeHeaders.join(', ');
const PREFLIGHT_HEADERS = {
  'Access-Control-Allow-Methods': CORS.allowMethods.join(', '),
  'Access-Control-Allow-Headers': CORS.allowHeaders.join(', '),
  'Access-Control-Max-Age': String(CORS.maxAgeSeconds),
};

/**
 * CORS headers of an answer at /mcp to an allow-listed `origin` (from corsOrigin), per the Fetch
 * standard: Access-Control-Allow-Origin (the origin itself, never `*`), Vary: Origin and
 * Access-Control-Expose-Headers (spec/protocol-v1.json http.cors.exposeHeaders: the headers MCP
 * clients read). No credentials header: agents authenticate with a Bearer key, not cookies.
 */
export function corsResponseHeaders(origin: string): Record<string, string> {
  return { 'Access-Control-Allow-Origin': origin, Vary: 'Origin', 'Access-Control-Expose-Headers': EXPOSE_HEADERS };
}

/**
 * Headers of the 204 answer to a CORS preflight from an allow-listed `origin`: the response
 * headers plus Access-Control-Allow-Methods (POST), -Allow-Headers (the request headers MCP clients
 * send: http.cors.allowHeaders) and -Max-Age (seconds).
 */
export function corsPreflightHeaders(origin: string): Record<string, string> {
  return { ...corsResponseHeaders(origin), ...PREFLIGHT_HEADERS };
}
