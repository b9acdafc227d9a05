/**
 * A PostgreSQL source with one mapped document table, scanned and indexed, for the definition
 * guard's discovery tests (red teams rt49 V3, rt49c I1): a reader role of its own, source `hr` in a
 * control database of its own, and `titles(query)`: what interlock_discover shows a caller whose
 * role reads `public.*` but not `public.people.ssn`.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { ADMIN_URL, createTempDatabase, urlFor, type TempDatabase } from './pg';
import { scanSource } from '../../src/control/scan';
import { openControlDb, type ControlDb } from '../../src/control/db';
import { putSource } from '../../src/control/sources';
import { loadCatalog } from '../../src/control/catalog';
import { indexSource } from '../../src/discovery/indexer';
import { MemoryGovernanceStore } from '../../src/governance/store';
import { memoryRateLimiter } from '../../src/pipeline/05-rate-limit';
import { discoverHandler } from '../../src/tools/handlers/discover';
import type { Identity, ToolCallContext } from '../../src/tools/types';

/** The fixture: the control database, the source owner's connection, the reader role's quoted name, the hits' titles, and its teardown. */
export interface MappedSource {
  db: ControlDb;
  owner: pg.Client;
  reader: string;
  titles(query: string): Promise<unknown[]>;
  close(): Promise<void>;
}

/**
 * Creates the source database (`prefix` names the temporary databases), runs `ddl` as its owner
 * (`$READER` replaced by the reader role's name; the reader is granted USAGE on public, the ddl
 * grants SELECT), maps `table` (`public.x`, columns id, title, body), then scans and indexes `hr`.
 */
export async function mappedSource(prefix: string, ddl: string, table: string): Promise<MappedSource> {
  const agent: Identity = { id: 'idn_00000000000000000r49', name: 'agent', keyId: 'key_00000000000000000r49' };
  const reader = `il_${prefix}_rd_${randomBytes(4).toString('hex')}`;
  const control: TempDatabase = await createTempDatabase(`${prefix}_disc`);
  const source: TempDatabase = await createTempDatabase(`${prefix}_disc_src`);
  const db = await openControlDb(control.url);
  const owner = new pg.Client({ connectionString: source.url });
  await owner.connect();
  await owner.query(`CREATE ROLE ${reader} LOGIN PASSWORD 'reader-pw'; GRANT USAGE ON SCHEMA public TO ${reader}; ${ddl.replaceAll('$READER', reader)}`);
  const u = new URL(urlFor(source.name));
  await putSource(db, {
    id: 'hr',
    type: 'postgres',
    name: 'HR',
    settings: { host: u.hostname, port: Number(u.port || 5432), database: source.name, reader: { user: reader, password: 'reader-pw' }, tls: { mode: 'off' }, document_tables: [{ table, id_column: 'id', title_column: 'title', body_column: 'body' }] },
  });
  await scanSource(db, 'hr');
  await indexSource(db, 'hr');
  return {
    db,
    owner,
    reader,
    async titles(query: string): Promise<unknown[]> {
      const store = new MemoryGovernanceStore();
      store.sources.set('hr', { id: 'hr', type: 'postgres', name: 'HR', enabled: true, settings: {} } as never);
      store.grants.push({ identityId: agent.id, sourceId: 'hr', role: { name: 'r', statements: [{ effect: 'allow', action: 'discover', resource: '*' }, { effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.people.ssn' }] } });
      store.catalogs.set('hr', (await loadCatalog(db, 'hr'))!);
      const discover = discoverHandler({ store, rateLimiter: memoryRateLimiter({ perIdentity: { points: 1000, windowSeconds: 60 }, perSource: { points: 1000, windowSeconds: 60 } }), db, maskSecret: 'k' });
      const ctx = { requestId: 'req_test', apiKey: 'k', identity: agent, dialect: 'handshake', protocolVersion: '2025-11-25', toolName: 't', canonicalTool: 't', signal: new AbortController().signal, notify: () => undefined } as ToolCallContext;
      const o = await discover({ source_id: 'hr', query, limit: 20 }, ctx);
      if (o.kind !== 'result') throw new Error(JSON.stringify(o));
      return (o.structuredContent!.hits as Array<Record<string, unknown>>).map((h) => h.title);
    },
    async close(): Promise<void> {
      await owner.end();
      await db.close();
      await control.drop();
      await source.drop();
      const a = new pg.Client({ connectionString: ADMIN_URL });
      await a.connect();
      await a.query(`DROP ROLE IF EXISTS ${reader}`).catch(() => undefined);
      await a.end();
    },
  };
}
