/**
 * The runner: sends generated and fixed requests to any endpoint over real HTTP, judges every answer
 * with the oracle, and reports one verdict per rule id. A failed property reports its shrunk
 * counterexample (the exact request), the oracle's expectation, the actual answer, and the seed and
 * path that replay it.
 */
import fc from 'fast-check';
import { render, type Draft, type GenContext } from './arbitraries';
import { examples, type ExampleDef } from './examples';
import { createClient, DEFAULT_RETRY, formatRequest, formatResponse, type WireClient, type WireRequest, type WireResponse } from './http';
import { createOracle, isObject, isOwnHost, isOwnOrigin, type Expectation, type OracleContext } from './oracle';
import { knownRules, parseProfiles, profileOf, PROFILES, type Profile } from './profiles';
import { properties, type PropertyDef } from './properties';
import { CONTRACT_PROBE_TOOL, DEFAULT_SPEC_DIR, loadSpec, withServerCatalogue, type JsonSchema, type Spec } from './spec';
import type { ToolMap } from './toolmap';
import { judge, parseSse, violations, type Violation } from './verdict';

/** Options of `runConformance`. */
export interface RunOptions {
  /** The endpoint, e.g. http://127.0.0.1:8080/mcp. */
  url: string;
  /** A valid agent API key; without it, checks that need an authenticated call are skipped. */
  apiKey?: string;
  /** Generated requests per property (default 100). */
  numRuns?: number;
  /** Base seed (default: random); each property derives its own seed from it and its rule id. */
  seed?: number;
  /** Receives one line per rule and the failure details; silent when omitted. */
  log?: (line: string) => void;
  /** Folder with protocol-v1.json, errors-v1.json, mcp-tools-v1.json (default: the repository's spec/). */
  specDir?: string;
  /** Only run these rule ids. */
  rules?: string[];
  /** Leave out the fixed examples (properties only). */
  skipExamples?: boolean;
  /** Per-request timeout in milliseconds (default 15000). */
  timeoutMs?: number;
  /** Most shrink steps per failing property (default 300); each step is one request. */
  maxShrinks?: number;
  /** Profiles to run (profiles.ts); default mcp-stateless and interlock-v1. The sql-gateway profile is run by sql/run.ts. */
  profiles?: string[];
  /** Another server's tool names (toolmap.ts); its `list` role is the probe tool of the mcp-stateless profile. */
  toolMap?: ToolMap;
  /** Most retries of one request after a rate limit (HTTP 429, or the in-band rate_limited tool result; default 8); each waits as the answer asks. */
  retries?: number;
  /** False prints a one-screen report (a failing rule's first violations); true or absent prints every counterexample in full. */
  verbose?: boolean;
}

/** The outcome of one property or one example. */
export interface SubCheck {
  kind: 'property' | 'example' | 'incidental';
  name: string;
  passed: boolean;
  skipped?: string;
  /** Generated requests judged (properties). */
  runs?: number;
  seed?: number;
  /** fast-check replay path of the counterexample. */
  path?: string;
  counterexample?: string;
  violations?: Violation[];
  /**
   * The flags that reproduce this finding alone (issue 30 item 4): `--rule` of the owning rule, plus,
   * for an incidental finding, `--rule` of the property or example that found it, then seed and runs.
   */
  replay?: string;
  /** Properties: how many generated requests the oracle decided by each rule id (the first failing check, or the result rule). */
  coverage?: Record<string, number>;
}

/** A subcheck of kind 'incidental': a violation of this rule found while another rule's property or example ran. */
export type IncidentalCheck = SubCheck & { kind: 'incidental' };

/** The verdict for one rule id. */
export interface RuleCheck {
  rule: string;
  /** The profile the rule belongs to. */
  profile: Profile;
  passed: boolean;
  /** Why the rule was not exercised at all (e.g. it needs --api-key). */
  skipped?: string;
  /** The first failure of this rule, printed in full. */
  counterexample?: string;
  details: SubCheck[];
  /**
   * MCP mode: answers the MCP and RFC text permit (no MUST forbids them) but the contract does not, one
   * line per distinct finding (at most 5): reported, never failing the rule.
   */
  warnings?: string[];
}

