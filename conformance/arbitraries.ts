/**
 * fast-check generators for requests to the endpoint. A generated `Draft` describes a request by its
 * dimensions (HTTP method, Host, Origin, Content-Type, Accept, MCP-Protocol-Version, mirrored headers,
 * authentication, header-name casing, body); `render` turns it into the exact wire request. Header values
 * that mirror the body (Mcp-Method, Mcp-Name, `_meta` protocolVersion) are drawn as modes (match,
 * mismatch, absent, padded, Base64, …) and resolved against the body at render time, so shrinking moves
 * toward the simplest request that still breaks the rule.
 *
 * Every dimension has a "valid" generator and an "all" generator; `draftArb` takes the valid one with a
 * small probability of noise, except for the dimensions a property overrides.
 */
import fc from 'fast-check';
import type { WireRequest } from './http';
import { isObject, type Oracle } from './oracle';
import type { JsonSchema, Spec } from './spec';

/** What the generators need to know about the target. */
export interface GenContext {
  spec: Spec;
  oracle: Oracle;
  url: URL;
  /** A valid agent key; without one, valid authentication is never generated. */
  apiKey?: string;
}

/** How the Host header is sent: derived from the URL, or an explicit value. */
export type HostChoice = { kind: 'url' } | { kind: 'value'; value: string };
/**
 * Spellings of the request's own origin: `upper` (all upper case), `slash` (one trailing slash), `upper-slash`
 * (both) are the own origin under rule ORIGIN; `double-slash` and `path` are not.
 */
export type OriginVariant = 'upper' | 'slash' | 'upper-slash' | 'double-slash' | 'path';
/** How the Origin header is sent: absent, the request's own origin (possibly respelled), or an explicit value. */
export type OriginChoice = { kind: 'absent' } | { kind: 'own' } | { kind: 'own-variant'; variant: OriginVariant } | { kind: 'value'; value: string };
/** Mcp-Method relative to the body's method. */
export type McpMethodMode = 'match' | 'absent' | 'mismatch' | 'padded' | 'upper';
/** Mcp-Name relative to the body's params.name. */
export type McpNameMode = 'match' | 'absent' | 'wrong' | 'padded' | 'b64' | 'b64-padded' | 'b64-invalid' | 'b64-upper' | 'b64-wrong';
/** Shape of params._meta. */
export type MetaMode =
  | 'absent'
  | 'complete'
  | 'complete+clientInfo'
  | 'no-protocolVersion'
  | 'no-clientCapabilities'
  | 'protocolVersion-number'
  | 'clientCapabilities-string'
  | 'clientCapabilities-null'
  | 'clientCapabilities-array'
  | 'meta-string'
  | 'meta-array'
  | 'meta-empty';
/** The version named in `_meta`: the header's value, or a literal. */
export type MetaVersion = { kind: 'header' } | { kind: 'literal'; value: string };
/** How the request authenticates: no header, a wrong Bearer key, the valid key, the valid key with a lower-case scheme, another scheme, Bearer with no token. */
export type AuthMode = 'absent' | 'invalid' | 'valid' | 'valid-lowercase-scheme' | 'other-scheme' | 'empty-bearer';
/** Header-name casing on the wire. */
export type HeaderCase = 'canonical' | 'lower' | 'upper' | 'mixed';

/** params of a generated message: its method-specific fields plus the `_meta` envelope mode. */
export interface ParamsDraft {
  meta: MetaMode;
  metaVersion: MetaVersion;
  /** Method-specific fields (name, arguments, protocolVersion, capabilities, clientInfo, …). */
  fields: Record<string, unknown>;
  /** For initialize: params.protocolVersion equals the MCP-Protocol-Version header (or 2025-11-25 without one). */
  initVersionFromHeader?: boolean;
  /** The clientCapabilities object the envelope declares (default {}). */
  capabilities?: Record<string, unknown>;
}

/**
 * Shape of initialize's params (rule INITIALIZE-PARAMS): complete, or one member missing or of another type.
 * `absent-params` sends initialize without params at all.
 */
export type InitParamsMode =
  | 'complete'
  | 'no-capabilities'
  | 'no-clientInfo'
  | 'no-protocolVersion'
  | 'capabilities-null'
  | 'capabilities-array'
  | 'clientInfo-string'
  | 'protocolVersion-number'
  | 'absent-params';

/** One JSON-RPC message (or near-message) to render into the body. */
export interface MessageDraft {
  kind: 'request' | 'notification' | 'response';
  jsonrpc: { present: false } | { present: true; value: unknown };
  id: unknown;
  method: unknown;
  params: { kind: 'absent' } | { kind: 'draft'; draft: ParamsDraft } | { kind: 'raw'; value: unknown };
  /** For kind response: which members it carries. */
  response: 'result' | 'error' | 'both' | 'neither';
}

/** The body of a generated request; `bom` sends `inner` behind a UTF-8 byte order mark. */
export type BodyDraft =
  | { kind: 'message'; message: MessageDraft }
  | { kind: 'bom'; inner: BodyDraft }
  | { kind: 'batch'; items: MessageDraft[] }
  | { kind: 'json'; value: unknown }
  | { kind: 'raw'; text: string }
  | { kind: 'none' };

