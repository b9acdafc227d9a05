/**
 * Identities: the agents (and people) that hold API keys. Issue 3, Build 1; decisions.md
 * "Governance model". Names are lower case so that the self-approval check (operator name versus
 * requesting identity name) cannot be side-stepped by changing case.
 */
import type pg from 'pg';
import type { ControlDb } from './db';
import type { RefusalCode } from '../errors/vocabulary';
import { isUniqueViolation, withTransaction } from './db';
import { recordChange, type ChangeActor } from './change-audit';
import { ConflictError, NotFoundError, ValidationError } from './errors';
import { iso, newIdentityId } from './ids';
import { ATTRIBUTE_NAME, attributeNumberUsable } from '../sql/row-rules/predicate';

/**
 * Longest token subject (`sub`, in JavaScript string length: UTF-16 code units) a link takes and a
 * token may carry (task hul; OIDC Core bounds `sub` at 255 ASCII characters). Bounded so that DELETE
 * /admin/v1/identities/{name}/subjects, which takes it in the query string, always fits Node's
 * 16 KiB header limit: at most 1024 × 9 = 9,216 bytes URL-encoded (3 UTF-8 bytes per code unit at
 * most; even counted as 1024 code points of 4 bytes, 12,288).
 * The token verifier refuses a longer `sub` (invalid_claims), so no sign-in provisions one.
 */
export const MAX_TOKEN_SUBJECT = 1024;

/** An authenticated agent identity (contract: Governance, identity resolution). */
export interface Identity {
  /** Stable identity id (control database primary key, or a configured id). */
  id: string;
  /** Human-readable name, e.g. "demo-agent". */
  name: string;
  /** Id of the API key that authenticated this call (never the key itself); for an access token, "token:<jti>" (or "token" without a jti). */
  keyId: string;
  /** For an identity from an access token (issue 26): issuer, subject and token id (`jti`), never the token. */
  token?: { issuer: string; subject: string; jti: string | null };
  /**
   * The identity's attributes for policies and row rules (issue 27): the record's values
   * (IdentityRecord.attributes) over, for an identity from an access token, its claim values
   * (mergeAttributes).
   */
  attributes?: Record<string, unknown>;
  /**
   * An identity from an access token only: the attribute values its token's claims gave
   * (auth.issuers[].attribute_claims), before the record's values were put over them. A queued
   * ruled write keeps those its row rules read (ApprovalRecord.claimAttributes). Absent: none.
   */
  claimAttributes?: Record<string, unknown>;
}

/**
 * The attributes a caller has (issue 27, docs/row-rules.md "Attributes"): the identity record's
 * values win; claim values (from an access token, or those kept with a queued write) fill in the
 * rest. Either may be absent. Pure; neither argument is changed.
 */
export function mergeAttributes(record: Record<string, unknown> | null | undefined, claims: Record<string, unknown> | null | undefined): Record<string, unknown> {
  return { ...(claims ?? {}), ...(record ?? {}) };
}

/**
 * The claim values kept with a queued write (ApprovalRecord.claimAttributes) that the requester
 * still holds (red team rt27m finding 3): each kept value that a token of the identity presented
 * since the write was first queued (the oldest approval of its requeue chain, `approvalId`'s
 * `requeued_from` links) contradicts — its subject's last recorded attribute claims
 * (identity_subjects.claim_attributes, claims_seen_at) lack it or hold another value — is dropped:
 * its issuer has moved the requester since, so the old value must not write rows at approval (the
 * caller then fails closed with row_rule_attribute_missing unless the record holds the attribute).
 * Any subject of the identity counts, so a second subject whose tokens lack the claim drops it too
 * (fail closed). Null when none is left. One query.
 */
export async function claimsStillHeld(db: ControlDb | pg.ClientBase, identityId: string, approvalId: string, kept: Record<string, unknown> | null): Promise<Record<string, unknown> | null> {
  if (!kept || Object.keys(kept).length === 0) return null;
  const r = await ('pool' in db ? db.pool : db).query<{ claim_attributes: Record<string, unknown> | null }>(
    `WITH RECURSIVE chain AS (
       SELECT id, requeued_from, created_at FROM approvals WHERE id = $2
       UNION ALL SELECT p.id, p.requeued_from, p.created_at FROM approvals p JOIN chain c ON p.id = c.requeued_from)
     SELECT s.claim_attributes FROM identity_subjects s
      WHERE s.identity_id = $1 AND s.claims_seen_at > (SELECT min(created_at) FROM chain)`,
    [identityId, approvalId],
  );
  const held = { ...kept };
  for (const row of r.rows) {
    for (const name of Object.keys(held)) {
      const seen = row.claim_attributes ?? {};
      if (!Object.prototype.hasOwnProperty.call(seen, name) || JSON.stringify(seen[name]) !== JSON.stringify(held[name])) delete held[name];
    }
  }
  return Object.keys(held).length > 0 ? held : null;
}

