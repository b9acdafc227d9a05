/**
 * The governed floor's configuration for the bench's point read (issue 28, task h28f;
 * bench/lib/node-floor-server.ts BENCH_FLOOR_GOVERNED): what a gateway governed as InterLock is must
 * send, made with InterLock's own functions from the source's stored catalogue, and the template of
 * the gateway's own audit event read back from its trail.
 *
 * Source preludes, in PortalRead's order (src/sources/postgres/portal-read.ts): the function guard
 * of the statement's analysis (the connector's `functionGuard`: function, type and shape parts in one
 * statement) and the hierarchy guard of the relations it reads (hierarchy.ts `standaloneGuard`; sent
 * by the pipeline when the agent's policy is hierarchy-sensitive and the catalogue places the
 * relations in no tree, as for the bench's agent on Chinook's `track`); no settings binding (the
 * bench's agent has no row rules). Confirm on the wire with
 * `BENCH_DB=source bench/control-db-statements.ts` (same statements per call for both sides).
 */
import pg from 'pg';
import { loadCatalog } from '../../src/control/catalog';
import type { ControlDb } from '../../src/control/db';
import { analyzeSql, initSqlParser } from '../../src/sql/analyze';
import { PostgresSourceConnector } from '../../src/sources/postgres/connector';
import { standaloneGuard } from '../../src/sources/postgres/hierarchy';
import { resolveSettings, startupOptions } from '../../src/sources/postgres/settings';
import type { GovernedFloorConfig } from './node-floor-server';

/**
 * The GovernedFloorConfig of `sql` on source `sourceId` of the control database `db` (`controlUrl`
 * its URL), whose gateway has already answered at least one interlock_query of `sql` (its event is the
 * template). `lanes`: the writer lanes (2 as the gateway; 1: one commit in flight).
 * @throws Error when the catalogue, the analysis or the template event is missing
 */
export async function governedFloorConfig(db: ControlDb, controlUrl: string, sourceId: string, sql: string, lanes = 2): Promise<GovernedFloorConfig> {
  const catalog = await loadCatalog(db, sourceId);
  if (!catalog) throw new Error(`no catalogue for source ${sourceId}`);
  await initSqlParser();
  const a = analyzeSql(sql, catalog);
  if (!a.ok) throw new Error(`statement not analysed: ${JSON.stringify(a).slice(0, 200)}`);
  const fnGuard = a.userFunctions || a.resolvedNames || a.rowShapes || a.typeUses ? PostgresSourceConnector.prototype.functionGuard.call(null, catalog, a, a.rowShapes) : null;
  const relations = a.reads.map((r) => ({ schema: r.schema, name: r.table }));
  const hierGuard = relations.length > 0 ? standaloneGuard(relations) : null;
  const preludes = [fnGuard, hierGuard].filter((g): g is { text: string; values: string[] } => g !== null);
  const src = (await db.pool.query<{ settings: Parameters<typeof resolveSettings>[0] }>('SELECT settings FROM sources WHERE id = $1', [sourceId])).rows[0];
  const options = startupOptions(resolveSettings(src.settings), true, catalog.searchPath);
  const c = new pg.Client({ connectionString: controlUrl });
  await c.connect();
  try {
    const r = await c.query(
      `SELECT identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision, reason_code, source_id, action, fingerprint, relations, row_count, details
         FROM audit_events WHERE kind = 'tool_call' AND tool = 'interlock_query' AND decision = 'allowed' ORDER BY id DESC LIMIT 1`,
    );
    const e = r.rows[0] as Record<string, unknown> | undefined;
    if (!e) throw new Error('no interlock_query event in the trail yet');
    const details = { ...(e.details as Record<string, unknown>), source_id: e.source_id, action: e.action, fingerprint: e.fingerprint, relations: e.relations, row_count: e.row_count };
    return {
      preludes: preludes.map((p) => ({ text: p.text, values: [...p.values] })),
      options,
      lanes,
      event: {
        identityId: e.identity_id as string,
        keyId: e.key_id as string,
        tool: e.tool as string,
        canonicalTool: e.canonical_tool as string,
        dialect: e.dialect as 'modern',
        protocolVersion: e.protocol_version as string,
        decision: e.decision as 'allowed',
        reasonCode: (e.reason_code as string | null) ?? null,
        details,
      },
    };
  } finally {
    await c.end();
  }
}
