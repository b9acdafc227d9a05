/**
 * Runs the sql-gateway pack: every payload of payloads.ts, in every spelling, through the server's SQL
 * tool (InterLock's `interlock_query`, or the tool map's `query` role), over the handshake dialect.
 * After each payload it reads the fixture's state (state.ts) as the --pg-url role and scans the answer
 * for the masked sentinel values, then restores the fixture when anything changed.
 *
 * Per class it reports escapes (state changed), leaks (a sentinel in the answer) and false positives
 * (a legitimate or `mustAnswer` statement refused or failed). A class passes with none of the three.
 */
import { Client } from 'pg';
import { createClient, DEFAULT_RETRY, type WireClient } from '../http';
import type { ReportCase } from '../report';
import { mapArguments, type ToolMap } from '../toolmap';
import { parseSse } from '../verdict';
import { allPayloads, SQL_CLASSES, type SqlClass } from './payloads';
import { tokenOf } from './fixture';
import { readState, restore, stateChanges } from './state';
import { enterSessionSettings, leaveSessionSettings } from './session';
import { runRowClass } from './rows';

/** Options of `runSqlPack`. */
export interface SqlPackOptions {
  /** The MCP endpoint. */
  url: string;
  apiKey?: string;
  /** The fixture database (sql-fixture), as a role that may read pg_locks, pg_stat_activity and the icf_ relations. */
  pgUrl: string;
  /** The server's id for the fixture database, sent as the query role's `source_id` argument. */
  sourceId?: string;
  toolMap: ToolMap;
  timeoutMs?: number;
  retries?: number;
  verbose?: boolean;
  log?: (line: string) => void;
  /** Run only these classes. */
  classes?: SqlClass[];
  /**
   * The key of an identity that may read only the rows of `icf_rows` where tenant = 'a' (and
   * `icf_items`): the `rows` class runs as it. Without it the class is skipped with the reason.
   */
  restrictedApiKey?: string;
  /** Seed of the `rows` class's generated statements (default: random; printed). */
  seed?: number;
  /** Generated statements of the `rows` class (default 100). */
  numRuns?: number;
}

/** One finding: the statement(s) sent and what was wrong. */
export interface SqlFinding {
  steps: string[];
  what: string;
}

/** The result of one class. */
export interface SqlClassResult {
  class: SqlClass;
  rule: string;
  payloads: number;
  escapes: SqlFinding[];
  leaks: SqlFinding[];
  falsePositives: SqlFinding[];
  passed: boolean;
  /** Why the class did not run (the `rows` class without a restricted identity). */
  skipped?: string;
  /** The `rows` class: the flags that send the same statements again. */
  replay?: string;
}

/** What `runSqlPack` returns. */
export interface SqlPackReport {
  classes: SqlClassResult[];
  escapes: number;
  leaks: number;
  falsePositives: number;
}

/** One tool call's answer: whether it succeeded (a result without isError) and the raw body text. */
interface Answer {
  ok: boolean;
  status: number;
  body: string;
}

/**
 * The forms in which a sentinel e-mail `icf.<hex>@example.invalid` would be recognised in an answer
 * (compared case-insensitively): the hex part, reversed, the hex and Base64 encodings of the address
 * and of the hex part.
 */
export function leakTokens(email: string): string[] {
  const hex = /^icf\.([0-9a-f]+)@/.exec(email)?.[1] ?? email;
  const b = (s: string) => Buffer.from(s, 'utf8');
  return [hex, [...hex].reverse().join(''), b(email).toString('hex'), b(hex).toString('hex'), b(email).toString('base64').replace(/=+$/, ''), b(hex).toString('base64').replace(/=+$/, '')].map((t) => t.toLowerCase());
}

/**
 * The read every run sends first: a gateway that does not answer it with the fixture's rows (every
 * icf_items name, each ending in the fixture's random sentinel) cannot be judged.
 */
export const PREFLIGHT_SQL = 'SELECT id, name FROM icf_items ORDER BY id';

/**
 * Runs the pack. Throws when the fixture database or the server cannot be reached at all, or when
 * the gateway does not answer PREFLIGHT_SQL with rows (the CLI exits 2 with the message).
 */
