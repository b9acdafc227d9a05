/** Test helper: a control database whose answers reach the caller late (a busy event loop or network). */
import { openControlDb, type ControlDb } from '../../src/control/db';

/** A ControlDb whose held queries answer only after release(); `ran` resolves when the first held one has run. */
export interface HeldControlDb {
  db: ControlDb;
  /** Lets every held answer through (idempotent). */
  release(): void;
  /** Resolves once a held query has run on the server (its answer then waits for release()). */
  ran: Promise<void>;
}

/**
 * Opens a second ControlDb on `url` (2 connections, no migration) whose `pool.query` runs each
 * statement at once but, when `hold(sql)` is true at the time of the call, hands its answer back
 * only after release(). Close it with `db.close()`.
 */
export async function openHeldControlDb(url: string, hold: (sql: string) => boolean): Promise<HeldControlDb> {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((r) => (release = r));
  let ranNow: () => void = () => undefined;
  const ran = new Promise<void>((r) => (ranNow = r));
  const db = await openControlDb(url, { migrate: false, poolSize: 2 });
  const realQuery = db.pool.query.bind(db.pool) as (...args: unknown[]) => Promise<unknown>;
  (db.pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = async (...args: unknown[]) => {
    const held = hold(typeof args[0] === 'string' ? args[0] : String((args[0] as { text?: string })?.text ?? ''));
    const r = await realQuery(...args);
    if (held) {
      ranNow();
      await gate;
    }
    return r;
  };
  return { db, release: () => release(), ran };
}
