/**
 * The oracle: given one concrete HTTP request, computes the outcome the contract demands, purely from
 * the spec files (protocol-v1.json `checks` in `order`, `versions`, `methods`, `headers`, `meta`;
 * errors-v1.json; mcp-tools-v1.json). The first failing check wins. It imports nothing from src/.
 *
 * Every outcome is single, as the `checks[].rule` texts settle it, with one exception the spec text does
 * not settle (an initialize whose header equals params.protocolVersion, unsupported, next to a complete
 * `_meta` envelope naming the same version): there the expectation lists the other permitted outcome in
 * `alternatives` and says why in `why`.
 */
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import type { ValidateFunction } from 'ajv';
import { header, type WireRequest } from './http';
import { checkById, type CatalogueTool, type Spec } from './spec';

/** A JSON-RPC id as MCP allows it on requests. */
export type JsonRpcId = string | number;

/** What a successful (or tool-level) result must look like. */
export type ResultExpectation =
  | { kind: 'discover' }
  | { kind: 'initialize'; protocolVersion: string; requested: string; fallback: boolean }
  | { kind: 'empty' }
  | { kind: 'tools' }
  /** A tool call that succeeded: isError absent or false. */
  | { kind: 'tool-success' }
  /** A tool result with isError true (argument errors in versions.argumentErrorsAsToolResults). */
  | { kind: 'tool-error' }
  /** A handshake-dialect refusal: tool result with isError true and structuredContent {status, code, message}. */
  | { kind: 'tool-refusal'; status: string; code: string }
  /** The tool ran against the server's own data: any well-formed tool result or governed refusal. */
  | { kind: 'tool-any'; dialect: 'modern' | 'handshake' };

/** The outcome the contract demands for one request. */
export interface Expectation {
  /** Rule id deciding the outcome: a `checks[].id` of protocol-v1.json, a `results.*` key for successes, or "unspecified". */
  rule: string;
  dialect: 'modern' | 'handshake' | 'none';
  /** Protocol version the request is served in, when it gets that far. */
  version?: string;
  /** Expected HTTP status; for `tool-any` the status of a 200 answer (refusal statuses are also accepted). */
  http: number;
  /**
   * 'any' (MCP mode only): only the HTTP status is checked (MCP names a status and no body, e.g. a 403
   * Host or Origin refusal: "The HTTP response body MAY comprise a JSON-RPC error response").
   */
  body: 'empty' | 'error' | 'result' | 'unspecified' | 'any';
  /** With body 'any': every 4xx status is accepted, not only `http`. */
  anyClientError?: true;
  /** With body 'any': every 2xx status is accepted, not only `http`. */
  anySuccess?: true;
  /** With body 'error': any HTTP status is accepted (the revision names none for this error). */
  anyHttp?: true;
  /**
   * MCP mode: this alternative is an answer the MCP and RFC text permit (no MUST forbids it) but the
   * contract does not; a server passing only through it passes with this warning (issue 30: a rule
   * the spec does not make a MUST must not fail a server).
   */
  warning?: string;
  /**
   * The request carries a complete 2026-07-28 envelope (it passed ENVELOPE): an answer refusing it with
   * 400 -32602 is charged to ENVELOPE, the rule it breaks, whatever the request was aimed at (one finding,
   * one owning rule: e.g. a server that demands the optional clientInfo).
   */
  envelopeOk?: true;
  /**
   * The request's Mcp-Method and Mcp-Name headers match its body (it passed MCP-NAME): an answer refusing
   * it with 400 -32020 is charged to this rule (MCP-NAME when it carries Mcp-Name, else MCP-METHOD).
   */
  headersOwner?: 'MCP-NAME' | 'MCP-METHOD';
  /**
   * A complete `initialize` whose answer nothing but its body decides (no MCP-Protocol-Version, or a
   * handshake-era one): an answer refusing it (an HTTP error status or a JSON-RPC error) is charged to
   * this rule, whatever the request was aimed at (one finding, one owning rule).
   */
  refusalOwner?: 'results.plain';
  /**
   * MCP mode: an answer that meets this expectation passes with this warning (rule and text): the answer
   * breaks a rule whose basis is no MCP, JSON-RPC or RFC MUST (e.g. HOST on a loopback URL, whose basis
   * is the official conformance suite's dns-rebinding-protection scenario).
   */
  metWarning?: { rule: string; message: string };
  /**
   * MCP mode: why the request must get this outcome, in the words of the text that demands it. When the
   * answer meets neither this expectation nor an alternative, the verdict states this reason and what the
   * server answered instead of the contract's exact status, code and id (which MCP does not demand).
   */
  reason?: string;
  /** MCP mode: the answer may issue an Mcp-Session-Id (a handshake-era server MAY assign sessions); a warning, not a violation. */
  sessionMay?: true;
  /** JSON-RPC error code (body 'error'). */
  code?: number;
  /** The id the response must carry (null when it must be null). Undefined for an empty body. */
  id?: JsonRpcId | null;
  /** Required `error.data` content. */
  errorData?: { supported?: string[]; requested?: string; refusal?: { status: string; code: string }; requiredCapabilities?: Record<string, unknown> };
  result?: ResultExpectation;
  /**
   * Required response headers: `Allow` listing exactly these methods; `allowListing`: an `Allow` header
   * present and listing this method (RFC 9110 §15.5.6: a 405 MUST carry Allow); `WWW-Authenticate` with this scheme.
   */
  headers?: { allow?: string[]; allowListing?: string; wwwAuthenticate?: string };
  /** True when the answer may be one text/event-stream carrying the JSON-RPC response (tools/call). */
  mayStream?: boolean;
  /** Human-readable derivation, printed with counterexamples. */
  why: string;
  /** Other outcomes the spec also permits for this request (only where the spec text leaves the case open). */
  alternatives?: Expectation[];
  /** With body 'unspecified': a JSON array (a batch's answer) is an acceptable body too. */
  batch?: true;
}

/** Facts about the target that the oracle needs besides the request itself. */
export interface OracleContext {
  /** The endpoint URL the suite was pointed at; its host and scheme define "the request's own origin". */
  url: URL;
  /** A valid agent API key, when the operator gave one; any other Bearer token is invalid. */
  apiKey?: string;
  /**
   * MCP mode: whether the server refuses a plain request (tools/list) that carries this request's
   * Host and Origin while it serves the same request with its own Host and no Origin (run.ts probes
   * it once per Host/Origin pair). `false`: the server does not refuse this Host or Origin, so a 4xx
   * answer to this request is no Host/Origin refusal and is not credited as one (issue 30 item 4).
   * Undefined: not probed (credited as before).
   */
  hostOriginRefused?: boolean;
  /**
   * MCP mode: true when the server implements no 2026-07-28 dialect (run.ts found its `server/discover`
   * with a complete 2026-07-28 envelope answered without a result). Such a server is read by the handshake-era
   * revisions alone: a modern or unknown MCP-Protocol-Version is an unsupported version (HTTP 400, any
   * body: "the server MUST respond with 400 Bad Request"), and `params._meta` is opaque metadata that
   * selects nothing.
   */
  handshakeOnly?: boolean;
}

type Obj = Record<string, unknown>;

/** True for a plain JSON object (not null, not an array). */
export function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** True for a valid MCP id (JSONRPC-SHAPE): a string, or a safe integer (|id| <= 2^53-1, so it can be echoed exactly). */
export function isValidId(v: unknown): v is JsonRpcId {
  return typeof v === 'string' || (typeof v === 'number' && Number.isSafeInteger(v));
}

/** One parsed media range of an Accept header. */
export interface AcceptRange {
  type: string;
  subtype: string;
  /** The q value; 0 when the q parameter is not a number (rule ACCEPT: such a range excludes). */
  q: number;
}

/**
 * Parses an Accept header into media ranges (lower-cased, parameters other than q ignored). Rule ACCEPT:
 * a q value that is not a number excludes its range, so it is read as q=0.
 */
export function parseAccept(value: string | undefined): AcceptRange[] {
  if (value === undefined) return [];
  const out: AcceptRange[] = [];
  for (const part of value.split(',')) {
    const [range, ...params] = part.split(';');
    const m = /^\s*([^\s/]+)\/([^\s/]+)\s*$/.exec(range ?? '');
    if (!m) continue;
    let q = 1;
    for (const p of params) {
      const qm = /^\s*q\s*=\s*(.*?)\s*$/i.exec(p);
      if (!qm) continue;
      q = /^[+-]?(\d+(\.\d*)?|\.\d+)$/.test(qm[1]!) ? Number(qm[1]) : 0;
    }
    out.push({ type: m[1]!.toLowerCase(), subtype: m[2]!.toLowerCase(), q });
  }
  return out;
}

function matches(r: AcceptRange, type: string, subtype: string): number {
  if (r.type === type && r.subtype === subtype) return 3;
  if (r.type === type && r.subtype === '*') return 2;
  if (r.type === '*' && r.subtype === '*') return 1;
  return 0;
}

/**
 * Rule ACCEPT: whether `ranges` accept `mediaType`. The most specific matching range decides (exact type
 * over `type/*` over `*\/*`, RFC 9110 §12.5.1), and it accepts when its q is above 0. Ties between equally
 * specific ranges (the same range listed twice) are not ordered by the spec; the generators never send
 * them, and the oracle lets any of them with q > 0 accept.
 */
export function acceptsMedia(ranges: AcceptRange[], mediaType: string): boolean {
  const [type, subtype] = mediaType.toLowerCase().split('/') as [string, string];
  const hits = ranges.map((r) => ({ r, s: matches(r, type, subtype) })).filter((h) => h.s > 0);
  const best = Math.max(0, ...hits.map((h) => h.s));
  const top = hits.filter((h) => h.s === best);
  return top.length > 0 && Math.max(...top.map((h) => h.r.q)) > 0;
}

/**
 * Rule ORIGIN: the comparable form of an origin: trimmed, lower-cased, one trailing slash removed
 * ("HTTP://LocalHost:80/" → "http://localhost:80").
 */
