/**
 * The runner: sends generated and fixed requests to any endpoint over real HTTP, judges every answer
 * with the oracle, and reports one verdict per rule id. A failed property reports its shrunk
 * counterexample (the exact request), the oracle's expectation, the actual answer, and the seed and
 * path that replay it.
 */
import fc from 'fast-check';
import { render, type Draft, type GenContext } from './arbitraries';
import { examples, type ExampleDef } from './examples';
import { createClient, formatRequest, formatResponse, type WireClient, type WireRequest, type WireResponse } from './http';
import { createOracle, type Expectation } from './oracle';
import { properties, type PropertyDef } from './properties';
import { DEFAULT_SPEC_DIR, loadSpec, type Spec } from './spec';
import { judge, type Violation } from './verdict';

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
}

/** The outcome of one property or one example. */
export interface SubCheck {
  kind: 'property' | 'example';
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
  /** Properties: how many generated requests the oracle decided by each rule id (the first failing check, or the result rule). */
  coverage?: Record<string, number>;
}

/** The verdict for one rule id. */
export interface RuleCheck {
  rule: string;
  passed: boolean;
  /** Why the rule was not exercised at all (e.g. it needs --api-key). */
  skipped?: string;
  /** The first failure of this rule, printed in full. */
  counterexample?: string;
  details: SubCheck[];
}

/** What `runConformance` returns. */
export interface RunReport {
  checks: RuleCheck[];
  /** Number of rules that failed. */
  failures: number;
  seed: number;
  numRuns: number;
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
 * cannot be loaded or the endpoint cannot be reached at all.
 */
export async function runConformance(opts: RunOptions): Promise<RunReport> {
  const spec: Spec = loadSpec(opts.specDir ?? DEFAULT_SPEC_DIR);
  const oracle = createOracle(spec);
  const url = new URL(opts.url);
  const client: WireClient = createClient(opts.url, opts.timeoutMs ?? 15000);
  const numRuns = opts.numRuns ?? 100;
  const seed = opts.seed ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
  const log = opts.log ?? (() => undefined);
  const g: GenContext = { spec, oracle, url, apiKey: opts.apiKey };
  const ctx = { url, apiKey: opts.apiKey };
  const wanted = (rule: string) => !opts.rules || opts.rules.includes(rule);

  try {
    const probe = await client.send({ method: 'POST', headers: [['Content-Type', 'application/json'], ['Accept', 'application/json, text/event-stream']], body: '{}' });
    if (probe.status === 0) throw new Error(`conformance: cannot reach ${opts.url}: ${probe.error}`);

    const exchange = async (req: WireRequest) => {
      const exp = oracle.expect(req, ctx);
      const res = await client.send(req);
      return { req, exp, res, verdict: judge(spec, exp, res) };
    };

    const sub = new Map<string, SubCheck[]>();
    const push = (rule: string, s: SubCheck) => sub.set(rule, [...(sub.get(rule) ?? []), s]);

    const runProperty = async (p: PropertyDef): Promise<SubCheck> => {
      const pseed = seedFor(seed, p.rule);
      if (p.needsApiKey && !opts.apiKey) return { kind: 'property', name: p.title, passed: true, skipped: 'needs --api-key' };
      const arb = fc.limitShrink(p.arb(g), opts.maxShrinks ?? 300);
      const coverage: Record<string, number> = {};
      let shrinking = false;
      const prop = fc.asyncProperty(arb, async (draft: Draft) => {
        const x = await exchange(render(g, draft));
        if (!shrinking) coverage[x.exp.rule] = (coverage[x.exp.rule] ?? 0) + 1;
        if (!x.verdict.passed) shrinking = true;
        return x.verdict.passed;
      });
      const out = await fc.check(prop, { numRuns, seed: pseed });
      if (!out.failed) return { kind: 'property', name: p.title, passed: true, runs: out.numRuns, seed: pseed, coverage };
      if (!out.counterexample) {
        return { kind: 'property', name: p.title, passed: false, runs: out.numRuns, seed: pseed, counterexample: `  the property errored: ${String(out.errorInstance ?? 'unknown error')}`, violations: [] };
      }
      const again = await exchange(render(g, out.counterexample[0]));
      const violations = again.verdict.passed ? [{ rule: p.rule, message: 'the counterexample passed when replayed (the server answered differently the second time)' }] : again.verdict.violations;
      const text = [
        `  Property "${p.title}" failed after ${out.numRuns} run(s), shrunk ${out.numShrinks} time(s); seed ${pseed}, path "${out.counterexamplePath}"`,
        `  Replay: --rule ${p.rule} --seed ${seed} --num-runs ${numRuns}`,
        formatFailure(url, again.req, again.exp, again.res, violations),
      ].join('\n');
      return { kind: 'property', name: p.title, passed: false, runs: out.numRuns, seed: pseed, path: out.counterexamplePath ?? undefined, counterexample: text, violations, coverage };
    };

    const runExample = async (e: ExampleDef): Promise<SubCheck> => {
      const name = `${e.row ? `${e.row} ` : ''}${e.title}`;
      if (e.needsApiKey && !opts.apiKey) return { kind: 'example', name, passed: true, skipped: 'needs --api-key' };
      const x = await exchange(e.build(g));
      if (x.verdict.passed) return { kind: 'example', name, passed: true };
      return { kind: 'example', name, passed: false, counterexample: `  Example ${name}\n${formatFailure(url, x.req, x.exp, x.res, x.verdict.violations)}`, violations: x.verdict.violations };
    };

    for (const p of properties()) if (wanted(p.rule)) push(p.rule, await runProperty(p));
    if (!opts.skipExamples) for (const e of examples()) if (wanted(e.rule)) push(e.rule, await runExample(e));

    const order = [...spec.checkIds, ...[...sub.keys()].filter((r) => !spec.checkIds.includes(r))];
    const checks: RuleCheck[] = [];
    for (const rule of order) {
      const details = sub.get(rule);
      if (!details) continue;
      const ran = details.filter((d) => !d.skipped);
      const failed = ran.filter((d) => !d.passed);
      const check: RuleCheck = {
        rule,
        passed: failed.length === 0,
        skipped: ran.length === 0 ? details[0]!.skipped : undefined,
        counterexample: failed[0]?.counterexample,
        details,
      };
      checks.push(check);
      const props = ran.filter((d) => d.kind === 'property');
      const exs = ran.filter((d) => d.kind === 'example');
      const summary = `${props.length ? `${props.reduce((n, d) => n + (d.runs ?? 0), 0)} generated` : 'no property'}, ${exs.length} example(s)`;
      if (check.skipped) log(`SKIP  ${rule}  (${check.skipped})`);
      else if (check.passed) log(`PASS  ${rule}  (${summary})`);
      else {
        log(`FAIL  ${rule}  (${summary}; ${failed.length} failing)`);
        for (const f of failed) log(f.counterexample ?? `  ${f.name}`);
      }
    }
    const failures = checks.filter((c) => !c.passed).length;
    const passed = checks.filter((c) => c.passed && !c.skipped).length;
    const skipped = checks.filter((c) => c.skipped).length;
    log(`${passed} passed, ${failures} failed${skipped ? `, ${skipped} skipped` : ''} (seed ${seed}, ${numRuns} runs per property)`);
    return { checks, failures, seed, numRuns };
  } finally {
    client.close();
  }
}