/** Body variants that are valid JSON-RPC only after a parser ignores a leading byte order mark (RFC 8259 §8.1). */
export const BOM_BODIES = ['\ufeff{"jsonrpc":"2.0","id":1,"method":"tools/list"}', '\ufeff{"jsonrpc":"2.0","method":"notifications/initialized"}'];

/** A generated request before rendering. */
export interface Draft {
  httpMethod: string;
  host: HostChoice;
  origin: OriginChoice;
  contentType: string | null;
  accept: string | null;
  mpv: string | null;
  mcpMethod: McpMethodMode;
  mcpName: McpNameMode;
  auth: AuthMode;
  headerCase: HeaderCase;
  extra: Array<[string, string]>;
  body: BodyDraft;
}

/** Methods that are not in the contract's method table (removed in 2026-07-28, never served, or made up). */
export const FOREIGN_METHODS = ['logging/setLevel', 'resources/list', 'resources/read', 'resources/subscribe', 'prompts/list', 'prompts/get', 'subscriptions/listen', 'completion/complete', 'foo/bar'];
/** Unsupported MCP-Protocol-Version values. */
export const UNKNOWN_VERSIONS = ['2099-01-01', 'garbage', 'v999.0.0', '1900-01-01', '2024-11-05'];
/** clientCapabilities objects a client may declare in the envelope. */
export const CAPABILITIES_ARB: fc.Arbitrary<Record<string, unknown>> = fc.constantFrom<Record<string, unknown>>(
  {},
  { elicitation: {} },
  { sampling: {} },
  { roots: { listChanged: true } },
  { elicitation: {}, sampling: {}, roots: {} },
  { experimental: { 'com.example/x': {} } },
);
/** Tool names outside the catalogue. */
export const UNKNOWN_TOOLS = ['get_weather', 'interlock_drop_everything', 'agentgate_describe_access', 'interlock_query2'];

const weighted = <T>(valid: fc.Arbitrary<T>, all: fc.Arbitrary<T>, noise = 20): fc.Arbitrary<T> =>
  fc.oneof({ arbitrary: valid, weight: noise }, { arbitrary: all, weight: 1 });

/** Safe integers at the edges (rule JSONRPC-SHAPE: |id| <= 2^53-1 is valid and echoed exactly), beyond 32 bits. */
export const SAFE_EDGE_IDS = [Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 2 ** 31, -(2 ** 31) - 1, 2 ** 32 + 1, 2 ** 52 + 3];
/** Integers beyond 2^53-1 (rule JSONRPC-SHAPE: invalid, -32600 with id null); 1e21 is sent as 1e+21. */
export const UNSAFE_IDS = [2 ** 53, -(2 ** 53), 2 ** 53 + 2, 2 ** 64, 1e21];
/** Ids on both sides of the safe-integer limit. */
export const boundaryIdArb: fc.Arbitrary<number> = fc.constantFrom(...SAFE_EDGE_IDS, ...UNSAFE_IDS);

/** A JSON-RPC id MCP accepts: strings and safe integers (0, negatives, up to ±(2^53-1)). */
export const validIdArb: fc.Arbitrary<string | number> = fc.oneof(
  fc.constant(0),
  fc.integer({ min: -1000, max: 1000 }),
  fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }),
  fc.constantFrom(...SAFE_EDGE_IDS),
  fc.constant('0'),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: 'grapheme', maxLength: 6 }),
);
/** An id MCP refuses: null, fractions, booleans, objects, arrays, integers beyond 2^53-1. */
export const invalidIdArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 1.5, -0.25, 2.000001),
  fc.constantFrom(...UNSAFE_IDS),
  fc.constant({}),
  fc.constant({ id: 1 }),
  fc.constant([]),
  fc.constant([1]),
);

