/**
 * The property list: one property per rule id, each generating requests aimed at that rule (the
 * dimension it governs is fully varied, the others are mostly valid). Every generated request is
 * judged against the oracle's full expectation, not only against its rule.
 */
import fc from 'fast-check';
import {
  dimensions,
  draftArb,
  messageArb,
  CAPABILITIES_ARB,
  FOREIGN_METHODS,
  MALFORMED_JSON,
  BOM_BODIES,
  UNKNOWN_TOOLS,
  validIdArb,
  invalidIdArb,
  boundaryIdArb,
  SAFE_EDGE_IDS,
  type BodyDraft,
  type Draft,
  type GenContext,
  type MessageDraft,
  type MetaVersion,
} from './arbitraries';

/** One property of the suite. */
export interface PropertyDef {
  /** The rule id the property is named after (checks[].id or a results/versions/… key of the spec). */
  rule: string;
  /** What the property varies, in one line. */
  title: string;
  /** The generator. */
  arb: (g: GenContext) => fc.Arbitrary<Draft>;
  /** True when the property cannot run without a valid agent API key. */
  needsApiKey?: boolean;
}

const message = (m: fc.Arbitrary<MessageDraft>): fc.Arbitrary<BodyDraft> => m.map((message) => ({ kind: 'message', message }));

