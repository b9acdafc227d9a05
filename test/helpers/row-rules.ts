/**
 * A row-rule fixture on this machine's PostgreSQL (issue 27): a fresh database with Chinook-like
 * tables (employee, customer with support_rep_id, invoice, a list-partitioned `ticket`, a view and a
 * user function), a reader role (SELECT only) and a writer role that may create schemas (it creates
 * InterLock's row views) and may write the tables, and the interlock_query handler over the real connector with an in-memory
 * governance store. `call` runs a statement as an identity with the given attributes.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { ADMIN_URL, createTempDatabase, pgServer, type TempDatabase } from './pg';
import { startPrivatePostgres, type PrivatePostgres } from './private-postgres';
import { MemoryGovernanceStore, type SourceRecord } from '../../src/governance/store';
import type { SourceRole } from '../../src/control/roles';
import { PostgresSourceConnector, type PostgresSourceSettings } from '../../src/sources/postgres/connector';
import { scanCatalog } from '../../src/sources/postgres/catalog';
import { queryHandler } from '../../src/pipeline/query';
import { ResultCache } from '../../src/pipeline/cache';
import { rowViewProvisioner } from '../../src/pipeline/row-views';
import { AnalysisCache } from '../../src/pipeline/analysis-cache';
import { initSqlParser } from '../../src/sql/analyze';
import type { SourceCatalog } from '../../src/sql/catalog-types';
import type { ToolCallContext, ToolOutcome } from '../../src/pipeline/types';
import { AccessEvaluator } from '../../src/governance/evaluator';
import { authorizeSql } from '../../src/pipeline/query';
import { policyStep } from '../../src/pipeline/04-policy';
import { planRowRules } from '../../src/pipeline/row-rules';
import { policyRowRestrictions } from '../../src/governance/policies';
import { runPlannedWrite } from '../../src/approvals/row-write';
import { failureCode } from '../../src/approvals/causes';

/** The fixture's schema and data: 6 employees, 60 customers, 240 invoices, 30 tickets in 3 partitions. */
export const ROW_FIXTURE_SQL = `
CREATE TABLE employee (employee_id int PRIMARY KEY, last_name text NOT NULL, region text NOT NULL);
CREATE TABLE customer (customer_id int PRIMARY KEY, support_rep_id int REFERENCES employee, country text NOT NULL, email text, credit numeric(10,2) NOT NULL, code character(2));
CREATE TABLE invoice (invoice_id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customer, total numeric(10,2) NOT NULL, billing_country text);
CREATE TABLE ticket (ticket_id int NOT NULL, region text NOT NULL, body text) PARTITION BY LIST (region);
CREATE TABLE ticket_eu PARTITION OF ticket FOR VALUES IN ('eu');
CREATE TABLE ticket_us PARTITION OF ticket FOR VALUES IN ('us');
CREATE TABLE ticket_ap PARTITION OF ticket FOR VALUES IN ('ap');
INSERT INTO employee SELECT g, 'emp' || g, (ARRAY['eu','us','ap'])[1 + g % 3] FROM generate_series(1, 6) g;
INSERT INTO customer SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE 1 + g % 6 END, (ARRAY['DE','US','JP','FR'])[1 + g % 4], 'c' || g || '@x.test', (g * 7 % 100) - 20, (ARRAY['aa','bb'])[1 + g % 2] FROM generate_series(1, 60) g;
INSERT INTO invoice SELECT g, 1 + g % 60, (g * 13 % 50) + 0.5, (ARRAY['DE','US','JP','FR', NULL])[1 + g % 5] FROM generate_series(1, 240) g;
INSERT INTO ticket SELECT g, (ARRAY['eu','us','ap'])[1 + g % 3], 'body ' || g FROM generate_series(1, 30) g;
CREATE VIEW customer_countries AS SELECT customer_id, country FROM customer;
CREATE FUNCTION customer_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM customer';
ANALYZE;
`;

/**
 * The support-rep role of the red team and view tests: customers by support rep, tickets by region,
 * invoices and employees whole. Employee 1 (attributes `{employee_id: 1}`) sees REP1_CUSTOMERS.
 */
