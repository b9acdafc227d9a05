/**
 * Command line of the conformance suite:
 *   interlock-conformance --url http://host:port/mcp [--api-key K] [--num-runs N] [--seed S] [--spec DIR] [--rule ID]...
 * Prints one PASS/FAIL/SKIP line per rule id, failure details, and "N passed, N failed".
 * Exit code: 0 when every rule passed, 1 when any failed, 2 for a usage or connection error.
 */
import { parseArgs } from 'node:util';
import { runConformance } from './run';

const USAGE = `Usage: interlock-conformance --url http://host:port/mcp [options]

Options:
  --url URL          the MCP endpoint to test (required)
  --api-key KEY      a valid agent API key (enables authenticated tool-call checks)
  --num-runs N       generated requests per property (default 100)
  --seed S           base seed, to replay a run (printed at the end of every run)
  --spec DIR         folder with protocol-v1.json, errors-v1.json, mcp-tools-v1.json
  --rule ID          run only this rule id (repeatable)
  --no-examples      run the properties only
  --timeout MS       per-request timeout (default 15000)
  -h, --help         this text`;

/** Runs the CLI with `argv` (without node and script); resolves to the process exit code. */
export async function main(argv: string[], out: (s: string) => void = (s) => process.stdout.write(s + '\n')): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        url: { type: 'string' },
        'api-key': { type: 'string' },
        'num-runs': { type: 'string' },
        seed: { type: 'string' },
        spec: { type: 'string' },
        rule: { type: 'string', multiple: true },
        'no-examples': { type: 'boolean' },
        timeout: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (e) {
    out(`${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    out(USAGE);
    return 0;
  }
  if (!values.url) {
    out(`--url is required\n\n${USAGE}`);
    return 2;
  }
  const int = (name: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n)) throw new Error(`--${name} must be an integer, got "${v}"`);
    return n;
  };
  try {
    const report = await runConformance({
      url: values.url,
      apiKey: values['api-key'],
      numRuns: int('num-runs', values['num-runs']),
      seed: int('seed', values.seed),
      specDir: values.spec,
      rules: values.rule,
      skipExamples: values['no-examples'],
      timeoutMs: int('timeout', values.timeout),
      log: out,
    });
    return report.failures > 0 ? 1 : 0;
  } catch (e) {
    out(`error: ${(e as Error).message}`);
    return 2;
  }
}

if (require.main === module) {
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
