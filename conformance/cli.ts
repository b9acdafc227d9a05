/**
 * Command line of the conformance suite:
 *   interlock-conformance --url http://host:port/mcp [--profile P]... [--api-key K] [--tool-map FILE]
 *                         [--pg-url URL --source-id ID [--restricted-api-key K]] [--json] [--junit FILE] [--verbose] ...
 *   interlock-conformance sql-fixture --pg-url URL [--database NAME]
 * Prints one PASS/FAIL/SKIP line per rule, grouped by profile, and "N passed, N failed".
 * Exit codes (README "Exit codes"): 0 every selected rule passed; 1 a rule failed (or the SQL pack
 * found an escape, a leak or a false positive); 2 usage error, unreadable spec or tool map, an
 * unreachable server or database, or an --api-key the server refuses.
 */
import * as fs from 'node:fs';
import { parseArgs } from 'node:util';
import { parseProfiles } from './profiles';
import { casesOf, toJUnit, type ReportCase } from './report';
import { runConformance, type RunReport } from './run';
import { loadToolMap, INTERLOCK_TOOL_MAP, type ToolMap } from './toolmap';
import { createFixture, FIXTURE_SETUP_TEXT } from './sql/fixture';
import { runSqlPack, sqlCases, type SqlPackReport } from './sql/run';
import { SQL_CLASSES, type SqlClass } from './sql/payloads';

const USAGE = `Usage: interlock-conformance --url http://host:port/mcp [options]
       interlock-conformance sql-fixture --pg-url postgres://… [--database NAME]

Options:
  --url URL          the MCP endpoint to test (required)
  --profile P        mcp-stateless, interlock-v1 or sql-gateway (repeatable or comma-separated;
                     default: mcp-stateless,interlock-v1)
  --api-key KEY      a valid API key (enables authenticated tool-call checks; needed by sql-gateway
                     on servers that require one)
  --tool-map FILE    another server's tool and argument names (JSON; see README "Tool maps")
  --pg-url URL       sql-gateway: the fixture database, as a role that may read its state
  --source-id ID     sql-gateway: the source id the server uses for the fixture database
  --restricted-api-key KEY
                     sql-gateway, class sql.rows: the key of an identity that may read only the rows
                     of icf_rows where tenant = 'a' (without it the class is skipped)
  --num-runs N       generated requests per property, statements of sql.rows (default 100)
  --seed S           base seed, to replay a run (printed at the end of every run)
  --spec DIR         folder with protocol-v1.json, errors-v1.json, mcp-tools-v1.json
  --rule ID          run only this rule id (repeatable; sql.<class> selects sql-gateway classes)
  --no-examples      run the properties only
  --timeout MS       per-request timeout (default 15000)
  --retries N        retries of a request answered 429, each after its Retry-After (default 8)
  --json             print the whole report as JSON on stdout instead of the text report
  --junit FILE       also write a JUnit XML report to FILE
  --verbose          print every counterexample in full (default: one screen)
  -h, --help         this text

Exit codes: 0 passed; 1 a rule failed; 2 usage, spec, tool map, server or database error.`;

