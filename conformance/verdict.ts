/**
 * Compares an actual HTTP response with the oracle's expectation and lists every violation, each named
 * by the rule id it breaks (a `checks[].id` of protocol-v1.json, or a results/versions/capabilities/tools
 * key of the spec files).
 */
import type { WireResponse } from './http';
import { isObject, type Expectation, type ResultExpectation } from './oracle';
import type { Spec } from './spec';

/** One broken rule in one response. */
export interface Violation {
  rule: string;
  message: string;
  /**
   * True when the answer contradicts the expected outcome itself (status, error code, id, result
   * instead of error…), as opposed to a cross-cutting shape rule (`results.*`, `tools`, `capabilities`,
   * `versions.*`). run.ts attributes outcome violations to the rule the request was aimed at.
   */
  outcome?: true;
  /** MCP mode: not a failure but a warning (the answer breaks the contract's choice, no MCP or RFC MUST). */
  warning?: true;
}

/** The JSON-RPC message carried by a response body, plus how it was framed. */
export interface ParsedBody {
  framing: 'json' | 'sse' | 'none';
  message?: unknown;
  problem?: string;
}

/** Splits a text/event-stream body into events ({event, data, id}); comment lines are dropped. */
export function parseSse(text: string): Array<{ event?: string; data: string; id?: string }> {
  const events: Array<{ event?: string; data: string; id?: string }> = [];
  for (const block of text.replace(/\r\n?/g, '\n').split(/\n\n+/)) {
    if (block.trim() === '') continue;
    let event: string | undefined;
    let id: string | undefined;
    const data: string[] = [];
    let sawField = false;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      sawField = true;
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') id = value;
    }
    if (sawField) events.push({ event, data: data.join('\n'), id });
  }
  return events;
}