/** Generators for the individual dimensions; `valid` passes the transport checks, `all` covers every variant. */
export function dimensions(g: GenContext) {
  const P = g.spec.protocol;
  const port = g.url.port || (g.url.protocol === 'https:' ? '443' : '80');
  const loopbackHosts = P.http.defaultAllowedHosts.flatMap((h) => [`${h}:${port}`, h, `${h}:1`]);
  // Host names compare case-insensitively (rule HOST): names with letters, respelled.
  const respelledHosts = P.http.defaultAllowedHosts.filter((h) => /[a-z]/i.test(h)).flatMap((h) => [`${h.toUpperCase()}:${port}`, `${h[0]!.toUpperCase()}${h.slice(1)}:1`, h.toUpperCase()]);
  const foreignHosts = ['evil.example.com', `evil.example.com:${port}`, `EVIL.EXAMPLE.COM:${port}`, `localhost.evil.example.com:${port}`, `127.0.0.1.nip.io:${port}`, `10.0.0.1:${port}`, `127.0.0.2:${port}`];
  const host = {
    valid: fc.constant<HostChoice>({ kind: 'url' }),
    all: fc.oneof(
      fc.constant<HostChoice>({ kind: 'url' }),
      fc.constantFrom(...loopbackHosts).map((value): HostChoice => ({ kind: 'value', value })),
      fc.constantFrom(...respelledHosts).map((value): HostChoice => ({ kind: 'value', value })),
      fc.constantFrom(...foreignHosts).map((value): HostChoice => ({ kind: 'value', value })),
    ),
  };
  const ownVariant = fc.constantFrom<OriginVariant>('upper', 'slash', 'upper-slash', 'upper', 'slash', 'upper-slash', 'double-slash', 'path').map((variant): OriginChoice => ({ kind: 'own-variant', variant }));
  const origin = {
    valid: fc.constantFrom<OriginChoice>({ kind: 'absent' }, { kind: 'own' }),
    /** Respellings of the request's own origin only (the ORIGIN property draws them more often). */
    ownVariant,
    all: fc.oneof(
      fc.constantFrom<OriginChoice>({ kind: 'absent' }, { kind: 'own' }),
      ownVariant,
      fc
        .constantFrom('http://evil.example.com', 'null', `http://localhost:1`, `https://${g.url.host}`, `http://${g.url.hostname}:1`, 'http://evil.example.com:' + port)
        .map((value): OriginChoice => ({ kind: 'value', value })),
    ),
  };
  const httpMethod = { valid: fc.constant('POST'), all: fc.constantFrom('POST', 'GET', 'DELETE', 'PUT', 'PATCH') };
  const goodCt = ['application/json', 'application/json; charset=utf-8', 'Application/JSON', 'APPLICATION/JSON;charset=UTF-8', 'application/json;charset=utf-8'];
  const badCt = [null, 'text/plain', 'application/x-www-form-urlencoded', 'text/json', 'application/jsonl', 'application/json-seq', 'multipart/form-data', '*/*', 'application/*'];
  const contentType = { valid: fc.constantFrom<string | null>(...goodCt), all: fc.constantFrom<string | null>(...goodCt, ...badCt) };
  const goodAccept = [
    'application/json, text/event-stream',
    'text/event-stream, application/json',
    '*/*',
    'application/*, text/*',
    'application/json;q=0.9, text/event-stream;q=0.1',
    'APPLICATION/JSON, TEXT/EVENT-STREAM',
    'application/json, text/*',
    '*/*;q=0.5',
    'application/json; charset=utf-8, text/event-stream',
  ];
  // Rule ACCEPT: the most specific matching range decides; q=0 or a q that is not a number excludes.
  const precedenceAccept = [
    'application/json;q=0, */*',
    'text/*;q=0, text/event-stream, application/json',
    '*/*;q=0, application/json, text/event-stream',
    'application/*;q=0, application/json, text/*',
    'text/event-stream;q=0, text/*, application/json',
    'application/json;q=abc, text/event-stream',
    'application/json, text/event-stream;q=high',
    'application/json;q=, text/event-stream',
    'application/json;Q=0, text/event-stream',
    '*/*;q=x',
  ];
  const badAccept = [null, 'application/json', 'text/event-stream', 'text/html', 'application/json, text/event-stream;q=0', 'application/*', '*/*;q=0', 'text/*, image/png', 'application/json;q=0, text/event-stream'];
  const rangePool = ['application/json', 'text/event-stream', 'application/*', 'text/*', '*/*', 'text/html', 'application/xml', 'image/png', 'Application/Json', 'TEXT/EVENT-STREAM'];
  const composedAccept = fc
    .uniqueArray(fc.constantFrom(...rangePool), { minLength: 1, maxLength: 4, selector: (r) => r.toLowerCase() })
    .chain((ranges) =>
      fc.tuple(...ranges.map((r) => fc.constantFrom('', ';q=1', ';q=0.5', ';q=0.001', ';q=0', '; charset=utf-8', ';q=abc', ';q=').map((p) => r + p))).map((parts) => parts.join(', ')),
    );
  const accept = {
    valid: fc.constantFrom<string | null>(...goodAccept),
    all: fc.oneof(fc.constantFrom<string | null>(...goodAccept, ...badAccept), fc.constantFrom<string | null>(...precedenceAccept), composedAccept),
  };
  const mpvModern = fc.constantFrom<string | null>(...P.versions.modern);
  const mpvHandshake = fc.constantFrom<string | null>(null, ...P.versions.handshake);
  const mpvUnknown = fc.constantFrom<string | null>(...UNKNOWN_VERSIONS);
  const mpv = { modern: mpvModern, handshake: mpvHandshake, unknown: mpvUnknown, all: fc.oneof(mpvModern, mpvHandshake, mpvUnknown) };
  const mcpMethod = { valid: fc.constant<McpMethodMode>('match'), all: fc.constantFrom<McpMethodMode>('match', 'absent', 'mismatch', 'padded', 'upper') };
  const mcpName = {
    valid: fc.constantFrom<McpNameMode>('match', 'padded', 'b64'),
    all: fc.constantFrom<McpNameMode>('match', 'absent', 'wrong', 'padded', 'b64', 'b64-padded', 'b64-invalid', 'b64-upper', 'b64-wrong'),
  };
  const authModes: AuthMode[] = g.apiKey ? ['valid', 'absent', 'invalid', 'valid-lowercase-scheme', 'other-scheme', 'empty-bearer'] : ['absent', 'invalid', 'other-scheme', 'empty-bearer'];
  const auth = { valid: fc.constant<AuthMode>(g.apiKey ? 'valid' : 'absent'), all: fc.constantFrom(...authModes) };
  const headerCase = fc.constantFrom<HeaderCase>('canonical', 'lower', 'upper', 'mixed');
  const extra = {
    none: fc.constant<Array<[string, string]>>([]),
    all: fc.subarray<[string, string]>([
      [P.headers.sessionIdIgnored ?? 'Mcp-Session-Id', 'session-from-elsewhere-123'],
      [P.headers.lastEventIdIgnored ?? 'Last-Event-ID', '42'],
    ]),
  };
  const meta = {
    valid: fc.constantFrom<MetaMode>('complete', 'complete+clientInfo'),
    all: fc.constantFrom<MetaMode>(
      'complete',
      'complete+clientInfo',
      'absent',
      'no-protocolVersion',
      'no-clientCapabilities',
      'protocolVersion-number',
      'clientCapabilities-string',
      'clientCapabilities-null',
      'clientCapabilities-array',
      'meta-string',
      'meta-array',
      'meta-empty',
    ),
  };
  const metaVersion = {
    valid: fc.constant<MetaVersion>({ kind: 'header' }),
    all: fc.oneof(
      fc.constant<MetaVersion>({ kind: 'header' }),
      fc.constantFrom(...P.versions.supported, 'v999.0.0', '2099-01-01').map((value): MetaVersion => ({ kind: 'literal', value })),
    ),
  };
  const initParams = {
    valid: fc.constant<InitParamsMode>('complete'),
    all: fc.constantFrom<InitParamsMode>(
      'complete',
      'no-capabilities',
      'no-clientInfo',
      'no-protocolVersion',
      'capabilities-null',
      'capabilities-array',
      'clientInfo-string',
      'protocolVersion-number',
      'absent-params',
    ),
  };
  return { host, origin, httpMethod, contentType, accept, mpv, mcpMethod, mcpName, auth, headerCase, extra, meta, metaVersion, initParams };
}