/** What `runConformance` returns. */
export interface RunReport {
  checks: RuleCheck[];
  /** Number of rules that failed. */
  failures: number;
  seed: number;
  numRuns: number;
  /** The profiles that ran. */
  profiles: Profile[];
  /** Where the tool catalogue came from: the contract's spec files, or the server's own tools/list. */
  catalogue: 'contract' | 'server';
  /** MCP mode: true when the server refused a 2026-07-28 server/discover and was judged by the handshake-era revisions alone. */
  handshakeOnly?: boolean;
}

/** Stable per-property seed: the base seed mixed with the rule id, so filtering rules does not change it. */
export function seedFor(base: number, rule: string): number {
  let h = base | 0;
  for (let i = 0; i < rule.length; i++) h = (Math.imul(h ^ rule.charCodeAt(i), 16777619) + 0x9e3779b9) | 0;
  return h;
}

function describeExpectation(e: Expectation): string {
  const what =
    e.body === 'empty'
      ? 'no body'
      : e.body === 'error'
        ? `error ${e.code}, id ${JSON.stringify(e.id)}`
        : e.body === 'result'
          ? `result (${e.result?.kind}${e.result?.kind === 'initialize' ? ` ${e.result.protocolVersion}` : ''}), id ${JSON.stringify(e.id)}`
          : e.body === 'any'
            ? `any body${e.anyClientError ? ' (any 4xx status)' : ''}`
            : 'unspecified by the contract';
  const headers = [e.headers?.allow ? `Allow: ${e.headers.allow.join(', ')}` : '', e.headers?.wwwAuthenticate ? `WWW-Authenticate: ${e.headers.wwwAuthenticate}` : ''].filter(Boolean).join('; ');
  const alt = e.alternatives?.length ? `\n    also accepted: ${e.alternatives.map((a) => `HTTP ${a.http} ${a.body === 'error' ? `error ${a.code}` : a.body} [${a.rule}]`).join(' | ')}` : '';
  return `HTTP ${e.result?.kind === 'tool-any' ? '200 (or a governed refusal status)' : e.http}, ${what}${headers ? `; ${headers}` : ''} — rule ${e.rule} (${e.dialect}${e.version ? ` ${e.version}` : ''}): ${e.why}${alt}`;
}

const indent = (s: string, n = 4): string => s.split('\n').map((l) => ' '.repeat(n) + l).join('\n');

/** Formats one failing exchange for people: request, expectation, actual answer, violations. */
export function formatFailure(url: URL, req: WireRequest, exp: Expectation, res: WireResponse, violations: Violation[]): string {
  return [
    '  Request:',
    indent(formatRequest(req, url)),
    '  Expected:',
    indent(describeExpectation(exp)),
    '  Got:',
    indent(formatResponse(res)),
    '  Violations:',
    ...violations.map((v) => `    - [${v.rule}] ${v.message}`),
  ].join('\n');
}

/**
 * Runs the suite against `opts.url` and returns one verdict per rule id. Throws only when the spec
 * cannot be loaded, the endpoint cannot be reached at all, or it refuses `opts.apiKey` (HTTP 401 or
 * 403, or the contract's in-band unauthorized, on a tools/call of the probe tool: keyRefusal): the
 * CLI's exit 2 with one line.
 */
