/**
 * Operator tokens: the credentials of the admin API (/admin/v1). Issue 6, Build 4.
 *
 * They are deliberately not agent API keys:
 *  - their own table (operator_tokens, migration 20261129200000000) and their own prefix, "ilo_"
 *    (agent keys are "ilk_"); the agent resolver (src/control/keys.ts) only accepts "ilk_" secrets
 *    and only reads api_keys, so a token is refused on /mcp and /v1 as invalid_api_key (401), and
 *    the admin resolver below only reads operator_tokens, so an agent key is refused on /admin (401);
 *  - random 256 bits ("ilo_" + 43 base64url characters), stored only as HMAC-SHA-256 with the
 *    control database's key pepper, shown once at creation (`interlock operator-token create NAME`,
 *    which works on the database directly: a token cannot be minted through the API it protects).
 *
 * `name` is the operator name recorded on approvals (decided_by), so an operator whose name equals
 * an agent identity's name cannot approve that identity's writes (self-approval check).
 */
import crypto from 'node:crypto';
import type { ControlDb } from '../control/db';
import { getKeyPepper, isUniqueViolation, withTransaction } from '../control/db';
import { recordChange, revokeCredentialRow, SYSTEM_OPERATOR, type ChangeActor } from '../control/change-audit';
import { NotFoundError, ValidationError } from '../control/errors';
import { assertIdentityName } from '../control/identities';
import { iso } from '../control/ids';

/** Shape of every operator token secret. */
export const OPERATOR_TOKEN_PATTERN = /^ilo_[A-Za-z0-9_-]{43}$/;
/** Random bytes in a token (256 bits). */
export const OPERATOR_TOKEN_RANDOM_BYTES = 32;

/** A token as listed: never the secret or its hash. Times are ISO-8601 UTC. */
export interface OperatorTokenRecord {
  id: string;
  /** Operator name (recorded as decided_by on approvals). */
  name: string;
  /** Display prefix, e.g. "ilo_Q2x9aB". */
  prefix: string;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  /** Derived at read time: revoked wins over expired. */
  status: 'active' | 'revoked' | 'expired';
}

/** The result of createOperatorToken. `secret` exists only here. */
export interface CreatedOperatorToken {
  tokenId: string;
  name: string;
  secret: string;
  prefix: string;
  expiresAt: string | null;
}

/** The operator a presented token authenticates. */
export interface Operator {
  name: string;
  tokenId: string;
}

/** A fresh secret: "ilo_" + base64url(32 random bytes). */
export function generateOperatorTokenSecret(): string {
  return 'ilo_' + crypto.randomBytes(OPERATOR_TOKEN_RANDOM_BYTES).toString('base64url');
}

/** HMAC-SHA-256(pepper, "operator-token\0" + secret): the 32 bytes stored in operator_tokens.hash. */
export function hashOperatorToken(pepper: Buffer, secret: string): Buffer {
  return crypto.createHmac('sha256', pepper).update('operator-token\u0000', 'utf8').update(secret, 'utf8').digest();
}

function newTokenId(): string {
  return 'opt_' + crypto.randomBytes(10).toString('hex');
}

interface TokenRow {
  id: string;
  name: string;
  prefix: string;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
  expired: boolean;
}

const SELECT = `SELECT id, name, prefix, created_at, expires_at, revoked_at, last_used_at,
  (expires_at IS NOT NULL AND expires_at <= now()) AS expired FROM operator_tokens`;

function toRecord(r: TokenRow): OperatorTokenRecord {
  return {
    id: r.id,
    name: r.name,
    prefix: r.prefix,
    createdAt: iso(r.created_at)!,
    expiresAt: iso(r.expires_at),
    revokedAt: iso(r.revoked_at),
    lastUsedAt: iso(r.last_used_at),
    status: r.revoked_at ? 'revoked' : r.expired ? 'expired' : 'active',
  };
}

/**
 * Creates a token for operator `name` and returns its secret ONCE (only the keyed hash is stored).
 * Records operator_token_created ({tokenId, name, expiresAt}) in the same transaction, in `actor`'s name.
 * Throws ValidationError for a bad name, the reserved name "system" (the trail's name for the
 * gateway's own changes: a token so named would record its changes as the gateway's, red team
 * rtgov) or a past expiry.
 */