/** Step 1's detailed answer: the identity, or the refusal code (spec/errors-v1.json) and a log-only reason. */
export type IdentityResolution = { identity: Identity } | { refusal: RefusalCode; reason: string };

/**
 * Resolves a presented Bearer API key to an identity. Returns null for an unknown, revoked or
 * expired key or a disabled identity. Must not throw for bad keys; throws only on infrastructure
 * failure (which the caller maps to the opaque tool execution failure).
 */
export interface IdentityResolver {
  resolve(apiKey: string): Promise<Identity | null>;
  /**
   * Optional, synchronous: true when `apiKey` can never resolve, judged by its form alone (e.g. it
   * does not match the API key format). Such a token is charged to the keyless budget before the
   * body is read, like no token at all (client-limits.ts keylessGate; red-team F4).
   */
  rejectsByFormat?(apiKey: string): boolean;
  /**
   * Optional: like resolve, but a refusal says which (invalid_api_key, invalid_token,
   * insufficient_scope, identity_provider_unavailable) and why (for the log, never the client).
   * Step 1 uses it when present (issue 26).
   */
  resolveDetailed?(token: string): Promise<IdentityResolution>;
  /**
   * Optional, synchronous: the identity `apiKey` resolves to when the resolver's cache answers it
   * now (a copy, exactly what resolve would return), else undefined — a miss, an expired entry, a
   * token this method does not judge; never a refusal (negative results are not cached), so the
   * caller then asks resolve/resolveDetailed. `scope` (the request's socket) may keep the key's
   * digest for later calls on it. Step 1 tries it first (issue 28 item 3: no promise per call for
   * an identity held in memory).
   */
  resolveNow?(apiKey: string, scope?: object): Identity | undefined;
}

/** Pattern of identity names, e.g. "demo-agent", "etl.bot", "ana@example.com". */
export const IDENTITY_NAME_PATTERN = /^[a-z0-9][a-z0-9_.@-]{0,127}$/;

/** One identity. Times are ISO-8601 UTC. */
export interface IdentityRecord {
  id: string;
  name: string;
  disabled: boolean;
  createdAt: string;
  disabledAt: string | null;
  /**
   * Token subjects linked to this identity (issue 26: identities from an identity provider), with
   * their last use (ISO-8601 UTC or null). Only in listIdentities, and only when there is one.
   */
  subjects?: Array<{ issuer: string; subject: string; lastUsedAt: string | null }>;
  /** Attributes row rules read as identity.<name> (issue 27); present only when there is one. */
  attributes?: Record<string, IdentityAttributeValue>;
}

/** A value of an identity attribute: a string, a finite number, a boolean, or a list of those. */
export type IdentityAttributeValue = string | number | boolean | Array<string | number | boolean>;

interface IdentityRow {
  id: string;
  name: string;
  disabled: boolean;
  created_at: Date;
  disabled_at: Date | null;
  attributes?: Record<string, IdentityAttributeValue>;
}

const COLS = 'id, name, disabled, created_at, disabled_at, attributes';

function toRecord(r: IdentityRow): IdentityRecord {
  const rec: IdentityRecord = { id: r.id, name: r.name, disabled: r.disabled, createdAt: iso(r.created_at)!, disabledAt: iso(r.disabled_at) };
  if (r.attributes && Object.keys(r.attributes).length > 0) rec.attributes = r.attributes;
  return rec;
}

/** Most attributes one identity holds, and most elements of one list value. */
export const MAX_IDENTITY_ATTRIBUTES = 64;
const MAX_LIST = 1000;
const MAX_TEXT = 1000;

function validAttributeValue(v: unknown): boolean {
  // A number beyond ±(2^53 − 1) was rounded when its JSON was parsed: never stored (rt48b B1).
  const scalar = (x: unknown) => (typeof x === 'string' && x.length <= MAX_TEXT && !x.includes('\u0000')) || (typeof x === 'number' && attributeNumberUsable(x)) || typeof x === 'boolean';
  return scalar(v) || (Array.isArray(v) && v.length <= MAX_LIST && v.every(scalar));
}