export function normalizeOrigin(value: string): string {
  return value.trim().toLowerCase().replace(/\/$/, '');
}

/**
 * True when a Host header value names the URL's own authority: the same host name compared
 * case-insensitively (RFC 9110 §4.2.3 and RFC 3986 §6.2.2.1: "the scheme and host are
 * case-insensitive") and the same port, a missing port being the scheme's default (RFC 3986 §6.2.3).
 * `LOCALHOST:8787` is `http://localhost:8787`'s own Host; `localhost:1`, `127.0.0.1:8787` and
 * `evil.example.com` are not. Used in MCP mode (issue 30 item 4): only a Host that is not the server's
 * own may be refused as DNS-rebinding protection.
 */
export function isOwnHost(value: string, url: URL): boolean {
  const name = hostName(value);
  if (name === undefined || name !== url.hostname.toLowerCase()) return false;
  const v = value.trim();
  const portText = v.startsWith('[') ? v.slice(v.indexOf(']') + 1).replace(/^:/, '') : v.includes(':') ? v.slice(v.indexOf(':') + 1) : '';
  const defaultPort = url.protocol === 'https:' ? 443 : 80;
  const port = portText === '' ? defaultPort : Number(portText);
  return port === (url.port === '' ? defaultPort : Number(url.port));
}

/**
 * True when an Origin header value is the URL's own origin (RFC 6454 §4 and §5: the tuple of scheme,
 * host and port; scheme and host compared ASCII-case-insensitively, RFC 3986 §6.2.2.1, a missing port
 * being the scheme's default, RFC 3986 §6.2.3). The value must be a serialized origin,
 * `scheme "://" host [ ":" port ]` with nothing after it: `HTTP://127.0.0.1:8787` and
 * `http://127.0.0.1:80` (for `http://127.0.0.1/mcp`) are the own origin; `null`, another host, port or
 * scheme, and anything with a path, even a single trailing slash (`http://127.0.0.1:8787/`), are not.
 * Used in MCP mode (issue 30): only an Origin that is not the server's own may be refused as such.
 */
export function isOwnOrigin(value: string, url: URL): boolean {
  const v = value.trim();
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#@\\\s]+$/.test(v)) return false;
  try {
    return new URL(v).origin === url.origin;
  } catch {
    return false;
  }
}

/** The host name of a Host header value (lower-cased, port removed, IPv6 kept in brackets), or undefined when malformed. */
export function hostName(value: string): string | undefined {
  const v = value.trim().toLowerCase();
  if (v.startsWith('[')) {
    const end = v.indexOf(']');
    if (end < 0) return undefined;
    const rest = v.slice(end + 1);
    if (rest !== '' && !/^:\d+$/.test(rest)) return undefined;
    return v.slice(0, end + 1);
  }
  const i = v.indexOf(':');
  const name = i < 0 ? v : v.slice(0, i);
  if (i >= 0 && !/^\d+$/.test(v.slice(i + 1))) return undefined;
  return name === '' ? undefined : name;
}

/**
 * Decodes an Mcp-Name header value: trims surrounding whitespace and decodes `=?base64?…?=` (markers in
 * lower case only). Returns undefined when the Base64 payload is invalid (not canonical padded Base64 or
 * not UTF-8); a value with upper-case markers is returned literally.
 */
export function decodeMcpName(value: string, prefix = '=?base64?', suffix = '?='): string | undefined {
  const t = value.trim();
  if (!(t.startsWith(prefix) && t.endsWith(suffix) && t.length >= prefix.length + suffix.length)) return t;
  const b64 = t.slice(prefix.length, t.length - suffix.length);
  if (b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) return undefined;
  const buf = Buffer.from(b64, 'base64');
  if (buf.toString('base64') !== b64) return undefined;
  const s = buf.toString('utf8');
  if (!Buffer.from(s, 'utf8').equals(buf)) return undefined;
  return s;
}

/** The compiled oracle for one spec: `expect(req, ctx)` gives the demanded outcome. */
export interface Oracle {
  spec: Spec;
  /** Computes the outcome the contract demands for `req` sent to `ctx.url`. */
  expect(req: WireRequest, ctx: OracleContext): Expectation;
  /** True when `args` satisfies the input schema of catalogue tool `name` (undefined arguments count as {}). */
  argumentsValid(name: string, args: unknown): boolean;
  /** The catalogue entry of `name`, or undefined for a name outside the catalogue. */
  tool(name: string): CatalogueTool | undefined;
}

/** How the oracle reads the spec. */
export interface OracleOptions {
  /**
   * MCP mode (how the `mcp-stateless` profile is always judged, alone or next to `interlock-v1`): where the contract deliberately
   * deviates from MCP (protocol-v1.json `deviations`) or fixes an order of checks MCP leaves open, the
   * MCP behaviour is accepted as an alternative, so a correct generic server is not failed for
   * InterLock's choices (the full list is in conformance/README.md, "Against other MCP servers").
   */
  mcp?: boolean;
}

