/**
 * Where the admin API (/admin/v1) and the console make governance changes: identities, keys,
 * sources, roles, grants, policies and `apply`, each with its kind-config audit event.
 *
 * The gateway normally runs on a least-privilege runtime role (`interlock db grant-runtime-role`)
 * that may not write those tables. The operator connection (config database.operator_url,
 * INTERLOCK_OPERATOR_DATABASE_URL) is a small pool on a role given `interlock db
 * grant-operator-role`; governance writes go through it, reads and approvals stay on the gateway's
 * own pool. Without it, governance writes go through the gateway's role.
 *
 * Either way the role's privileges are checked once at start (has_any_column_privilege /
 * has_table_privilege on the tables each family of writes changes, and EXECUTE of
 * interlock_audit_append_v2 for the config event) and again after a permission error (SQLSTATE
 * 42501) or while refused. A write the role may not make answers ControlError 'forbidden' (HTTP 403
 * forbidden, spec/errors-v1.json) whose message names the fix, never the driver's text; every write
 * runs in one transaction with its config event, so a refused write changes nothing.
 */
import type { Logger } from 'pino';
import { ControlError } from '../control/errors';
import { CONTROL_CONNECT_TIMEOUT_MS, getKeyPepper, redactUrl, type ControlDb } from '../control/db';
import { controlPool } from '../control/targets';
import { APPLY_PRIVILEGES, CONFIG_EVENT_FUNCTION, GOVERNANCE_WRITE_PRIVILEGES, privilegesOf, type GovernanceFamily, type GovernancePrivilege } from '../control/governance-privileges';

export type { GovernanceFamily } from '../control/governance-privileges';
/**
 * The privileges each family's writes need (besides EXECUTE of interlock_audit_append_v2): the one
 * list `interlock db grant-operator-role` grants from (src/control/governance-privileges.ts).
 */
export { GOVERNANCE_WRITE_PRIVILEGES } from '../control/governance-privileges';

/** The admin API's and console's families, whose refusal start() reports ('claim_rules' is the gateway's own, reported by its sync). */
const FAMILIES: readonly GovernanceFamily[] = ['identity', 'subject', 'key', 'source', 'role', 'grant', 'policy', 'apply'];

/** The refusal's message when governance writes go through the gateway's own role (no operator connection). */
export const RUNTIME_ROLE_REFUSAL =
  "This gateway's database role may not change governance state (identities, keys, sources, roles, grants, policies): set INTERLOCK_OPERATOR_DATABASE_URL (database.operator_url) to a role given `interlock db grant-operator-role ROLE`, or make the change with the interlock CLI as the database owner.";

/** The refusal's message when the operator connection's role lacks a privilege. */
export const OPERATOR_ROLE_REFUSAL =
  "The operator connection's database role (INTERLOCK_OPERATOR_DATABASE_URL) may not make this change: run `interlock db grant-operator-role ROLE` for it as the database owner, or make the change with the interlock CLI as the owner.";

/** The answer when the operator connection cannot be opened or used (never the driver's text). */
export const OPERATOR_UNAVAILABLE = "The operator database connection (INTERLOCK_OPERATOR_DATABASE_URL) cannot be used now; the gateway's log says why.";

/**
 * How long a governance change on the operator connection waits for one lock, in ms (PostgreSQL
 * lock_timeout of its sessions). The runtime role may lock rows it must update (api_keys,
 * approvals, catalog_snapshots) and the format-2 chain's lock; a change that waits longer answers 503
 * unavailable, rolled back with its event, instead of never answering (red team rtop finding 3).
 */
export const OPERATOR_LOCK_TIMEOUT_MS = 10_000;

/** Codes of failures to reach or use a database connection (network, refused credentials, missing database, server shutdown). */
function isConnectionFailure(err: unknown): boolean {
  const code = (err as { code?: string })?.code ?? '';
  return /^(ECONN|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE)/.test(code) || /^(08|28|3D|57P)/.test(code) || /Connection terminated|timeout exceeded when trying to connect/i.test((err as Error)?.message ?? '');
}

/**
 * The database governance writes go through, and whether its role may make each family of them.
 * `via` says which it is: 'runtime' (the gateway's own pool, no operator connection configured) or
 * 'operator' (the operator connection, which this object closes).
 */
export class GovernanceAccess {
  private allowed: Promise<ReadonlySet<GovernanceFamily>> | null = null;

  constructor(
    /** The pool governance writes run on. */
    readonly db: ControlDb,
    readonly via: 'runtime' | 'operator',
    private readonly logger?: Logger,
  ) {}

  /** The families the role may write now (one catalog query; cached until a refusal or a 42501 asks again). */
  private families(fresh = false): Promise<ReadonlySet<GovernanceFamily>> {
    if (fresh || !this.allowed) {
      const p = checkGovernancePrivileges(this.db);
      this.allowed = p;
      p.catch(() => {
        if (this.allowed === p) this.allowed = null;
      });
    }
    return this.allowed;
  }