// ---------------------------------------------------------------- tool arguments from the input schemas

function resolve(schema: JsonSchema, root: JsonSchema): JsonSchema {
  const ref = schema.$ref;
  if (typeof ref === 'string' && ref.startsWith('#/$defs/')) {
    const defs = (root.$defs ?? {}) as Record<string, JsonSchema>;
    const target = defs[ref.slice('#/$defs/'.length)];
    if (target) return resolve({ ...target, ...Object.fromEntries(Object.entries(schema).filter(([k]) => k !== '$ref')) }, root);
  }
  return schema;
}

/**
 * A generator of values meant to satisfy `schema` (strings, integers, booleans, arrays, objects, enums,
 * patterns, date-time). The oracle re-validates with ajv, so a value that misses is only misfiled, never
 * misjudged. `sql` properties are always the read-only `SELECT 1`, so the suite never sends other SQL.
 */
export function valueArb(schema: JsonSchema, root: JsonSchema = schema, propName?: string): fc.Arbitrary<unknown> {
  const s = resolve(schema, root);
  if (propName === 'sql') return fc.constant('SELECT 1');
  if ('const' in s) return fc.constant(s.const);
  if (Array.isArray(s.enum)) return fc.constantFrom(...(s.enum as unknown[]));
  const type = s.type;
  if (Array.isArray(type)) return fc.oneof(...type.map((t) => valueArb({ ...s, type: t }, root, propName)));
  switch (type) {
    case 'string': {
      const min = typeof s.minLength === 'number' ? s.minLength : 0;
      const max = Math.min(typeof s.maxLength === 'number' ? s.maxLength : 16, 16);
      if (typeof s.pattern === 'string') return fc.stringMatching(new RegExp(s.pattern)).filter((x) => x.length >= min && x.length <= Math.max(max, min));
      if (s.format === 'date-time') return fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2035-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString());
      return fc.string({ minLength: min, maxLength: Math.max(max, min) });
    }
    case 'integer':
      return fc.integer({ min: typeof s.minimum === 'number' ? s.minimum : -1000, max: typeof s.maximum === 'number' ? s.maximum : 1000 });
    case 'number':
      return fc.integer({ min: -1000, max: 1000 });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array': {
      const items = isObject(s.items) ? (s.items as JsonSchema) : {};
      const maxLength = Math.min(typeof s.maxItems === 'number' ? s.maxItems : 3, 3);
      return fc.array(valueArb(items, root), { minLength: Math.min(typeof s.minItems === 'number' ? s.minItems : 0, maxLength), maxLength });
    }
    case 'object': {
      const props = (isObject(s.properties) ? s.properties : {}) as Record<string, JsonSchema>;
      const required = Array.isArray(s.required) ? (s.required as string[]) : [];
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [k, v] of Object.entries(props)) model[k] = valueArb(v, root, k);
      return fc.record(model, { requiredKeys: required.filter((k) => k in props) }) as fc.Arbitrary<unknown>;
    }
    default:
      return fc.constant({});
  }
}