/** True when `res` is a batch's answer: a JSON array, or an event stream whose every data event is a JSON-RPC object. */
function batchAnswer(res: WireResponse): boolean {
  const ct = (res.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  try {
    if (ct === 'application/json') return Array.isArray(JSON.parse(res.body));
    if (ct !== 'text/event-stream') return false;
    const events = parseSse(res.body).filter((e) => e.data !== '');
    return events.length > 0 && events.every((e) => isObject(JSON.parse(e.data)));
  } catch {
    return false;
  }
}

/** Reads the JSON-RPC message out of a response (application/json, or one text/event-stream message event). */
export function parseBody(res: WireResponse): ParsedBody {
  const ct = (res.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (ct === 'text/event-stream') {
    const events = parseSse(res.body).filter((e) => e.data !== '');
    if (events.length !== 1) return { framing: 'sse', problem: `the event stream carries ${events.length} data events, not exactly one` };
    try {
      return { framing: 'sse', message: JSON.parse(events[0]!.data) };
    } catch {
      return { framing: 'sse', problem: 'the event data is not JSON' };
    }
  }
  if (ct !== 'application/json') return { framing: 'none', problem: `Content-Type is ${res.headers['content-type'] === undefined ? 'absent' : `"${res.headers['content-type']}"`}, not application/json` };
  try {
    return { framing: 'json', message: JSON.parse(res.body) };
  } catch {
    return { framing: 'json', problem: 'the body is not valid JSON' };
  }
}

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(canon(a)) === JSON.stringify(canon(b));
function canon(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canon);
  if (isObject(v)) return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
  return v;
}
const show = (v: unknown): string => (v === undefined ? 'absent' : JSON.stringify(v));

/** RFC 9110 §15.5.6: "The origin server MUST generate an Allow header field in a 405 response"; it must list `method`. */
function allowListing(method: string, res: WireResponse, fail: (message: string) => void): void {
  const allow = res.headers['allow'];
  if (allow === undefined) fail('a 405 without an Allow header (RFC 9110 §15.5.6: the origin server MUST generate one)');
  else if (!allow.split(',').map((m) => m.trim().toUpperCase()).includes(method)) fail(`Allow: ${allow} does not list ${method}`);
}

/** Lists the violations of `res` against `exp` (alternatives are not consulted here; see `judge`). */
export function violations(spec: Spec, exp: Expectation, res: WireResponse): Violation[] {
  const out: Violation[] = [];
  const add = (rule: string, message: string) => out.push({ rule, message });
  const fail = (message: string) => out.push({ rule: exp.rule, message, outcome: true });
  if (res.status === 0) {
    fail(`no HTTP response (${res.error ?? 'connection failed'})`);
    return out;
  }
  if (res.headers['mcp-session-id'] !== undefined) {
    const message = `the response issues Mcp-Session-Id "${res.headers['mcp-session-id']}"`;
    // A handshake-era server MAY assign a session id at initialization (MCP Transports, Session Management).
    if (exp.sessionMay) out.push({ rule: 'results.noSession', message: `${message} (a handshake-era server MAY assign a session; the stateless contract does not)`, warning: true });
    else add('results.noSession', message);
  }

  if (exp.envelopeOk && res.status === 400 && !(exp.http === 400 && (exp.code === -32602 || exp.code === -32020))) {
    const p = parseBody(res);
    const e = isObject(p.message) && isObject(p.message.error) ? p.message.error : undefined;
    if (e && e.code === -32020 && exp.headersOwner && exp.code !== -32020) {
      out.push({ rule: exp.headersOwner, message: `headers that match the body were refused 400 -32020 (${show(e.message)}); Mcp-Name is compared after Base64 decoding and trimming` });
      return out;
    }
    if (e && e.code === -32602) {
      out.push({ rule: 'ENVELOPE', message: `a request with a complete 2026-07-28 envelope was refused 400 -32602 as malformed (${show(e.message)}); 2026-07-28 _meta requires only protocolVersion and clientCapabilities` });
      return out;
    }
  }
  if (exp.refusalOwner && (res.status >= 400 || /"error"\s*:/.test(res.body))) {
    const p = parseBody(res);
    const e = isObject(p.message) && isObject(p.message.error) ? p.message.error : undefined;
    if (res.status >= 400 || e) {
      out.push({ rule: exp.refusalOwner, message: `a complete initialize was refused: HTTP ${res.status}${e ? `, error ${show(e.code)} (${show(e.message)})` : ''}; expected ${exp.result?.kind === 'initialize' ? `a result with protocolVersion ${exp.result.protocolVersion}` : 'a result'}` });
      return out;
    }
  }
  if (exp.body === 'unspecified') {
    // The spec names no outcome; only the invariants of any answer to a request are checked: not 202 (a
    // request is never accepted without an answer), not a server error, and an HTTP 200 answer echoes the id.
    if (res.status === 202 || res.status >= 500) add('JSONRPC-SHAPE', `a request was answered HTTP ${res.status}`);
    if (res.status === 200) {
      // A batch's answer: a JSON array, or (2025-03-26) an event stream carrying one response per event.
      if (exp.batch && batchAnswer(res)) return out;
      const p = parseBody(res);
      if (p.problem || !isObject(p.message)) add('JSONRPC-SHAPE', p.problem ?? 'the body is not a JSON-RPC object');
      else if (p.message.id !== exp.id) add('JSONRPC-SHAPE', `id ${show(p.message.id)} does not echo ${show(exp.id)}`);
    }
    return out;
  }
  if (exp.result?.kind === 'tool-any') return [...out, ...toolAny(spec, exp, res)];
  if (exp.body === 'any') {
    if (res.status !== exp.http && !(exp.anyClientError && res.status >= 400 && res.status < 500) && !(exp.anySuccess && res.status >= 200 && res.status < 300)) {
      fail(`expected HTTP ${exp.anyClientError ? '4xx' : exp.anySuccess ? '2xx' : exp.http}, got ${res.status}`);
    }
    if (exp.headers?.allowListing && res.status === 405) allowListing(exp.headers.allowListing, res, fail);
    return out;
  }

  if (res.status !== exp.http && !exp.anyHttp) fail(`expected HTTP ${exp.http}, got ${res.status}`);
  if (exp.headers?.allowListing) allowListing(exp.headers.allowListing, res, fail);
  if (exp.headers?.allow) {
    const allow = (res.headers['allow'] ?? '').split(',').map((s) => s.trim().toUpperCase()).filter(Boolean).sort();
    if (!sameJson(allow, [...exp.headers.allow].sort())) fail(`expected Allow: ${exp.headers.allow.join(', ')}, got ${show(res.headers['allow'])}`);
  }
  if (exp.headers?.wwwAuthenticate) {
    const w = res.headers['www-authenticate'];
    if (w === undefined || !w.trim().toLowerCase().startsWith(exp.headers.wwwAuthenticate.toLowerCase())) fail(`expected WWW-Authenticate: ${exp.headers.wwwAuthenticate}, got ${show(w)}`);
  }
  if (exp.body === 'empty') {
    if (res.body !== '') fail(`expected an empty body, got ${res.body.length} bytes`);
    return out;
  }
  const parsed = parseBody(res);
  if (parsed.problem) {
    fail(parsed.problem);
    return out;
  }
  if (parsed.framing === 'sse') {
    if (!exp.mayStream) add('results.toolCallStream', 'only tools/call may be answered with text/event-stream');
    for (const e of parseSse(res.body)) if (e.id !== undefined) add('results.toolCallStream', `the event stream carries an event id ("${e.id}")`);
    for (const e of parseSse(res.body)) if (e.data !== '' && e.event !== undefined && e.event !== 'message') add('results.toolCallStream', `event type "${e.event}", not message`);
    if ((res.headers['x-accel-buffering'] ?? '').toLowerCase() !== 'no') add('results.toolCallStream', 'the event stream lacks X-Accel-Buffering: no');
  }
  const m = parsed.message;
  if (!isObject(m)) {
    fail('the body is not a JSON-RPC object');
    return out;
  }
  if (m.jsonrpc !== '2.0') fail(`jsonrpc is ${show(m.jsonrpc)}`);
  if ('result' in m && 'error' in m) fail('the response carries both result and error');
  if (!('id' in m)) fail(`the response has no id (expected ${show(exp.id)})`);
  else if (m.id !== exp.id) fail(`id ${show(m.id)} does not echo ${show(exp.id)}`);

  if (exp.body === 'error') {
    if (!isObject(m.error)) {
      fail(`expected a JSON-RPC error ${exp.code}, got ${'result' in m ? 'a result' : 'no error object'}`);
      return out;
    }
    const e = m.error;
    if (exp.code !== undefined && e.code !== exp.code) fail(`expected error code ${exp.code}, got ${show(e.code)}`);
    if (typeof e.message !== 'string') fail('error.message is not a string');
    const d = exp.errorData;
    if (d?.supported || d?.requested !== undefined) {
      const data = isObject(e.data) ? e.data : {};
      if (d.supported && !sameJson(data.supported, d.supported)) fail(`error.data.supported is ${show(data.supported)}, expected ${show(d.supported)}`);
      if (d.requested !== undefined && data.requested !== d.requested) fail(`error.data.requested is ${show(data.requested)}, expected ${show(d.requested)}`);
    }
    if (d?.requiredCapabilities) {
      const data = isObject(e.data) ? e.data : {};
      if (!sameJson(data.requiredCapabilities, d.requiredCapabilities)) fail(`error.data.requiredCapabilities is ${show(data.requiredCapabilities)}, expected ${show(d.requiredCapabilities)}`);
    }
    if (d?.refusal) {
      const data = isObject(e.data) ? e.data : {};
      if (data.status !== d.refusal.status || data.code !== d.refusal.code || typeof data.message !== 'string') {
        fail(`error.data should be {status: "${d.refusal.status}", code: "${d.refusal.code}", message}, got ${show(e.data)}`);
      }
    }
    return out;
  }
  // Result expected.
  if (!('result' in m)) {
    fail(`expected a result, got error ${show(isObject(m.error) ? m.error.code : m.error)}`);
    return out;
  }
  resultChecks(spec, exp, exp.result!, m.result, add, fail);
  return out;
}

function completeEnvelope(spec: Spec, r: Record<string, unknown>, add: (rule: string, message: string) => void): void {
  if (r.resultType !== 'complete') add('results.complete', `resultType is ${show(r.resultType)}, expected "complete"`);
  const info = isObject(r._meta) ? r._meta[spec.protocol.meta.serverInfo] : undefined;
  if (!isObject(info) || typeof info.name !== 'string' || typeof info.version !== 'string') {
    add('results.complete', `_meta["${spec.protocol.meta.serverInfo}"] is ${show(info)}, expected {name, version}`);
  }
}

function cacheable(r: Record<string, unknown>, add: (rule: string, message: string) => void): void {
  if (typeof r.ttlMs !== 'number' || !Number.isInteger(r.ttlMs) || r.ttlMs < 0) add('results.cacheable', `ttlMs is ${show(r.ttlMs)}, expected an integer >= 0`);
  if (r.cacheScope !== 'public' && r.cacheScope !== 'private') add('results.cacheable', `cacheScope is ${show(r.cacheScope)}, expected "public" or "private"`);
}

function toolContent(r: Record<string, unknown>, fail: (message: string) => void): void {
  if (!Array.isArray(r.content) || r.content.length === 0 || !r.content.every((c) => isObject(c) && typeof c.type === 'string')) {
    fail(`content is ${show(r.content)}, expected a non-empty array of content items`);
  }
}

function hasNull(node: unknown, path: string): string | undefined {
  if (node === null) return path;
  if (Array.isArray(node)) {
    for (let i = 0; i < node.length; i++) {
      const p = hasNull(node[i], `${path}[${i}]`);
      if (p) return p;
    }
  } else if (isObject(node)) {
    for (const [k, v] of Object.entries(node)) {
      if (k === 'const' || k === 'default' || k === 'enum' || k === 'examples') continue;
      const p = hasNull(v, `${path}.${k}`);
      if (p) return p;
    }
  }
  return undefined;
}

function resultChecks(spec: Spec, exp: Expectation, want: ResultExpectation, result: unknown, add: (rule: string, message: string) => void, fail: (message: string) => void): void {
  if (!isObject(result)) {
    fail(`result is ${show(result)}, not an object`);
    return;
  }
  const P = spec.protocol;
  switch (want.kind) {
    case 'empty':
      if (Object.keys(result).length !== 0) add('results.plain', `ping must answer exactly {}, got ${show(result)}`);
      return;
    case 'initialize': {
      if (result.protocolVersion !== want.protocolVersion) {
        add(want.fallback ? 'versions.initializeFallback' : 'results.plain', `protocolVersion is ${show(result.protocolVersion)}, expected "${want.protocolVersion}" (requested "${want.requested}")`);
      }
      if (!sameJson(result.capabilities, P.capabilities)) add('capabilities', `capabilities is ${show(result.capabilities)}, expected ${show(P.capabilities)}`);
      const si = result.serverInfo;
      if (!isObject(si) || typeof si.name !== 'string' || typeof si.version !== 'string') add('results.plain', `serverInfo is ${show(si)}, expected {name, version}`);
      for (const k of ['resultType', 'ttlMs', 'cacheScope']) if (k in result) add('results.plain', `initialize carries "${k}"; it must be the plain shape`);
      if (isObject(result._meta) && P.meta.serverInfo in result._meta) add('results.plain', `initialize carries _meta["${P.meta.serverInfo}"]; it must be the plain shape`);
      return;
    }
    case 'discover':
      completeEnvelope(spec, result, add);
      cacheable(result, add);
      if (!sameJson(result.supportedVersions, P.versions.supported)) add('versions.supported', `supportedVersions is ${show(result.supportedVersions)}, expected ${show(P.versions.supported)}`);
      if (!sameJson(result.capabilities, P.capabilities)) add('capabilities', `capabilities is ${show(result.capabilities)}, expected ${show(P.capabilities)}`);
      return;
    case 'tools': {
      completeEnvelope(spec, result, add);
      cacheable(result, add);
      if ('nextCursor' in result && typeof result.nextCursor !== 'string') add('results.noNextCursorNull', `nextCursor is ${show(result.nextCursor)}; it must be a string or absent`);
      if (!Array.isArray(result.tools)) {
        add('tools', `tools is ${show(result.tools)}, not an array`);
        return;
      }
      const names = result.tools.map((t) => (isObject(t) ? t.name : undefined));
      const want = spec.tools.map((t) => t.name);
      const missing = want.filter((n) => !names.includes(n));
      const extra = names.filter((n) => typeof n !== 'string' || !want.includes(n));
      if (missing.length || extra.length) add('tools', `tools/list differs from the catalogue: missing ${show(missing)}, unexpected ${show(extra)}`);
      for (const t of result.tools) {
        if (!isObject(t)) continue;
        const s = t.inputSchema;
        if (!isObject(s) || s.type !== 'object') add('tools', `tool ${show(t.name)} has inputSchema.type ${show(isObject(s) ? s.type : s)}, expected "object"`);
        const nul = hasNull(s, 'inputSchema');
        if (nul) add('tools', `tool ${show(t.name)} has null at ${nul}`);
      }
      return;
    }
    case 'tool-success':
      completeEnvelope(spec, result, add);
      toolContent(result, fail);
      if (result.isError !== undefined && result.isError !== false) fail(`isError is ${show(result.isError)}, expected absent or false`);
      return;
    case 'tool-error':
      completeEnvelope(spec, result, add);
      toolContent(result, fail);
      if (result.isError !== true) fail(`isError is ${show(result.isError)}, expected true`);
      return;
    case 'tool-refusal': {
      completeEnvelope(spec, result, add);
      toolContent(result, fail);
      if (result.isError !== true) fail(`isError is ${show(result.isError)}, expected true`);
      const sc = result.structuredContent;
      if (!isObject(sc) || sc.status !== want.status || sc.code !== want.code || typeof sc.message !== 'string') {
        fail(`structuredContent should be {status: "${want.status}", code: "${want.code}", message}, got ${show(sc)}`);
      }
      return;
    }
    case 'tool-any':
      return;
  }
}

/** The loose check for a tool that ran against the server's own data: a well-formed tool result or governed refusal. */
function toolAny(spec: Spec, exp: Expectation, res: WireResponse): Violation[] {
  const out: Violation[] = [];
  const add = (rule: string, message: string) => out.push({ rule, message });
  const fail = (message: string) => out.push({ rule: exp.rule, message, outcome: true });
  const parsed = parseBody(res);
  if (parsed.problem || !isObject(parsed.message)) {
    fail(parsed.problem ?? 'the body is not a JSON-RPC object');
    return out;
  }
  const m = parsed.message;
  if (m.id !== exp.id) fail(`id ${show(m.id)} does not echo ${show(exp.id)}`);
  if ('result' in m) {
    if (res.status !== 200) fail(`a result with HTTP ${res.status}`);
    if (!isObject(m.result)) fail('result is not an object');
    else {
      completeEnvelope(spec, m.result, add);
      toolContent(m.result, fail);
    }
    return out;
  }
  const e = isObject(m.error) ? m.error : {};
  const dialect = exp.result?.kind === 'tool-any' ? exp.result.dialect : 'handshake';
  const statuses = spec.errors.statuses.filter((s) => s.isError);
  if (dialect === 'handshake') {
    // Handshake refusals and execution failures are tool results; only an invalid_params tool error of an
    // older version (errors-v1.json toolErrorClasses) is a JSON-RPC error, -32602 in-band.
    const older = !spec.protocol.versions.argumentErrorsAsToolResults.includes(exp.version ?? '');
    if (!(older && res.status === 200 && e.code === -32602)) fail(`handshake tool failures are tool results (isError true)${older ? ' or in-band -32602' : ''}, got HTTP ${res.status} error ${show(e.code)}`);
  } else {
    const okRefusal = statuses.some((s) => s.http === res.status && s.modernCode === e.code) && isObject(e.data) && typeof e.data.status === 'string' && typeof e.data.code === 'string';
    const okInternal = res.status === 200 && e.code === -32603;
    if (!okRefusal && !okInternal) fail(`modern tool failure must be a governed refusal (${statuses.map((s) => `${s.http}/${s.modernCode}`).join(', ')}) with data {status, code, message} or in-band -32603, got HTTP ${res.status} code ${show(e.code)}`);
  }
  return out;
}

/**
 * The verdict for one exchange: passes when the primary expectation or one of its alternatives holds.
 * `keep` selects the rules that count (the run's profiles); violations of other rules are ignored.
 */
export function judge(spec: Spec, exp: Expectation, res: WireResponse, keep: (rule: string) => boolean = () => true): Judgement {
  // An outcome violation of a success expectation (its rule a results.* key, no check of its own) is the
  // aimed rule's finding (run.ts ruleOf), whatever profile that key belongs to: never dropped by `keep`
  // (trial nuc: MCP mode alone passed a refused tools/list, its outcome rule results.complete being interlock-v1's).
  const kept = (v: Violation) => keep(v.rule) || (v.outcome === true && !spec.checkIds.includes(v.rule));
  const split = (x: Expectation) => {
    const all = violations(spec, x, res).filter(kept);
    return { fails: all.filter((v) => !v.warning), warns: all.filter((v) => v.warning) };
  };
  /** The warning an expectation carries when met (MCP mode: a rule whose basis is no MUST). */
  // Not when the answer is also that rule's own outcome (e.g. a 403 that refuses the Host and the Origin at once).
  const met = (x: Expectation): Violation[] =>
    x.metWarning && keep(x.metWarning.rule) && !(exp.alternatives ?? []).some((a) => a.rule === x.metWarning!.rule && !a.metWarning && split(a).fails.length === 0)
      ? [{ rule: x.metWarning.rule, message: `${x.metWarning.message}; got HTTP ${res.status}`, warning: true }]
      : [];
  const primary = split(exp);
  if (primary.fails.length === 0) return { passed: true, violations: [], warnings: [...met(exp), ...primary.warns] };
  // Alternatives without a warning first: an answer MCP permits outright is no warning.
  const alts = [...(exp.alternatives ?? [])].sort((a, b) => Number(a.warning !== undefined) - Number(b.warning !== undefined));
  for (const alt of alts) {
    const a = split(alt);
    if (a.fails.length > 0) continue;
    const warnings = [...met(alt), ...a.warns];
    // The warning belongs to the check the alternative relaxes (its own rule when it is one, else the expected outcome's).
    if (alt.warning) warnings.unshift({ rule: spec.checkIds.includes(alt.rule) ? alt.rule : exp.rule, message: `${alt.warning}; got HTTP ${res.status}`, warning: true });
    return { passed: true, violations: [], warnings };
  }
  // MCP mode: the reason the text gives replaces the contract's exact status, code and id (trial nuc's finding 8).
  if (exp.reason !== undefined && keep(exp.rule)) {
    return { passed: false, violations: [{ rule: exp.rule, message: `${exp.reason}; got ${answerSummary(res)}`, outcome: true }, ...primary.fails.filter((v) => !v.outcome)], warnings: primary.warns };
  }
  return { passed: false, violations: primary.fails, warnings: primary.warns };
}

/** A short account of an answer for a failure message: its status and whether it carries a result or which error. */
export function answerSummary(res: WireResponse): string {
  if (res.status === 0) return `no HTTP response (${res.error ?? 'connection failed'})`;
  const p = parseBody(res);
  const m = isObject(p.message) ? p.message : undefined;
  if (m && 'result' in m) return `HTTP ${res.status} with a result (the request was served)`;
  if (m && isObject(m.error)) return `HTTP ${res.status} with error ${show(m.error.code)} (${show(m.error.message)})`;
  return `HTTP ${res.status}${res.body === '' ? ' with no body' : ''}`;
}

/** The verdict for one exchange: failures, and (MCP mode) warnings of answers MCP permits and the contract does not. */
export interface Judgement {
  passed: boolean;
  violations: Violation[];
  warnings: Violation[];
}
