/**
 * Registered data sources (spec/source-v1.schema.json). Issue 3, Build 1: id, type, name,
 * connection settings, reader and writer credentials, TLS settings, enabled flag.
 */
import type pg from 'pg';
import type { ConnectionOptions } from 'node:tls';
import { validateSourceDefinition, validateSourceDefinitionDocumentsSettings, validateSourceDefinitionPostgresSettings } from '../../generated/validators';
import type { DocumentsSourceSettings, PostgresSourceSettings, SourceDefinition } from '../../generated/source-v1';
import { isUniqueViolation, withTransaction, type ControlDb } from './db';
import { recordConfigEvent } from '../audit/writer';
import { recordChange, type ChangeActor } from './change-audit';
import { ConflictError, formatSchemaErrors, NotFoundError, PasswordRequiredError, ValidationError } from './errors';
import { iso } from './ids';
import { connectPinned, type PinnedClient } from '../sources/postgres/pinned-client';
import { refuseOnePartRolesOnSource } from './catalog-names';
import { untiePolicies } from './policies';
import { checkClaimRulesNaming, untieClaimRules } from './claim-mappings';
import { pinnedStartupOptions } from '../sources/postgres/session-settings';
import sourceSchema from '../../spec/source-v1.schema.json';

export type { DocumentsSourceSettings, PostgresSourceSettings, SourceDefinition } from '../../generated/source-v1';

/** Defaults applied by the data plane when a PostgreSQL setting is absent. */
export const POSTGRES_SOURCE_DEFAULTS = Object.freeze({ statement_timeout_ms: 15_000, lock_timeout_ms: 2_000, max_rows: 1_000, pool_size: 5 });

interface SourceRecordBase {
  id: string;
  name: string;
  description: string;
  enabled: boolean;
  createdAt: string;
  updatedAt: string;
}

/** A registered source. `settings` holds credentials: never print it unredacted (redactSourceSettings). */
export type SourceRecord =
  | (SourceRecordBase & { type: 'postgres'; settings: PostgresSourceSettings })
  | (SourceRecordBase & { type: 'documents'; settings: DocumentsSourceSettings });

interface SourceRow {
  id: string;
  type: 'postgres' | 'documents';
  name: string;
  description: string;
  enabled: boolean;
  settings: PostgresSourceSettings | DocumentsSourceSettings;
  created_at: Date;
  updated_at: Date;
}

const COLS = 'id, type, name, description, enabled, settings, created_at, updated_at';

function toRecord(r: SourceRow): SourceRecord {
  const base = { id: r.id, name: r.name, description: r.description, enabled: r.enabled, createdAt: iso(r.created_at)!, updatedAt: iso(r.updated_at)! };
  return r.type === 'postgres'
    ? { ...base, type: 'postgres', settings: r.settings as PostgresSourceSettings }
    : { ...base, type: 'documents', settings: r.settings as DocumentsSourceSettings };
}

type SchemaNode = { $ref?: string; enum?: unknown[]; const?: unknown; type?: string; properties?: Record<string, SchemaNode>; required?: string[] };