/** Arguments for tool `name`: absent, schema-valid, or broken (extra property, missing required, wrong type, out of range). */
export function argumentsArb(g: GenContext, name: string, mode: 'valid' | 'invalid' | 'any' = 'any'): fc.Arbitrary<{ present: boolean; value?: unknown }> {
  const tool = g.oracle.tool(name);
  if (!tool) return fc.oneof(fc.constant({ present: false }), fc.constant({ present: true, value: {} }), fc.constant({ present: true, value: { x: 1 } }));
  const schema = tool.inputSchema;
  const valid = valueArb(schema, schema) as fc.Arbitrary<Record<string, unknown>>;
  const props = Object.keys((schema.properties ?? {}) as object);
  const required = (schema.required ?? []) as string[];
  const wrongValue = (v: unknown): unknown => (typeof v === 'string' ? 12345 : typeof v === 'number' ? 'ten' : typeof v === 'boolean' ? 'yes' : Array.isArray(v) ? 'not-an-array' : isObject(v) ? 7 : 'x');
  const broken = fc.tuple(valid, fc.constantFrom('extra', 'missing', 'wrong-type', 'out-of-range'), fc.nat()).map(([v, how, n]) => {
    const out: Record<string, unknown> = { ...v };
    if (how === 'missing' && required.length > 0) delete out[required[n % required.length]!];
    else if (how === 'wrong-type' && props.length > 0) {
      const k = props[n % props.length]!;
      out[k] = wrongValue(out[k] ?? 'x');
    } else if (how === 'out-of-range' && out.limit !== undefined) out.limit = 10_000;
    else if (how === 'out-of-range' && 'max_rows' in out) out.max_rows = 0;
    else out.unexpected_argument = true;
    return { present: true, value: out };
  });
  const validArgs = fc.oneof(
    valid.map((v) => ({ present: true, value: v })),
    required.length === 0 ? fc.constant({ present: false }) : valid.map((v) => ({ present: true, value: v })),
  );
  if (mode === 'valid') return validArgs;
  if (mode === 'invalid') return broken;
  return fc.oneof(validArgs, broken);
}

// ---------------------------------------------------------------- messages

/** Options for `messageArb`: which methods, kinds, ids and params shapes to draw. */
export interface MessageOptions {
  methods?: fc.Arbitrary<string>;
  kind?: fc.Arbitrary<MessageDraft['kind']>;
  id?: fc.Arbitrary<unknown>;
  jsonrpc?: fc.Arbitrary<MessageDraft['jsonrpc']>;
  meta?: fc.Arbitrary<MetaMode>;
  metaVersion?: fc.Arbitrary<MetaVersion>;
  /** Tool names for tools/call. */
  toolNames?: fc.Arbitrary<string>;
  /** Argument validity for tools/call. */
  args?: 'valid' | 'invalid' | 'any';
  /** Allow a non-object params or a non-string method (shape noise). */
  shapeNoise?: boolean;
  /** The clientCapabilities declared in the envelope (default: mostly {}). */
  capabilities?: fc.Arbitrary<Record<string, unknown>>;
  response?: fc.Arbitrary<MessageDraft['response']>;
  /** Shape of initialize's params (default: complete, 1 draw in 11 another shape). */
  initParams?: fc.Arbitrary<InitParamsMode>;
  /** For tools/call: 1 draw in this many sends params.arguments that is not an object ([], null, a string, …); default never. */
  nonObjectArguments?: number;
}

/** params.arguments values that are not objects (rule TOOL-KNOWN: -32602 in-band, before AUTH). */
export const NON_OBJECT_ARGUMENTS: unknown[] = [[], null, 'arguments', 7, true, [{ source_id: 'demo' }]];