/**
 * Changes an identity's attributes (issue 27): each key of `changes` is set to its value, or removed
 * when the value is null. Names follow ATTRIBUTE_NAME (lower-case letters, digits, _); values are
 * strings (≤ 1000 characters), finite numbers within ±(2^53 − 1) (a larger one was rounded when its
 * JSON was parsed: red team rt48b B1), booleans, or lists of those (≤ 1000). Throws
 * ValidationError (every problem listed) or NotFoundError. Returns the identity as stored. Records
 * identity_attributes_changed ({identityId, identity, set: names, removed: names}; never values) in
 * the same transaction; changes that change nothing record nothing.
 */
export async function setIdentityAttributes(db: ControlDb, nameOrId: string, changes: unknown, actor: ChangeActor = {}): Promise<IdentityRecord> {
  if (!changes || typeof changes !== 'object' || Array.isArray(changes)) throw new ValidationError('attributes must be an object of name → value (null removes)');
  const problems: string[] = [];
  for (const [k, v] of Object.entries(changes)) {
    if (!ATTRIBUTE_NAME.test(k)) problems.push(`${k}: attribute names are 1-63 lower-case letters, digits or _, starting with a letter or _`);
    else if (v !== null && !validAttributeValue(v)) problems.push(`${k}: a value is a string, a finite number within ±(2^53 − 1) (write larger ids as strings), a boolean or a list of those (null removes the attribute)`);
  }
  if (problems.length) throw new ValidationError('invalid identity attributes', problems);
  const idn = await requireIdentity(db, nameOrId);
  return withTransaction(db, async (c) => {
    const cur = await c.query<IdentityRow>(`SELECT ${COLS} FROM identities WHERE id = $1 FOR UPDATE`, [idn.id]);
    if (!cur.rows[0]) throw new NotFoundError(`identity "${nameOrId}" not found`);
    const before = cur.rows[0].attributes ?? {};
    const entries = Object.entries(changes as Record<string, unknown>);
    // Names only: attribute values are data, never recorded.
    const setNames = entries.filter(([k, v]) => v !== null && JSON.stringify(before[k]) !== JSON.stringify(v)).map(([k]) => k).sort();
    const removed = entries.filter(([k, v]) => v === null && k in before).map(([k]) => k).sort();
    if (setNames.length === 0 && removed.length === 0) return toRecord(cur.rows[0]);
    const set = Object.fromEntries(entries.filter(([, v]) => v !== null));
    const r = await c.query<IdentityRow>(
      `UPDATE identities SET attributes = (attributes - $3::text[]) || $2::jsonb
       WHERE id = $1 AND (SELECT count(*) FROM jsonb_object_keys((attributes - $3::text[]) || $2::jsonb)) <= $4
       RETURNING ${COLS}`,
      [idn.id, JSON.stringify(set), removed, MAX_IDENTITY_ATTRIBUTES],
    );
    if (!r.rows[0]) throw new ValidationError(`an identity holds at most ${MAX_IDENTITY_ATTRIBUTES} attributes`);
    await recordChange(c, actor, 'identity_attributes_changed', { identityId: idn.id, identity: idn.name, set: setNames, removed });
    return toRecord(r.rows[0]);
  });
}

/** Throws ValidationError unless `name` matches IDENTITY_NAME_PATTERN. */
export function assertIdentityName(name: string): void {
  if (!IDENTITY_NAME_PATTERN.test(name)) {
    throw new ValidationError(`invalid identity name ${JSON.stringify(name)}: use 1-128 lower-case letters, digits, '.', '_', '@' or '-', starting with a letter or digit`);
  }
}

/**
 * Creates an enabled identity and records identity_created ({identityId, identity}) in the same
 * transaction. Throws ValidationError for a bad name, ConflictError when the name is taken.
 */