  /**
   * Checks the role's privileges (at start) and logs one warning when it may not make some governance
   * writes, or when the operator connection cannot be opened. Never throws. Returns the families
   * the role may write (empty when it may write none), or null when they could not be checked.
   */
  async start(): Promise<GovernanceFamily[] | null> {
    try {
      const ok = await this.families(true);
      const missing = FAMILIES.filter((f) => !ok.has(f));
      const allowed = FAMILIES.filter((f) => ok.has(f));
      if (missing.length === 0) return allowed;
      if (this.via === 'runtime') this.logger?.warn({ component: 'governance', refused: missing }, 'the gateway\'s database role may not change governance state: governance changes over /admin/v1 and /console are refused (403) until INTERLOCK_OPERATOR_DATABASE_URL names a role given `interlock db grant-operator-role` (reads, approvals and the CLI as the owner work)');
      else this.logger?.warn({ component: 'governance', refused: missing, url: redactUrl(this.db.url) }, 'the operator connection\'s database role lacks privileges: these governance changes over /admin/v1 and /console are refused (403) until `interlock db grant-operator-role ROLE` is run for it');
      return allowed;
    } catch (err) {
      this.logger?.warn({ component: 'governance', code: (err as { code?: string }).code, url: redactUrl(this.db.url) }, this.via === 'operator' ? 'the operator database connection cannot be opened: governance changes over /admin/v1 and /console answer 503 until it can' : 'the governance privileges of the gateway\'s database role could not be checked');
      return null;
    }
  }

  private refusal(): ControlError {
    return new ControlError('forbidden', this.via === 'runtime' ? RUNTIME_ROLE_REFUSAL : OPERATOR_ROLE_REFUSAL);
  }

  private unavailable(err: unknown): ControlError {
    this.logger?.warn({ component: 'governance', code: (err as { code?: string }).code, url: redactUrl(this.db.url) }, 'the operator database connection failed');
    return new ControlError('unavailable', OPERATOR_UNAVAILABLE);
  }

  /**
   * Runs one governance write `fn` on this pool when its role may make writes of `family`; else
   * throws ControlError 'forbidden' (the fix in its message) without touching anything. A permission
   * error (42501) from `fn` — a privilege revoked since the check, or an append the database refuses —
   * is answered the same way (its transaction rolled back: nothing half-made, no event skipped) and
   * the privileges are checked again. On the operator connection a connection failure, or a lock waited
   * for longer than OPERATOR_LOCK_TIMEOUT_MS (55P03), is ControlError 'unavailable'. Any other error is rethrown as is.
   */
  async run<T>(family: GovernanceFamily, fn: (db: ControlDb) => Promise<T>): Promise<T> {
    let ok: ReadonlySet<GovernanceFamily>;
    try {
      ok = await this.families();
      // A role refused before may have been granted since: ask the catalog again before refusing.
      if (!ok.has(family)) ok = await this.families(true);
    } catch (err) {
      if (this.via === 'operator' && isConnectionFailure(err)) throw this.unavailable(err);
      throw err;
    }
    if (!ok.has(family)) throw this.refusal();
    try {
      return await fn(this.db);
    } catch (err) {
      if ((err as { code?: string })?.code === '42501') {
        this.logger?.warn({ component: 'governance', family, via: this.via, code: '42501', reason: (err as Error).message }, 'a governance change was refused by the database (permission denied); nothing was changed');
        void this.families(true).catch(() => undefined);
        throw this.refusal();
      }
      if (this.via === 'operator' && !(err instanceof ControlError) && (err as { code?: string })?.code === '55P03') {
        this.logger?.warn({ component: 'governance', family, code: '55P03', lockTimeoutMs: OPERATOR_LOCK_TIMEOUT_MS }, 'a governance change waited too long for a lock another session holds (a long transaction, or a runtime-role session holding it); nothing was changed');
        throw new ControlError('unavailable', OPERATOR_UNAVAILABLE);
      }
      if (this.via === 'operator' && !(err instanceof ControlError) && isConnectionFailure(err)) throw this.unavailable(err);
      throw err;
    }
  }

  /** Closes the operator connection's pool (nothing for 'runtime': the gateway closes its own). Idempotent. */
  async close(): Promise<void> {
    if (this.via === 'operator') await this.db.close();
  }
}

/**
 * The governance families the role of `db` may write: every privilege of the family
 * (has_column_privilege for UPDATE of named columns, has_any_column_privilege for INSERT and any
 * UPDATE, which column grants satisfy; has_table_privilege for DELETE; has_function_privilege for
 * EXECUTE) and EXECUTE of interlock_audit_append_v2(text) for the config event.
 */