export async function createOperatorToken(db: ControlDb, name: string, opts: { expiresAt?: Date } = {}, actor: ChangeActor = {}): Promise<CreatedOperatorToken> {
  assertIdentityName(name);
  if (name === SYSTEM_OPERATOR) throw new ValidationError(`the operator name "${SYSTEM_OPERATOR}" is reserved for the gateway's own changes in the audit trail`);
  if (opts.expiresAt !== undefined && !(opts.expiresAt.getTime() > Date.now())) {
    throw new ValidationError('the expiry must be in the future');
  }
  const pepper = await getKeyPepper(db);
  for (let attempt = 0; ; attempt++) {
    const secret = generateOperatorTokenSecret();
    const tokenId = newTokenId();
    try {
      return await withTransaction(db, async (c) => {
        const r = await c.query<{ expires_at: Date | null }>(
          'INSERT INTO operator_tokens (id, name, hash, prefix, expires_at) VALUES ($1, $2, $3, $4, $5) RETURNING expires_at',
          [tokenId, name, hashOperatorToken(pepper, secret), secret.slice(0, 10), opts.expiresAt ?? null],
        );
        const expiresAt = iso(r.rows[0].expires_at);
        // The token's id and operator only: never its secret, prefix or hash.
        await recordChange(c, actor, 'operator_token_created', { tokenId, name, expiresAt });
        return { tokenId, name, secret, prefix: secret.slice(0, 10), expiresAt };
      });
    } catch (err) {
      if (isUniqueViolation(err) && attempt < 2) continue;
      throw err;
    }
  }
}

/** Every token (optionally of one operator), newest first. Never secrets or hashes. */
export async function listOperatorTokens(db: ControlDb, filter: { name?: string } = {}): Promise<OperatorTokenRecord[]> {
  const r = await db.pool.query<TokenRow>(`${SELECT} WHERE ($1::text IS NULL OR name = $1) ORDER BY created_at DESC, id`, [filter.name ?? null]);
  return r.rows.map(toRecord);
}

/**
 * Revokes a token (idempotent: only the first revocation records operator_token_revoked ({tokenId,
 * name}) in its transaction). Throws NotFoundError for an unknown id.
 */
export async function revokeOperatorToken(db: ControlDb, tokenId: string, actor: ChangeActor = {}): Promise<OperatorTokenRecord> {
  await withTransaction(db, async (c) => {
    const r = await revokeCredentialRow(c, 'operator_tokens', 'name', tokenId);
    if (!r) throw new NotFoundError(`operator token ${tokenId} not found`);
    if (r.fresh) await recordChange(c, actor, 'operator_token_revoked', { tokenId, name: r.value });
  });
  const rows = await db.pool.query<TokenRow>(`${SELECT} WHERE id = $1`, [tokenId]);
  return toRecord(rows.rows[0]);
}

const ZERO = Buffer.alloc(32);

/**
 * Resolves a presented operator token: null for anything that is not an active token (wrong shape,
 * unknown, revoked, expired), never an exception for a bad token. Not cached, so a revocation takes
 * effect on the next request. Updates last_used_at at most once a minute.
 */
export async function resolveOperatorToken(db: ControlDb, secret: string | null): Promise<Operator | null> {
  if (typeof secret !== 'string' || !OPERATOR_TOKEN_PATTERN.test(secret)) return null;
  const hash = hashOperatorToken(await getKeyPepper(db), secret);
  const r = await db.pool.query<{ id: string; name: string; hash: Buffer; usable: boolean; fresh: boolean }>(
    `SELECT id, name, hash, (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())) AS usable,
       (last_used_at IS NOT NULL AND last_used_at > now() - interval '60 seconds') AS fresh
     FROM operator_tokens WHERE hash = $1`,
    [hash],
  );
  const row = r.rows[0];
  const same = crypto.timingSafeEqual(row ? row.hash : ZERO, hash);
  if (!row || !same || !row.usable) return null;
  if (!row.fresh) {
    db.pool.query('UPDATE operator_tokens SET last_used_at = now() WHERE id = $1', [row.id]).catch(() => undefined);
  }
  return { name: row.name, tokenId: row.id };
}
