/**
 * Requester checks at decision time (issue 24, item 4): a queued write may run only while the API
 * key that queued it is neither revoked nor expired and its identity is enabled. Approving checks
 * this before anything runs (src/approvals/execute.ts: the approval ends `failed` with the code,
 * which agents read through interlock_approval_status, spec/errors-v1.json `approvalFailures`), and
 * the console shows the problem on a pending approval before anyone clicks.
 *
 * An approval with no key (key_id null: made directly on the control plane, e.g. by tests; every
 * write an agent queues through the gateway records its key) is checked by its identity only, and
 * so is one queued with an OAuth access token (key_id `token` or `token:<jti>`, issue 26): there is
 * no API key to look up, and before this rule every such write ended failed `key_revoked`.
 */
import type pg from 'pg';
import type { ControlDb } from '../control/db';
import type { ApprovalRecord } from '../control/approvals';

/** Why the requester can no longer have a write run, as an approvalFailures code. */
export type RequesterProblem = 'identity_disabled' | 'key_revoked' | 'key_expired';

/** What operators are told for each problem (the console and the failure cause). */
export const REQUESTER_PROBLEMS: Readonly<Record<RequesterProblem, string>> = Object.freeze({
  identity_disabled: 'the requesting identity is disabled (or no longer exists)',
  key_revoked: 'the API key that queued this write has been revoked (or no longer exists)',
  key_expired: 'the API key that queued this write has expired',
});

/**
 * A requester problem as operators are warned of it before deciding (the console's detail, `GET
 * /admin/v1/approvals/{id}/review`, `interlock approval show|approve`): the code, and one sentence
 * saying approving will not run the write and how it would end.
 */
export interface RequesterWarning {
  code: RequesterProblem;
  message: string;
}

/** The warning for `problem`, or null for none (the same text on every operator surface). */
export function requesterWarning(problem: RequesterProblem | null): RequesterWarning | null {
  return problem ? { code: problem, message: `Approving will not run this write: ${REQUESTER_PROBLEMS[problem]}. It would end failed (${problem}).` } : null;
}

/**
 * Requester problems no operator can fix (issue hnu4b item a): a revoked or expired API key stays
 * so, so a write it queued can never run; the agent must send it again with a valid key. A disabled
 * identity can be enabled again, so its write may be requeued.
 */
export const PERMANENT_REQUESTER_PROBLEMS: ReadonlySet<RequesterProblem> = new Set<RequesterProblem>(['key_revoked', 'key_expired']);

type Queryable = ControlDb | pg.ClientBase;
/** SQL: t.key_id names an access token (src/auth/token-identities.ts), not an API key. */
const TOKEN_KEY_SQL = "(t.key_id = 'token' OR t.key_id LIKE 'token:%')";
const q = (db: Queryable) => ('pool' in db ? db.pool : db);

/**
 * The requester problem of each approval (by id), judged at `now`; approvals without one are not in
 * the map. One query whatever the number of approvals. Order of precedence: identity disabled,
 * key revoked (or missing), key expired.
 */
export async function requesterProblems(db: Queryable, approvals: Pick<ApprovalRecord, 'id' | 'identityId' | 'keyId'>[], now: Date = new Date()): Promise<Map<string, RequesterProblem>> {
  const out = new Map<string, RequesterProblem>();
  if (approvals.length === 0) return out;
  const r = await q(db).query<{ n: number; identity_ok: boolean; key_missing: boolean; revoked: boolean; expired: boolean }>(
    `SELECT t.n, COALESCE(NOT i.disabled, false) AS identity_ok, (t.key_id IS NOT NULL AND NOT ${TOKEN_KEY_SQL} AND k.id IS NULL) AS key_missing,
            (k.revoked_at IS NOT NULL) AS revoked, (k.expires_at IS NOT NULL AND k.expires_at <= $3) AS expired
       FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(identity_id, key_id, n)
       LEFT JOIN identities i ON i.id = t.identity_id
       LEFT JOIN api_keys k ON k.id = t.key_id AND k.identity_id = t.identity_id`,
    [approvals.map((a) => a.identityId), approvals.map((a) => a.keyId), now],
  );
  for (const row of r.rows) {
    const a = approvals[Number(row.n) - 1];
    const problem: RequesterProblem | null = !row.identity_ok ? 'identity_disabled' : row.key_missing || row.revoked ? 'key_revoked' : row.expired ? 'key_expired' : null;
    if (problem) out.set(a.id, problem);
  }
  return out;
}

/** The requester problem of one approval at `now`, or null when its key and identity may still have it run. */
export async function requesterProblem(db: Queryable, a: Pick<ApprovalRecord, 'id' | 'identityId' | 'keyId'>, now: Date = new Date()): Promise<RequesterProblem | null> {
  return (await requesterProblems(db, [a], now)).get(a.id) ?? null;
}
