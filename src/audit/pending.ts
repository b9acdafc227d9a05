/**
 * Pending audit events (task hchain, migration 20261211140000000_pending-audit-events_hchain): the
 * events of a token sign-in (identity_created, grant_added, grant_revoked) that
 * interlock_provision_token_identity / interlock_sync_claim_grants stored as pending because another
 * transaction held the format-2 chain's lock row (audit_chain_lock) past a short wait (50 ms; none
 * while events are already pending: task hfix, migration 20261212101000000), instead of waiting longer. The
 * next append on that chain chains them first; this module is the gateway's background step that
 * chains them when no append comes: interlock_audit_seal_pending() (SECURITY DEFINER, SKIP LOCKED:
 * it never waits), every PENDING_SEAL_INTERVAL_MS and once at shutdown.
 *
 * docs/operators.md ("Audit trail", pending events) says what an operator sees.
 */
import type { ControlDb } from '../control/db';
import type { Logger } from 'pino';

/** How often the gateway chains pending events, in ms. */
export const PENDING_SEAL_INTERVAL_MS = 2000;

/** Age (ms) past which `interlock audit verify` names a pending event (fault pending_stale). */
export const PENDING_STALE_MS = 60_000;

/**
 * Chains the pending audit events (one format-2 batch, in their order, with their original times)
 * when the chain's lock row is free; never waits for it. Returns how many were chained (0: none
 * pending), or null when some are pending but another transaction holds the lock (they stay
 * pending). Throws the driver's error (e.g. 42501 for a role without EXECUTE of the function).
 */
export async function sealPendingAuditEvents(db: Pick<ControlDb, 'pool'>): Promise<number | null> {
  const r = await db.pool.query<{ n: number | null }>('SELECT interlock_audit_seal_pending() AS n');
  return r.rows[0]?.n ?? null;
}

/** A running pending-event sealer (startPendingSealer). */
export interface PendingSealer {
  /** Stops the timer, then seals once more (bounded by the pool's own timeouts; errors are logged). */
  close(): Promise<void>;
}

/**
 * Runs sealPendingAuditEvents every `intervalMs` (default PENDING_SEAL_INTERVAL_MS; one run at a time,
 * the timer unref'd) and once at close. Chained events are logged at info; a failure at warn, once
 * per distinct SQLSTATE until a run succeeds (a gateway role granted before the migration lacks
 * EXECUTE: `interlock db grant-runtime-role` again).
 */
export function startPendingSealer(opts: { db: Pick<ControlDb, 'pool'>; logger: Logger; intervalMs?: number }): PendingSealer {
  const { db, logger } = opts;
  let running: Promise<void> | null = null;
  let lastFailure: string | null = null;
  const run = (): Promise<void> => {
    if (running) return running;
    running = sealPendingAuditEvents(db)
      .then((n) => {
        lastFailure = null;
        if (n) logger.info({ component: 'audit', chained: n }, 'pending audit events chained');
      })
      .catch((err: unknown) => {
        const code = String((err as { code?: string }).code ?? 'error');
        if (code !== lastFailure) logger.warn({ component: 'audit', code }, 'chaining pending audit events failed');
        lastFailure = code;
      })
      .finally(() => {
        running = null;
      });
    return running;
  };
  const timer = setInterval(() => void run(), opts.intervalMs ?? PENDING_SEAL_INTERVAL_MS);
  timer.unref();
  return {
    async close() {
      clearInterval(timer);
      if (running) await running;
      await run();
    },
  };
}
