/**
 * Result envelopes per dialect (contract: "Every successful result has resultType: complete and
 * identifies InterLock in _meta.io.modelcontextprotocol/serverInfo, with two deliberate exceptions:
 * initialize and ping"; decisions 4, 5, 9, 17).
 */
import protocol from '../../spec/protocol-v1.json';

/** InterLock's Implementation object for serverInfo. `version` is the protocol revision the shape follows. */
export function serverInfo(forVersion?: string): Record<string, string> {
  const info: Record<string, string> = { name: protocol.serverInfo.name, version: protocol.serverInfo.version };
  if (!forVersion || forVersion >= '2025-06-18') info.title = protocol.serverInfo.title;
  return info;
}

const SERVER_INFO_KEY = protocol.meta.serverInfo;
/** serverInfo() of the current revision, made once and shared by every complete envelope (never edited: frozen). */
const SERVER_INFO: Readonly<Record<string, string>> = Object.freeze(serverInfo());
/** The `_meta` of a result that had none: made once (issue 28 item 3: not two objects and a computed key per answer). */
const COMPLETE_META: Readonly<Record<string, unknown>> = Object.freeze({ [SERVER_INFO_KEY]: SERVER_INFO });

/**
 * Wraps a result in the complete envelope: resultType "complete" and _meta serverInfo (merged into
 * any _meta). The serverInfo object, and the `_meta` of a result without one, are shared frozen
 * objects: an envelope is serialised, never edited.
 */
export function complete(result: Record<string, unknown>): Record<string, unknown> {
  const m = result._meta;
  const meta = m && typeof m === 'object' ? { ...(m as Record<string, unknown>), [SERVER_INFO_KEY]: SERVER_INFO } : COMPLETE_META;
  return { ...result, resultType: 'complete', _meta: meta };
}

/**
 * complete({content, structuredContent?, isError?}) for a tool result without `_meta`, built as one
 * object literal per shape instead of a result and its spread copy (issue 28 item 3, h28e: one
 * object per answer, not two). Keys in complete()'s order: content, structuredContent (when not
 * undefined), isError (when true), resultType, _meta (the shared frozen COMPLETE_META). Same
 * serialisation as complete() of that result (test/unit/protocol/complete-result.test.ts).
 */
export function completeResult(content: unknown, structuredContent: unknown, isError: boolean | undefined): Record<string, unknown> {
  if (structuredContent === undefined) return isError ? { content, isError: true, resultType: 'complete', _meta: COMPLETE_META } : { content, resultType: 'complete', _meta: COMPLETE_META };
  return isError ? { content, structuredContent, isError: true, resultType: 'complete', _meta: COMPLETE_META } : { content, structuredContent, resultType: 'complete', _meta: COMPLETE_META };
}

/** Adds ttlMs and cacheScope for a cacheable method (tools/list, server/discover) from spec/protocol-v1.json. */
export function cacheable(method: 'tools/list' | 'server/discover', result: Record<string, unknown>): Record<string, unknown> {
  const c = protocol.caching[method];
  return { ...result, ttlMs: c.ttlMs, cacheScope: c.cacheScope };
}

/** The server/discover result (both dialects). */
export function discoverResult(instructions?: string): Record<string, unknown> {
  const r: Record<string, unknown> = { supportedVersions: [...protocol.versions.supported], capabilities: structuredClone(protocol.capabilities) };
  if (instructions) r.instructions = instructions;
  return complete(cacheable('server/discover', r));
}

/** Negotiates initialize: the requested version when it is a handshake version, else the fallback (decision 4). */
export function negotiateVersion(requested: unknown): string {
  return typeof requested === 'string' && protocol.versions.handshake.includes(requested) ? requested : protocol.versions.initializeFallback;
}

/** The plain initialize result: no resultType, no InterLock _meta (decision 4). */
export function initializeResult(requested: unknown, instructions?: string): Record<string, unknown> {
  const version = negotiateVersion(requested);
  const r: Record<string, unknown> = { protocolVersion: version, capabilities: structuredClone(protocol.capabilities), serverInfo: serverInfo(version) };
  if (instructions) r.instructions = instructions;
  return r;
}

const toolsLists = new WeakMap<object, Record<string, unknown>>();
const frozenJson = new WeakMap<object, string>();

/**
 * The tools/list result for a tool registry (complete envelope, ttlMs and cacheScope): built and
 * serialised once per registry, since the catalogue does not change while the process runs
 * (issue 13: tools/list answers without rebuilding or re-serialising eleven input schemas).
 */
export function toolsListResult(tools: { list(): Array<Record<string, unknown>> }): Record<string, unknown> {
  let r = toolsLists.get(tools);
  if (!r) {
    r = complete(cacheable('tools/list', { tools: tools.list() }));
    toolsLists.set(tools, r);
    frozenJson.set(r, JSON.stringify(r));
  }
  return r;
}

/**
 * Records `json`, the exact serialisation of `result` (what jsonText(result) returns), so a response
 * carrying this very object is written from it (frozenResultJson, frozenResultTail). `result` must
 * never be edited afterwards. Used for a cached read's stored answer (tool-results.ts, issue 28).
 */
export function freezeResultJson(result: object, json: string): void {
  frozenJson.set(result, json);
}

/** The serialisation made once for a result from toolsListResult() or freezeResultJson(), or undefined. */
export function frozenResultJson(result: object): string | undefined {
  return frozenJson.get(result);
}

const frozenTails = new WeakMap<object, Buffer>();

/**
 * The UTF-8 bytes of `,"result":<frozen JSON>}` for a result from toolsListResult() (made once per
 * result), or undefined: a response `{"jsonrpc":"2.0","id":…` followed by these bytes is the whole
 * answer, so tools/list is written from precomputed bytes (issue 13).
 */
export function frozenResultTail(result: object): Buffer | undefined {
  let tail = frozenTails.get(result);
  if (!tail) {
    const json = frozenJson.get(result);
    if (json === undefined) return undefined;
    tail = Buffer.from(`,"result":${json}}`, 'utf8');
    frozenTails.set(result, tail);
  }
  return tail;
}