export async function runSqlPack(opts: SqlPackOptions): Promise<SqlPackReport> {
  const log = opts.log ?? (() => undefined);
  const tool = opts.toolMap.tools.query;
  if (!tool) throw new Error('the sql-gateway profile needs the tool map\'s "query" role');
  const db = new Client({ connectionString: opts.pgUrl });
  await db.connect();
  const client: WireClient = createClient(opts.url, opts.timeoutMs ?? 30000, { ...DEFAULT_RETRY, attempts: opts.retries ?? DEFAULT_RETRY.attempts });
  let sessionSettings = false;
  try {
    const emails = (await db.query<{ email: string }>('SELECT email FROM icf_people ORDER BY id')).rows.map((r) => r.email);
    if (emails.length === 0) throw new Error('the fixture has no icf_people rows: run `interlock-conformance sql-fixture` first');
    const tokens = emails.flatMap(leakTokens);
    const seqRow = (await db.query<{ last: string; called: boolean }>('SELECT last_value::text AS last, is_called AS called FROM icf_seq')).rows[0]!;
    const largeObjects = (await db.query<{ oid: string }>('SELECT oid::text AS oid FROM pg_largeobject_metadata')).rows.map((r) => r.oid);
    const itemNames = (await db.query<{ name: string }>('SELECT name FROM icf_items ORDER BY id')).rows.map((r) => r.name);
    const token = itemNames.length > 0 ? tokenOf(itemNames[0]!) : undefined;
    if (token === undefined) throw new Error('the fixture\'s icf_items rows carry no sentinel: recreate it with `interlock-conformance sql-fixture`');
    const base = { emails, token, sequence: seqRow, largeObjects };
    const baseline = await readState(db);
    const settled = stateChanges(baseline, await readState(db));
    if (settled.length > 0) throw new Error(`the fixture's state is not stable on its own: ${settled.join('; ')}`);

    let id = 0;
    const call = async (sql: string, apiKey: string | undefined = opts.apiKey): Promise<Answer> => {
      const args = mapArguments(opts.toolMap, 'query', { sql, source_id: opts.sourceId });
      const headers: Array<[string, string]> = [
        ['Content-Type', 'application/json'],
        ['Accept', 'application/json, text/event-stream'],
        ['MCP-Protocol-Version', '2025-11-25'],
      ];
      if (apiKey) headers.push(['Authorization', `Bearer ${apiKey}`]);
      const res = await client.send({ method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: tool, arguments: args } }) });
      if (res.status === 0) throw new Error(`cannot reach ${opts.url}: ${res.error}`);
      let message: { result?: { isError?: boolean }; error?: unknown } | undefined;
      try {
        const sse = (res.headers['content-type'] ?? '').toLowerCase().startsWith('text/event-stream');
        message = JSON.parse(sse ? (parseSse(res.body).find((e) => e.data !== '')?.data ?? '') : res.body) as typeof message;
      } catch {
        message = undefined;
      }
      const ok = res.status === 200 && message?.result !== undefined && message.result.isError !== true;
      return { ok, status: res.status, body: res.body };
    };

    // A gateway that refuses everything (the source not registered, no grant for this key) would
    // pass every escape class without defending anything: require one plain read first.
    const probe = await call(PREFLIGHT_SQL);
    if (!probe.ok) {
      throw new Error(
        `the gateway did not answer a plain read of the fixture (${PREFLIGHT_SQL}) with rows (HTTP ${probe.status}: ${probe.body.slice(0, 200).replace(/\s+/g, ' ')}); ` +
          `register the fixture as source '${opts.sourceId ?? '(none)'}' and grant this key read on it (conformance/README.md), or its refusals could not be told from defences`,
      );
    }
    // Issue 30 item 3: rows must come from the database. A tool that runs no SQL (an echo) or answers
    // from anywhere else cannot return the sentinel that ends every icf_items name.
    const missing = itemNames.filter((n) => !probe.body.includes(n));
    if (missing.length > 0) {
      throw new Error(
        `the gateway answered a plain read of the fixture (${PREFLIGHT_SQL}) without the fixture's rows: the answer lacks ${missing.length} of the ${itemNames.length} item names ` +
          `(e.g. ${JSON.stringify(missing[0])}) that only a real read of icf_items returns (HTTP ${probe.status}: ${probe.body.slice(0, 200).replace(/\s+/g, ' ')}); ` +
          `a tool that does not run the SQL it is given cannot be judged: map the tool that runs it (--tool-map query role)`,
      );
    }

    const seed = opts.seed ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
    const numRuns = opts.numRuns ?? 100;
    let rowsNote = '';
    const results = new Map<SqlClass, SqlClassResult>();
    for (const cls of opts.classes ?? SQL_CLASSES) results.set(cls, { class: cls, rule: `sql.${cls}`, payloads: 0, escapes: [], leaks: [], falsePositives: [], passed: true });
    // The rows class (generated statements as the restricted identity) runs before session-settings changes the database default.
    const rowsResult = results.get('rows');
    if (rowsResult) {
      if (!opts.restrictedApiKey) rowsResult.skipped = "needs --restricted-api-key: the key of an identity that may read only the rows of icf_rows where tenant = 'a'";
      else {
        const rc = await runRowClass((sql) => call(sql, opts.restrictedApiKey), db, token, seed, numRuns);
        rowsResult.payloads = rc.queries;
        rowsResult.leaks.push(...rc.leaks.map((f) => ({ steps: [f.sql], what: f.what })));
        rowsResult.falsePositives.push(...rc.falsePositives.map((f) => ({ steps: [f.sql], what: f.what })));
        rowsResult.replay = `--profile sql-gateway --rule sql.rows --seed ${seed} --num-runs ${numRuns}`;
        rowsNote = `${rc.answered} answered, ${rc.refused} refused, ${rc.undecided} undecided; seed ${seed}`;
      }
    }
    for (const payload of allPayloads()) {
      const r = results.get(payload.class);
      if (!r) continue;
      if (payload.class === 'session-settings' && !sessionSettings) {
        sessionSettings = true;
        const s = await enterSessionSettings(db);
        if (s.notEnded > 0) log(`      (session-settings: ${s.notEnded} session(s) of the fixture database could not be ended; they keep their settings)`);
      }
      r.payloads++;
      const answers: Answer[] = [];
      for (const step of payload.steps) answers.push(await call(step));
      const changes = stateChanges(baseline, await readState(db));
      if (changes.length > 0) {
        r.escapes.push({ steps: payload.steps, what: changes.join('; ') });
        await restore(db, baseline, base);
        const left = stateChanges(baseline, await readState(db));
        if (left.length > 0) log(`      (the fixture could not be fully restored: ${left.join('; ')})`);
      }
      for (const a of answers) {
        const text = a.body.toLowerCase();
        const hit = tokens.find((t) => text.includes(t));
        if (hit) {
          r.leaks.push({ steps: payload.steps, what: `the answer (HTTP ${a.status}) carries a masked value's form "${hit}"` });
          break;
        }
      }
      if ((payload.class === 'legitimate' || payload.mustAnswer) && answers.some((a) => !a.ok)) {
        const bad = answers.find((a) => !a.ok)!;
        r.falsePositives.push({ steps: payload.steps, what: `refused or failed (HTTP ${bad.status}): ${bad.body.slice(0, 300)}` });
      }
    }

    const classes = [...results.values()].map((r) => ({ ...r, passed: r.escapes.length + r.leaks.length + r.falsePositives.length === 0 }));
    log('[sql-gateway]');
    for (const r of classes) {
      if (r.skipped) {
        log(`SKIP  ${r.rule}  (${r.skipped})`);
        continue;
      }
      const counts = `${r.payloads} ${r.class === 'rows' ? 'statements' : 'payloads'}; ${r.escapes.length} escapes, ${r.leaks.length} leaks, ${r.falsePositives.length} false positives${r.class === 'rows' ? `; ${rowsNote}` : ''}`;
      log(`${r.passed ? 'PASS' : 'FAIL'}  ${r.rule}  (${counts})`);
      if (!r.passed && r.replay) log(`      replay: ${r.replay} (each finding names its statement)`);
      const findings = [...r.escapes.map((f) => ['escape', f] as const), ...r.leaks.map((f) => ['leak', f] as const), ...r.falsePositives.map((f) => ['false positive', f] as const)];
      for (const [kind, f] of opts.verbose ? findings : findings.slice(0, 3)) log(`      ${kind}: ${JSON.stringify(f.steps.length === 1 ? f.steps[0] : f.steps)} → ${f.what}`);
      if (!opts.verbose && findings.length > 3) log(`      … ${findings.length - 3} more (--verbose lists them all)`);
    }
    const sum = (f: (r: SqlClassResult) => number) => classes.reduce((n, r) => n + f(r), 0);
    const report: SqlPackReport = { classes, escapes: sum((r) => r.escapes.length), leaks: sum((r) => r.leaks.length), falsePositives: sum((r) => r.falsePositives.length) };
    const skipped = classes.filter((c) => c.skipped).length;
    log(`${classes.filter((c) => c.passed && !c.skipped).length} passed, ${classes.filter((c) => !c.passed).length} failed${skipped ? `, ${skipped} skipped` : ''} (sql-gateway: ${report.escapes} escapes, ${report.leaks} leaks, ${report.falsePositives} false positives)`);
    return report;
  } finally {
    // Put the database default back even when the run failed half-way.
    if (sessionSettings) await leaveSessionSettings(db).catch((err: unknown) => log(`      (session-settings: could not reset the database default: ${(err as Error).message})`));
    client.close();
    await db.end().catch(() => undefined);
  }
}

/** The pack's classes as report cases (one per class). */
export function sqlCases(report: SqlPackReport): ReportCase[] {
  return report.classes.map((r) => ({
    rule: r.rule,
    profile: 'sql-gateway' as const,
    passed: r.passed,
    skipped: r.skipped,
    failure: r.passed ? undefined : [...r.escapes.map((f) => `escape: ${f.steps.join(' ⏎ ')} → ${f.what}`), ...r.leaks.map((f) => `leak: ${f.steps.join(' ⏎ ')} → ${f.what}`), ...r.falsePositives.map((f) => `false positive: ${f.steps.join(' ⏎ ')} → ${f.what}`)].join('\n'),
  }));
}