/** Generates one message: method-appropriate params with a `_meta` envelope mode, an id, a jsonrpc member. */
export function messageArb(g: GenContext, o: MessageOptions = {}): fc.Arbitrary<MessageDraft> {
  const P = g.spec.protocol;
  const d = dimensions(g);
  const tableMethods = P.methods.filter((m) => m.kind === 'request').map((m) => m.method);
  const methods = o.methods ?? fc.constantFrom(...tableMethods);
  const toolNames = o.toolNames ?? fc.constantFrom(...g.spec.tools.map((t) => t.name));
  const paramsFor = (method: string): fc.Arbitrary<Record<string, unknown> & { __initFromHeader?: boolean; __absentParams?: boolean }> => {
    if (method === 'tools/call') {
      const shaped = toolNames.chain((name) => argumentsArb(g, name, o.args ?? 'any').map((a) => (a.present ? { name, arguments: a.value } : { name })));
      if (!o.nonObjectArguments) return shaped;
      const raw = fc.tuple(toolNames, fc.constantFrom(...NON_OBJECT_ARGUMENTS)).map(([name, value]) => ({ name, arguments: value }));
      return fc.oneof({ arbitrary: shaped, weight: o.nonObjectArguments - 1 }, { arbitrary: raw, weight: 1 });
    }
    if (method === 'initialize') {
      return fc
        .tuple(
          fc.oneof(
            fc.constantFrom(...P.versions.handshake, '2024-11-05', '1999-01-01', ...P.versions.modern, 'garbage').map((v) => ({ protocolVersion: v as unknown })),
            fc.constant({ protocolVersion: '' as unknown, __initFromHeader: true }),
          ),
          o.initParams ?? weighted(d.initParams.valid, d.initParams.all, 10),
        )
        .map(([p, mode]) => {
          const out: Record<string, unknown> & { __initFromHeader?: boolean; __absentParams?: boolean } = { ...p, capabilities: {}, clientInfo: { name: 'interlock-conformance', version: '1.0.0' } };
          switch (mode) {
            case 'complete':
              break;
            case 'no-capabilities':
              delete out.capabilities;
              break;
            case 'no-clientInfo':
              delete out.clientInfo;
              break;
            case 'no-protocolVersion':
              delete out.protocolVersion;
              delete out.__initFromHeader;
              break;
            case 'capabilities-null':
              out.capabilities = null;
              break;
            case 'capabilities-array':
              out.capabilities = [];
              break;
            case 'clientInfo-string':
              out.clientInfo = 'interlock-conformance/1.0.0';
              break;
            case 'protocolVersion-number':
              out.protocolVersion = 20250618;
              delete out.__initFromHeader;
              break;
            case 'absent-params':
              return { __absentParams: true };
          }
          return out;
        });
    }
    if (method === 'notifications/cancelled') return fc.constant({ requestId: 1, reason: 'conformance' });
    if (method === 'resources/read') return fc.constant({ uri: 'file:///etc/hosts' });
    if (method === 'prompts/get') return fc.constant({ name: 'p' });
    if (method === 'logging/setLevel') return fc.constant({ level: 'info' });
    return fc.constant({});
  };
  const params = (method: string): fc.Arbitrary<MessageDraft['params']> =>
    fc
      .tuple(
        paramsFor(method),
        o.meta ?? weighted(d.meta.valid, d.meta.all, 10),
        o.metaVersion ?? weighted(d.metaVersion.valid, d.metaVersion.all, 10),
        o.capabilities ?? weighted(fc.constant({}), CAPABILITIES_ARB, 10),
      )
      .map(([fields, meta, metaVersion, capabilities]): MessageDraft['params'] => {
        const { __initFromHeader, __absentParams, ...rest } = fields;
        if (__absentParams) return { kind: 'absent' };
        return { kind: 'draft', draft: { meta, metaVersion, fields: rest, initVersionFromHeader: __initFromHeader === true, capabilities } };
      });
  const noisyParams = (method: string): fc.Arbitrary<MessageDraft['params']> =>
    o.shapeNoise
      ? fc.oneof(
          { arbitrary: params(method), weight: 4 },
          { arbitrary: fc.constant<MessageDraft['params']>({ kind: 'absent' }), weight: 1 },
          { arbitrary: fc.constantFrom<unknown>([], null, 'params', 7, [{ name: 'x' }]).map((value): MessageDraft['params'] => ({ kind: 'raw', value })), weight: 1 },
        )
      : fc.oneof({ arbitrary: params(method), weight: 12 }, { arbitrary: fc.constant<MessageDraft['params']>({ kind: 'absent' }), weight: 1 });
  const methodValue = o.shapeNoise ? fc.oneof({ arbitrary: methods as fc.Arbitrary<unknown>, weight: 6 }, { arbitrary: fc.constantFrom<unknown>(42, null, ['tools/list'], { m: 1 }, ''), weight: 1 }) : (methods as fc.Arbitrary<unknown>);
  return fc
    .record({
      kind: o.kind ?? fc.constant<MessageDraft['kind']>('request'),
      jsonrpc: o.jsonrpc ?? fc.constant<MessageDraft['jsonrpc']>({ present: true, value: '2.0' }),
      id: o.id ?? validIdArb,
      method: methodValue,
      response: o.response ?? fc.constantFrom<MessageDraft['response']>('result', 'error'),
    })
    .chain((m) => (typeof m.method === 'string' ? noisyParams(m.method) : fc.constant<MessageDraft['params']>({ kind: 'draft', draft: { meta: 'complete', metaVersion: { kind: 'header' }, fields: {} } })).map((p) => ({ ...m, params: p })));
}

// ---------------------------------------------------------------- drafts

/** Per-dimension overrides for `draftArb`; any dimension not given is valid with a small probability of noise. */
export type DraftOverrides = Partial<{ [K in keyof Draft]: fc.Arbitrary<Draft[K]> }> & {
  /** 1 in (noise + 1) draws of a non-overridden dimension is from its "all" generator (default 20; Infinity = never). */
  noise?: number;
};

