/**
 * A discovery fixture for row rules (issue 27 item 3): a control database and a source database
 * (`schemaSql` creates and fills its tables) with a reader role (SELECT on public) and a writer
 * role (may create InterLock's row views), registered as source `hr`, scanned and indexed with
 * `documentTables` (each `public.<name>` mapped on id, title and body). `deps` builds the discovery
 * tools' dependencies for one identity with a role of `statements`, with the row reader.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import type { RoleStatement, SourceRole } from '../../generated/role-v1';
import { openControlDb, type ControlDb } from '../../src/control/db';
import { putSource } from '../../src/control/sources';
import { loadCatalog } from '../../src/control/catalog';
import { scanSource } from '../../src/control/scan';
import { MemoryGovernanceStore, type SourceRecord } from '../../src/governance/store';
import { memoryRateLimiter } from '../../src/pipeline/05-rate-limit';
import { rowViewProvisioner } from '../../src/pipeline/row-views';
import { PostgresSourceConnector, type PostgresSourceSettings } from '../../src/sources/postgres/connector';
import { indexSource } from '../../src/discovery/indexer';
import type { IndexResult } from '../../src/discovery/types';
import type { Identity, ToolCallContext } from '../../src/tools/types';
import { ADMIN_URL, createTempDatabase, pgServer, type TempDatabase } from './pg';

/** One identity's view of the fixture: what the discovery handlers need. */
export interface RowDiscoveryCaller {
  identity: Identity;
  record: SourceRecord;
  role: SourceRole;
  deps: {
    store: MemoryGovernanceStore;
    rateLimiter: ReturnType<typeof memoryRateLimiter>;
    db: ControlDb;
    maskSecret: string;
    rowReads?: { connectors: { reader: () => PostgresSourceConnector }; rowViews: ReturnType<typeof rowViewProvisioner> };
  };
  /** A tool call context for `identity`. */
  ctx(): ToolCallContext;
}

/** The running fixture. */
export interface RowDiscoverySource {
  db: ControlDb;
  /** Superuser client on the source database. */
  su: pg.Client;
  connector: PostgresSourceConnector;
  /** What the first indexing reported. */
  indexed: IndexResult;
  /** Dependencies for an identity with `attributes` under `statements` (`rowReads` false: no row reader). */
  caller(attributes: Record<string, unknown> | undefined, statements: RoleStatement[], rowReads?: boolean): Promise<RowDiscoveryCaller>;
  close(): Promise<void>;
}

/** Starts the fixture (databases named with `prefix`). */
export async function startRowDiscoverySource(prefix: string, schemaSql: string, documentTables: string[]): Promise<RowDiscoverySource> {
  const control: TempDatabase = await createTempDatabase(prefix);
  const source: TempDatabase = await createTempDatabase(`${prefix}_src`);
  const db = await openControlDb(control.url);
  const tag = randomBytes(4).toString('hex');
  const reader = `il_drr_${tag}`;
  const writer = `il_drw_${tag}`;
  const su = new pg.Client({ connectionString: source.url });
  await su.connect();
  await su.query(`CREATE ROLE ${reader} LOGIN; CREATE ROLE ${writer} LOGIN;
    ${schemaSql}
    GRANT USAGE ON SCHEMA public TO ${reader}, ${writer};
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader}, ${writer};
    GRANT CREATE ON DATABASE "${source.name}" TO ${writer};`);
  const { host, port } = pgServer();
  const table = (t: string) => ({ table: `public.${t}`, id_column: 'id', title_column: 'title', body_column: 'body' });
  const settings = { host, port, database: source.name, reader: { user: reader }, writer: { user: writer }, tls: { mode: 'off' }, document_tables: documentTables.map(table) };
  await putSource(db, { id: 'hr', type: 'postgres', name: 'HR', settings });
  await scanSource(db, 'hr');
  const indexed = await indexSource(db, 'hr');
  const connector = new PostgresSourceConnector('hr', settings as unknown as PostgresSourceSettings);
  return {
    db,
    su,
    connector,
    indexed,
    async caller(attributes, statements, rowReads = true) {
      const identity: Identity = { id: `idn_${randomBytes(8).toString('hex')}`, name: 'agent', keyId: 'key_x', ...(attributes ? { attributes } : {}) };
      const store = new MemoryGovernanceStore();
      const record = { id: 'hr', type: 'postgres', name: 'HR', enabled: true, settings: { reader: { user: reader } } } as unknown as SourceRecord;
      store.sources.set('hr', record);
      const role = { name: 'r', statements } as SourceRole;
      store.grants.push({ identityId: identity.id, sourceId: 'hr', role });
      store.catalogs.set('hr', (await loadCatalog(db, 'hr'))!);
      const deps: RowDiscoveryCaller['deps'] = {
        store,
        rateLimiter: memoryRateLimiter({ perIdentity: { points: 1000, windowSeconds: 60 }, perSource: { points: 1000, windowSeconds: 60 } }),
        db,
        maskSecret: 'k',
        ...(rowReads ? { rowReads: { connectors: { reader: () => connector }, rowViews: rowViewProvisioner(async (_s, sql) => void (await connector.write(sql, []))) } } : {}),
      };
      const ctx = () =>
        ({ requestId: 'req_test', apiKey: 'k', identity, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined, auditDetails: {} }) as unknown as ToolCallContext;
      return { identity, record, role, deps, ctx };
    },
    async close() {
      await connector.close();
      await su.end();
      await db.close();
      await control.drop();
      await source.drop();
      const a = new pg.Client({ connectionString: ADMIN_URL });
      await a.connect();
      for (const r of [reader, writer]) await a.query(`DROP ROLE IF EXISTS ${r}`).catch(() => undefined);
      await a.end();
    },
  };
}