/** Builds the oracle for `spec` (compiles every tool's input schema with ajv, JSON Schema 2020-12). */
export function createOracle(spec: Spec, options: OracleOptions = {}): Oracle {
  const P = spec.protocol;
  const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv);
  // Another server's tools may declare their input schema's dialect: draft-07 is what zod-based SDKs
  // emit (`$schema: http://json-schema.org/draft-07/schema#`); MCP's default is 2020-12.
  const ajv07 = new Ajv({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv07);
  const validators = new Map<string, ValidateFunction>();
  const tools = new Map(spec.tools.map((t) => [t.name, t]));
  const validatorFor = (t: CatalogueTool): ValidateFunction => {
    let v = validators.get(t.canonical);
    if (!v) {
      const dialect = typeof t.inputSchema.$schema === 'string' ? t.inputSchema.$schema : undefined;
      if (dialect !== undefined && /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/.test(dialect)) v = ajv07.compile(t.inputSchema);
      else if (dialect !== undefined && !dialect.includes('2020-12')) {
        // Another dialect ajv does not carry: read the schema as 2020-12, MCP's default.
        const { $schema: _dialect, ...rest } = t.inputSchema;
        v = ajv.compile(rest);
      } else v = ajv.compile(t.inputSchema);
      validators.set(t.canonical, v);
    }
    return v;
  };
  const argumentsValid = (name: string, args: unknown): boolean => {
    const t = tools.get(name);
    if (!t) return false;
    return validatorFor(t)(args === undefined ? {} : args) === true;
  };

  const methodEntry = (m: string) => P.methods.find((e) => e.method === m);
  const servedRequest = (dialect: 'modern' | 'handshake', m: string): boolean => {
    const e = methodEntry(m);
    return !!e && e.kind === 'request' && e.dialects.includes(dialect);
  };
  const H = P.headers;
  const M = P.meta;

  const error = (rule: string, id: JsonRpcId | null, dialect: Expectation['dialect'], why: string, extra: Partial<Expectation> = {}): Expectation => {
    const c = checkById(spec, rule);
    return { rule, dialect, http: c.http, body: 'error', code: c.code, id, why, ...extra };
  };
  const accepted = (dialect: Expectation['dialect'], why: string, version?: string): Expectation => ({
    rule: 'results.notification',
    dialect,
    version,
    http: P.http.acceptedStatus,
    body: 'empty',
    why,
  });
  /** Adds `alt` (and its own alternatives) to the alternatives of `e`. */
  const orElse = (e: Expectation, alt: Expectation): Expectation => ({ ...e, alternatives: [...(e.alternatives ?? []), alt, ...(alt.alternatives ?? [])] });
  const unsupported = (id: JsonRpcId | null, requested: string, why: string): Expectation =>
    error('VERSION-HEADER', id, 'none', why, { errorData: { supported: [...P.versions.supported], requested } });

  function expect(req: WireRequest, ctx: OracleContext): Expectation {
    // 1 HOST
    const hostValue = header(req, H.host ?? 'Host') ?? ctx.url.host;
    const allowedHosts = new Set([...P.http.defaultAllowedHosts.map((h) => h.toLowerCase()), ctx.url.hostname.toLowerCase()]);
    const hn = hostName(hostValue);
    if (hn === undefined || !allowedHosts.has(hn)) return error('HOST', null, 'none', `Host "${hostValue}" is not an allowed host (${[...allowedHosts].join(', ')}, any port)`);
    // 2 ORIGIN
    // Compared case-insensitively, ignoring one trailing slash; 'null' matches no own origin, so it is foreign.
    const origin = header(req, H.origin ?? 'Origin');
    const ownOrigin = `${ctx.url.protocol}//${hostValue}`;
    if (origin !== undefined && normalizeOrigin(origin) !== normalizeOrigin(ownOrigin)) {
      return error('ORIGIN', null, 'none', `Origin "${origin}" differs from the request's own origin ${ownOrigin} (compared case-insensitively, one trailing slash ignored)`);
    }
    // 3 HTTP-METHOD
    if (!P.http.allowedMethods.includes(req.method)) {
      return error('HTTP-METHOD', null, 'none', `${req.method} is not served at the endpoint`, { headers: { allow: [...P.http.allowedMethods] } });
    }
    // 4 CONTENT-TYPE
    const ct = header(req, 'Content-Type');
    const media = ct?.split(';')[0]?.trim().toLowerCase();
    if (media !== P.http.requiredContentType.toLowerCase()) return error('CONTENT-TYPE', null, 'none', `Content-Type ${ct === undefined ? 'absent' : `"${ct}"`} is not ${P.http.requiredContentType}`);
    // 5 ACCEPT
    // The most specific matching range decides; q=0 or a q that is not a number excludes.
    const acceptValue = header(req, 'Accept');
    const ranges = parseAccept(acceptValue);
    if (!P.http.requiredAccept.every((m) => acceptsMedia(ranges, m))) {
      return error('ACCEPT', null, 'none', `Accept ${acceptValue === undefined ? 'absent' : `"${acceptValue}"`} does not cover ${P.http.requiredAccept.join(' and ')} (the most specific matching range decides; q=0 or a non-numeric q excludes)`);
    }
    // 6 JSON: one leading UTF-8 byte order mark is ignored (RFC 8259 §8.1), then the rest must parse.
    const raw = req.body ?? '';
    const bom = raw.startsWith('\ufeff');
    const body = bom ? raw.slice(1) : raw;
    let msg: unknown;
    try {
      msg = JSON.parse(body);
    } catch {
      return error('JSON', null, 'none', `the body is not valid JSON${bom ? ' after its byte order mark' : ''}`);
    }
    // 7 NO-BATCH
    if (Array.isArray(msg)) return error('NO-BATCH', null, 'none', 'the body is a JSON array (batch)');
    // 8 JSONRPC-SHAPE
    if (!isObject(msg)) return error('JSONRPC-SHAPE', null, 'none', 'the body is JSON but not an object');
    const hasId = 'id' in msg;
    const echoWhenValid = hasId && isValidId(msg.id) ? msg.id : null;
    if (msg.jsonrpc !== '2.0') return error('JSONRPC-SHAPE', echoWhenValid, 'none', `jsonrpc is ${JSON.stringify(msg.jsonrpc)}, not "2.0"`);
    let kind: 'request' | 'notification' | 'response';
    if ('method' in msg) {
      if (typeof msg.method !== 'string') return error('JSONRPC-SHAPE', echoWhenValid, 'none', 'method is not a string');
      if (msg.method === '') return error('JSONRPC-SHAPE', echoWhenValid, 'none', 'method is the empty string');
      if (hasId && !isValidId(msg.id)) return error('JSONRPC-SHAPE', null, 'none', `id ${JSON.stringify(msg.id)} is neither a string nor a safe integer (|id| <= 2^53-1)`);
      if ('params' in msg && !isObject(msg.params)) return error('JSONRPC-SHAPE', echoWhenValid, 'none', 'params is present but not an object');
      kind = hasId ? 'request' : 'notification';
    } else {
      const one = ('result' in msg ? 1 : 0) + ('error' in msg ? 1 : 0);
      if (!hasId || !isValidId(msg.id) || one !== 1) {
        return error('JSONRPC-SHAPE', echoWhenValid, 'none', 'neither a request (no method) nor a response (id plus exactly one of result or error)');
      }
      kind = 'response';
    }
    const id: JsonRpcId | null = kind === 'notification' ? null : (msg.id as JsonRpcId);
    const method = kind === 'response' ? undefined : (msg.method as string);
    const params = isObject(msg.params) ? msg.params : undefined;

    // Envelope state of the body: none (no _meta), complete (both required keys with the right types) or partial.
    const meta = params && '_meta' in params ? params._meta : undefined;
    const hasMeta = !!params && '_meta' in params;
    const metaPv = isObject(meta) ? meta[M.protocolVersion] : undefined;
    const envComplete = isObject(meta) && typeof metaPv === 'string' && isObject(meta[M.clientCapabilities]);
    const envelope: 'none' | 'complete' | 'partial' = !hasMeta ? 'none' : envComplete ? 'complete' : 'partial';
    // The body claims the modern envelope when _meta is an object carrying the protocolVersion key (VERSION-HEADER).
    const claimsEnvelope = isObject(meta) && M.protocolVersion in meta;
    const envelopeWhy = !hasMeta
      ? 'params._meta is absent'
      : !isObject(meta)
        ? 'params._meta is not an object'
        : typeof metaPv !== 'string'
          ? `_meta["${M.protocolVersion}"] is ${metaPv === undefined ? 'missing' : 'not a string'}`
          : `_meta["${M.clientCapabilities}"] is ${meta[M.clientCapabilities] === undefined ? 'missing' : 'not an object'}`;

    // 9 VERSION-HEADER and dialect selection
    const mpv = header(req, H.protocolVersion ?? 'MCP-Protocol-Version');
    let dialect: 'modern' | 'handshake';
    let version: string;
    if (mpv === undefined) {
      dialect = 'handshake';
      version = P.versions.assumedWhenHeaderAbsent;
    } else if (P.versions.modern.includes(mpv)) {
      dialect = 'modern';
      version = mpv;
    } else if (P.versions.handshake.includes(mpv)) {
      dialect = 'handshake';
      version = mpv;
    } else {
      // Notifications and responses are checked against the header alone, and the error carries id null.
      if (kind !== 'request') return unsupported(null, mpv, `MCP-Protocol-Version "${mpv}" is not supported (a ${kind} is checked against the header alone, id null)`);
      const initException = method === 'initialize' && params?.protocolVersion === mpv;
      const plain = unsupported(id, mpv, `MCP-Protocol-Version "${mpv}" is not supported`);
      const initAccepted = (): Expectation => ({
        ...dispatchHandshake(req, ctx, kind, method, id, params, P.versions.assumedWhenHeaderAbsent),
        why: `initialize with MCP-Protocol-Version equal to params.protocolVersion ("${mpv}") is accepted; negotiation uses the body`,
      });
      // A request whose body claims the modern envelope: ENVELOPE and VERSION-MATCH are checked first.
      if (claimsEnvelope) {
        if (envelope !== 'complete') return error('ENVELOPE', id, 'modern', `the body claims a modern _meta envelope, so ENVELOPE is checked before the version: ${envelopeWhy}`);
        if (metaPv !== mpv) return error('VERSION-MATCH', id, 'modern', `the body carries a modern _meta envelope, so VERSION-MATCH is checked first: header "${mpv}" ≠ _meta protocolVersion "${String(metaPv)}"`);
        const chain = { ...plain, why: `the body carries a modern _meta envelope naming "${mpv}" like the header, and that version is not supported` };
        // Settled: the initialize exception does not apply to a request carrying a modern envelope.
        return chain;
      }
      if (initException) return initAccepted();
      return plain;
    }

    if (kind === 'notification') return accepted(dialect, `a notification (${method}) is answered 202 with no body`, version);
    if (dialect === 'handshake') return dispatchHandshake(req, ctx, kind, method, id, params, version);

    // Modern dialect.
    // 10 POSTED-RESPONSE
    if (kind === 'response') return error('POSTED-RESPONSE', id, 'modern', 'a JSON-RPC response was posted in the modern dialect');
    // 11 ENVELOPE
    if (envelope !== 'complete') return error('ENVELOPE', id, 'modern', envelopeWhy);
    // 12 VERSION-MATCH
    if (metaPv !== mpv) return error('VERSION-MATCH', id, 'modern', `MCP-Protocol-Version "${mpv}" ≠ _meta protocolVersion "${String(metaPv)}"`);
    // From here on the envelope is complete: a 400 -32602 answer is the server refusing it as malformed (ENVELOPE).
    const afterEnvelope = ((): Expectation => {
      // 13 MCP-METHOD
      const mm = header(req, H.method ?? 'Mcp-Method');
      if (mm === undefined) return error('MCP-METHOD', id, 'modern', 'Mcp-Method is missing');
      if (mm.trim() !== method) return error('MCP-METHOD', id, 'modern', `Mcp-Method "${mm}" ≠ method "${method}"`);
      // 14 MCP-NAME
      if (method === 'tools/call') {
        const mn = header(req, H.name ?? 'Mcp-Name');
        if (mn === undefined) return error('MCP-NAME', id, 'modern', 'Mcp-Name is missing on tools/call');
        const decoded = decodeMcpName(mn, H.base64Prefix, H.base64Suffix);
        if (decoded === undefined) return error('MCP-NAME', id, 'modern', `Mcp-Name "${mn}" carries invalid Base64`);
        if (decoded === mn.trim() && !/^[\x20-\x7e]*$/.test(decoded)) return error('MCP-NAME', id, 'modern', `Mcp-Name "${mn}" carries characters outside visible ASCII without Base64`);
        if (decoded !== params?.name) return error('MCP-NAME', id, 'modern', `Mcp-Name "${mn}" (read as "${decoded}") ≠ params.name ${JSON.stringify(params?.name)}`);
      }
      // From here on the Mcp-Method and Mcp-Name headers match the body: a 400 -32020 answer is the server
      // misreading one of them (MCP-NAME when the request carries Mcp-Name, else MCP-METHOD).
      const headersOwner = header(req, H.name ?? 'Mcp-Name') !== undefined ? 'MCP-NAME' : 'MCP-METHOD';
      // 15 METHOD-KNOWN
      if (!servedRequest('modern', method!)) return { ...error('METHOD-KNOWN', id, 'modern', `method "${method}" is not served in the modern dialect`), headersOwner };
      return { ...dispatchMethod(req, ctx, 'modern', version, method!, id as JsonRpcId, params), headersOwner };
    })();
    return { ...afterEnvelope, envelopeOk: true };
  }

  function dispatchHandshake(
    req: WireRequest,
    ctx: OracleContext,
    kind: 'request' | 'notification' | 'response',
    method: string | undefined,
    id: JsonRpcId | null,
    params: Obj | undefined,
    version: string,
  ): Expectation {
    if (kind === 'response') return accepted('handshake', 'a JSON-RPC response posted in the handshake dialect is answered 202 with no body', version);
    if (kind === 'notification') return accepted('handshake', `a notification (${method}) is answered 202 with no body`, version);
    if (!servedRequest('handshake', method!)) return error('METHOD-KNOWN-HANDSHAKE', id, 'handshake', `method "${method}" is not served in the handshake dialect`, { version });
    return dispatchMethod(req, ctx, 'handshake', version, method!, id as JsonRpcId, params);
  }

  function dispatchMethod(req: WireRequest, ctx: OracleContext, dialect: 'modern' | 'handshake', version: string, method: string, id: JsonRpcId, params: Obj | undefined): Expectation {
    const ok = (result: ResultExpectation, rule: string, why: string, extra: Partial<Expectation> = {}): Expectation => ({
      rule,
      dialect,
      version,
      http: 200,
      body: 'result',
      id,
      result,
      why,
      ...extra,
    });
    const unspecified = (why: string): Expectation => ({ rule: 'unspecified', dialect, version, http: 0, body: 'unspecified', id, why });
    const entry = methodEntry(method)!;
    switch (entry.result) {
      case 'discover':
        return ok({ kind: 'discover' }, 'results.complete', `server/discover is answered in both dialects (${dialect})`);
      case 'empty':
        return ok({ kind: 'empty' }, 'results.plain', 'ping answers exactly {}');
      case 'tools':
        return ok({ kind: 'tools' }, 'results.complete', `tools/list (${dialect})`);
      case 'initialize': {
        // 16 INITIALIZE-PARAMS: protocolVersion a string, capabilities and clientInfo objects, else -32602 in-band.
        const requested = params?.protocolVersion;
        const bad = params === undefined
          ? 'params is absent'
          : typeof requested !== 'string'
            ? `params.protocolVersion is ${requested === undefined ? 'missing' : 'not a string'}`
            : !isObject(params.capabilities)
              ? `params.capabilities is ${params.capabilities === undefined ? 'missing' : 'not an object'}`
              : !isObject(params.clientInfo)
                ? `params.clientInfo is ${params.clientInfo === undefined ? 'missing' : 'not an object'}`
                : undefined;
        if (bad !== undefined || typeof requested !== 'string') return { ...error('INITIALIZE-PARAMS', id, dialect, `initialize: ${bad}`), version };
        const supported = P.versions.handshake.includes(requested);
        const pv = supported ? requested : P.versions.initializeFallback;
        // With no MCP-Protocol-Version, or a handshake-era one, nothing but the body decides this answer: a
        // refusal of it is results.plain's finding, whatever rule the request was aimed at (issue 30 item 4).
        const mpv = header(req, H.protocolVersion ?? 'MCP-Protocol-Version');
        const plainOwner = mpv === undefined || P.versions.handshake.includes(mpv) ? { refusalOwner: 'results.plain' as const } : {};
        return ok({ kind: 'initialize', protocolVersion: pv, requested, fallback: !supported }, 'results.plain', supported ? `initialize answers the requested version ${requested}` : `initialize answers ${pv} for the unsupported request ${requested}`, plainOwner);
      }
      case 'tool':
        return dispatchTool(ctx, req, dialect, version, id, params, ok);
      default:
        return unspecified(`method ${method} has result kind ${entry.result}, which the suite does not model`);
    }
  }

  function dispatchTool(
    ctx: OracleContext,
    req: WireRequest,
    dialect: 'modern' | 'handshake',
    version: string,
    id: JsonRpcId,
    params: Obj | undefined,
    ok: (result: ResultExpectation, rule: string, why: string, extra?: Partial<Expectation>) => Expectation,
  ): Expectation {
    const name = params?.name;
    // 16 TOOL-KNOWN (a tools/call without a string name names no tool of the catalogue either)
    const tool = typeof name === 'string' ? tools.get(name) : undefined;
    if (!tool || typeof name !== 'string') return { ...error('TOOL-KNOWN', id, dialect, `tool ${JSON.stringify(name)} is not in the catalogue`), version, mayStream: true };
    // 16 TOOL-KNOWN also covers params.arguments: absent or an object, else -32602 in-band (before CLIENT-CAPABILITY and AUTH).
    if (params !== undefined && 'arguments' in params && !isObject(params.arguments)) {
      return { ...error('TOOL-KNOWN', id, dialect, `params.arguments is ${JSON.stringify(params.arguments)}, not an object: malformed params, answered before AUTH`), version, mayStream: true };
    }
    // 16 CLIENT-CAPABILITY (modern): a tool's declared client capabilities must be in _meta clientCapabilities.
    if (dialect === 'modern' && tool.requiredClientCapabilities) {
      const meta = isObject(params?._meta) ? params._meta : {};
      const declared = isObject(meta[P.meta.clientCapabilities]) ? (meta[P.meta.clientCapabilities] as Obj) : {};
      const missing = Object.keys(tool.requiredClientCapabilities).filter((k) => !(k in declared));
      if (missing.length > 0) {
        const requiredCapabilities = Object.fromEntries(missing.map((k) => [k, tool.requiredClientCapabilities![k]]));
        return { ...error('CLIENT-CAPABILITY', id, 'modern', `tool "${name}" requires client capabilities ${missing.join(', ')}`), version, errorData: { requiredCapabilities } };
      }
    }
    // 17 AUTH
    if (tool.governed) {
      const auth = header(req, P.headers.authorization ?? 'Authorization');
      // The scheme is case-insensitive (RFC 9110 §11.1).
      const bearer = auth === undefined ? undefined : /^bearer +(\S+)\s*$/i.exec(auth.trim())?.[1];
      const valid = ctx.apiKey !== undefined && bearer === ctx.apiKey;
      if (!valid) {
        // No Authorization header, another scheme or an empty token is missing_api_key; a token is invalid_api_key.
        const noCredential = auth !== undefined && bearer === undefined;
        const refusalFor = (code: string): Expectation => {
          const status = spec.errors.refusals.find((r) => r.code === code)?.status ?? 'unauthorized';
          const why = `governed tool "${name}" with ${auth === undefined ? 'no Authorization header' : noCredential ? 'no Bearer credential' : 'an invalid key'}`;
          if (dialect === 'handshake') return ok({ kind: 'tool-refusal', status, code }, 'AUTH', why + ': a tool result with isError true', { mayStream: true });
          const st = spec.errors.statuses.find((x) => x.status === status);
          const c = checkById(spec, 'AUTH');
          return {
            ...error('AUTH', id, 'modern', why + ': a JSON-RPC error with HTTP ' + (st?.http ?? c.http)),
            version,
            http: st?.http ?? c.http,
            code: st?.modernCode ?? c.code,
            errorData: { refusal: { status, code } },
            headers: { wwwAuthenticate: 'Bearer' },
          };
        };
        return refusalFor(bearer === undefined ? 'missing_api_key' : 'invalid_api_key');
      }
    }
    // 18 TOOL-ARGUMENTS
    if (!argumentsValid(name, params?.arguments)) {
      if (P.versions.argumentErrorsAsToolResults.includes(version)) {
        return ok({ kind: 'tool-error' }, 'TOOL-ARGUMENTS', `arguments fail the input schema of "${name}"; in ${version} that is a tool result with isError true`, { mayStream: true });
      }
      return { ...error('TOOL-ARGUMENTS', id, dialect, `arguments fail the input schema of "${name}"; in ${version} that is JSON-RPC -32602 in-band`), version, mayStream: true };
    }
    if (spec.probeTool !== undefined && tool.canonical === spec.probeTool) return ok({ kind: 'tool-success' }, 'results.complete', `"${name}" with a valid key and valid arguments succeeds`, { mayStream: true });
    return ok({ kind: 'tool-any', dialect }, 'results.complete', `"${name}" runs against the server's own data; any well-formed tool result or governed refusal`, { mayStream: true });
  }

  /** Header fixes that make one failing header check pass, so the next check can be seen (MCP mode). */
  const REPAIRS: Record<string, (r: WireRequest) => WireRequest | undefined> = {
    HOST: (r) => withHeader(r, H.host ?? 'Host', undefined),
    ORIGIN: (r) => withHeader(r, H.origin ?? 'Origin', undefined),
    'CONTENT-TYPE': (r) => withHeader(r, 'Content-Type', P.http.requiredContentType),
    ACCEPT: (r) => withHeader(r, 'Accept', P.http.requiredAccept.join(', ')),
    'VERSION-HEADER': (r) => (header(r, H.protocolVersion ?? 'MCP-Protocol-Version') === undefined ? undefined : withHeader(r, H.protocolVersion ?? 'MCP-Protocol-Version', undefined)),
  };

  /**
   * MCP mode: the contract's expectation, plus the MCP behaviour at each deviation (see OracleOptions)
   * and, for a request that breaks several header checks, the error of any of them (MCP fixes no order).
   */
  /**
   * MCP mode for a server that implements only handshake-era revisions (`ctx.handshakeOnly`): a request
   * with a 2026-07-28 (or unknown) MCP-Protocol-Version gets HTTP 400 with any body, or a transport
   * refusal MCP orders no differently (Host, Origin, method, media types, JSON); with a handshake
   * version or none, `params._meta` is metadata the server may ignore, so the request is judged without it.
   */
  function expectHandshakeOnly(req: WireRequest, ctx: OracleContext): Expectation {
    const plain = { ...ctx, handshakeOnly: undefined };
    const mpv = header(req, H.protocolVersion ?? 'MCP-Protocol-Version');
    const msg = parsedBody(req);
    const m = isObject(msg) ? msg : undefined;
    if (mpv === undefined || P.versions.handshake.includes(mpv) || PUBLISHED_REVISIONS.includes(mpv)) {
      const opaque = m && isObject(m.params) && isObject(m.params._meta) ? withoutMeta(req, m) : req;
      const e = expectMcp(opaque, plain);
      return opaque === req ? e : { ...e, why: `${e.why} (a handshake-only server reads params._meta as opaque metadata)` };
    }
    const unsupported: Expectation = { rule: 'VERSION-HEADER', dialect: 'none', http: 400, body: 'any', why: `MCP 2025-11-25 Transports: the server implements no ${mpv} (its server/discover at 2026-07-28 got no result), and an unsupported MCP-Protocol-Version MUST be answered 400 Bad Request` };
    const e = expectMcp(req, plain);
    const transport: Expectation[] = [e, ...(e.alternatives ?? [])].filter((x) => x.dialect === 'none' && x.rule !== 'VERSION-HEADER').map((x) => ({ ...x, alternatives: undefined }));
    // MCP 2025-06-18 and later: the client sends MCP-Protocol-Version on the requests after initialization;
    // a server may ignore it on initialize itself and negotiate from the body.
    const onlyInitialize = Array.isArray(msg) && msg.length > 0 && msg.every((x) => isObject(x) && x.method === 'initialize');
    if (m?.method === 'initialize' || onlyInitialize) {
      // (A batch of initialize requests alone likewise: trial nuc's finding 6.)
      const bare = withHeader(req, H.protocolVersion ?? 'MCP-Protocol-Version', undefined);
      const served = expectHandshakeOnly(bare, ctx);
      transport.push({ ...served, alternatives: undefined, why: `${served.why} (MCP: the header is not required on initialize)` }, ...(served.alternatives ?? []));
    }
    // One finding, one owning rule (issue 30 item 4): a transport check that comes before VERSION-HEADER in
    // `checks` (a foreign Host or Origin, the method, the media types, JSON, batches, the JSON-RPC shape)
    // and decides the request by itself is the main expectation, so a server that serves such a request
    // is charged to that check whatever MCP-Protocol-Version rode along; the 400 stays accepted.
    const order = (rule: string): number => spec.checkIds.indexOf(rule);
    if (e.dialect === 'none' && order(e.rule) >= 0 && order(e.rule) < order('VERSION-HEADER')) {
      return { ...e, alternatives: [unsupported, ...transport.slice(1)] };
    }
    return { ...unsupported, alternatives: transport.length > 0 ? transport : undefined };
  }

  function expectMcp(req: WireRequest, ctx: OracleContext, depth = 0): Expectation {
    if (depth === 0 && ctx.handshakeOnly) return expectHandshakeOnly(req, ctx);
    let e = expect(req, ctx);
    const mpv = header(req, H.protocolVersion ?? 'MCP-Protocol-Version');
    const msg = parsedBody(req);
    const m = isObject(msg) ? msg : undefined;
    const reqId = m && 'method' in m && isValidId(m.id) ? (m.id as JsonRpcId) : null;
    const anyError = (why: string, extra: Partial<Expectation> = {}): Expectation => ({ ...e, code: undefined, errorData: undefined, headers: undefined, alternatives: undefined, why, ...extra });
    // DEV-BATCH-2025-03-26 and the removal of batches: any JSON-RPC error for a batch, and for
    // 2025-03-26 (no header or that header) a batch answered as a batch.
    if (e.rule === 'NO-BATCH') {
      e = orElse(e, anyError('MCP: a server that does not take batches refuses them with any JSON-RPC error'));
      // 2025-06-18 and later only say what a client sends ("MUST be a single JSON-RPC request…"); a
      // server may go on serving batches in any handshake-era version.
      // A batch holding only initialize messages may be served whatever MCP-Protocol-Version rides along:
      // initialize may ignore the header (it negotiates from its body), as it may alone (trial nuc's finding 6).
      const items = Array.isArray(msg) ? msg : [];
      const onlyInitialize = items.length > 0 && items.every((x) => isObject(x) && x.method === 'initialize');
      if (mpv === undefined || !P.versions.modern.includes(mpv) || onlyInitialize) {
        e = orElse(e, { rule: 'NO-BATCH', dialect: 'handshake', http: 200, body: 'unspecified', batch: true, why: `MCP 2025-03-26: implementations MUST support receiving JSON-RPC batches${onlyInitialize && mpv !== undefined ? ` (initialize may ignore MCP-Protocol-Version ${mpv})` : ''}` });
        const all = Array.isArray(msg) ? msg : [];
        if (all.length > 0 && all.every((x) => isObject(x) && !('method' in x && 'id' in x))) e = orElse(e, { rule: 'NO-BATCH', dialect: 'handshake', http: 202, body: 'empty', why: 'MCP 2025-03-26: a batch of only notifications or responses is answered 202 with no body' });
      }
    }
    // DEV-UNSUPPORTED-VERSION-CODE: handshake-era revisions name only HTTP 400 for an unsupported version.
    // MCP names no body either, so an error without the request's id (id null) is acceptable too.
    if (e.rule === 'VERSION-HEADER' && e.body === 'error') {
      e = orElse(e, anyError('MCP: an unsupported MCP-Protocol-Version is answered HTTP 400; no JSON-RPC code is named', { http: 400 }));
      e = orElse(e, anyError('MCP: an unsupported MCP-Protocol-Version is answered HTTP 400; no body is named', { http: 400, id: null }));
    }
    // DEV-MODERN-MISSING-HEADER: a body claiming the modern envelope without the header is -32020 in 2026-07-28.
    const meta = m && isObject(m.params) ? m.params._meta : undefined;
    const method = m && typeof m.method === 'string' ? m.method : undefined;
    const isNotification = !!m && method !== undefined && !('id' in m);
    const envVersion = isObject(meta) && typeof meta[M.protocolVersion] === 'string' ? (meta[M.protocolVersion] as string) : undefined;
    // An envelope claim with a protocolVersion that is not a string, or without an object
    // clientCapabilities, is malformed: -32602 (2026-07-28 _meta).
    if (isObject(meta) && M.protocolVersion in meta && !isNotification && method !== undefined && (envVersion === undefined || !isObject(meta[M.clientCapabilities]))) {
      e = orElse(e, { ...error('ENVELOPE', reqId, 'modern', 'MCP 2026-07-28: a malformed envelope is rejected with -32602'), alternatives: undefined });
    }
    // A request carrying the modern envelope "is served statelessly according to" 2026-07-28 (its
    // versioning section): the header checks (-32020) and the version check (-32022) of that revision
    // apply, whatever version the envelope names.
    const mcpMethodHeader = header(req, H.method ?? 'Mcp-Method');
    if (envVersion !== undefined && !isNotification && method !== undefined) {
      if (mcpMethodHeader !== undefined && mcpMethodHeader.trim() !== method) e = orElse(e, { ...error('MCP-METHOD', reqId, 'modern', 'MCP 2026-07-28: an Mcp-Method header that differs from the body method is rejected with -32020'), alternatives: undefined });
      if (mpv === undefined || mpv !== envVersion) {
        e = orElse(e, { ...error('VERSION-MATCH', reqId, 'modern', 'MCP 2026-07-28: the MCP-Protocol-Version header is missing or differs from the envelope version: -32020'), alternatives: undefined });
      }
      // The version check, against the envelope's version (the SDK reads no header when the envelope is
      // valid; MCP fixes no order between a missing header and an unsupported version).
      if ((mpv === undefined || mpv === envVersion) && !P.versions.modern.includes(envVersion)) {
        e = orElse(e, { ...error('VERSION-HEADER', reqId, 'modern', `MCP 2026-07-28: the envelope names ${envVersion}, not a modern version the server implements: -32022`), errorData: { requested: envVersion }, alternatives: undefined });
      }
    }
    // A notification the server cannot accept (an envelope naming a version it does not serve, or an
    // Mcp-Method header naming another method): "it MUST return an HTTP error status code (e.g., 400 Bad
    // Request)", with an error that has no id.
    const claimsModern = isObject(meta) && M.protocolVersion in meta && !P.versions.modern.includes(meta[M.protocolVersion] as string);
    const badMeta = !!m && isObject(m.params) && '_meta' in m.params && !isObject(meta);
    if (isNotification && (claimsModern || badMeta || (mcpMethodHeader !== undefined && mcpMethodHeader.trim() !== method))) {
      e = orElse(e, { rule: e.rule, dialect: e.dialect, http: 400, body: 'error', id: null, why: 'MCP: a notification the server cannot accept gets an HTTP error status (e.g. 400) and an error without id' });
    }
    // initialize "selects legacy semantics" (2026-07-28 versioning): it may be served as a legacy
    // initialize whatever its envelope or header says; an MCP-Protocol-Version that is no handshake-era
    // version may instead be refused as a header/body mismatch (-32020).
    if (method === 'initialize' && depth < 5) {
      if (mpv !== undefined && !P.versions.handshake.includes(mpv)) {
        e = orElse(e, { ...error('VERSION-MATCH', reqId, 'modern', `MCP: initialize with the non-handshake MCP-Protocol-Version ${mpv} may be refused with 400`), alternatives: undefined });
        // Read with legacy semantics, the header names a version that revision does not support: "it MUST
        // respond with 400 Bad Request" (2025-06-18 and later Transports), any body.
        if (!PUBLISHED_REVISIONS.includes(mpv)) e = orElse(e, { rule: 'VERSION-HEADER', dialect: 'handshake', http: 400, body: 'any', why: `MCP 2025-11-25 Transports: initialize read with legacy semantics, and ${mpv} is no version it supports: 400 Bad Request, any body` });
      }
      if (mpv !== undefined || (isObject(m?.params) && '_meta' in m.params)) {
        const next = expectMcp(withoutMeta(withHeader(req, H.protocolVersion ?? 'MCP-Protocol-Version', undefined), m), ctx, depth + 1);
        e = orElse(e, { ...next, alternatives: undefined, why: `${next.why} (MCP 2026-07-28: initialize selects legacy semantics)` });
        for (const a of next.alternatives ?? []) e = orElse(e, a);
      }
    }
    // MCP: a server that supports the requested version "MUST respond with the same version"; a server
    // may support the published revisions the contract does not (2024-11-05).
    if (e.result?.kind === 'initialize' && e.result.fallback && PUBLISHED_REVISIONS.includes(e.result.requested)) {
      e = orElse(e, { ...e, result: { ...e.result, protocolVersion: e.result.requested, fallback: false }, alternatives: undefined, why: `MCP: a server supporting ${e.result.requested} answers it` });
    }
    // The same revisions in MCP-Protocol-Version: a server that supports them serves the request.
    // What the request gets when the version is served is the main expectation, so a failure is charged
    // to the rule that decides it; the refusal stays allowed.
    if (e.rule === 'VERSION-HEADER' && mpv !== undefined && PUBLISHED_REVISIONS.includes(mpv) && depth < 5) {
      const next = expectMcp(withHeader(req, H.protocolVersion ?? 'MCP-Protocol-Version', undefined), ctx, depth + 1);
      e = { ...next, why: `${next.why} (MCP: a server may support ${mpv})`, alternatives: [...(next.alternatives ?? []), { ...e, alternatives: undefined }, ...(e.alternatives ?? [])] };
    }
    // Posted responses the server does not take: "an HTTP error status code (e.g., 400 Bad Request)",
    // the body "MAY comprise a JSON-RPC error response that has no id".
    if (e.rule === 'POSTED-RESPONSE' && e.body === 'error') e = orElse(e, anyError('MCP: a posted response the server cannot accept gets HTTP 400 with any error', { id: null }));
    // MCP Tools, Error Handling: "errors in _finding_ the tool ... should be reported as an MCP error
    // response" (a recommendation, no MUST), so an unknown tool reported as a tool result with isError
    // true is acceptable too.
    if (e.rule === 'TOOL-KNOWN' && e.body === 'error' && method === 'tools/call' && m && isObject(m.params) && typeof m.params.name === 'string' && !tools.has(m.params.name) && (m.params.arguments === undefined || isObject(m.params.arguments))) {
      e = orElse(e, { rule: 'TOOL-KNOWN', dialect: e.dialect, version: e.version, http: 200, body: 'result', id: reqId, result: { kind: 'tool-error' }, mayStream: true, why: 'MCP Tools: an unknown tool "should" be an MCP error response; a tool result with isError true is not forbidden' });
    }
    // Every MCP revision's schema types _meta as an object, so a request whose _meta is not one is no
    // valid request object: Invalid Request (-32600) fits as well as Invalid params (MCP's -32602 rule
    // names missing fields).
    if (badMeta && !isNotification) e = orElse(e, { ...error('JSONRPC-SHAPE', reqId, e.dialect, 'JSON-RPC: a request whose _meta is not an object is not a valid MCP request object'), alternatives: undefined });
    // Methods MCP 2026-07-28 defines and a server may implement (or refuse per its capabilities).
    if (e.rule === 'METHOD-KNOWN' && method !== undefined && OPTIONAL_MODERN_METHODS.includes(method)) {
      e = orElse(e, { rule: 'METHOD-KNOWN', dialect: 'modern', http: 200, body: 'unspecified', id: reqId, why: `MCP 2026-07-28 defines ${method}; a server may implement it` });
    }
    // DEV-DISCOVER-HANDSHAKE: server/discover is a 2026-07-28 method; handshake-era servers answer -32601.
    if (e.result?.kind === 'discover' && e.dialect === 'handshake') {
      e = orElse(e, { ...error('METHOD-KNOWN-HANDSHAKE', reqId, 'handshake', 'MCP: handshake-era servers answer server/discover with -32601'), version: e.version });
    }
    // Transport refusals for which MCP names only an HTTP status (405, 406, 415): any JSON-RPC error
    // code, or none (the SDK sends -32000).
    if (e.body === 'error' && (e.rule === 'HTTP-METHOD' || e.rule === 'CONTENT-TYPE' || e.rule === 'ACCEPT')) {
      e = orElse(e, anyError(`MCP names only HTTP ${e.http} here, no JSON-RPC code`, { headers: e.rule === 'HTTP-METHOD' ? e.headers : undefined }));
    }
    // Accept: MCP puts the rule on the client ("MUST include an Accept header, listing both") and names
    // no server reaction, so a server may refuse an Accept that does not list both types with 406.
    const accept = header(req, 'Accept') ?? '';
    if (req.method === 'POST' && !(accept.includes(P.http.requiredAccept[0] ?? 'application/json') && accept.includes(P.http.requiredAccept[1] ?? 'text/event-stream'))) {
      e = orElse(e, { rule: 'ACCEPT', dialect: 'none', http: 406, body: 'error', id: null, why: 'MCP: the Accept header does not list both application/json and text/event-stream; a server may refuse it (406)' });
    }
    // Accept: MCP names no reaction to it, so serving the request as if that header were fine is correct
    // too. Host: no MCP revision has a MUST on the Host header (2025-11-25 Transports: "Servers MUST
    // validate the Origin header"; binding to localhost is a SHOULD). On a loopback URL a foreign Host is a
    // DNS-rebinding attempt that the official suite's dns-rebinding-protection scenario expects refused
    // (4xx), so serving it there passes with a warning naming that basis (trial nuc's finding 7).
    const loopback = P.http.defaultAllowedHosts.some((h) => h.toLowerCase() === ctx.url.hostname.toLowerCase());
    const serveAnyway = (e.rule === 'HOST' || e.rule === 'ACCEPT') && e.body === 'error' && depth < 5 ? REPAIRS[e.rule]!(req) : undefined;
    if (serveAnyway) {
      const next = expectMcp(serveAnyway, ctx, depth + 1);
      const hostNote =
        e.rule === 'HOST' && loopback
          ? { rule: 'HOST', message: `Host "${header(req, H.host ?? 'Host')}" on the loopback URL ${ctx.url.host} was answered as if it were the own Host, not refused; no MCP MUST requires refusing it (basis: the official MCP conformance suite's dns-rebinding-protection scenario, which expects a 4xx)` }
          : undefined;
      const served: Expectation = { ...next, alternatives: undefined, why: `${next.why} (MCP: no ${e.rule} rule binds the server here)`, ...(hostNote ? { metWarning: hostNote } : {}) };
      // With no such rule in MCP, what the request gets apart from that header is the main expectation,
      // so a failure is charged to the rule that really decides it (e.g. ORIGIN); the refusal stays allowed.
      const servedAlts = (next.alternatives ?? []).map((a) => (hostNote ? { ...a, metWarning: hostNote } : a));
      e = { ...served, alternatives: [...servedAlts, { ...e, alternatives: undefined }, ...(e.alternatives ?? [])] };
    }
    // JSON-RPC: method is "A String"; the empty string is an unknown method, not an invalid request.
    if (m && m.method === '' && depth < 5) {
      const renamed = withHeader({ ...req, body: JSON.stringify({ ...m, method: 'conformance/unknown-method' }) }, H.method ?? 'Mcp-Method', header(req, H.method ?? 'Mcp-Method')?.trim() === '' ? 'conformance/unknown-method' : header(req, H.method ?? 'Mcp-Method'));
      const next = expectMcp(renamed, ctx, depth + 1);
      e = orElse(e, { ...next, alternatives: undefined, why: `${next.why} (JSON-RPC: "" is a method name)` });
      for (const a of next.alternatives ?? []) e = orElse(e, a);
    }
    // Several failing header checks: MCP fixes no order among them.
    const repair = e.body === 'error' ? REPAIRS[e.rule] : undefined;
    const repaired = repair && depth < 5 ? repair(req) : undefined;
    if (repaired) {
      const next = expectMcp(repaired, ctx, depth + 1);
      if (next.body === 'error') {
        e = orElse(e, { ...next, alternatives: undefined, why: `${next.why} (MCP fixes no order between this and ${e.rule})` });
        for (const a of next.alternatives ?? []) e = orElse(e, a);
      }
    }
    // JSON-RPC asks for id null only when the id cannot be read: echoing a readable id is correct too.
    if (depth === 0 && reqId !== null) {
      for (const x of [e, ...(e.alternatives ?? [])]) if (x.body === 'error' && x.id === null) e = orElse(e, { ...x, id: reqId, alternatives: undefined });
    }
    // JSON-RPC: an Invalid Request (-32600) or Parse error carries id null when the server could not
    // detect the id; a server may treat an invalid message's id as undetected, or echo a readable one.
    const rawId = m && (typeof m.id === 'string' || typeof m.id === 'number') ? (m.id as JsonRpcId) : undefined;
    if (depth === 0) {
      for (const x of [e, ...(e.alternatives ?? [])]) {
        if (x.body !== 'error' || (x.code !== -32600 && x.code !== -32700)) continue;
        if (x.id !== null) e = orElse(e, { ...x, id: null, alternatives: undefined });
        if (rawId !== undefined && x.id !== rawId) e = orElse(e, { ...x, id: rawId, alternatives: undefined });
      }
    }
    if (depth === 0 && e.rule === 'ORIGIN' && e.body === 'error') {
      const origin = header(req, H.origin ?? 'Origin');
      const served = ctx.hostOriginRefused === false ? '; the server serves a plain tools/list carrying this Origin, so it does not refuse it' : '';
      e = { ...e, reason: `Origin ${JSON.stringify(origin)} is not the server's own origin ${ctx.url.origin}: MCP 2025-11-25 Transports, "If the Origin header is present and invalid, servers MUST respond with HTTP 403 Forbidden" (any 4xx and any body are accepted as the refusal)${served}` };
    }
    if (depth === 0) e = refusalCredits(e, req, ctx, method, reqId);
    if (depth === 0) e = noMustLeniency(e, req, ctx, m, reqId, depth);
    return e;
  }

  /**
   * MCP mode, issue 30 item 3: answers no MCP or RFC MUST forbids. Those the contract forbids are accepted
   * with a `warning` (reported, never failing); orders MCP leaves open between two MUSTs are accepted
   * plainly. Each case names the text that permits it.
   */
  function noMustLeniency(e: Expectation, req: WireRequest, ctx: OracleContext, m: Obj | undefined, reqId: JsonRpcId | null, depth: number): Expectation {
    const all = () => [e, ...(e.alternatives ?? [])];
    /** An alternative whose derivation is its warning. */
    const w = (x: Omit<Expectation, 'why'> & { warning: string }): Expectation => ({ ...x, why: x.warning });
    const has = (rule: string) => all().some((x) => x.rule === rule);
    const method = m && typeof m.method === 'string' ? m.method : undefined;
    const isRequest = !!m && method !== undefined && 'id' in m;
    const rawId = m && (typeof m.id === 'string' || typeof m.id === 'number') ? (m.id as JsonRpcId) : undefined;
    const mpv = header(req, H.protocolVersion ?? 'MCP-Protocol-Version');
    for (const x of all()) {
      if (x.body !== 'error') continue;
      // Transport refusals: MCP and RFC 9110 name only the status (a 405 MUST carry Allow, RFC 9110 §15.5.6).
      if (x.rule === 'HTTP-METHOD' || x.rule === 'CONTENT-TYPE' || x.rule === 'ACCEPT') {
        e = orElse(e, w({
          rule: x.rule,
          dialect: 'none',
          http: x.http,
          body: 'any',
          headers: x.rule === 'HTTP-METHOD' ? { allowListing: 'POST' } : undefined,
          warning: `MCP and RFC 9110 name only HTTP ${x.http} here${x.http === 405 ? ' and an Allow header' : ''}; the contract also wants a JSON-RPC -32600 body${x.http === 405 ? ' and exactly Allow: POST' : ''}`,
        }));
      }
      // Input that is no JSON-RPC message: MCP Transports, "If the server cannot accept the input, it MUST
      // return an HTTP error status code (e.g., 400 Bad Request). The HTTP response body MAY comprise a
      // JSON-RPC error response"; JSON-RPC 2.0 §5 answers it with an error Response. Neither names the status
      // of such a Response or makes -32700/-32600 (a code definition, §5.1) a MUST.
      if (x.rule === 'JSON' || x.rule === 'JSONRPC-SHAPE') {
        e = orElse(e, w({ rule: x.rule, dialect: 'none', http: 400, body: 'any', anyClientError: true, warning: 'MCP Transports: input the server cannot accept gets "an HTTP error status code"; its body MAY be a JSON-RPC error (the contract: 400 with -32700 or -32600)' }));
      }
      if (x.rule === 'JSON' || x.rule === 'JSONRPC-SHAPE' || x.rule === 'NO-BATCH') {
        const note = 'JSON-RPC 2.0 §5/§6: the invalid call answered with one error Response at HTTP 200, any code (no MUST names its status or code; the contract: 400 with -32700 or -32600)';
        e = orElse(e, w({ rule: x.rule, dialect: 'none', http: 200, body: 'error', id: null, warning: note }));
        if (rawId !== undefined) e = orElse(e, w({ rule: x.rule, dialect: 'none', http: 200, body: 'error', id: rawId, warning: note }));
      }
      // Error codes JSON-RPC 2.0 §5.1 only defines (no MUST), for errors whose code no MCP MUST names.
      if (x.code !== undefined && (x.rule === 'INITIALIZE-PARAMS' || x.rule === 'TOOL-KNOWN' || x.rule === 'METHOD-KNOWN-HANDSHAKE' || (x.rule === 'TOOL-ARGUMENTS' && x.dialect === 'handshake'))) {
        // The handshake-era transport names no HTTP status for the error of a request ("MUST either return
        // Content-Type: text/event-stream … or Content-Type: application/json").
        const handshakeStatus = x.rule === 'METHOD-KNOWN-HANDSHAKE' || x.dialect === 'handshake';
        e = orElse(e, {
          ...x,
          code: undefined,
          alternatives: undefined,
          ...(handshakeStatus ? { anyHttp: true as const } : {}),
          warning: `JSON-RPC 2.0 §5.1 defines ${x.code} for this error, a code definition, no MUST${handshakeStatus ? '; the handshake-era transport names no HTTP status for a request\'s error' : ''} (the contract: HTTP ${x.http}, ${x.code})`,
        });
      }
    }
    // DELETE: "The server MAY respond to this request with HTTP 405" (2025-03-26 to 2025-11-25; 2026-07-28: SHOULD).
    if (req.method === 'DELETE' && has('HTTP-METHOD')) e = orElse(e, w({ rule: 'HTTP-METHOD', dialect: 'none', http: 200, body: 'any', anySuccess: true, warning: 'MCP: a server MAY (2026-07-28: SHOULD) answer DELETE with 405; serving it breaks no MUST (the contract: 405)' }));
    // More than one byte order mark: RFC 8259 §9, "A JSON parser MAY accept non-JSON forms or extensions".
    const raw = req.body ?? '';
    if (raw.startsWith('\ufeff\ufeff') && has('JSON') && depth < 5) {
      const stripped = { ...req, body: raw.replace(/^\ufeff+/, '') };
      if (parsedBody(stripped) !== undefined) {
        const next = expectMcp(stripped, ctx, depth + 1);
        e = orElse(e, { ...next, alternatives: undefined, warning: 'RFC 8259 §9: a JSON parser MAY accept non-JSON forms (here more than one byte order mark) (the contract: 400 -32700)' });
      }
    }
    // Ids JSON-RPC and MCP ask of the client (a string or integer; "Numbers SHOULD NOT contain fractional parts"):
    // serving such a request breaks no server MUST.
    if (has('JSONRPC-SHAPE') && m && m.jsonrpc === '2.0' && typeof m.method === 'string' && m.method !== '' && 'id' in m && m.id !== null && !isValidId(m.id) && (m.params === undefined || isObject(m.params))) {
      e = orElse(e, w({ rule: 'JSONRPC-SHAPE', dialect: 'none', http: 200, body: 'any', warning: `MCP asks the client for a string or integer id; serving id ${JSON.stringify(m.id)} breaks no server MUST (the contract: 400 -32600)` }));
    }
    // A notification or a response the server does not accept: "it MUST return an HTTP error status code
    // (e.g., 400 Bad Request). The HTTP response body MAY comprise a JSON-RPC error response that has no id."
    if (!isRequest && (has('results.notification') || has('POSTED-RESPONSE'))) {
      e = orElse(e, w({ rule: e.rule, dialect: e.dialect, version: e.version, http: 400, body: 'any', anyClientError: true, warning: 'MCP Transports: a notification or response the server does not accept gets an HTTP error status code, the body MAY be anything (the contract accepts it: 202)' }));
    }
    // Two MUSTs of 2026-07-28 fail at once; MCP orders none of them: a header/_meta mismatch (-32020), an
    // unsupported version (-32022), a malformed envelope (-32602), a missing or differing Mcp-Method (-32020).
    const modernHeader = mpv !== undefined && P.versions.modern.includes(mpv);
    if (isRequest && has('VERSION-MATCH') && mpv !== undefined && !P.versions.supported.includes(mpv) && !PUBLISHED_REVISIONS.includes(mpv)) {
      e = orElse(e, { ...error('VERSION-HEADER', reqId, 'modern', `MCP 2026-07-28: MCP-Protocol-Version ${mpv} is a version the server does not implement (MUST 400 UnsupportedProtocolVersionError); MCP orders no check before it`), errorData: { requested: mpv } });
    }
    const mm = header(req, H.method ?? 'Mcp-Method');
    if (isRequest && modernHeader && method !== 'initialize' && (mm === undefined || mm.trim() !== method) && (has('ENVELOPE') || has('VERSION-MATCH') || has('VERSION-HEADER'))) {
      e = orElse(e, { ...error('MCP-METHOD', reqId, 'modern', `MCP 2026-07-28: Mcp-Method ${mm === undefined ? 'is missing' : `"${mm}" differs from the method`} (MUST -32020); MCP orders no check before it`) });
    }
    const mn = header(req, H.name ?? 'Mcp-Name');
    const bodyName = m && isObject(m.params) ? (typeof m.params.name === 'string' ? m.params.name : typeof m.params.uri === 'string' ? m.params.uri : undefined) : undefined;
    const decodedName = mn === undefined ? undefined : decodeMcpName(mn, H.base64Prefix, H.base64Suffix);
    if (isRequest && modernHeader && mn !== undefined && (decodedName === undefined || decodedName !== bodyName) && (has('ENVELOPE') || has('VERSION-MATCH') || has('VERSION-HEADER'))) {
      e = orElse(e, { ...error('MCP-NAME', reqId, 'modern', `MCP 2026-07-28: Mcp-Name "${mn}" does not match the body (MUST -32020); MCP orders no check before it`) });
    }
    // A method the server does not implement in 2026-07-28 (ping, initialize, or an optional one such as
    // completion/complete): "MUST respond with 404 Not Found and -32601"; no order before the other MUSTs.
    // (The request is read as 2026-07-28 when its header names it or its body carries the envelope: "served statelessly according to this revision".)
    const envelopeClaim = !!m && isObject(m.params) && isObject(m.params._meta) && M.protocolVersion in m.params._meta;
    if (isRequest && (modernHeader || envelopeClaim) && method !== undefined && !servedRequest('modern', method) && (has('ENVELOPE') || has('VERSION-MATCH') || has('VERSION-HEADER') || has('MCP-METHOD') || has('MCP-NAME'))) {
      e = orElse(e, { ...error('METHOD-KNOWN', reqId, 'modern', `MCP 2026-07-28: ${method} is no method of this revision (MUST 404 -32601); MCP orders no check before it`) });
    }
    // A handshake-era MCP-Protocol-Version the server implements: that revision reads params._meta as opaque metadata.
    if (isRequest && mpv !== undefined && (P.versions.handshake.includes(mpv) || PUBLISHED_REVISIONS.includes(mpv)) && m && isObject(m.params) && '_meta' in m.params && depth < 5 && (has('ENVELOPE') || has('VERSION-MATCH') || has('VERSION-HEADER'))) {
      const next = expectMcp(withoutMeta(req, m), { ...ctx, handshakeOnly: undefined }, depth + 1);
      e = orElse(e, { ...next, alternatives: undefined, why: `${next.why} (MCP ${mpv}: params._meta is opaque metadata in that revision)` });
      // What that revision also accepts for the request without _meta (e.g. an argument error as a tool result).
      for (const a of next.alternatives ?? []) e = orElse(e, a);
    }
    // Invalid arguments (TOOL-ARGUMENTS): MCP 2025-03-26 and 2025-06-18 Tools, Error Handling, list "Invalid
    // arguments" only as an example of a protocol error (no MUST), and 2025-11-25 says input validation
    // errors SHOULD be tool execution errors: a tool result with isError true is correct in every
    // revision, and a JSON-RPC error where the later revisions recommend the tool result breaks no MUST.
    for (const x of all()) {
      if (x.rule !== 'TOOL-ARGUMENTS' || !isRequest) continue;
      if (x.body === 'error') e = orElse(e, { rule: 'TOOL-ARGUMENTS', dialect: x.dialect, version: x.version, http: 200, body: 'result', id: reqId, result: { kind: 'tool-error' }, mayStream: true, why: 'MCP Tools, Error Handling: invalid arguments are named only as an example of a protocol error, no MUST; a tool execution error (isError true) is correct too' });
      if (x.body === 'result' && x.result?.kind === 'tool-error') {
        e = orElse(e, w({ rule: 'TOOL-ARGUMENTS', dialect: x.dialect, version: x.version, http: 200, body: 'error', code: -32602, id: reqId, mayStream: true, warning: `MCP 2025-11-25 Tools: input validation errors SHOULD be reported as tool execution errors (isError true); a JSON-RPC -32602 breaks no MUST (the contract: a tool result with isError true in ${x.version ?? 'this version'})` }));
      }
    }
    // tools/call of a listed tool with `arguments` that is no object, served as if it were absent: no MUST
    // asks a server to refuse it (as for an initialize with mistyped params).
    if (isRequest && method === 'tools/call' && m && isObject(m.params) && typeof m.params.name === 'string' && tools.has(m.params.name) && 'arguments' in m.params && !isObject(m.params.arguments) && has('TOOL-KNOWN')) {
      e = orElse(e, w({ rule: 'TOOL-KNOWN', dialect: e.dialect, version: e.version, http: 200, body: 'result', id: reqId, result: { kind: 'tool-any', dialect: e.dialect === 'modern' ? 'modern' : 'handshake' }, mayStream: true, warning: `MCP names no reaction to tools/call arguments ${JSON.stringify(m.params.arguments)}; serving the call breaks no MUST (the contract: 200 -32602 before the tool runs)` }));
    }
    // tools/call with `arguments` that is no object reported as a tool result with isError true: MCP 2025-11-25
    // Tools (SEP-1303) reports input validation errors as tool execution errors; no MUST asks for -32602.
    if (isRequest && method === 'tools/call' && m && isObject(m.params) && 'arguments' in m.params && !isObject(m.params.arguments) && has('TOOL-KNOWN')) {
      e = orElse(e, w({ rule: 'TOOL-KNOWN', dialect: e.dialect, version: e.version, http: 200, body: 'result', id: reqId, result: { kind: 'tool-error' }, mayStream: true, warning: 'MCP 2025-11-25 Tools: input validation errors are reported as a tool result with isError true; no MUST asks for -32602 (the contract: 200 -32602 before the tool runs)' }));
    }
    // Methods MCP does not name (PUT, PATCH): RFC 9110 requires no particular refusal (405 or 501, or another 4xx).
    if ((req.method === 'PUT' || req.method === 'PATCH') && has('HTTP-METHOD')) e = orElse(e, w({ rule: 'HTTP-METHOD', dialect: 'none', http: 400, body: 'any', anyClientError: true, warning: `MCP names no answer to ${req.method}; any 4xx refusal breaks no MUST (the contract: 405)` }));
    // initialize with missing or mistyped params: MCP names no server reaction; serving it breaks no MUST.
    if (method === 'initialize' && has('INITIALIZE-PARAMS')) e = orElse(e, w({ rule: 'INITIALIZE-PARAMS', dialect: 'handshake', http: 200, body: 'any', warning: 'MCP names no reaction to an initialize whose params are missing or mistyped; serving it breaks no MUST (the contract: 200 -32602)' }));
    // Methods the handshake-era revisions define (resources, prompts, completion, logging): a server may serve them.
    if (isRequest && method !== undefined && HANDSHAKE_OPTIONAL_METHODS.includes(method) && has('METHOD-KNOWN-HANDSHAKE')) {
      e = orElse(e, { rule: 'METHOD-KNOWN-HANDSHAKE', dialect: 'handshake', http: 200, body: 'unspecified', id: reqId, why: `MCP defines ${method}; a server may implement it` });
    }
    // "A server ... MAY assign a session ID at initialization time" (handshake-era Session Management).
    if (method === 'initialize') e = { ...e, sessionMay: true, alternatives: e.alternatives?.map((a) => ({ ...a, sessionMay: true as const })) };
    return e;
  }

  /**
   * MCP mode, issue 30 items 1 and 2: refusals MCP permits and the contract does not model for a generic
   * server. A Host other than the URL's own, or an Origin other than the own origin (`isOwnOrigin`: scheme
   * and host in any letter case, the default port implied),
   * may be refused with any 4xx and any body (DNS-rebinding protection; MCP 2025-11-25 Transports:
   * "the HTTP response body MAY comprise a JSON-RPC error response"); such an answer counts for HOST or
   * ORIGIN and is evidence for no other rule. A tools/call without the valid key may be refused by the
   * server's own authorization (MCP Authorization: HTTP 401; or, in the handshake dialect, a tool result
   * with isError true), since a generic server's tools/list does not say which tools need a key.
   */
  function refusalCredits(e: Expectation, req: WireRequest, ctx: OracleContext, method: string | undefined, reqId: JsonRpcId | null): Expectation {
    const refusal = (rule: string, why: string): Expectation => ({ rule, dialect: 'none', http: 403, body: 'any', anyClientError: true, why });
    // Credited only where the server does refuse this Host/Origin on a plain request too (probed by run.ts):
    // otherwise a 4xx answer is the server's verdict on something else, judged by its own rule.
    const credit = ctx.hostOriginRefused !== false;
    const hostValue = header(req, H.host ?? 'Host');
    if (credit && hostValue !== undefined && !isOwnHost(hostValue, ctx.url)) e = orElse(e, refusal('HOST', `MCP: a server may refuse a Host other than its own ${ctx.url.host} (DNS-rebinding protection) with a 4xx and any body`));
    const origin = header(req, H.origin ?? 'Origin');
    if (credit && origin !== undefined && !isOwnOrigin(origin, ctx.url)) e = orElse(e, refusal('ORIGIN', `MCP: a server may refuse an Origin other than its own ${ctx.url.origin} (scheme and host in any letter case, RFC 6454 §4) with 403 and any body`));
    if (e.body === 'error' && e.http === 403 && (e.rule === 'HOST' || e.rule === 'ORIGIN')) e = orElse(e, { ...refusal(e.rule, `MCP names only HTTP 403 here; the body MAY be a JSON-RPC error`), anyClientError: undefined });
    // RFC 8259 §8.1: a parser "MAY ignore the presence of a byte order mark rather than treating it as an
    // error", so refusing a body behind one as a parse error is allowed too.
    if ((req.body ?? '').startsWith('\ufeff') && e.rule !== 'JSON') e = orElse(e, { ...error('JSON', null, 'none', 'RFC 8259 §8.1: a byte order mark may be treated as an error (-32700)'), alternatives: undefined });
    // The main expectation or an alternative (e.g. the request read by a handshake-era revision named in its
    // header, with params._meta opaque) that runs the tool.
    const runsTool = [e, ...(e.alternatives ?? [])].filter((x) => x.rule === 'TOOL-ARGUMENTS' || x.result?.kind === 'tool-any' || x.result?.kind === 'tool-success');
    const auth = header(req, P.headers.authorization ?? 'Authorization');
    const bearer = auth === undefined ? undefined : /^bearer +(\S+)\s*$/i.exec(auth.trim())?.[1];
    if (method === 'tools/call' && (ctx.apiKey === undefined || bearer !== ctx.apiKey)) {
      for (const x of runsTool) {
        e = orElse(e, { rule: x.rule, dialect: x.dialect, version: x.version, http: 401, body: 'any', why: 'MCP Authorization: a request without a valid token is answered HTTP 401 by a server whose tool needs one' });
        if (x.dialect === 'handshake') e = orElse(e, { rule: x.rule, dialect: 'handshake', version: x.version, http: 200, body: 'result', id: reqId, result: { kind: 'tool-error' }, mayStream: true, why: "a tool that needs a key the request lacks reports it as a tool result with isError true (the server's own authorization)" });
      }
    }
    return e;
  }

  return { spec, expect: options.mcp ? (req, ctx) => expectMcp(req, ctx) : expect, argumentsValid, tool: (n) => tools.get(n) };
}