export const REP_ROLE: SourceRole = {
  name: 'rep',
  statements: [
    { effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' },
    { effect: 'allow', action: 'read', resource: 'public.invoice' },
    { effect: 'allow', action: 'read', resource: 'public.employee' },
    { effect: 'allow', action: 'read', resource: 'public.ticket', rows: 'region = ANY(identity.regions)' },
  ],
};
/** The customer ids employee 1 supports (8 of 60). */
export const REP1_CUSTOMERS = [6, 12, 18, 24, 36, 42, 48, 54];

/** The running fixture. */
export interface RowFixture {
  db: TempDatabase;
  reader: string;
  writer: string;
  catalog: SourceCatalog;
  store: MemoryGovernanceStore;
  source: SourceRecord;
  connector: PostgresSourceConnector;
  /** The handler's analysis cache (it also holds the row-rule rewrites). */
  analyses: AnalysisCache;
  /** Scans the source again as the reader; later calls use the new catalogue (`catalog` is updated). */
  rescan(): Promise<SourceCatalog>;
  /** Replaces the roles granted to identity `id` on the source. */
  grant(id: string, roles: SourceRole[]): void;
  /** The audit details of the last call. */
  lastAudit(): Record<string, unknown>;
  /** What the handler reported through onRelationGone (a relation dropped since the scan), in order. */
  gone: Array<{ sourceId: string; object?: string }>;
  /** Runs interlock_query as identity `id` with `attributes`. */
  call(id: string, attributes: Record<string, unknown> | undefined, sql: string, params?: unknown[]): Promise<ToolOutcome>;
  /**
   * Runs a write as an approved write of identity `id` with `attributes` would run (issue 27): the
   * statement is first queued through interlock_query (it must answer `queued`, else its code is
   * returned), then re-planned with the store's current roles and policies exactly as
   * src/approvals/execute.ts does, and run by src/approvals/row-write.ts on the writer role.
   * Answers the rows changed, or the refusal / approval failure code.
   */
  write(id: string, attributes: Record<string, unknown> | undefined, sql: string, params?: unknown[]): Promise<{ rowCount: number } | { code: string }>;
  /** Runs SQL as the superuser on the fixture database. */
  admin<T extends pg.QueryResultRow = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

/**
 * Creates the fixture (about 1 s). `extraSql` runs after ROW_FIXTURE_SQL, before the catalog scan.
 * `adminUrl`: a superuser URL of another server to use (default ADMIN_URL, this machine's); the
 * reader and writer roles get a password, so a server with password authentication works too.
 */
export async function startRowFixture(extraSql = '', adminUrl: string = ADMIN_URL): Promise<RowFixture> {
  await initSqlParser();
  const db = await createTempDatabase('rows', adminUrl);
  const tag = randomBytes(4).toString('hex');
  const reader = `il_rr_${tag}`;
  const writer = `il_rw_${tag}`;
  const password = randomBytes(12).toString('hex');
  const su = new pg.Client({ connectionString: db.url });
  await su.connect();
  await su.query(ROW_FIXTURE_SQL + extraSql);
  await su.query(`CREATE ROLE "${reader}" LOGIN PASSWORD '${password}'; CREATE ROLE "${writer}" LOGIN PASSWORD '${password}';
    GRANT USAGE ON SCHEMA public TO "${reader}", "${writer}";
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO "${reader}";
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "${writer}";
    GRANT CREATE ON DATABASE "${db.name}" TO "${writer}";`);
  const readerUrl = new URL(db.url);
  readerUrl.username = reader;
  readerUrl.password = password;
  const scan = async (): Promise<SourceCatalog> => {
    const rc = new pg.Client({ connectionString: readerUrl.toString() });
    await rc.connect();
    try {
      return await scanCatalog(rc);
    } finally {
      await rc.end();
    }
  };
  let catalog = await scan();
  const analyses = new AnalysisCache();
  const { host, port } = pgServer(adminUrl);
  const settings: PostgresSourceSettings = { host, port, database: db.name, reader: { user: reader, password }, writer: { user: writer, password }, pool_size: 4 };
  const connector = new PostgresSourceConnector('rows', settings);
  const source: SourceRecord = { id: 'rows', type: 'postgres', name: 'rows', enabled: true, settings: settings as unknown as Record<string, unknown> };
  const store = new MemoryGovernanceStore();
  store.sources.set(source.id, source);
  const handler = queryHandler({
    store,
    connectors: { reader: () => connector },
    rateLimiter: { consume: async () => ({ ok: true as const }) },
    cache: new ResultCache({ ttlMs: 60_000, maxBytes: 8 * 1024 * 1024 }),
    catalog: async () => catalog,
    analysisCache: analyses,
    maskSecret: 'row-rules-test',
    rowViews: rowViewProvisioner(async (_s, sql) => {
      await connector.write(sql, []);
    }),
    onRelationGone: (f) => void gone.push({ sourceId: f.sourceId, ...(f.object !== undefined ? { object: f.object } : {}) }),
  });
  const gone: Array<{ sourceId: string; object?: string }> = [];
  let n = 0;
  let audit: Record<string, unknown> = {};
  const fixture: RowFixture = {
    lastAudit: () => audit,
    gone,
    db,
    reader,
    writer,
    get catalog() {
      return catalog;
    },
    store,
    source,
    connector,
    analyses,
    async rescan() {
      catalog = await scan();
      return catalog;
    },
    grant(id, roles) {
      store.grants = store.grants.filter((g) => g.identityId !== id);
      for (const role of roles) store.grants.push({ identityId: id, sourceId: 'rows', role });
    },
    call(id, attributes, sql, params = []) {
      const ctx = {
        requestId: `req_rows_${++n}`,
        apiKey: null,
        identity: { id, name: id, keyId: 'k', ...(attributes ? { attributes } : {}) },
        dialect: 'modern',
        protocolVersion: '2025-11-25',
        toolName: 'interlock_query',
        canonicalTool: 'interlock_query',
        signal: new AbortController().signal,
        auditDetails: (audit = {}),
      } as unknown as ToolCallContext;
      return handler({ source_id: 'rows', sql, params, max_rows: 10_000 }, ctx);
    },
    async write(id, attributes, sql, params = []) {
      const queued = await fixture.call(id, attributes, sql, params);
      if (codeOf(queued) !== 'queued') return { code: codeOf(queued) };
      const grants = await store.grantsForIdentity(id);
      const evaluator = new AccessEvaluator(grants);
      const { analysis, denied } = authorizeSql(evaluator, 'rows', sql, catalog);
      if (denied || !analysis.ok) return { code: denied ? codeOf(denied) : 'invalid_sql' };
      const policies = await store.activePolicies();
      const subject = { identityId: id, identityName: id, roles: evaluator.roleNames('rows'), sourceId: 'rows' };
      const pol = policyStep(policies, subject, analysis, catalog, new Date());
      if (!pol.ok) return { code: 'policy_denied' };
      const rows = planRowRules({ evaluator, sourceId: 'rows', analysis, catalog, attributes, sql, policyRows: policyRowRestrictions(policies, subject) });
      if (rows.kind === 'refused') return { code: codeOf(rows.outcome) };
      const r = await runPlannedWrite(connector, source, sql, params, rows.kind === 'ruled' ? rows.plan : null);
      if (r.ok) return { rowCount: r.rowCount };
      return { code: r.code ?? failureCode(r.err) };
    },
    async admin(sql, params = []) {
      return (await su.query(sql, params)).rows;
    },
    async close() {
      await connector.close();
      await su.end();
      await db.drop();
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      try {
        for (const r of [reader, writer]) await a.query(`DROP ROLE IF EXISTS "${r}"`);
      } finally {
        await a.end();
      }
    },
  };
  return fixture;
}

/**
 * Registers a suite's fixture hooks: `startRowFixture(extraSql)` with `grants` (identity → roles)
 * before all tests, `reset` SQL (run as superuser) before each, closed after all. Returns the
 * getter of the started fixture (call it in a test or a later beforeAll). With
 * `opts.privateServer` (a tag), the fixture is on a private PostgreSQL 18 started for the suite
 * (test/helpers/private-postgres.ts) and stopped after it, instead of this machine's server.
 */
export function useRowFixture(extraSql: string, reset: string, grants: Record<string, SourceRole[]>, opts: { privateServer?: string } = {}): () => RowFixture {
  let fx: RowFixture | undefined;
  let server: PrivatePostgres | undefined;
  beforeAll(async () => {
    if (opts.privateServer) server = await startPrivatePostgres(opts.privateServer);
    fx = await startRowFixture(extraSql, server?.adminUrl);
    for (const [id, roles] of Object.entries(grants)) fx.grant(id, roles);
  }, opts.privateServer ? 180_000 : 60_000);
  afterAll(async () => {
    await fx?.close();
    await server?.stop();
  });
  beforeEach(async () => {
    await fx!.admin(reset);
  });
  return () => fx!;
}

/** The rows of a result outcome (throws with the outcome for anything else). */
export function rowsOf(o: ToolOutcome): Array<Record<string, unknown>> {
  if (o.kind !== 'result') throw new Error(`expected rows, got ${JSON.stringify(o)}`);
  return (o.structuredContent as { rows: Array<Record<string, unknown>> }).rows;
}

/** The refusal or error code of an outcome, or 'ok'. */
export function codeOf(o: ToolOutcome): string {
  return o.kind === 'result' ? 'ok' : 'code' in o ? String(o.code) : o.kind;
}

/** The oracle of the differential row-rule tests: a twin database with PostgreSQL RLS. */
export interface RlsTwin {
  /** A superuser connection to the twin (policies are created on it, queries run after SET ROLE). */
  client: pg.Client;
  /** The per-identity role the twin's policies name (`TO "<role>"`), quoted where used. */
  role: string;
  close(): Promise<void>;
}

/**
 * Creates the twin of the row fixture (issue 27's differential tests): a fresh database holding
 * ROW_FIXTURE_SQL + `extraSql`, a role with USAGE on public and SELECT on every table, then `setup`
 * (run with the role's name: grants, ENABLE ROW LEVEL SECURITY). Closed with the database and role.
 */
export async function startRlsTwin(label: string, extraSql: string, setup: (role: string) => string): Promise<RlsTwin> {
  const db = await createTempDatabase(label);
  const role = `il_${label}_${randomBytes(4).toString('hex')}`;
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await client.query(ROW_FIXTURE_SQL + extraSql);
  await client.query(`CREATE ROLE "${role}"; GRANT USAGE ON SCHEMA public TO "${role}"; GRANT SELECT ON ALL TABLES IN SCHEMA public TO "${role}"; ${setup(role)}`);
  return {
    client,
    role,
    async close() {
      await client.end();
      await db.drop();
      const a = new pg.Client({ connectionString: ADMIN_URL });
      await a.connect();
      try {
        await a.query(`DROP ROLE IF EXISTS "${role}"`);
      } finally {
        await a.end();
      }
    },
  };
}
