/** Test helper: a migrated control database in a fresh temporary PostgreSQL database. */
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';

export interface TestControlDb {
  db: ControlDb;
  temp: TempDatabase;
  /** Closes the pool and drops the database. */
  cleanup(): Promise<void>;
}

/** Creates a temporary database, applies the migrations and opens it. */
export async function freshControlDb(prefix: string, opts: { keyPepper?: string } = {}): Promise<TestControlDb> {
  const temp = await createTempDatabase(prefix);
  const db = await openControlDb(temp.url, { keyPepper: opts.keyPepper });
  return {
    db,
    temp,
    async cleanup() {
      await db.close();
      await temp.drop();
    },
  };
}

/** A tool-call audit event for tests: an allowed interlock_query read of chinook (1 row) with `details` merged in. */
export function toolCallEvent(requestId: string, details: Record<string, unknown> = {}): import('../../../src/pipeline/audit-types').ToolCallAuditEvent {
  return {
    requestId,
    time: new Date().toISOString(),
    identityId: null,
    keyId: null,
    tool: 'interlock_query',
    canonicalTool: 'interlock_query',
    dialect: 'handshake',
    protocolVersion: '2025-11-25',
    decision: 'allowed',
    reasonCode: null,
    durationMs: 3,
    details: { source_id: 'chinook', action: 'read', row_count: 1, ...details },
  };
}