export async function runConformance(opts: RunOptions): Promise<RunReport> {
  const profiles: Profile[] = parseProfiles(opts.profiles).filter((p) => p !== 'sql-gateway');
  const contractSpec: Spec = loadSpec(opts.specDir ?? DEFAULT_SPEC_DIR);
  const url = new URL(opts.url);
  const log = opts.log ?? (() => undefined);
  const retry = { ...DEFAULT_RETRY, attempts: opts.retries ?? DEFAULT_RETRY.attempts, onWait: (ms: number, n: number) => log(`(rate limited: waiting ${ms} ms as the answer asked, retry ${n})`) };
  const client: WireClient = createClient(opts.url, opts.timeoutMs ?? 15000, retry);
  const numRuns = opts.numRuns ?? 100;
  const seed = opts.seed ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
  const inProfile = (rule: string): boolean => profiles.includes(profileOf(rule));
  const wanted = (rule: string) => inProfile(rule) && (!opts.rules || opts.rules.includes(rule));

  try {
    const probe = await client.send({ method: 'POST', headers: [['Content-Type', 'application/json'], ['Accept', 'application/json, text/event-stream']], body: '{}' });
    if (probe.status === 0) throw new Error(`conformance: cannot reach ${opts.url}: ${probe.error}`);
    // A wrong or stale --api-key would otherwise read as contract failures (trial nu40): one authenticated call first.
    if (opts.apiKey) {
      const refused = await keyRefusal(client, contractSpec, opts.apiKey, opts.toolMap?.tools.list ?? contractSpec.probeTool ?? CONTRACT_PROBE_TOOL);
      if (refused) throw new Error(`conformance: the server refused the API key (${refused}): check --api-key (a key of a running server, not revoked)`);
    }

    const withContract = profiles.includes('interlock-v1');
    const withMcp = profiles.includes('mcp-stateless');
    // The mcp-stateless profile is always judged in MCP mode, on the server's own catalogue (trial nuc's finding 3):
    // alone or next to interlock-v1 it generates the same requests and gives the same verdicts. Without
    // interlock-v1 the contract's catalogue does not apply at all.
    let mcpSpec: Spec = contractSpec;
    if (withMcp) {
      try {
        mcpSpec = withServerCatalogue(contractSpec, await serverTools(client, contractSpec, opts.apiKey), opts.toolMap?.tools.list);
      } catch (err) {
        if (!withContract) throw err;
        log(`(mcp-stateless: ${(err as Error).message}; judged on the contract's catalogue)`);
      }
    }
    const spec: Spec = withContract ? contractSpec : mcpSpec;
    const oracle = createOracle(spec, { mcp: !withContract });
    // With both protocol profiles: the mcp-stateless rules are judged by the MCP oracle exactly as alone,
    // the contract's oracle judges interlock-v1's rules, and a contract violation of a generic rule that
    // MCP accepts is InterLock's stricter choice, charged to interlock.strict (issue 30 item 2).
    const mcpOracle = withContract && withMcp ? createOracle(mcpSpec, { mcp: true }) : undefined;
    const generic = (rule: string): boolean => profileOf(rule) === 'mcp-stateless';
    const g: GenContext = { spec, oracle, url, apiKey: opts.apiKey };
    /** The generator context of a rule: mcp-stateless rules draw from the MCP catalogue, as they do alone. */
    const gMcp: GenContext = mcpOracle ? { spec: mcpSpec, oracle: mcpOracle, url, apiKey: opts.apiKey } : g;
    const genFor = (rule: string): GenContext => (generic(rule) ? gMcp : g);
    const ctx: OracleContext = { url, apiKey: opts.apiKey };
    const refusedProbe = hostOriginProbe(client, contractSpec, url, opts.apiKey);
    const mcpMode = withMcp;
    // MCP mode: a server that answers a complete 2026-07-28 server/discover without a result implements only the
    // handshake-era revisions, and is judged by them (issue 30 item 5: SDK v1, DBHub, Toolbox).
    if (mcpMode) ctx.handshakeOnly = await handshakeOnly(client, contractSpec, opts.apiKey);

    const exchange = async (req: WireRequest) => {
      // MCP mode credits a Host/Origin refusal only where the server refuses that Host/Origin on a plain request too.
      const rctx = mcpMode ? { ...ctx, hostOriginRefused: await refusedProbe(req) } : ctx;
      const exp = oracle.expect(req, rctx);
      const res = await client.send(req);
      const verdict = judge(spec, exp, res, inProfile);
      if (!mcpOracle) return { req, exp, res, verdict };
      // Both profiles. The MCP verdict on the mcp-stateless rules, as alone.
      const mcpExp = mcpOracle.expect(req, rctx);
      const mv = judge(mcpSpec, mcpExp, res, generic);
      if (mv.violations.length > 0) {
        // The finding is MCP's; the contract's verdict on the same answer would repeat it. Its own rules still count.
        const own = verdict.violations.filter((v) => !generic(v.rule) && !(v.outcome === true && !spec.checkIds.includes(v.rule)));
        return { req, exp: mcpExp, res, verdict: { passed: false, violations: [...mv.violations, ...own.map((v) => ({ rule: v.rule, message: v.message }))], warnings: mv.warnings } };
      }
      // MCP accepts the answer: what the contract finds on a generic rule is its stricter choice. An answer MCP
      // reads as a Host or Origin refusal (or a byte order mark refused as a parse error, RFC 8259 §8.1) is
      // evidence for no other rule, so everything the contract expected instead is that choice too.
      const bom = (req.body ?? '').startsWith('\ufeff');
      const hostRefusal = [mcpExp, ...(mcpExp.alternatives ?? [])].some((x) => (x.rule === 'HOST' || x.rule === 'ORIGIN' || (bom && x.rule === 'JSON')) && violations(mcpSpec, x, res).every((v) => !(v.outcome || generic(v.rule))));
      const genericFinding = (v: Violation): boolean => generic(v.rule) || (v.outcome === true && !spec.checkIds.includes(v.rule));
      const strict = verdict.violations.map((v): Violation => (hostRefusal || genericFinding(v) ? { rule: 'interlock.strict', message: `[${v.rule}] ${v.message} (the contract's stricter choice; MCP permits this answer)` } : { rule: v.rule, message: v.message }));
      // The contract's expectation is the one printed and counted for coverage (its violations carry their rules).
      return { req, exp, res, verdict: { passed: strict.length === 0, violations: strict, warnings: mv.warnings } };
    };

    const sub = new Map<string, SubCheck[]>();
    const warned = new Map<string, string[]>();
    const warn = (rule: string, message: string) => {
      const list = warned.get(rule) ?? [];
      if (list.length < 5 && !list.includes(message)) warned.set(rule, [...list, message]);
    };
    const push = (rule: string, s: SubCheck) => sub.set(rule, [...(sub.get(rule) ?? []), s]);
    /** Violations of rules other than the one being run are reported under their own rule, once per rule. */
    const incidental = new Set<string>();
    const replayOf = (...rules: string[]): string => `${[...new Set(rules)].map((r) => `--rule ${r}`).join(' ')} --seed ${seed} --num-runs ${numRuns}`;
    /** `found` names the property or example that sent the request; `foundRule` is its rule. */
    const attribute = (own: string, x: { req: WireRequest; exp: Expectation; res: WireResponse; verdict: { violations: Violation[]; warnings?: Violation[] } }, found: string, foundRule: string = own): Violation[] => {
      for (const w of x.verdict.warnings ?? []) {
        const rule = ruleOf(spec, own, x.exp, w);
        if (wanted(rule)) warn(rule, `${w.message} (${found})`);
      }
      const all = x.verdict.violations.map((v) => ({ ...v, rule: ruleOf(spec, own, x.exp, v) }));
      const others = new Map<string, Violation[]>();
      for (const v of all) if (v.rule !== own) others.set(v.rule, [...(others.get(v.rule) ?? []), v]);
      for (const [rule, vs] of others) {
        if (incidental.has(rule) || (opts.rules && !opts.rules.includes(rule))) continue;
        incidental.add(rule);
        const replay = replayOf(rule, foundRule);
        push(rule, { kind: 'incidental', name: `found by ${found}`, passed: false, replay, counterexample: `  Found while running ${found}\n  Replay: ${replay}\n${formatFailure(url, x.req, x.exp, x.res, vs)}`, violations: vs });
      }
      return all.filter((v) => v.rule === own);
    };

    const runProperty = async (p: PropertyDef): Promise<SubCheck> => {
      const pseed = seedFor(seed, p.rule);
      if (p.needsApiKey && !opts.apiKey) return { kind: 'property', name: p.title, passed: true, skipped: 'needs --api-key' };
      const pg = genFor(p.rule);
      const arb = fc.limitShrink(p.arb(pg), opts.maxShrinks ?? 300);
      const coverage: Record<string, number> = {};
      let shrinking = false;
      const prop = fc.asyncProperty(arb, async (draft: Draft) => {
        const x = await exchange(render(pg, draft));
        if (!shrinking) coverage[x.exp.rule] = (coverage[x.exp.rule] ?? 0) + 1;
        const own = shrinking ? x.verdict.violations.filter((v) => ruleOf(spec, p.rule, x.exp, v) === p.rule) : attribute(p.rule, x, `property ${p.rule}`);
        if (own.length > 0) shrinking = true;
        return own.length === 0;
      });
      const out = await fc.check(prop, { numRuns, seed: pseed });
      if (!out.failed) return { kind: 'property', name: p.title, passed: true, runs: out.numRuns, seed: pseed, coverage };
      if (!out.counterexample) {
        return { kind: 'property', name: p.title, passed: false, runs: out.numRuns, seed: pseed, counterexample: `  the property errored: ${String(out.errorInstance ?? 'unknown error')}`, violations: [] };
      }
      const again = await exchange(render(pg, out.counterexample[0]));
      const replayed = again.verdict.violations.filter((v) => ruleOf(spec, p.rule, again.exp, v) === p.rule).map((v) => ({ ...v, rule: p.rule }));
      const violations = replayed.length === 0 ? [{ rule: p.rule, message: 'the counterexample passed when replayed (the server answered differently the second time)' }] : replayed;
      const text = [
        `  Property "${p.title}" failed after ${out.numRuns} run(s), shrunk ${out.numShrinks} time(s); seed ${pseed}, path "${out.counterexamplePath}"`,
        `  Replay: ${replayOf(p.rule)}`,
        formatFailure(url, again.req, again.exp, again.res, violations),
      ].join('\n');
      return { kind: 'property', name: p.title, passed: false, runs: out.numRuns, seed: pseed, path: out.counterexamplePath ?? undefined, replay: replayOf(p.rule), counterexample: text, violations, coverage };
    };

    const runExample = async (e: ExampleDef): Promise<SubCheck> => {
      const name = `${e.row ? `${e.row} ` : ''}${e.title}`;
      if (e.needsApiKey && !opts.apiKey) return { kind: 'example', name, passed: true, skipped: 'needs --api-key' };
      const eg = genFor(e.rule);
      const req = e.build(eg);
      const foreign = contractToolNamed(req, contractSpec, eg.spec);
      if (foreign) return { kind: 'example', name, passed: true, skipped: `calls the contract's tool ${foreign}, which the server under test does not list` };
      const x = await exchange(req);
      const own = attribute(e.rule, x, `example ${name}`, e.rule);
      if (own.length === 0) return { kind: 'example', name, passed: true };
      return { kind: 'example', name, passed: false, replay: replayOf(e.rule), counterexample: `  Example ${name}\n${formatFailure(url, x.req, x.exp, x.res, own)}`, violations: own };
    };

    for (const p of properties()) if (wanted(p.rule)) push(p.rule, await runProperty(p));
    if (!opts.skipExamples) for (const e of examples()) if (wanted(e.rule)) push(e.rule, await runExample(e));

    // Cross-cutting shape rules have no property of their own: every answer is checked against them, so
    // one that no answer broke has passed.
    for (const rule of knownRules()) {
      if (!sub.has(rule) && wanted(rule) && !spec.checkIds.includes(rule)) push(rule, { kind: 'incidental', name: 'checked on every answer of the run', passed: true });
    }
    const byCheckOrder = [...spec.checkIds, ...[...sub.keys()].filter((r) => !spec.checkIds.includes(r))];
    const order = PROFILES.flatMap((p) => byCheckOrder.filter((r) => profileOf(r) === p));
    const checks: RuleCheck[] = [];
    let lastProfile: Profile | undefined;
    for (const rule of order) {
      const details = sub.get(rule);
      if (!details) continue;
      const profile = profileOf(rule);
      if (profile !== lastProfile) log(`[${profile}]`);
      lastProfile = profile;
      const ran = details.filter((d) => !d.skipped);
      const failed = ran.filter((d) => !d.passed);
      const check: RuleCheck = {
        rule,
        profile,
        passed: failed.length === 0,
        skipped: ran.length === 0 ? details[0]!.skipped : undefined,
        counterexample: failed[0]?.counterexample,
        details,
        ...(warned.has(rule) ? { warnings: warned.get(rule) } : {}),
      };
      checks.push(check);
      const props = ran.filter((d) => d.kind === 'property');
      const exs = ran.filter((d) => d.kind === 'example');
      const summary = props.length + exs.length === 0 ? 'checked on every answer' : `${props.length ? `${props.reduce((n, d) => n + (d.runs ?? 0), 0)} generated` : 'no property'}, ${exs.length} example(s)`;
      const warnings = check.warnings ?? [];
      const warnNote = warnings.length ? `; ${warnings.length}${warnings.length === 5 ? '+' : ''} warning(s)` : '';
      if (check.skipped) log(`SKIP  ${rule}  (${check.skipped})`);
      else if (check.passed) log(`PASS  ${rule}  (${summary}${warnNote})`);
      else {
        log(`FAIL  ${rule}  (${summary}; ${failed.length} failing)`);
        if (opts.verbose === false) {
          // One screen: the first failing check's first violations and how to replay it.
          const f = failed[0]!;
          for (const v of (f.violations ?? []).slice(0, 3)) log(`      ${f.name}: ${v.message}`);
          log(`      replay with details: ${f.replay ?? replayOf(rule)} --verbose`);
        } else for (const f of failed) log(f.counterexample ?? `  ${f.name}`);
      }
      for (const w of opts.verbose === false ? warnings.slice(0, 1) : warnings) log(`      warning: ${w}`);
    }
    const failures = checks.filter((c) => !c.passed).length;
    const passed = checks.filter((c) => c.passed && !c.skipped).length;
    const skipped = checks.filter((c) => c.skipped).length;
    log(`${passed} passed, ${failures} failed${skipped ? `, ${skipped} skipped` : ''} (profiles ${profiles.join(', ')}; seed ${seed}, ${numRuns} runs per property${ctx.handshakeOnly ? '; the server answered a 2026-07-28 server/discover without a result, so it was judged by the handshake-era revisions' : ''})`);
    return { checks, failures, seed, numRuns, profiles, catalogue: spec.contractCatalogue ? 'contract' : 'server', handshakeOnly: ctx.handshakeOnly };
  } finally {
    client.close();
  }
}

