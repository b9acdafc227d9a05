/**
 * Test helper: two sign-ins at once on the format-2 audit chain (tasks hchain, hfix): the first
 * holds the chain's lock row (audit_chain_lock) until a second transaction waits on it, standing for
 * the few ms of an ordinary commit. Used by test/integration/audit/pending-events.test.ts and the
 * red team rt40 (test/integration/attacks/rt40-redteam.test.ts).
 */
import type pg from 'pg';

/**
 * Runs `statement` (SQL text, e.g. a token function's call) on `client` in a transaction that
 * commits as soon as another transaction waits on its transaction id (pg_locks; at most 5 s, then
 * it commits anyway). Resolves when that transaction has committed.
 */
export function commitWhenWaitedOn(client: pg.ClientBase, statement: string): Promise<unknown> {
  return client.query(
    `BEGIN;
     ${statement};
     DO $$
     BEGIN
       FOR i IN 1..5000 LOOP
         EXIT WHEN EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'transactionid' AND NOT l.granted
                             AND l.transactionid::text = (txid_current() % 4294967296)::text);
         PERFORM pg_sleep(0.001);
       END LOOP;
     END
     $$;
     COMMIT;`,
  );
}

/** Waits (at most 5 s) until backend `pid` holds the chain's lock row (its RowShareLock on audit_chain_lock stands for it). */
export async function untilChainLockHeld(pool: pg.Pool, pid: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const held = await pool.query("SELECT 1 FROM pg_locks WHERE pid = $1 AND relation = 'audit_chain_lock'::regclass AND mode = 'RowShareLock' AND granted", [pid]);
    if (held.rowCount) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}