/** A schema node with its `$ref` (`#/$defs/<name>` of spec/source-v1.schema.json) followed. */
function deref(node: SchemaNode | undefined): SchemaNode | undefined {
  const m = node?.$ref?.match(/^#\/\$defs\/([A-Za-z0-9_]+)$/);
  return m ? ((sourceSchema.$defs as Record<string, SchemaNode>)[m[1]] ?? node) : node;
}

/** The allowed values of a schema node as text (`"off" | "require"`), or undefined when it is not a closed set. */
function allowedText(node: SchemaNode | undefined): string | undefined {
  const n = deref(node);
  if (Array.isArray(n?.enum)) return n.enum.map((x) => JSON.stringify(x)).join(' | ');
  if (n?.const !== undefined) return JSON.stringify(n.const);
  return undefined;
}

/**
 * What a required property missing from settings (ajv `schemaPath` `#/…/required` of the
 * `$defs/<def>` validator) may hold, read from spec/source-v1.schema.json (task hnu42b item 5): its
 * allowed values, or for an object the allowed values of its own required members, e.g. `{"mode":
 * "off" | "require" | "verify-ca" | "verify-full"}` for `tls`. Undefined when the schema names none.
 */
export function missingPropertyHint(def: string, schemaPath: string, property: string): string | undefined {
  const parts = schemaPath.replace(/^#\/?/, '').split('/').filter((p) => p !== '');
  if (parts.pop() !== 'required') return undefined;
  // A path into $defs is the schema's own; any other is relative to the validator's definition.
  let node: unknown = parts[0] === '$defs' ? sourceSchema : (sourceSchema.$defs as Record<string, SchemaNode>)[def];
  for (const p of parts) node = node && typeof node === 'object' ? (node as Record<string, unknown>)[p] : undefined;
  const prop = deref((node as SchemaNode | undefined)?.properties?.[property]);
  const direct = allowedText(prop);
  if (direct) return `one of ${direct}`;
  const members = (prop?.required ?? []).map((k) => [k, allowedText(prop?.properties?.[k])] as const).filter((x): x is readonly [string, string] => x[1] !== undefined);
  return members.length ? `{${members.map(([k, t]) => `${JSON.stringify(k)}: ${t}`).join(', ')}}` : undefined;
}

/**
 * Validates a source definition (parsed JSON/YAML) against spec/source-v1.schema.json and returns
 * it typed. Throws ValidationError whose details are "path: message" lines.
 */
export function parseSourceDefinition(input: unknown): SourceDefinition {
  if (validateSourceDefinition(input)) return input as SourceDefinition;
  let details = formatSchemaErrors(validateSourceDefinition.errors);
  // Prefer the precise errors of the settings shape the type selects over the anyOf noise.
  const obj = input as { type?: unknown; settings?: unknown } | null;
  if (obj && typeof obj === 'object' && obj.settings !== undefined) {
    const v = obj.type === 'postgres' ? validateSourceDefinitionPostgresSettings : obj.type === 'documents' ? validateSourceDefinitionDocumentsSettings : null;
    if (v) {
      const others = details.filter((l) => !l.startsWith('/settings'));
      const def = obj.type === 'postgres' ? 'postgresSettings' : 'documentsSettings';
      details = v(obj.settings) ? others : [...others, ...formatSchemaErrors(v.errors, '/settings', undefined, (path, prop) => missingPropertyHint(def, path, prop))];
    }
  }
  throw new ValidationError('invalid source definition', details);
}

/**
 * Registers a new source (enabled unless def.enabled is false) and records source_added ({type,
 * name, enabled}; never settings) in the same transaction. Throws ValidationError, or ConflictError
 * when the id is taken.
 */
export async function addSource(db: ControlDb, def: unknown, actor: ChangeActor = {}): Promise<SourceRecord> {
  const d = parseSourceDefinition(def);
  try {
    return await withTransaction(db, async (c) => {
      const r = await c.query<SourceRow>(
        `INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${COLS}`,
        [d.id, d.type, d.name, d.description ?? '', d.enabled ?? true, JSON.stringify(d.settings)],
      );
      // Claim rules and grants naming this id may be older than the source (rt39 finding 4): a one-part role resource is refused on PostgreSQL.
      if (d.type === 'postgres') await refuseOnePartRolesOnSource(c, d.id);
      await recordChange(c, actor, 'source_added', { type: d.type, name: d.name, enabled: r.rows[0].enabled }, d.id);
      return toRecord(r.rows[0]);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw new ConflictError(`source "${d.id}" already exists`);
    throw err;
  }
}

/** Creates or replaces a source's definition (type, name, description, settings; enabled when given). Returns it and whether it was new. */
export async function putSource(db: ControlDb, def: unknown): Promise<{ source: SourceRecord; created: boolean }> {
  const d = parseSourceDefinition(def);
  const r = await db.pool.query<SourceRow & { inserted: boolean }>(
    `INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ($1, $2, $3, $4, COALESCE($5, true), $6)
     ON CONFLICT (id) DO UPDATE SET type = EXCLUDED.type, name = EXCLUDED.name, description = EXCLUDED.description,
       enabled = COALESCE($5, sources.enabled), settings = EXCLUDED.settings, updated_at = now()
     RETURNING ${COLS}, (xmax = 0) AS inserted`,
    [d.id, d.type, d.name, d.description ?? '', d.enabled ?? null, JSON.stringify(d.settings)],
  );
  return { source: toRecord(r.rows[0]), created: r.rows[0].inserted };
}

/** The source with id `id`, or null. */
export async function getSource(db: ControlDb, id: string): Promise<SourceRecord | null> {
  const r = await db.pool.query<SourceRow>(`SELECT ${COLS} FROM sources WHERE id = $1`, [id]);
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/** The source with id `id`; throws NotFoundError. */
export async function requireSource(db: ControlDb, id: string): Promise<SourceRecord> {
  const s = await getSource(db, id);
  if (!s) throw new NotFoundError(`source "${id}" not found`);
  return s;
}

/** Every source, by id. */
export async function listSources(db: ControlDb): Promise<SourceRecord[]> {
  const r = await db.pool.query<SourceRow>(`SELECT ${COLS} FROM sources ORDER BY id`);
  return r.rows.map(toRecord);
}

/**
 * Enables or disables a source (a disabled source refuses calls as unavailable). Idempotent: records
 * source_enabled or source_disabled in the same transaction only when the flag changed. Throws NotFoundError.
 */
export async function setSourceEnabled(db: ControlDb, id: string, enabled: boolean, actor: ChangeActor = {}): Promise<SourceRecord> {
  return withTransaction(db, async (c) => {
    const r = await c.query<SourceRow>(`UPDATE sources SET enabled = $2, updated_at = now() WHERE id = $1 AND enabled <> $2 RETURNING ${COLS}`, [id, enabled]);
    if (r.rows[0]) {
      await recordChange(c, actor, enabled ? 'source_enabled' : 'source_disabled', {}, id);
      return toRecord(r.rows[0]);
    }
    const same = await c.query<SourceRow>(`SELECT ${COLS} FROM sources WHERE id = $1`, [id]);
    if (!same.rows[0]) throw new NotFoundError(`source "${id}" not found`);
    return toRecord(same.rows[0]);
  });
}

/** A copy of the settings for display: a set password as "***" (an empty one, never set, left out: trial nu40), a CA bundle summarised. */
export function redactSourceSettings(settings: PostgresSourceSettings | DocumentsSourceSettings): Record<string, unknown> {
  const s = structuredClone(settings) as unknown as Record<string, unknown>;
  for (const who of ['reader', 'writer']) {
    const c = s[who] as { password?: string } | undefined;
    // "***" only for a password that is set (trial nu40); none given is stored as "" and shown as absent, as export does.
    if (c && typeof c === 'object' && 'password' in c) {
      if (c.password) c.password = '***';
      else delete c.password;
    }
  }
  const tls = s.tls as { ca?: string } | undefined;
  if (tls?.ca) tls.ca = `<PEM, ${tls.ca.length} characters>`;
  return s;
}

/**
 * A pg client configuration for one of the source's roles, with TLS as configured (explicit ssl
 * objects, never sslmode strings, whose pg 8 meaning differs from libpq's):
 * off → no TLS; require → TLS without verification; verify-ca → chain checked against `ca`
 * (host name not checked); verify-full → chain and host name (servername, default host) checked.
 * Every connection starts with the pinned session settings in its startup packet (issue 22 item 2;
 * src/sources/postgres/session-settings.ts); open it with `connectSourceClient` to have them verified.
 * Throws ValidationError when the writer is asked for and none is configured.
 */
export function postgresClientConfig(settings: PostgresSourceSettings, role: 'reader' | 'writer', extra: Partial<pg.ClientConfig> = {}): pg.ClientConfig {
  const cred = role === 'reader' ? settings.reader : settings.writer;
  if (!cred) throw new ValidationError(`this source has no ${role} credentials`);
  let ssl: boolean | ConnectionOptions = false;
  switch (settings.tls.mode) {
    case 'off':
      ssl = false;
      break;
    case 'require':
      ssl = { rejectUnauthorized: false };
      break;
    case 'verify-ca':
      ssl = { rejectUnauthorized: true, ...(settings.tls.ca ? { ca: settings.tls.ca } : {}), checkServerIdentity: () => undefined };
      break;
    case 'verify-full':
      ssl = { rejectUnauthorized: true, ...(settings.tls.ca ? { ca: settings.tls.ca } : {}), servername: settings.tls.servername ?? settings.host };
      break;
  }
  return { host: settings.host, port: settings.port, database: settings.database, user: cred.user, password: cred.password, ssl, options: pinnedStartupOptions(), ...extra };
}

/**
 * Opens one connection to a PostgreSQL source as `role` (postgresClientConfig) and verifies that the
 * server holds the pinned session settings (issue 22 item 2). Used by the catalog scan, the document
 * table indexer and the console's plan view; the caller ends the client.
 * @throws ValidationError (no such role configured), SessionSettingsMismatch (the server overrides a
 *   pinned setting; its message names the setting and the server's value, for operators), or pg's
 *   connect error
 */
export function connectSourceClient(settings: PostgresSourceSettings, role: 'reader' | 'writer', extra: Partial<pg.ClientConfig> = {}): Promise<PinnedClient> {
  return connectPinned(postgresClientConfig(settings, role, extra));
}

/** Settings whose change means the catalog must be scanned again (the reader sees another server or database). */
const CONNECTION_SETTINGS = ['host', 'port', 'database', 'reader', 'tls'];

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}

/**
 * `base` with `patch` merged in (JSON merge patch, RFC 7396): objects merge member by member,
 * null removes a member, anything else replaces. Neither input is modified.
 */
export function mergePatch(base: unknown, patch: unknown): unknown {
  if (!isPlainObject(patch)) return structuredClone(patch);
  const out: Record<string, unknown> = isPlainObject(base) ? structuredClone(base) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** Dotted paths ("settings.tls.mode") whose values differ between two JSON values, sorted. Secrets are compared, never returned. */
export function changedPaths(a: unknown, b: unknown, prefix = ''): string[] {
  // A member present on one side only is compared leaf by leaf (so a new credential is listed as its fields, never as one value).
  if ((isPlainObject(a) || a === undefined) && (isPlainObject(b) || b === undefined) && (a !== undefined || b !== undefined)) {
    const x = (a ?? {}) as Record<string, unknown>;
    const y = (b ?? {}) as Record<string, unknown>;
    const keys = [...new Set([...Object.keys(x), ...Object.keys(y)])].sort();
    return keys.flatMap((k) => changedPaths(x[k], y[k], prefix ? `${prefix}.${k}` : k));
  }
  return canonicalJson(a) === canonicalJson(b) ? [] : [prefix];
}

/** JSON with object members sorted by name at every depth (jsonb does not keep member order). */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isPlainObject(v)) return `{${Object.keys(v).sort().filter((k) => v[k] !== undefined).map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`).join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/** The stored source as a definition (spec/source-v1.schema.json), credentials included. */
export function sourceDefinitionOf(s: SourceRecord): SourceDefinition {
  return { id: s.id, type: s.type, name: s.name, description: s.description, enabled: s.enabled, settings: structuredClone(s.settings) } as SourceDefinition;
}

/** The roles of a PostgreSQL source that carry a password. */
export const CREDENTIAL_ROLES = ['reader', 'writer'] as const;
/** One of CREDENTIAL_ROLES. */
export type CredentialRole = (typeof CREDENTIAL_ROLES)[number];

/**
 * The endpoint a stored password is bound to (issue 24, item 1): host, port, database, the whole
 * TLS settings (mode, ca, servername) and the role's user, as canonical JSON; null when the role
 * has no credentials. A stored password may be kept only while this is unchanged.
 */
export function credentialEndpoint(settings: PostgresSourceSettings, who: CredentialRole): string | null {
  const cred = settings[who];
  if (!cred) return null;
  return canonicalJson({ host: settings.host, port: settings.port, database: settings.database, tls: settings.tls ?? null, user: cred.user });
}

/**
 * Checks that no stored password is kept for another endpoint (issue 24, item 1). For each role
 * whose password `kept(who)` says was carried over from `before` (not given again), the new
 * settings must have the same credentialEndpoint; an empty password is no secret and may follow.
 * Throws PasswordRequiredError (HTTP 400 password_required) naming the roles and what changed,
 * never a value.
 */
export function assertPasswordsBound(sourceId: string, before: PostgresSourceSettings | undefined, after: PostgresSourceSettings, kept: (who: CredentialRole) => boolean): void {
  const problems: string[] = [];
  for (const who of CREDENTIAL_ROLES) {
    const old = before?.[who];
    if (!old || !old.password || !after[who] || !kept(who)) continue;
    if (credentialEndpoint(before!, who) === credentialEndpoint(after, who)) continue;
    const moved = changedPaths({ host: before!.host, port: before!.port, database: before!.database, tls: before!.tls, user: old.user }, { host: after.host, port: after.port, database: after.database, tls: after.tls, user: after[who]!.user });
    problems.push(`settings.${who}.password: the stored ${who} password is bound to its endpoint; ${moved.join(', ')} changed, so give the ${who} password again`);
  }
  if (problems.length) throw new PasswordRequiredError(`source "${sourceId}": a stored password is kept only while host, port, database, user and TLS settings are unchanged`, problems);
}

/** What updateSource changed. */
export interface SourceUpdate {
  source: SourceRecord;
  /** Dotted paths of the definition that changed ("settings.tls.mode"), sorted; [] when nothing did. */
  changed: string[];
  /** True when a connection setting (host, port, database, reader, tls) changed: the catalog must be scanned again. */
  connectionChanged: boolean;
}

/**
 * Changes a source (issue 16, Build 3): `patch` is a JSON merge patch of its definition
 * (spec/source-v1.schema.json; e.g. `{settings: {tls: {mode: "off"}}}`; null removes a member such as
 * `settings.writer`). The id and type cannot change. The merged definition is validated whole.
 * Records a kind-config audit event (decision source_updated, the changed paths, never values)
 * when something changed. Throws NotFoundError, ValidationError (details are "path: message").
 */
export async function updateSource(db: ControlDb, id: string, patch: unknown, opts: { operator: string }): Promise<SourceUpdate> {
  if (!isPlainObject(patch)) throw new ValidationError('the source update must be an object (a merge patch of the source definition)');
  if (patch.id !== undefined && patch.id !== id) throw new ValidationError(`a source id cannot change (the update names "${String(patch.id)}", the source is "${id}")`);
  // The row is read under its lock in the change's own transaction, so an update beside another one
  // merges into what that one committed: it neither reverts the other's change nor records a change
  // the other already made (red team rtgov).
  return withTransaction(db, async (c) => {
    const cur = await c.query<SourceRow>(`SELECT ${COLS} FROM sources WHERE id = $1 FOR UPDATE`, [id]);
    if (!cur.rows[0]) throw new NotFoundError(`source "${id}" not found`);
    const current = toRecord(cur.rows[0]);
    if (patch.type !== undefined && patch.type !== current.type) throw new ValidationError(`a source type cannot change (${current.type}); remove the source and add a new one`);
    const before = sourceDefinitionOf(current);
    const merged = parseSourceDefinition(mergePatch(before, patch));
    if (current.type === 'postgres' && merged.type === 'postgres') {
      const given = (patch.settings ?? {}) as Record<string, unknown>;
      const passwordGiven = (who: CredentialRole) => isPlainObject(given[who]) && typeof (given[who] as Record<string, unknown>).password === 'string';
      assertPasswordsBound(id, current.settings, merged.settings as PostgresSourceSettings, (who) => !passwordGiven(who));
    }
    const changed = changedPaths(before, { ...merged, description: merged.description ?? '', enabled: merged.enabled ?? current.enabled });
    if (changed.length === 0) return { source: current, changed, connectionChanged: false };
    const r = await c.query<SourceRow>(
      `UPDATE sources SET name = $2, description = $3, enabled = $4, settings = $5, updated_at = now() WHERE id = $1 RETURNING ${COLS}`,
      [id, merged.name, merged.description ?? '', merged.enabled ?? current.enabled, JSON.stringify(merged.settings)],
    );
    await recordConfigEvent(c, { decision: 'source_updated', operator: opts.operator, sourceId: id, details: { changed } });
    return { source: toRecord(r.rows[0]), changed, connectionChanged: changed.some((p) => CONNECTION_SETTINGS.includes(p.split('.')[1] ?? '')) };
  });
}

/** What removeSource did. */
export interface SourceRemoval {
  id: string;
  removed: true;
  /** Pending approvals rejected because of --force (ids), [] otherwise. */
  rejectedApprovals: string[];
  /** Grants deleted with the source. */
  grantsRemoved: number;
  /** Policies that named only this source in `applies_to.sources`, removed because of --force (names), [] otherwise. */
  policiesRemoved: string[];
  /** Policies that named this source among others, which no longer name it (--force; names), [] otherwise. */
  policiesDetached: string[];
  /** Issuers whose claim mapping's role_grants named this source, those rules taken out by --force (untieClaimRules), [] otherwise. */
  claimRulesUntied: string[];
}

/**
 * Removes a source and what only it used (issue 16, Build 3): its grants, catalog snapshot and
 * discovery index; its audit events and approvals stay (history). Refuses with ConflictError while
 * approvals of it are pending, unless `force`: then they are rejected in the operator's name
 * (reason source_removed, each audited). Refuses with ConflictError (details: the policy names)
 * while a policy names it in `applies_to.sources` (trial nu40: the export could not be applied
 * again, and a source added later under the same id inherited them), unless `force`: then, as its
 * grants (each about this one source) are deleted, the policy's tie to this source goes: a policy
 * naming only it is removed (it could never apply again), one naming others too no longer names it
 * (each recorded as policy_removed / policy_updated). Claim rules naming it are refused or, for a
 * claim mapping's rules with `force`, taken out of the mapping (untieClaimRules, claim_mapping_updated;
 * the gateway configuration's own rules are left to it). One transaction; records a kind-config audit
 * event (decision source_removed). Throws NotFoundError.
 */
export async function removeSource(db: ControlDb, id: string, opts: { operator: string; force?: boolean }): Promise<SourceRemoval> {
  return withTransaction(db, (c) => removeSourceIn(c, id, opts));
}

/**
 * Advisory lock key serializing `interlock apply` (src/declarative/apply.ts) and source removals
 * (any constant; "interlock apply"), taken with pg_advisory_xact_lock.
 */
export const APPLY_LOCK = 0x1e7e_a991;

/**
 * removeSource inside the caller's transaction (used by `interlock apply --prune`). It first takes
 * apply's transaction lock (APPLY_LOCK; reentrant inside an apply): an apply adding a claim mapping
 * rule naming the source would otherwise see the source while this removal's transaction is open,
 * write the rule after untieClaimRules found none, and leave a rule naming a removed source (red
 * team rt41a, low).
 */
export async function removeSourceIn(c: pg.ClientBase, id: string, opts: { operator: string; force?: boolean }): Promise<SourceRemoval> {
  await c.query('SELECT pg_advisory_xact_lock($1)', [APPLY_LOCK]);
  const found = await c.query('SELECT id FROM sources WHERE id = $1 FOR UPDATE', [id]);
  if (found.rowCount === 0) throw new NotFoundError(`source "${id}" not found`);
  // No row lock on approvals: the operator role may not UPDATE them (red team rtop finding 4). With
  // force, a write queued after this check is rejected with the others below; without, it stays
  // pending until it expires.
  const pending = await c.query<{ id: string }>(`SELECT id FROM approvals WHERE source_id = $1 AND state = 'pending' ORDER BY created_at, id`, [id]);
  if (pending.rows.length > 0 && !opts.force) {
    throw new ConflictError(`source "${id}" has ${pending.rows.length} pending approval(s): approve or reject them first, or force the removal (they are then rejected)`, pending.rows.map((a) => a.id));
  }
  const { removed: policiesRemoved, detached: policiesDetached } = await untiePolicies(c, 'sources', id, { operator: opts.operator, force: opts.force, what: `source "${id}"`, sourceId: id });
  await checkClaimRulesNaming(c, id, { force: opts.force, what: `source "${id}"` });
  const grants = await c.query('DELETE FROM grants WHERE source_id = $1', [id]);
  await c.query('DELETE FROM catalog_snapshots WHERE source_id = $1', [id]);
  await c.query('DELETE FROM sources WHERE id = $1', [id]);
  // The source gone, the claim mapping rules naming it are taken out through the owner's function
  // (migration 20261213190000000: no UPDATE of claim_mappings for the source family; task hpriv).
  const claimRulesUntied = (await untieClaimRules(c, id, { operator: opts.operator })).map((u) => u.issuer);
  // The source gone, its pending approvals are rejected in the operator's name with one approval
  // event each (reason source_removed), in one statement (migration 20261208290000000).
  const rejected = await c.query<{ ids: string[] }>('SELECT interlock_reject_removed_source_approvals($1, $2) AS ids', [id, opts.operator]);
  const rejectedApprovals = rejected.rows[0].ids;
  await recordConfigEvent(c, { decision: 'source_removed', operator: opts.operator, sourceId: id, details: { rejectedApprovals, grantsRemoved: grants.rowCount ?? 0, policiesRemoved, policiesDetached, claimRulesUntied } });
  return { id, removed: true, rejectedApprovals, grantsRemoved: grants.rowCount ?? 0, policiesRemoved, policiesDetached, claimRulesUntied };
}