/**
 * Reads the server's own catalogue with one handshake-dialect tools/list (no initialize: the endpoint
 * is stateless). Throws when the answer holds no tools array.
 */
export async function serverTools(client: WireClient, spec: Spec, apiKey?: string): Promise<Array<{ name: string; inputSchema?: JsonSchema }>> {
  const res = await client.send(toolsListRequest(spec, apiKey));
  let message: unknown;
  try {
    const sse = (res.headers['content-type'] ?? '').toLowerCase().startsWith('text/event-stream');
    message = JSON.parse(sse ? (parseSse(res.body).find((e) => e.data !== '')?.data ?? '') : res.body);
  } catch {
    message = undefined;
  }
  const tools = isObject(message) && isObject(message.result) ? message.result.tools : undefined;
  if (!Array.isArray(tools)) throw new Error(`conformance: tools/list of the server under test answered HTTP ${res.status} without a tools array; cannot run the mcp-stateless profile on its catalogue`);
  return tools.filter(isObject).filter((t) => typeof t.name === 'string').map((t) => ({ name: t.name as string, inputSchema: isObject(t.inputSchema) ? (t.inputSchema as JsonSchema) : undefined }));
}

/**
 * Issue 30 item 4: whether the server refuses a request's Host and Origin as such. For a request whose
 * Host is not the URL's own (case-insensitive, `isOwnHost`) or whose Origin is not the URL's own origin
 * (scheme and host case-insensitive, `isOwnOrigin`), the returned function sends a plain tools/list (as `serverTools` does) carrying that Host and
 * Origin, once per pair, and answers true when it gets a 4xx while the same tools/list with the own Host
 * and no Origin is served (2xx); false when both are served; undefined when the request has its own Host
 * and no foreign Origin, or when the plain tools/list is not served at all (nothing to compare).
 */