/** Runs the CLI with `argv` (without node and script); resolves to the process exit code. */
export async function main(argv: string[], out: (s: string) => void = (s) => process.stdout.write(s + '\n')): Promise<number> {
  if (argv[0] === 'sql-fixture') return fixtureCommand(argv.slice(1), out);
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        url: { type: 'string' },
        profile: { type: 'string', multiple: true },
        'api-key': { type: 'string' },
        'tool-map': { type: 'string' },
        'pg-url': { type: 'string' },
        'source-id': { type: 'string' },
        'restricted-api-key': { type: 'string' },
        'num-runs': { type: 'string' },
        seed: { type: 'string' },
        spec: { type: 'string' },
        rule: { type: 'string', multiple: true },
        'no-examples': { type: 'boolean' },
        timeout: { type: 'string' },
        retries: { type: 'string' },
        json: { type: 'boolean' },
        junit: { type: 'string' },
        verbose: { type: 'boolean' },
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
  let profiles;
  let toolMap: ToolMap | undefined;
  try {
    profiles = parseProfiles(values.profile);
    toolMap = values['tool-map'] ? loadToolMap(values['tool-map']) : undefined;
    if (profiles.includes('sql-gateway') && !values['pg-url']) throw new Error('the sql-gateway profile needs --pg-url (the fixture database)');
    const unknown = (values.rule ?? []).filter((r) => r.startsWith('sql.') && !(SQL_CLASSES as readonly string[]).includes(r.slice(4)));
    if (unknown.length > 0) throw new Error(`unknown rule ${unknown[0]} (sql-gateway rules: ${SQL_CLASSES.map((c) => `sql.${c}`).join(', ')})`);
  } catch (e) {
    out(`${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const text = values.json ? () => undefined : out;
  try {
    // --rule selects protocol rules and sql-gateway classes (sql.<class>); a run given only one kind runs only that kind.
    const sqlRules = values.rule?.filter((r) => r.startsWith('sql.'));
    const protocolRules = values.rule?.filter((r) => !r.startsWith('sql.'));
    const protocolProfiles = profiles.filter((p) => p !== 'sql-gateway');
    // One seed for the whole run (printed by each part), so one --seed replays both.
    const seed = int('seed', values.seed) ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
    let report: RunReport | undefined;
    if (protocolProfiles.length > 0 && (protocolRules === undefined || protocolRules.length > 0)) {
      report = await runConformance({
        url: values.url,
        apiKey: values['api-key'],
        profiles: protocolProfiles,
        toolMap,
        numRuns: int('num-runs', values['num-runs']),
        seed,
        specDir: values.spec,
        rules: protocolRules,
        skipExamples: values['no-examples'],
        timeoutMs: int('timeout', values.timeout),
        retries: int('retries', values.retries),
        verbose: values.verbose === true,
        log: text,
      });
    }
    let sql: SqlPackReport | undefined;
    if (profiles.includes('sql-gateway') && (sqlRules === undefined || sqlRules.length > 0)) {
      sql = await runSqlPack({
        url: values.url,
        apiKey: values['api-key'],
        pgUrl: values['pg-url']!,
        sourceId: values['source-id'],
        restrictedApiKey: values['restricted-api-key'],
        classes: sqlRules === undefined || sqlRules.length === 0 ? undefined : sqlRules.map((r) => r.slice(4) as SqlClass),
        seed,
        numRuns: int('num-runs', values['num-runs']),
        toolMap: toolMap ?? INTERLOCK_TOOL_MAP,
        timeoutMs: int('timeout', values.timeout),
        retries: int('retries', values.retries),
        verbose: values.verbose === true,
        log: text,
      });
    }
    const cases: ReportCase[] = [...(report ? casesOf(report.checks) : []), ...(sql ? sqlCases(sql) : [])];
    if (values.junit) fs.writeFileSync(values.junit, toJUnit(cases));
    if (values.json) out(JSON.stringify({ profiles, protocol: report ?? null, sql: sql ?? null, cases }, null, 2));
    const failed = cases.filter((c) => !c.passed).length;
    // --json prints exactly one JSON document: the overall line is for the text report only.
    const skipped = cases.filter((c) => c.skipped).length;
    if (report && sql) text(`overall: ${cases.filter((c) => c.passed && !c.skipped).length} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
    return failed > 0 ? 1 : 0;
  } catch (e) {
    out(`error: ${(e as Error).message}`);
    return 2;
  }
}

/** `sql-fixture`: creates the sql-gateway profile's fixture database and prints how to register it. */
async function fixtureCommand(argv: string[], out: (s: string) => void): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: { 'pg-url': { type: 'string' }, database: { type: 'string' }, help: { type: 'boolean', short: 'h' } }, strict: true }));
  } catch (e) {
    out(`${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    out(USAGE);
    return 0;
  }
  if (!values['pg-url']) {
    out(`sql-fixture needs --pg-url (a role that may create databases)\n\n${USAGE}`);
    return 2;
  }
  try {
    const f = await createFixture(values['pg-url'], values.database);
    out(`created fixture database ${f.database}\n  url: ${f.url}\n${FIXTURE_SETUP_TEXT}`);
    return 0;
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