/** Generates a whole request draft. */
export function draftArb(g: GenContext, over: DraftOverrides = {}): fc.Arbitrary<Draft> {
  const d = dimensions(g);
  const n = over.noise ?? 20;
  const pick = <T>(valid: fc.Arbitrary<T>, all: fc.Arbitrary<T>): fc.Arbitrary<T> => (Number.isFinite(n) ? weighted(valid, all, n) : valid);
  return fc.record<Draft>({
    httpMethod: over.httpMethod ?? pick(d.httpMethod.valid, d.httpMethod.all),
    host: over.host ?? pick(d.host.valid, d.host.all),
    origin: over.origin ?? pick(d.origin.valid, d.origin.all),
    contentType: over.contentType ?? pick(d.contentType.valid, d.contentType.all),
    accept: over.accept ?? pick(d.accept.valid, d.accept.all),
    mpv: over.mpv ?? d.mpv.all,
    mcpMethod: over.mcpMethod ?? pick(d.mcpMethod.valid, d.mcpMethod.all),
    mcpName: over.mcpName ?? pick(d.mcpName.valid, d.mcpName.all),
    auth: over.auth ?? d.auth.all,
    headerCase: over.headerCase ?? d.headerCase,
    extra: over.extra ?? pick(d.extra.none, d.extra.all),
    body: over.body ?? messageArb(g).map((message): BodyDraft => ({ kind: 'message', message })),
  });
}

/** Malformed JSON bodies. */
export const MALFORMED_JSON = ['', '{', '{"jsonrpc":"2.0",', 'not json', "{'jsonrpc':'2.0'}", '{"jsonrpc":"2.0","id":1,}', '[1,', '{"a":1} {"b":2}', 'NaN', '{"jsonrpc":"2.0","method":"ping","id":1', '\u0000'];

// ---------------------------------------------------------------- rendering

function caseName(name: string, c: HeaderCase, salt: number): string {
  switch (c) {
    case 'canonical':
      return name;
    case 'lower':
      return name.toLowerCase();
    case 'upper':
      return name.toUpperCase();
    case 'mixed':
      return [...name].map((ch, i) => ((i + salt) % 2 === 0 ? ch.toLowerCase() : ch.toUpperCase())).join('');
  }
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');

function materializeMeta(g: GenContext, p: ParamsDraft, mpv: string | null): unknown {
  const M = g.spec.protocol.meta;
  const version = p.metaVersion.kind === 'header' ? (mpv ?? g.spec.protocol.versions.modern[0]!) : p.metaVersion.value;
  const caps = p.capabilities ?? {};
  switch (p.meta) {
    case 'absent':
      return undefined;
    case 'complete':
      return { [M.protocolVersion]: version, [M.clientCapabilities]: caps };
    case 'complete+clientInfo':
      return { [M.protocolVersion]: version, [M.clientCapabilities]: caps, [M.clientInfo]: { name: 'interlock-conformance', version: '1.0.0' } };
    case 'no-protocolVersion':
      return { [M.clientCapabilities]: caps };
    case 'no-clientCapabilities':
      return { [M.protocolVersion]: version };
    case 'protocolVersion-number':
      return { [M.protocolVersion]: 20260728, [M.clientCapabilities]: caps };
    case 'clientCapabilities-string':
      return { [M.protocolVersion]: version, [M.clientCapabilities]: 'all' };
    case 'clientCapabilities-null':
      return { [M.protocolVersion]: version, [M.clientCapabilities]: null };
    case 'clientCapabilities-array':
      return { [M.protocolVersion]: version, [M.clientCapabilities]: [] };
    case 'meta-string':
      return 'meta';
    case 'meta-array':
      return [version];
    case 'meta-empty':
      return {};
  }
}

/** Turns a message draft into the JSON value that is sent. */
export function materializeMessage(g: GenContext, m: MessageDraft, mpv: string | null): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (m.jsonrpc.present) out.jsonrpc = m.jsonrpc.value;
  if (m.kind === 'response') {
    out.id = m.id;
    if (m.response === 'result' || m.response === 'both') out.result = {};
    if (m.response === 'error' || m.response === 'both') out.error = { code: -32601, message: 'Method not found' };
    return out;
  }
  if (m.kind === 'request') out.id = m.id;
  out.method = m.method;
  if (m.params.kind === 'raw') out.params = m.params.value;
  else if (m.params.kind === 'draft') {
    const p = m.params.draft;
    const params: Record<string, unknown> = { ...p.fields };
    if (p.initVersionFromHeader) params.protocolVersion = mpv ?? g.spec.protocol.versions.initializeFallback;
    const meta = materializeMeta(g, p, mpv);
    if (meta !== undefined) params._meta = meta;
    out.params = params;
  }
  return out;
}

/** The method and tool name a body claims (first batch item for batches), for the mirrored headers. */
function bodyClaims(g: GenContext, body: BodyDraft): { method: string; name: string } {
  if (body.kind === 'bom') return bodyClaims(g, body.inner);
  const first = body.kind === 'message' ? body.message : body.kind === 'batch' ? body.items[0] : undefined;
  const method = first && typeof first.method === 'string' ? first.method : 'tools/list';
  const fields = first && first.params.kind === 'draft' ? first.params.draft.fields : {};
  const name = typeof fields.name === 'string' ? fields.name : g.spec.tools[0]!.name;
  return { method, name };
}