export function hostOriginProbe(client: WireClient, spec: Spec, url: URL, apiKey?: string): (req: WireRequest) => Promise<boolean | undefined> {
  const H = spec.protocol.headers;
  const cache = new Map<string, Promise<boolean | undefined>>();
  const base = toolsListRequest(spec, apiKey);
  const plain = (extra: Array<[string, string]>) => client.send({ ...base, headers: [...base.headers, ...extra] }).then((r) => r.status);
  const ok = (status: number) => status >= 200 && status < 300;
  let baseline: Promise<number> | undefined;
  return async (req) => {
    const host = req.headers.find(([k]) => k.toLowerCase() === (H.host ?? 'Host').toLowerCase())?.[1];
    const origin = req.headers.find(([k]) => k.toLowerCase() === (H.origin ?? 'Origin').toLowerCase())?.[1];
    const foreignHost = host !== undefined && !isOwnHost(host, url);
    const foreignOrigin = origin !== undefined && !isOwnOrigin(origin, url);
    if (!foreignHost && !foreignOrigin) return undefined;
    const key = JSON.stringify([host ?? null, origin ?? null]);
    let answer = cache.get(key);
    if (!answer) {
      const extra: Array<[string, string]> = [];
      if (host !== undefined) extra.push([H.host ?? 'Host', host]);
      if (origin !== undefined) extra.push([H.origin ?? 'Origin', origin]);
      answer = (async () => {
        baseline ??= plain([]);
        if (!ok(await baseline)) return undefined;
        const status = await plain(extra);
        return ok(status) ? false : status >= 400 && status < 500 ? true : undefined;
      })();
      cache.set(key, answer);
    }
    return answer;
  };
}

