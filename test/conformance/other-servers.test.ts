/**
 * Issue 30 item 5: the conformance package against MCP servers it was not written for, as their users run
 * them, on loopback: a server built on the SDK v1 `StreamableHTTPServerTransport` (sdk-v1-reference.ts),
 * MCP Toolbox (`postgres-execute-sql`) and DBHub (`execute_sql`, read-only mode) against a test database
 * holding the sql-gateway fixture, read by a role with SELECT on the fixture only (other-servers.ts).
 * (The SDK v2 reference is pinned in reference.test.ts.) Each server's verdicts are pinned profile by
 * profile, rule by rule, as conformance/README.md ("Pinned verdicts of other servers") lists them with the
 * MCP, JSON-RPC or RFC text each failure breaks. A pin that turns out wrong is a package bug to fix.
 */
import { runConformance, type RunReport } from '../../conformance/run';
import { runSqlPack, type SqlPackReport } from '../../conformance/sql/run';
import { createFixture } from '../../conformance/sql/fixture';
import { parseToolMap } from '../../conformance/toolmap';
import { ADMIN_URL, createTempDatabase, execSql, pgServer, type TempDatabase } from '../helpers/pg';
import { startSdkV1Server } from './sdk-v1-reference';
import { startDbHub, startToolboxExecuteSql, type PgLogin } from './other-servers';
import type { ReferenceServer } from './sdk-reference';

jest.setTimeout(300_000);

/** Failing rules of a run, sorted, with the report when they differ from `want`. */
function failing(report: RunReport): string[] {
  return report.checks.filter((c) => !c.passed && !c.skipped).map((c) => c.rule).sort();
}
/** Per class: [class, escapes > 0, leaks > 0, false positives > 0]. */
function sqlVerdicts(report: SqlPackReport): Array<[string, boolean, boolean, boolean]> {
  return report.classes.map((c) => [c.class, c.escapes.length > 0, c.leaks.length > 0, c.falsePositives.length > 0]);
}

const MCP_RUN = { profiles: ['mcp-stateless'], numRuns: 20, seed: 1 };

describe('mcp-stateless against a server built on the SDK v1 StreamableHTTPServerTransport', () => {
  let s: ReferenceServer;
  let report: RunReport;
  const lines: string[] = [];
  beforeAll(async () => {
    s = await startSdkV1Server();
    report = await runConformance({ url: s.url, ...MCP_RUN, log: (l) => lines.push(l), toolMap: { tools: { list: 'list_items' }, arguments: {}, fixed: {} } });
  });
  afterAll(async () => {
    await s?.close();
  });
  it('is judged by the handshake-era revisions (it answers a 2026-07-28 server/discover without a result)', () => {
    expect(report.handshakeOnly).toBe(true);
  });
  it('fails exactly the pinned rules', () => {
    const want = PINS.sdkV1;
    expect({ failing: failing(report), report: failing(report).join() === want.join() ? '' : lines.join('\n') }).toEqual({ failing: want, report: '' });
  });
});

describe('MCP Toolbox and DBHub (read-only mode) against the sql-gateway fixture', () => {
  let db: TempDatabase;
  const role = `il_conf_reader_${process.pid}`;
  const login = (): PgLogin => ({ ...pgServer(), database: db.name, user: role, password: 'conformance' });
  beforeAll(async () => {
    db = await createTempDatabase('conf_other');
    await createFixture(db.url, db.name);
    await execSql(db.url, `CREATE ROLE ${role} LOGIN PASSWORD 'conformance'; GRANT CONNECT ON DATABASE "${db.name}" TO ${role}; GRANT USAGE ON SCHEMA public TO ${role}; GRANT SELECT ON icf_items, icf_people, icf_log, icf_parts, icf_parts_a, icf_parts_b, icf_parts_b_one, icf_parts_def, icf_base, icf_kid TO ${role};`);
  });
  afterAll(async () => {
    await db?.drop();
    await execSql(ADMIN_URL, `DROP ROLE IF EXISTS ${role}`);
  });

  const servers: Array<[string, (l: PgLogin) => Promise<ReferenceServer>]> = [
    ['toolbox', startToolboxExecuteSql],
    ['dbhub', startDbHub],
  ];
  it.each(servers)('%s: mcp-stateless and sql-gateway verdicts are the pinned ones', async (name, start) => {
    const s = await start(login());
    try {
      const lines: string[] = [];
      const report = await runConformance({ url: s.url, ...MCP_RUN, log: (l) => lines.push(l), toolMap: { tools: { list: 'execute_sql' }, arguments: {}, fixed: {} } });
      const want = PINS[name as 'toolbox' | 'dbhub'];
      expect({ name, handshakeOnly: report.handshakeOnly, failing: failing(report), report: failing(report).join() === want.mcp.join() ? '' : lines.join('\n') }).toEqual({ name, handshakeOnly: want.handshakeOnly, failing: want.mcp, report: '' });
      const sql = await runSqlPack({ url: s.url, pgUrl: db.url, toolMap: parseToolMap({ tools: { query: 'execute_sql' }, arguments: { query: { sql: 'sql', source_id: null } } }) });
      expect({ name, classes: sqlVerdicts(sql) }).toEqual({ name, classes: want.sql });
    } finally {
      await s.close();
    }
  });
});

/**
 * sql-gateway per class [class, escapes, leaks, false positives]: both servers let SELECT reach the
 * fixture's side-effecting operators and take locks (escapes), and mask nothing (leaks);
 * `legitimateRefused`: some legitimate statements refused (DBHub's read-only keyword check).
 */
function sqlPin(o: { legitimateRefused: boolean }): Array<[string, boolean, boolean, boolean]> {
  const escapes = ['side-effect', 'locks-and-session'];
  const leaks = ['masked-leak', 'partition', 'session-settings'];
  // `rows` is skipped (neither server has identities to restrict), so it has no findings.
  return ['stacked', 'hidden-write', 'side-effect', 'procedural', 'locks-and-session', 'masked-leak', 'partition', 'legitimate', 'rows', 'session-settings'].map((c) => [c, escapes.includes(c), leaks.includes(c), c === 'legitimate' && o.legitimateRefused]);
}

/** The pinned verdicts (conformance/README.md, "Pinned verdicts of other servers"). */
const PINS = {
  sdkV1: ['HOST', 'NO-BATCH', 'ORIGIN'],
  toolbox: {
    handshakeOnly: false,
    mcp: ['ENVELOPE', 'HOST', 'HTTP-METHOD', 'JSONRPC-SHAPE', 'MCP-NAME', 'ORIGIN', 'VERSION-HEADER', 'results.plain'],
    sql: sqlPin({ legitimateRefused: false }),
  },
  dbhub: { handshakeOnly: false, mcp: ['ORIGIN'], sql: sqlPin({ legitimateRefused: true }) },
};