export async function checkGovernancePrivileges(db: ControlDb): Promise<ReadonlySet<GovernanceFamily>> {
  const keyOf = (t: string, p: string, c: string | null) => `${t}:${p}:${c ?? ''}`;
  const rows = new Map<string, [string, string, string | null]>();
  const expand = (x: GovernancePrivilege): Array<[string, string, string | null]> => (x[1] === 'UPDATE' && x[2] ? x[2].map((c) => [x[0], 'UPDATE', c]) : [[x[0], x[1], null]]);
  for (const x of [...APPLY_PRIVILEGES, ...Object.values(GOVERNANCE_WRITE_PRIVILEGES).flat()]) for (const e of expand(x)) rows.set(keyOf(...e), e);
  const all = [...rows.values()];
  const r = await db.pool.query<{ t: string; p: string; c: string | null; ok: boolean; fn: boolean }>(
    `SELECT x.t, x.p, x.c,
            CASE WHEN x.p = 'EXECUTE' THEN coalesce(has_function_privilege(to_regprocedure(x.t), 'EXECUTE'), false)
                 WHEN to_regclass(x.t) IS NULL THEN false
                 WHEN x.p = 'DELETE' THEN has_table_privilege(x.t, 'DELETE')
                 WHEN x.c IS NOT NULL THEN coalesce(has_column_privilege(x.t, x.c, x.p), false)
                 ELSE has_any_column_privilege(x.t, x.p) END AS ok,
            coalesce(has_function_privilege(to_regprocedure($4), 'EXECUTE'), false) AS fn
       FROM unnest($1::text[], $2::text[], $3::text[]) AS x(t, p, c)`,
    [all.map(([t]) => t), all.map(([, p]) => p), all.map(([, , c]) => c), CONFIG_EVENT_FUNCTION],
  );
  const granted = new Set(r.rows.filter((x) => x.ok).map((x) => keyOf(x.t, x.p, x.c)));
  const fn = r.rows.every((x) => x.fn);
  return new Set([...FAMILIES, 'claim_rules' as const].filter((f) => fn && privilegesOf(f).every((x) => expand(x).every((e) => granted.has(keyOf(...e))))));
}

/** Options of openGovernanceAccess. */
export interface GovernanceAccessOptions {
  /** The gateway's open control database (its pepper is shared with the operator connection). */
  db: ControlDb;
  /** config database.operator_url; unset: governance writes use `db`. */
  operatorUrl?: string;
  logger?: Logger;
  /** Largest number of operator connections (default 4). */
  poolSize?: number;
}

/**
 * The governance access of a gateway: the operator connection when `operatorUrl` is set (a pool of
 * at most 4 connections, application_name interlock-operator, several hosts and
 * target_session_attrs as the control URL allows, no migrations, each connect bounded by
 * CONTROL_CONNECT_TIMEOUT_MS, lock waits by OPERATOR_LOCK_TIMEOUT_MS), else the gateway's own pool.
 * Checks privileges once and logs one warning when governance writes would be refused (start()).
 * Never throws: an operator connection that cannot be opened answers 503 per write until it can.
 */
export async function openGovernanceAccess(opts: GovernanceAccessOptions): Promise<GovernanceAccess> {
  if (!opts.operatorUrl) {
    const g = new GovernanceAccess(opts.db, 'runtime', opts.logger);
    await g.start();
    return g;
  }
  const url = opts.operatorUrl;
  // New keys are hashed with the gateway's pepper (the operator role cannot read settings).
  const keyPepper = opts.db.keyPepper ?? (await getKeyPepper(opts.db));
  // Connecting (TCP, TLS, authentication, up to the server's first ready-for-query) is bounded: a host
  // that accepts TCP and never answers must neither hold the gateway's start (the check below) nor
  // hang a governance change (503 unavailable instead; red team rtop finding 2). Waiting for a pooled
  // connection shares the bound, which only a burst of more than 4 slow governance changes reaches.
  const pool = controlPool(url, { max: opts.poolSize ?? 4, application_name: 'interlock-operator', connectionTimeoutMillis: CONTROL_CONNECT_TIMEOUT_MS, options: `-c lock_timeout=${OPERATOR_LOCK_TIMEOUT_MS}` });
  pool.on('error', (err) => opts.logger?.warn({ component: 'governance', code: (err as { code?: string }).code }, 'idle operator-database connection failed'));
  let closed: Promise<void> | null = null;
  const operatorDb: ControlDb = {
    pool,
    url,
    keyPepper,
    close() {
      closed ??= pool.end();
      return closed;
    },
  };
  const g = new GovernanceAccess(operatorDb, 'operator', opts.logger);
  const allowed = await g.start();
  // Said only of what works: the warning start() logged covers the refused families (403) or an
  // operator connection that cannot be opened (503).
  if (allowed && allowed.length === FAMILIES.length) {
    opts.logger?.info({ component: 'governance', url: redactUrl(url) }, 'governance changes of /admin/v1 and /console go through the operator connection');
  } else if (allowed && allowed.length > 0) {
    opts.logger?.info({ component: 'governance', allowed, url: redactUrl(url) }, 'the other governance changes of /admin/v1 and /console (allowed) go through the operator connection');
  }
  return g;
}