/**
 * True when the server answers a `server/discover` sent as 2026-07-28 clients send it (MCP-Protocol-Version
 * and Mcp-Method headers, a complete `_meta` envelope) without a result (a 4xx, or a JSON-RPC error such as
 * -32601): it implements no modern dialect, since 2026-07-28 servers MUST serve discover. False when it
 * answers with a result.
 */
export async function handshakeOnly(client: WireClient, spec: Spec, apiKey?: string): Promise<boolean> {
  const P = spec.protocol;
  const modern = P.versions.modern[0]!;
  const headers: Array<[string, string]> = [
    ['Content-Type', 'application/json'],
    ['Accept', 'application/json, text/event-stream'],
    [P.headers.protocolVersion ?? 'MCP-Protocol-Version', modern],
    [P.headers.method ?? 'Mcp-Method', 'server/discover'],
  ];
  if (apiKey) headers.push([P.headers.authorization ?? 'Authorization', `Bearer ${apiKey}`]);
  const _meta = { [P.meta.protocolVersion]: modern, [P.meta.clientCapabilities]: {}, [P.meta.clientInfo]: { name: 'interlock-conformance', version: '1.0.0' } };
  const res = await client.send({ method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta } }) });
  return res.status !== 0 && !/"result"\s*:/.test(res.body);
}