/** Published MCP revisions the contract does not serve but another server may (MCP mode). */
const PUBLISHED_REVISIONS = ['2024-11-05'];
/** Methods the handshake-era revisions define besides the contract's; a server may implement them (MCP mode). */
const HANDSHAKE_OPTIONAL_METHODS = ['resources/list', 'resources/read', 'resources/templates/list', 'resources/subscribe', 'resources/unsubscribe', 'prompts/list', 'prompts/get', 'completion/complete', 'logging/setLevel'];
/** Methods MCP 2026-07-28 defines that a server may implement or refuse per its capabilities (MCP mode). */
const OPTIONAL_MODERN_METHODS = ['subscriptions/listen', 'prompts/list', 'prompts/get', 'resources/list', 'resources/read', 'resources/templates/list', 'completion/complete'];

/** The JSON value of `req`'s body behind at most one byte order mark, or undefined when it is no JSON. */
function parsedBody(req: WireRequest): unknown {
  try {
    return JSON.parse((req.body ?? '').replace(/^\ufeff/, ''));
  } catch {
    return undefined;
  }
}

/** `req` with `params._meta` removed from its body (`m`, the parsed body), or `req` itself when it has none. */
function withoutMeta(req: WireRequest, m: Record<string, unknown> | undefined): WireRequest {
  if (!m || !isObject(m.params) || !('_meta' in m.params)) return req;
  const { _meta: _dropped, ...params } = m.params;
  return { ...req, body: JSON.stringify({ ...m, params }) };
}

/** `req` with header `name` (any casing) replaced by `value`, or removed when `value` is undefined. */
function withHeader(req: WireRequest, name: string, value: string | undefined): WireRequest {
  const n = name.toLowerCase();
  const headers = req.headers.filter(([k]) => k.toLowerCase() !== n);
  if (value !== undefined) headers.push([name, value]);
  return { ...req, headers };
}