/** The own origin `own` spelled as `variant` (see OriginVariant). */
export function ownOriginVariant(own: string, variant: OriginVariant): string {
  switch (variant) {
    case 'upper':
      return own.toUpperCase();
    case 'slash':
      return `${own}/`;
    case 'upper-slash':
      return `${own.toUpperCase()}/`;
    case 'double-slash':
      return `${own}//`;
    case 'path':
      return `${own}/mcp`;
  }
}

/** Renders a draft into the exact request to send. */
export function render(g: GenContext, d: Draft): WireRequest {
  const P = g.spec.protocol;
  const headers: Array<[string, string]> = [];
  let salt = 0;
  const put = (name: string, value: string) => headers.push([caseName(name, d.headerCase, salt++), value]);
  if (d.host.kind === 'value') put('Host', d.host.value);
  const hostValue = d.host.kind === 'value' ? d.host.value : g.url.host;
  if (d.origin.kind === 'own') put(P.headers.origin ?? 'Origin', `${g.url.protocol}//${hostValue}`);
  else if (d.origin.kind === 'own-variant') put(P.headers.origin ?? 'Origin', ownOriginVariant(`${g.url.protocol}//${hostValue}`, d.origin.variant));
  else if (d.origin.kind === 'value') put(P.headers.origin ?? 'Origin', d.origin.value);
  if (d.httpMethod !== 'GET' && d.httpMethod !== 'DELETE' && d.contentType !== null) put('Content-Type', d.contentType);
  if (d.accept !== null) put('Accept', d.accept);
  if (d.mpv !== null) put(P.headers.protocolVersion ?? 'MCP-Protocol-Version', d.mpv);
  const { method, name } = bodyClaims(g, d.body);
  const otherMethod = method === 'tools/list' ? 'prompts/list' : 'tools/list';
  switch (d.mcpMethod) {
    case 'match':
      put(P.headers.method ?? 'Mcp-Method', method);
      break;
    case 'mismatch':
      put(P.headers.method ?? 'Mcp-Method', otherMethod);
      break;
    case 'padded':
      put(P.headers.method ?? 'Mcp-Method', `  ${method}\t`);
      break;
    case 'upper':
      put(P.headers.method ?? 'Mcp-Method', method.toUpperCase());
      break;
    case 'absent':
      break;
  }
  const pre = P.headers.base64Prefix ?? '=?base64?';
  const suf = P.headers.base64Suffix ?? '?=';
  const nameHeader = P.headers.name ?? 'Mcp-Name';
  const isToolCall = method === 'tools/call';
  if (isToolCall || d.mcpName !== 'match') {
    switch (d.mcpName) {
      case 'match':
        put(nameHeader, name);
        break;
      case 'wrong':
        put(nameHeader, `${name}_other`);
        break;
      case 'padded':
        put(nameHeader, `   ${name} `);
        break;
      case 'b64':
        put(nameHeader, `${pre}${b64(name)}${suf}`);
        break;
      case 'b64-padded':
        put(nameHeader, `  ${pre}${b64(name)}${suf}  `);
        break;
      case 'b64-invalid':
        put(nameHeader, `${pre}SGVs!!!${suf}`);
        break;
      case 'b64-upper':
        put(nameHeader, `${pre.toUpperCase()}${b64(name)}${suf}`);
        break;
      case 'b64-wrong':
        put(nameHeader, `${pre}${b64(name + 'x')}${suf}`);
        break;
      case 'absent':
        break;
    }
  }
  const authHeader = P.headers.authorization ?? 'Authorization';
  if (d.auth === 'valid' && g.apiKey) put(authHeader, `Bearer ${g.apiKey}`);
  else if (d.auth === 'valid-lowercase-scheme' && g.apiKey) put(authHeader, `bearer ${g.apiKey}`);
  else if (d.auth === 'invalid') put(authHeader, 'Bearer ilk_conformance_not_a_valid_key_000000000000');
  else if (d.auth === 'other-scheme') put(authHeader, 'Basic Y29uZm9ybWFuY2U6bm90LWEta2V5');
  else if (d.auth === 'empty-bearer') put(authHeader, 'Bearer');
  for (const [k, v] of d.extra) put(k, v);
  const body = d.httpMethod === 'GET' || d.httpMethod === 'DELETE' ? undefined : renderBody(g, d.body, d.mpv);
  return { method: d.httpMethod, headers, body };
}

/** The body text of a draft body (undefined for none). */
function renderBody(g: GenContext, b: BodyDraft, mpv: string | null): string | undefined {
  switch (b.kind) {
    case 'message':
      return JSON.stringify(materializeMessage(g, b.message, mpv));
    case 'bom':
      return '\ufeff' + (renderBody(g, b.inner, mpv) ?? '');
    case 'batch':
      return JSON.stringify(b.items.map((m) => materializeMessage(g, m, mpv)));
    case 'json':
      return JSON.stringify(b.value);
    case 'raw':
      return b.text;
    case 'none':
      return undefined;
  }
}