/**
 * The key preflight (trial nu40): a handshake-dialect tools/call of `tool` (the probe tool, safe to
 * call with `{}`) carrying `apiKey`. Answers how the server refused the key ("HTTP 401 on a tools/call
 * of interlock_list_sources", or "… answered unauthorized (invalid_api_key)" for the contract's in-band
 * refusal, structuredContent.status unauthorized), or undefined when it did not: any other answer,
 * the tool's own errors included, is left to the rules.
 */
export async function keyRefusal(client: WireClient, spec: Spec, apiKey: string, tool: string): Promise<string | undefined> {
  const base = toolsListRequest(spec, apiKey);
  const res = await client.send({ ...base, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: tool, arguments: {} } }) });
  const where = `on a tools/call of ${tool}`;
  if (res.status === 401 || res.status === 403) return `HTTP ${res.status} ${where}`;
  let message: unknown;
  try {
    const sse = (res.headers['content-type'] ?? '').toLowerCase().startsWith('text/event-stream');
    message = JSON.parse(sse ? (parseSse(res.body).find((e) => e.data !== '')?.data ?? '') : res.body);
  } catch {
    return undefined;
  }
  const sc = isObject(message) && isObject(message.result) && isObject(message.result.structuredContent) ? message.result.structuredContent : undefined;
  if (sc?.status === 'unauthorized') return `${where} it answered unauthorized${typeof sc.code === 'string' ? ` (${sc.code})` : ''}`;
  return undefined;
}