export async function createIdentity(db: ControlDb, name: string, actor: ChangeActor = {}): Promise<IdentityRecord> {
  assertIdentityName(name);
  try {
    return await withTransaction(db, async (c) => {
      const r = await c.query<IdentityRow>(`INSERT INTO identities (id, name) VALUES ($1, $2) RETURNING ${COLS}`, [newIdentityId(), name]);
      await recordChange(c, actor, 'identity_created', { identityId: r.rows[0].id, identity: name });
      return toRecord(r.rows[0]);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw new ConflictError(`identity "${name}" already exists`);
    throw err;
  }
}

/** Every identity, by name. */
export async function listIdentities(db: ControlDb): Promise<IdentityRecord[]> {
  const r = await db.pool.query<IdentityRow & { subjects: Array<{ issuer: string; subject: string; last_used_at: string | null }> | null }>(
    `SELECT ${COLS}, (SELECT json_agg(json_build_object('issuer', s.issuer, 'subject', s.subject, 'last_used_at', s.last_used_at) ORDER BY s.issuer, s.subject)
       FROM identity_subjects s WHERE s.identity_id = identities.id) AS subjects
     FROM identities ORDER BY name`,
  );
  return r.rows.map((row) => {
    const rec = toRecord(row);
    if (row.subjects?.length) rec.subjects = row.subjects.map((x) => ({ issuer: x.issuer, subject: x.subject, lastUsedAt: x.last_used_at ? iso(new Date(x.last_used_at)) : null }));
    return rec;
  });
}

/** The identity called `name`, or null (also for a name with a NUL, which PostgreSQL text cannot hold: red team rtlk). */
export async function getIdentityByName(db: ControlDb | pg.ClientBase, name: string): Promise<IdentityRecord | null> {
  if (name.includes('\u0000')) return null;
  const q = 'pool' in db ? db.pool : db;
  const r = await q.query<IdentityRow>(`SELECT ${COLS} FROM identities WHERE name = $1`, [name]);
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/** The identity with id `id`, or null. */
export async function getIdentity(db: ControlDb | pg.ClientBase, id: string): Promise<IdentityRecord | null> {
  const q = 'pool' in db ? db.pool : db;
  const r = await q.query<IdentityRow>(`SELECT ${COLS} FROM identities WHERE id = $1`, [id]);
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/** The identity named `nameOrId` (an `idn_…` value is taken as an id). Throws NotFoundError. */
export async function requireIdentity(db: ControlDb, nameOrId: string): Promise<IdentityRecord> {
  const found = /^idn_[0-9a-f]{20}$/.test(nameOrId) ? await getIdentity(db, nameOrId) : await getIdentityByName(db, nameOrId);
  if (!found) throw new NotFoundError(`identity "${nameOrId}" not found`);
  return found;
}

/**
 * Disables the identity: every key of it stops resolving (within the resolver's cache bound, see
 * DbIdentityResolver). Idempotent: records identity_disabled ({identityId, identity}) in the same
 * transaction only when it was enabled. Throws NotFoundError.
 */
export async function disableIdentity(db: ControlDb, nameOrId: string, actor: ChangeActor = {}): Promise<IdentityRecord> {
  return setIdentityDisabled(db, nameOrId, true, actor);
}

/** Re-enables a disabled identity. Idempotent: records identity_enabled only when it was disabled. Throws NotFoundError. */
export async function enableIdentity(db: ControlDb, nameOrId: string, actor: ChangeActor = {}): Promise<IdentityRecord> {
  return setIdentityDisabled(db, nameOrId, false, actor);
}

async function setIdentityDisabled(db: ControlDb, nameOrId: string, disabled: boolean, actor: ChangeActor): Promise<IdentityRecord> {
  const idn = await requireIdentity(db, nameOrId);
  return withTransaction(db, async (c) => {
    const r = await c.query<IdentityRow>(
      `UPDATE identities SET disabled = $2, disabled_at = CASE WHEN $2 THEN now() END WHERE id = $1 AND disabled <> $2 RETURNING ${COLS}`,
      [idn.id, disabled],
    );
    if (!r.rows[0]) {
      const same = await getIdentity(c, idn.id);
      if (!same) throw new NotFoundError(`identity "${nameOrId}" not found`);
      return same;
    }
    await recordChange(c, actor, disabled ? 'identity_disabled' : 'identity_enabled', { identityId: idn.id, identity: idn.name });
    return toRecord(r.rows[0]);
  });
}

/** What `interlock identity show` and GET /admin/v1/identities/{name} answer (issue 26 item 4). */
export interface IdentityDetail extends IdentityRecord {
  /** Token subjects linked to the identity, by issuer and subject (empty for a key-only identity). */
  subjects: Array<{ issuer: string; subject: string; createdAt: string; lastUsedAt: string | null }>;
  /** Its grants by source and role; `grantedBy` is `claims` for grants that follow a token's claims. */
  grants: Array<{ role: string; source: string; grantedBy: 'operator' | 'claims' }>;
  /** Its API keys: usable now, and all ever created. */
  keys: { active: number; total: number };
  /** Last use by any key or token subject (ISO 8601), or null. */
  lastUsedAt: string | null;
}

/** The identity named `nameOrId` with its token subjects, grants and key counts. Throws NotFoundError. */
export async function showIdentity(db: ControlDb, nameOrId: string): Promise<IdentityDetail> {
  const idn = await requireIdentity(db, nameOrId);
  const subjects = await db.pool.query<{ issuer: string; subject: string; created_at: Date; last_used_at: Date | null }>(
    'SELECT issuer, subject, created_at, last_used_at FROM identity_subjects WHERE identity_id = $1 ORDER BY issuer, subject',
    [idn.id],
  );
  const grants = await db.pool.query<{ role: string; source: string; granted_by: 'operator' | 'claims' }>(
    'SELECT role_name AS role, source_id AS source, granted_by FROM grants WHERE identity_id = $1 ORDER BY source_id, role_name',
    [idn.id],
  );
  const keys = await db.pool.query<{ active: number; total: number; last: Date | null }>(
    `SELECT count(*) FILTER (WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()))::int AS active, count(*)::int AS total, max(last_used_at) AS last
       FROM api_keys WHERE identity_id = $1`,
    [idn.id],
  );
  const uses = [keys.rows[0].last, ...subjects.rows.map((s) => s.last_used_at)].filter((d): d is Date => d !== null).map((d) => d.getTime());
  return {
    ...idn,
    subjects: subjects.rows.map((s) => ({ issuer: s.issuer, subject: s.subject, createdAt: iso(s.created_at)!, lastUsedAt: s.last_used_at ? iso(s.last_used_at) : null })),
    grants: grants.rows.map((g) => ({ role: g.role, source: g.source, grantedBy: g.granted_by })),
    keys: { active: keys.rows[0].active, total: keys.rows[0].total },
    lastUsedAt: uses.length ? iso(new Date(Math.max(...uses))) : null,
  };
}

/** A token subject's link to an identity (`interlock identity link|unlink`, POST/DELETE /admin/v1/identities/{name}/subjects). */
export interface IdentitySubjectLink {
  /** The identity's name and id. */
  identity: string;
  identityId: string;
  /** The token issuer (compared exactly with a token's `iss`) and subject (`sub`). */
  issuer: string;
  subject: string;
  /** link: true when this call linked it, false when it was linked to this identity already (nothing recorded). unlink: always true. */
  changed: boolean;
}

/** Longest issuer a link stores (as auth.issuers[].issuer allows). */
const MAX_ISSUER = 2048;

/**
 * Throws ValidationError (every problem listed) unless `issuer` is an http(s) URL string of at most
 * 2048 characters (the pattern of auth.issuers[].issuer; not checked against any gateway's
 * configuration, which the CLI may not know: it must equal the tokens' `iss` exactly, trailing slash
 * included) and `subject` a non-empty string of at most MAX_TOKEN_SUBJECT (1024) characters without NUL.
 */
export function assertTokenSubject(issuer: unknown, subject: unknown): asserts issuer is string {
  const problems: string[] = [];
  if (typeof issuer !== 'string' || !/^https?:\/\/\S/.test(issuer) || issuer.length > MAX_ISSUER || issuer.includes('\u0000')) problems.push(`issuer: an http(s) URL of at most ${MAX_ISSUER} characters, exactly as the tokens' "iss" (e.g. https://login.example.com/)`);
  if (typeof subject !== 'string' || subject.length === 0 || subject.length > MAX_TOKEN_SUBJECT || subject.includes('\u0000')) problems.push(`subject: the tokens' "sub", a non-empty string of at most ${MAX_TOKEN_SUBJECT} characters`);
  if (problems.length) throw new ValidationError('invalid token subject', problems);
}

/**
 * Links the token subject (`issuer`, `subject`) to the identity `nameOrId` (task hnu3 item 2), so a
 * token with that `iss` and `sub` signs in as it under `unknown_subjects: refuse` (the default).
 * Records identity_subject_linked ({identityId, identity, issuer, subject}) in the same transaction.
 * Idempotent: a subject already linked to this identity changes and records nothing (changed false).
 * Throws ValidationError (assertTokenSubject), NotFoundError (no such identity), ConflictError when
 * the subject is linked to another identity (unlink it there first).
 */
export async function linkIdentitySubject(db: ControlDb, nameOrId: string, issuer: unknown, subject: unknown, actor: ChangeActor = {}): Promise<IdentitySubjectLink> {
  assertTokenSubject(issuer, subject);
  const sub = subject as string;
  const idn = await requireIdentity(db, nameOrId);
  const taken = (other: string) => new ConflictError(`the token subject ${JSON.stringify(sub)} of ${issuer} is linked to identity "${other}": unlink it there first (interlock identity unlink ${other} --issuer ${issuer} --subject …)`);
  try {
    return await withTransaction(db, async (c) => {
      const ins = await c.query('INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES ($1, $2, $3) ON CONFLICT (issuer, subject) DO NOTHING', [issuer, sub, idn.id]);
      if (ins.rowCount === 0) {
        const cur = await c.query<{ identity_id: string; name: string }>('SELECT s.identity_id, i.name FROM identity_subjects s JOIN identities i ON i.id = s.identity_id WHERE s.issuer = $1 AND s.subject = $2', [issuer, sub]);
        if (cur.rows[0] && cur.rows[0].identity_id !== idn.id) throw taken(cur.rows[0].name);
        return { identity: idn.name, identityId: idn.id, issuer, subject: sub, changed: false };
      }
      await recordChange(c, actor, 'identity_subject_linked', { identityId: idn.id, identity: idn.name, issuer, subject: sub });
      return { identity: idn.name, identityId: idn.id, issuer, subject: sub, changed: true };
    });
  } catch (err) {
    // The identity was removed meanwhile (foreign key).
    if ((err as { code?: string })?.code === '23503') throw new NotFoundError(`identity "${nameOrId}" not found`);
    throw err;
  }
}

/**
 * Unlinks the token subject (`issuer`, `subject`) from the identity `nameOrId`: its tokens sign in as
 * it no more (at once on running gateways, on the identity_subjects notification; within the resolver's cache bound of 2 s should it be lost), and, under
 * `unknown_subjects: refuse`, not at all. In the same transaction it takes back all the identity's
 * claim grants (granted_by 'claims', red team rtlk): nothing records which subject's token gave
 * which, so those of subjects still linked are made again at their next sign-in (at most
 * TOUCH_INTERVAL_MS, 60 s, later for a subject signed in during the last minute with the same
 * claims); operator grants are kept. Records identity_subject_unlinked ({identityId, identity,
 * issuer, subject}) and one grant_revoked per claim grant ({grantedBy 'claims', identity,
 * identityId, issuer (the unlinked subject's), role}, source id; by source, role).
 * Throws ValidationError, NotFoundError when the identity does not exist or that subject is not
 * linked to it.
 */
export async function unlinkIdentitySubject(db: ControlDb, nameOrId: string, issuer: unknown, subject: unknown, actor: ChangeActor = {}): Promise<IdentitySubjectLink> {
  assertTokenSubject(issuer, subject);
  const sub = subject as string;
  const idn = await requireIdentity(db, nameOrId);
  return withTransaction(db, async (c) => {
    const del = await c.query('DELETE FROM identity_subjects WHERE issuer = $1 AND subject = $2 AND identity_id = $3', [issuer, sub, idn.id]);
    if (del.rowCount === 0) throw new NotFoundError(`identity "${idn.name}" has no token subject ${JSON.stringify(sub)} of ${issuer} (interlock identity show ${idn.name} lists its subjects)`);
    await recordChange(c, actor, 'identity_subject_unlinked', { identityId: idn.id, identity: idn.name, issuer, subject: sub });
    const taken = await c.query<{ role_name: string; source_id: string }>("DELETE FROM grants WHERE identity_id = $1 AND granted_by = 'claims' RETURNING role_name, source_id", [idn.id]);
    const sorted = taken.rows.sort((x, y) => (x.source_id === y.source_id ? (x.role_name < y.role_name ? -1 : 1) : x.source_id < y.source_id ? -1 : 1));
    for (const g of sorted) {
      await recordChange(c, actor, 'grant_revoked', { grantedBy: 'claims', identity: idn.name, identityId: idn.id, issuer, role: g.role_name }, g.source_id);
    }
    return { identity: idn.name, identityId: idn.id, issuer, subject: sub, changed: true };
  });
}
