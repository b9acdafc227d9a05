/**
 * The gateway audit key (red team rt45b finding F1): a secret kept outside the control database with
 * which the writer lanes tag their batches (chain format 5, chain.ts: HMAC-SHA-256 in place of the
 * unkeyed SHA-256 of format 3), so whoever holds only the runtime role's database credential can no
 * longer write batches `interlock audit verify` accepts as the gateway's.
 *
 * Configured as `audit.key` (INTERLOCK_AUDIT_KEY, the signing key) and `audit.previous_keys`
 * (INTERLOCK_AUDIT_PREVIOUS_KEYS, comma-separated: keys that only verify, for rotation); each at least
 * 32 characters (whitespace around not counted; so at least 32 bytes of UTF-8) of at least 8 distinct byte values. A batch records its key's id, a non-secret fingerprint (AUDIT_KEY_ID_LENGTH hex
 * digits of HMAC-SHA-256(key, "interlock-audit-key-id")), so verify picks the key that tagged it.
 * The embedded/demo path generates a key into its data dir (mode 0600) when none is configured.
 * docs/operators.md ("Audit trail": "The audit key").
 */
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ValidationError } from '../control/errors';

/**
 * Fewest characters (Unicode code points) an audit key has, whitespace around it not counted, so at
 * least as many bytes (UTF-8). Characters, not bytes, because that is what the config schema can say
 * (spec/config-v1.schema.json audit.key's pattern): `interlock` and the schema give every key the same
 * answer (task low47 item 4).
 */
export const AUDIT_KEY_MIN_CHARACTERS = 32;

/** What a key shorter than AUDIT_KEY_MIN_CHARACTERS is told, after the setting's name (here and for the config schema's pattern, src/control/config.ts). */
export const AUDIT_KEY_TOO_SHORT = `must be at least ${AUDIT_KEY_MIN_CHARACTERS} characters, whitespace around it not counted (a random secret: openssl rand -base64 48)`;

/**
 * Fewest distinct byte values an audit key has (red team rt46b G3): a key that is one character or a
 * short pattern repeated (`aaaa…`, `abab…`) is refused; a random key (base64 or hex, as
 * docs/operators.md says to make one) always has many more. A key that is any pattern written at least
 * twice (`abcdefgh` ×4, red team rt47a H3) is refused too.
 */
export const AUDIT_KEY_MIN_DISTINCT_BYTES = 8;

/** Hex digits of a key id (64 bits). */
export const AUDIT_KEY_ID_LENGTH = 16;

/** One audit key: `id` its fingerprint (AUDIT_KEY_ID_LENGTH lowercase hex digits), `secret` its bytes. */
export interface AuditKey {
  id: string;
  secret: Buffer;
}

/** The keys of a gateway or a verify: `signing` tags new batches (null: write format 3, unkeyed); `byId` every key that verifies (signing included). */
export interface AuditKeyring {
  signing: AuditKey | null;
  byId: ReadonlyMap<string, AuditKey>;
}

/** The id (fingerprint) of a key's bytes; not secret (a one-way HMAC of a fixed text under the key). */
export function auditKeyId(secret: Buffer): string {
  return createHmac('sha256', secret).update('interlock-audit-key-id').digest('hex').slice(0, AUDIT_KEY_ID_LENGTH);
}

/**
 * The length of the shortest pattern `b` repeats (KMP failure function): `b.length` when it is no
 * repetition; at most half of it when `b` is a pattern written twice or more, a cut-off copy at the
 * end included (red team rt47a H3: `abcdefgh` four times has 8 distinct bytes, and passed).
 */
function smallestPeriod(b: Buffer): number {
  if (b.length === 0) return 0;
  const fail = new Array<number>(b.length).fill(0);
  for (let i = 1, k = 0; i < b.length; i++) {
    while (k > 0 && b[i] !== b[k]) k = fail[k - 1];
    if (b[i] === b[k]) k++;
    fail[i] = k;
  }
  return b.length - fail[b.length - 1];
}

/**
 * An AuditKey of `text` (its UTF-8 bytes, whitespace around it left out). Throws ValidationError when shorter than
 * AUDIT_KEY_MIN_CHARACTERS characters (whitespace around not counted), or of fewer than AUDIT_KEY_MIN_DISTINCT_BYTES distinct bytes (a character or
 * short pattern repeated), or a pattern written twice or more (its shortest period at most half its
 * length); `what` names the setting in the message (never the value).
 */
export function auditKey(text: string, what = 'audit.key'): AuditKey {
  // Whitespace around a key is not part of it (nu46): a key pasted with its file's trailing newline, or
  // a YAML block scalar, is the same key as the embedded data dir's file (read trimmed) and the variable.
  const trimmed = text.trim();
  if ([...trimmed].length < AUDIT_KEY_MIN_CHARACTERS) throw new ValidationError(`${what} ${AUDIT_KEY_TOO_SHORT}`);
  const secret = Buffer.from(trimmed, 'utf8');
  if (new Set(secret).size < AUDIT_KEY_MIN_DISTINCT_BYTES || smallestPeriod(secret) * 2 <= secret.length) throw new ValidationError(`${what} must be a random secret, not a character or short pattern repeated (openssl rand -base64 48)`);
  return { id: auditKeyId(secret), secret };
}

/**
 * The keyring of a resolved config's `audit.key` and `audit.previous_keys` (either may be absent).
 * Throws ValidationError for a key shorter than AUDIT_KEY_MIN_CHARACTERS or too regular (auditKey).
 */
export function auditKeyring(audit: { key?: string; previous_keys?: readonly string[] } | undefined): AuditKeyring {
  const signing = audit?.key ? auditKey(audit.key, 'audit.key (INTERLOCK_AUDIT_KEY)') : null;
  const byId = new Map<string, AuditKey>();
  if (signing) byId.set(signing.id, signing);
  for (const [i, k] of (audit?.previous_keys ?? []).entries()) {
    const key = auditKey(k, `audit.previous_keys[${i}] (INTERLOCK_AUDIT_PREVIOUS_KEYS)`);
    if (!byId.has(key.id)) byId.set(key.id, key);
  }
  return { signing, byId };
}

/** The file an embedded (demo) control database keeps its generated audit key in, inside its data dir. */
export const EMBEDDED_AUDIT_KEY_FILE = 'audit-key';

/**
 * The audit key of an embedded data dir: read from `<dataDir>/audit-key`; when there is none, generated
 * there (48 random bytes, base64, mode 0600) with `create`, else null. Throws ValidationError when the
 * file holds a key auditKey refuses.
 */
export function embeddedAuditKey(dataDir: string, create: boolean): string | null {
  const file = join(dataDir, EMBEDDED_AUDIT_KEY_FILE);
  if (existsSync(file)) {
    const text = readFileSync(file, 'utf8').trim();
    auditKey(text, file);
    return text;
  }
  if (!create) return null;
  const text = randomBytes(48).toString('base64');
  writeFileSync(file, text + '\n', { mode: 0o600, flag: 'wx' });
  return text;
}