/** A plain handshake-dialect tools/list (with the key when given): what `serverTools` and `hostOriginProbe` send. */
function toolsListRequest(spec: Spec, apiKey?: string): WireRequest {
  const version = spec.protocol.versions.handshake[spec.protocol.versions.handshake.length - 1]!;
  const headers: Array<[string, string]> = [
    ['Content-Type', 'application/json'],
    ['Accept', 'application/json, text/event-stream'],
    [spec.protocol.headers.protocolVersion ?? 'MCP-Protocol-Version', version],
  ];
  if (apiKey) headers.push([spec.protocol.headers.authorization ?? 'Authorization', `Bearer ${apiKey}`]);
  return { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) };
}

/** The name of a contract-catalogue tool that `req` calls and the tested catalogue lacks, if any. */
function contractToolNamed(req: WireRequest, contract: Spec, tested: Spec): string | undefined {
  if (tested.contractCatalogue || req.body === undefined) return undefined;
  let m: unknown;
  try {
    m = JSON.parse(req.body.replace(/^\ufeff+/, ''));
  } catch {
    return undefined;
  }
  const name = isObject(m) && isObject(m.params) ? m.params.name : undefined;
  if (typeof name !== 'string') return undefined;
  return contract.tools.some((t) => t.name === name) && !tested.tools.some((t) => t.name === name) ? name : undefined;
}

/**
 * The rule a violation is attributed to, for a request aimed at rule `aimed` (a property's or an
 * example's rule). A cross-cutting shape violation belongs to its own rule. An outcome violation (the
 * server answered the request wrongly) belongs to the aimed rule when that rule decided the expected
 * outcome, or when the request was expected to get through every check (a `results.*` outcome: the
 * server refused what the aimed rule lets through); when another check decided the outcome (one of
 * the few noisy requests a property sends), it belongs to that check.
 */
export function ruleOf(spec: Spec, aimed: string, exp: Expectation, v: Violation): string {
  if (!v.outcome) return v.rule;
  return exp.rule === aimed || !spec.checkIds.includes(exp.rule) ? aimed : exp.rule;
}