/** Every property, in the order of the checks they target. */
export function properties(): PropertyDef[] {
  return [
    {
      rule: 'HOST',
      title: 'Host: URL host, loopback names with any port, foreign names, the URL host respelled',
      // The URL's own host in other letter cases is its own Host (RFC 9110 §4.2.3), to be served in every
      // profile (issue 30 item 4); drawn as often as each other kind of Host.
      arb: (g) =>
        draftArb(g, {
          host: fc.oneof(
            { arbitrary: dimensions(g).host.all, weight: 4 },
            fc.constantFrom(g.url.host.toUpperCase(), [...g.url.host].map((c, i) => (i % 2 === 0 ? c.toUpperCase() : c.toLowerCase())).join('')).map((value): Draft['host'] => ({ kind: 'value', value })),
          ),
        }),
    },
    {
      rule: 'ORIGIN',
      title: 'Origin: absent, own origin, foreign, null, other port or scheme',
      // Respellings of the own origin get extra weight: a case- or slash-sensitive comparison is the
      // usual mistake, and it shows only on them.
      arb: (g) => draftArb(g, { origin: fc.oneof({ arbitrary: dimensions(g).origin.all, weight: 2 }, { arbitrary: dimensions(g).origin.ownVariant, weight: 1 }), host: fc.oneof({ arbitrary: dimensions(g).host.valid, weight: 4 }, { arbitrary: dimensions(g).host.all, weight: 1 }) }),
    },
    {
      rule: 'HTTP-METHOD',
      title: 'HTTP method: POST, GET, DELETE, PUT, PATCH',
      arb: (g) => draftArb(g, { httpMethod: dimensions(g).httpMethod.all }),
    },
    {
      rule: 'CONTENT-TYPE',
      title: 'Content-Type: case, parameters, missing, wrong media types',
      arb: (g) => draftArb(g, { contentType: dimensions(g).contentType.all }),
    },
    {
      rule: 'ACCEPT',
      title: 'Accept: exact types, wildcards, q values (q=0), missing, wrong',
      arb: (g) => draftArb(g, { accept: dimensions(g).accept.all }),
    },
    {
      rule: 'JSON',
      title: 'malformed JSON bodies among valid ones; bodies behind a UTF-8 byte order mark (ignored), or two',
      arb: (g) => {
        const malformed = fc.constantFrom(...MALFORMED_JSON).map((text): BodyDraft => ({ kind: 'raw', text }));
        const valid = message(messageArb(g, { kind: fc.constantFrom('request', 'request', 'request', 'notification') }));
        return draftArb(g, {
          body: fc.oneof(
            { arbitrary: malformed, weight: 2 },
            { arbitrary: valid, weight: 1 },
            // One leading byte order mark is ignored (RFC 8259 §8.1): the rest decides.
            { arbitrary: valid.map((inner): BodyDraft => ({ kind: 'bom', inner })), weight: 2 },
            { arbitrary: fc.constantFrom(...BOM_BODIES).map((text): BodyDraft => ({ kind: 'raw', text })), weight: 1 },
            { arbitrary: malformed.map((inner): BodyDraft => ({ kind: 'bom', inner })), weight: 1 },
            { arbitrary: valid.map((inner): BodyDraft => ({ kind: 'bom', inner: { kind: 'bom', inner } })), weight: 1 },
          ),
        });
      },
    },
    {
      rule: 'NO-BATCH',
      title: 'batches: empty, of requests, of notifications, of responses, mixed; every dialect',
      arb: (g) =>
        draftArb(g, {
          body: fc.oneof(
            fc.constant<BodyDraft>({ kind: 'batch', items: [] }),
            fc.array(messageArb(g, { kind: fc.constantFrom('request', 'notification', 'response') }), { minLength: 1, maxLength: 3 }).map((items): BodyDraft => ({ kind: 'batch', items })),
            fc.array(messageArb(g, { kind: fc.constant('notification'), methods: fc.constantFrom('notifications/initialized', 'notifications/cancelled') }), { minLength: 1, maxLength: 2 }).map((items): BodyDraft => ({ kind: 'batch', items })),
          ),
        }),
    },
    {
      rule: 'JSONRPC-SHAPE',
      title: 'ids (null, fractions, booleans, objects, arrays, integers on both sides of 2^53-1), jsonrpc member, method (incl. "") and params types, non-object JSON',
      arb: (g) =>
        fc.oneof(
          // Safe integer ids beyond 32 bits on otherwise valid requests (a supported version, a named method), so
          // that every seed sends several whose answer must echo the id (issue 30 item 4: a server refusing
          // them is found by this property on its own, not only when the other draws happen to reach it).
          {
            arbitrary: draftArb(g, {
              mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake),
              body: message(messageArb(g, { kind: fc.constant('request'), id: fc.constantFrom(...SAFE_EDGE_IDS), methods: fc.constantFrom(...g.spec.protocol.methods.filter((m) => m.kind === 'request').map((m) => m.method)) })),
            }),
            weight: 1,
          },
          {
            weight: 3,
            arbitrary: draftArb(g, {
              body: fc.oneof(
                // Settled edges: safe integers beyond 32 bits are echoed, integers beyond 2^53-1 are refused with id
                // null, an empty method is -32600 (requests echo their id).
                {
                  arbitrary: message(
                    messageArb(g, {
                      kind: fc.constantFrom('request', 'request', 'notification', 'response'),
                      id: fc.oneof({ arbitrary: boundaryIdArb, weight: 3 }, { arbitrary: validIdArb, weight: 1 }),
                      methods: fc.oneof(fc.constant(''), fc.constantFrom(...g.spec.protocol.methods.filter((m) => m.kind === 'request').map((m) => m.method))),
                    }),
                  ),
                  weight: 3,
                },
                message(
                  messageArb(g, {
                    kind: fc.constantFrom('request', 'notification', 'response'),
                    id: fc.oneof(validIdArb, invalidIdArb),
                    jsonrpc: fc.constantFrom<MessageDraft['jsonrpc']>({ present: true, value: '2.0' }, { present: false }, { present: true, value: '1.0' }, { present: true, value: 2 }, { present: true, value: null }),
                    shapeNoise: true,
                    response: fc.constantFrom('result', 'error', 'both', 'neither'),
                  }),
                ),
                fc.constantFrom<unknown>(42, 'tools/list', null, true, { foo: 1 }, {}).map((value): BodyDraft => ({ kind: 'json', value })),
              ),
            }),
          },
        ),
    },
    {
      rule: 'VERSION-HEADER',
      title: 'MCP-Protocol-Version: absent, handshake versions, modern, unknown values; initialize exception; with and without _meta',
      arb: (g) =>
        draftArb(g, {
          mpv: dimensions(g).mpv.all,
          body: message(
            messageArb(g, {
              kind: fc.constantFrom('request', 'request', 'notification', 'response'),
              methods: fc.constantFrom('initialize', 'initialize', 'tools/list', 'server/discover', 'ping', 'notifications/cancelled'),
              meta: dimensions(g).meta.all,
              metaVersion: dimensions(g).metaVersion.all,
            }),
          ),
        }),
    },
    {
      rule: 'POSTED-RESPONSE',
      title: 'posted JSON-RPC responses in every dialect',
      arb: (g) => draftArb(g, { mpv: dimensions(g).mpv.all, body: message(messageArb(g, { kind: fc.constant('response') })) }),
    },
    {
      rule: 'ENVELOPE',
      title: 'modern _meta: present, missing, partial, wrong types',
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof({ arbitrary: dimensions(g).mpv.modern, weight: 5 }, { arbitrary: dimensions(g).mpv.unknown, weight: 1 }),
          body: message(messageArb(g, { methods: modernMethods(g), meta: dimensions(g).meta.all })),
        }),
    },
    {
      rule: 'VERSION-MATCH',
      title: 'MCP-Protocol-Version against _meta protocolVersion (modern and unknown headers)',
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof({ arbitrary: dimensions(g).mpv.modern, weight: 3 }, { arbitrary: dimensions(g).mpv.unknown, weight: 1 }),
          body: message(
            messageArb(g, {
              methods: modernMethods(g),
              // Matching, unsupported and other supported versions in _meta, in about equal parts.
              metaVersion: fc.oneof(
                { arbitrary: dimensions(g).metaVersion.valid, weight: 1 },
                { arbitrary: fc.constantFrom('v999.0.0', '2099-01-01').map((value): MetaVersion => ({ kind: 'literal', value })), weight: 1 },
                { arbitrary: fc.constantFrom(...g.spec.protocol.versions.supported).map((value): MetaVersion => ({ kind: 'literal', value })), weight: 1 },
              ),
            }),
          ),
        }),
    },
    {
      rule: 'MCP-METHOD',
      title: 'Mcp-Method: match, absent, mismatch, padded, upper-case value; header-name casing',
      arb: (g) => draftArb(g, { mpv: dimensions(g).mpv.modern, mcpMethod: dimensions(g).mcpMethod.all, body: message(messageArb(g, { methods: modernMethods(g) })) }),
    },
    {
      rule: 'MCP-NAME',
      title: 'Mcp-Name on tools/call: match, absent, wrong, padded, =?base64?…?= valid/invalid/upper-case marker',
      arb: (g) =>
        draftArb(g, {
          mpv: dimensions(g).mpv.modern,
          mcpName: dimensions(g).mcpName.all,
          body: message(messageArb(g, { methods: fc.constant('tools/call'), toolNames: toolNames(g) })),
        }),
    },
    {
      rule: 'METHOD-KNOWN',
      title: 'modern dialect: table methods, removed methods (initialize, ping, logging/setLevel, resources/*, prompts/*), unknown',
      arb: (g) => draftArb(g, { mpv: dimensions(g).mpv.modern, body: message(messageArb(g, { methods: allMethods(g) })) }),
    },
    {
      rule: 'METHOD-KNOWN-HANDSHAKE',
      title: 'handshake dialect: table methods and unknown methods answered in-band',
      arb: (g) => draftArb(g, { mpv: dimensions(g).mpv.handshake, body: message(messageArb(g, { methods: allMethods(g) })) }),
    },
    {
      rule: 'TOOL-KNOWN',
      title: 'tools/call with catalogue and unknown tool names, params.arguments an object or not (-32602 before AUTH), both dialects',
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake),
          body: message(messageArb(g, { methods: fc.constant('tools/call'), toolNames: fc.oneof(fc.constantFrom(...UNKNOWN_TOOLS), toolNames(g)), nonObjectArguments: 3 })),
        }),
    },
    {
      rule: 'CLIENT-CAPABILITY',
      title: 'modern tools/call with varied _meta clientCapabilities: refused -32021 only for a tool that declares a capability the request lacks',
      arb: (g) =>
        draftArb(g, {
          mpv: dimensions(g).mpv.modern,
          body: message(messageArb(g, { methods: fc.constant('tools/call'), toolNames: toolNames(g), meta: dimensions(g).meta.valid, capabilities: CAPABILITIES_ARB })),
        }),
    },
    {
      rule: 'AUTH',
      title: 'governed tools without a key, with another scheme or an empty Bearer token (missing_api_key), an invalid key, a valid key (when given); both dialects',
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake),
          auth: dimensions(g).auth.all,
          body: message(messageArb(g, { methods: fc.constant('tools/call'), toolNames: toolNames(g), nonObjectArguments: 8 })),
        }),
    },
    {
      rule: 'INITIALIZE-PARAMS',
      title: 'initialize with params complete, absent, or missing or mistyping protocolVersion, capabilities or clientInfo (-32602 in-band)',
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof({ arbitrary: dimensions(g).mpv.handshake, weight: 3 }, { arbitrary: dimensions(g).mpv.unknown, weight: 1 }),
          body: message(
            messageArb(g, {
              methods: fc.constant('initialize'),
              meta: fc.oneof({ arbitrary: fc.constant('absent' as const), weight: 4 }, { arbitrary: dimensions(g).meta.all, weight: 1 }),
              initParams: fc.oneof({ arbitrary: dimensions(g).initParams.valid, weight: 1 }, { arbitrary: dimensions(g).initParams.all, weight: 2 }),
            }),
          ),
        }),
    },
    {
      rule: 'TOOL-ARGUMENTS',
      title: 'valid key; arguments valid or broken against each input schema; every version',
      needsApiKey: true,
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake),
          auth: fc.constant('valid'),
          body: message(messageArb(g, { methods: fc.constant('tools/call'), toolNames: toolNames(g), args: 'invalid' })).chain((b) =>
            fc.oneof({ arbitrary: fc.constant(b), weight: 3 }, { arbitrary: message(messageArb(g, { methods: fc.constant('tools/call'), toolNames: probeNames(g), args: 'any' })), weight: 1 }),
          ),
        }),
    },
    {
      rule: 'results.complete',
      title: 'server/discover, tools/list and tools/call results carry resultType complete and _meta serverInfo',
      arb: (g) =>
        draftArb(g, {
          noise: Infinity,
          mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake),
          body: message(messageArb(g, { methods: fc.constantFrom('server/discover', 'tools/list', 'tools/call'), toolNames: g.apiKey ? probeNames(g) : toolNames(g) })),
        }),
    },
    {
      rule: 'results.plain',
      title: 'initialize (every requested version) and ping answer their plain shapes',
      arb: (g) =>
        draftArb(g, {
          noise: Infinity,
          mpv: fc.oneof(dimensions(g).mpv.handshake, dimensions(g).mpv.unknown),
          body: message(messageArb(g, { methods: fc.constantFrom('initialize', 'ping'), meta: fc.constant('absent') })),
        }),
    },
    {
      rule: 'results.cacheable',
      title: 'tools/list and server/discover carry ttlMs and cacheScope',
      arb: (g) => draftArb(g, { noise: Infinity, mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake), body: message(messageArb(g, { methods: fc.constantFrom('tools/list', 'server/discover') })) }),
    },
    {
      rule: 'results.noNextCursorNull',
      title: 'tools/list never carries nextCursor: null',
      arb: (g) => draftArb(g, { noise: Infinity, mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake), body: message(messageArb(g, { methods: fc.constant('tools/list') })) }),
    },
    {
      rule: 'results.notification',
      title: 'notifications (known and unknown) and handshake posted responses are answered 202 with no body',
      arb: (g) =>
        draftArb(g, {
          mpv: fc.oneof(dimensions(g).mpv.modern, dimensions(g).mpv.handshake),
          body: fc.oneof(
            message(messageArb(g, { kind: fc.constant('notification'), methods: fc.constantFrom('notifications/initialized', 'notifications/cancelled', 'notifications/progress', 'tools/list', 'foo/bar') })),
            message(messageArb(g, { kind: fc.constant('response') })),
          ),
        }),
    },
    {
      rule: 'results.noSession',
      title: 'Mcp-Session-Id and Last-Event-ID on requests are ignored; no session id is issued',
      arb: (g) =>
        draftArb(g, {
          extra: dimensions(g).extra.all,
          mpv: fc.oneof({ arbitrary: dimensions(g).mpv.handshake, weight: 3 }, { arbitrary: dimensions(g).mpv.modern, weight: 1 }),
          // initialize is where a session id would be minted, so it is drawn most often.
          body: message(messageArb(g, { methods: fc.oneof({ arbitrary: fc.constant('initialize'), weight: 3 }, { arbitrary: allMethods(g), weight: 2 }) })),
        }),
    },
  ];
}

function modernMethods(g: GenContext): fc.Arbitrary<string> {
  return fc.constantFrom(...g.spec.protocol.methods.filter((m) => m.kind === 'request' && m.dialects.includes('modern')).map((m) => m.method));
}
function allMethods(g: GenContext): fc.Arbitrary<string> {
  return fc.oneof(fc.constantFrom(...g.spec.protocol.methods.filter((m) => m.kind === 'request').map((m) => m.method)), fc.constantFrom(...FOREIGN_METHODS));
}
function toolNames(g: GenContext): fc.Arbitrary<string> {
  return fc.constantFrom(...g.spec.tools.map((t) => t.name));
}
/** Names of the probe tool (and its aliases); every catalogue name when the target has no probe tool. */
function probeNames(g: GenContext): fc.Arbitrary<string> {
  const names = g.spec.tools.filter((t) => t.canonical === g.spec.probeTool).map((t) => t.name);
  return names.length > 0 ? fc.constantFrom(...names) : toolNames(g);
}
