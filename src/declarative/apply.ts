/**
 * `interlock apply -f FILE [--plan] [--prune] [--force]` and POST /admin/v1/apply (issue 16):
 * makes the control plane what an interlock file describes. Reading the current state, checking,
 * every change and the audit event happen in ONE transaction (serialized with other applies by an
 * advisory lock), so a failure changes nothing. Applying the same file twice changes nothing the
 * second time. The audit event (kind config, decision "applied") names the operator and the
 * sha256 digest of the file; every grant added or removed and every source added or updated also
 * records its own event (grant_added, grant_revoked, source_added, source_updated, with the source in
 * source_id and the file's digest in details; a removed source records source_removed), in the same
 * batch and transaction, so `audit search --kind config --source ID` finds them (red team rtgov
 * finding 7); `applied` lists in `details.sources` every source the apply's changes concern
 * (touchedSources), which `audit search --source` matches too. Catalog scans of new or
 * re-connected sources run after the commit.
 */
import type pg from 'pg';
import { withTransaction, type ControlDb } from '../control/db';
import { ConflictError, ValidationError } from '../control/errors';
import { appendAuditRows, configRow, type ConfigAuditEvent } from '../audit/writer';
import { APPLY_LOCK, canonicalJson, removeSourceIn } from '../control/sources';
import { newIdentityId } from '../control/ids';
import { insertOperatorGrant } from '../control/grants';
import { scanSource, type UnreadableRelation, type UnwritableRelation } from '../control/scan';
import { deleteClaimMapping, upsertClaimMapping } from '../control/claim-mappings';
import { takeBackUnruledClaimGrants } from '../control/claim-rules';
import { checkRowRules } from '../control/roles';
import { checkPolicyRowRules, untiePolicies } from '../control/policies';
import { loadKnownSources, refuseOnePartRolesOnSource, refuseOnePartSqlResources, refuseUnknownPolicyNames, refuseUnknownRoleNames, type KnownSources } from '../control/catalog-names';
import { computePlan, type Plan, type PlanChange } from './plan';
import { desiredStateOf, fileDigest, keepStoredSecrets, parseFileText, processSecrets, validateInterlockFileDocument, type SecretResolver } from './schema';
import { readConfigState } from './state';
import type { ConfigState, DesiredState } from './types';


/** What to apply: the file's text (YAML or JSON; its bytes are digested) or an already parsed document (digested as canonical JSON). */
export type ApplyInput = { text: string } | { document: unknown };

/** Options of applyInterlockFile. */
export interface ApplyOptions {
  /** Who applies (recorded in the audit). */
  operator: string;
  /** Only compute and return the plan; change nothing. */
  plan?: boolean;
  /** Delete objects of the file's sections that the file leaves out. */
  prune?: boolean;
  /** Let --prune remove a source with pending approvals (they are rejected). */
  force?: boolean;
  /** Scan the catalog of new or re-connected PostgreSQL sources after the commit (default true). */
  scan?: boolean;
  /** Where password_env / password_file are resolved (default: this process). */
  secrets?: SecretResolver;
  /**
   * Accept created or changed roles and policies naming relations or columns that no scanned
   * catalogue has (tables created later; task hnu4a item 1). A policy naming a source neither
   * registered nor in the file is refused all the same.
   */
  allowUnknownNames?: boolean;
}

/** A catalog scan after an apply. */
export interface ApplyScan {
  sourceId: string;
  relations?: number;
  /** Relations the reader may not SELECT (ScanResult.unreadable), when there are any. */
  unreadable?: UnreadableRelation[];
  /** Tables the writer may not INSERT, UPDATE or DELETE (ScanResult.unwritable), when there are any. */
  unwritable?: UnwritableRelation[];
  error?: string;
}

/** What applyInterlockFile did. */
export interface ApplyResult {
  /** False for --plan (nothing was changed). */
  applied: boolean;
  /** "sha256:<hex>" of the file. */
  digest: string;
  plan: Plan;
  scans: ApplyScan[];
}

const CONNECTION = /^settings\.(host|port|database|reader|tls)(\.|$)/;

/**
 * Plans and (unless opts.plan) applies an interlock file. Throws ValidationError (schema errors
 * as "path: message" details, unresolvable secret references, grants naming unknown roles or
 * sources, a source type change) and ConflictError when --prune would remove a source with
 * pending approvals and force is not set. Contract: issue 16, Build 1.
 */
export async function applyInterlockFile(db: ControlDb, input: ApplyInput, opts: ApplyOptions): Promise<ApplyResult> {
  const doc = 'text' in input ? parseFileText(input.text) : input.document;
  const digest = 'text' in input ? fileDigest(input.text) : fileDigest(canonicalJson(input.document));
  const desired = desiredStateOf(validateInterlockFileDocument(doc), opts.secrets ?? processSecrets);
  for (const role of desired.roles.values()) await checkRowRules(role);
  await checkPolicyRowRules([...desired.policies.values()]);
  const plan = await withTransaction(db, async (c) => {
    await c.query('SELECT pg_advisory_xact_lock($1)', [APPLY_LOCK]);
    const current = await readConfigState(c);
    keepStoredSecrets(desired, current);
    const p = computePlan(current, desired, { prune: opts.prune });
    for (const ch of p.changes) {
      if (ch.kind === 'source' && ch.action === 'update' && ch.fields.some((f) => f.path === 'type')) throw new ValidationError(`source "${ch.name}": a source type cannot change; remove it and add a new one`);
    }
    await notePendingApprovals(c, p, !!opts.force);
    notePoliciesOnRemovals(p, current, desired, !!opts.force);
    noteClaimRulesOnRemovedSources(p, current, desired, !!opts.force);
    await refuseUnknownNamesIn(c, p, current, desired, !!opts.allowUnknownNames);
    if (opts.plan) return p;
    const events: ConfigAuditEvent[] = [];
    for (const ch of p.changes) {
      const r = await execute(c, ch, desired, opts);
      // A change about one identity (grant_added/grant_revoked, a claim grant taken back) is stored in the
      // row's identity column too, as recordChange does, so `audit search --identity` finds it (fx45 item 2).
      for (const e of r === null ? [] : Array.isArray(r) ? r : [r]) events.push({ ...e, operator: opts.operator, identityId: typeof e.details.identityId === 'string' ? e.details.identityId : null, details: { ...e.details, digest } });
    }
    // Claim rules and grants naming a created PostgreSQL source's id may be older than it (rt39 finding 4): judged on the roles as this apply leaves them.
    for (const ch of p.changes) if (ch.kind === 'source' && ch.action === 'create' && desired.sources.get(ch.name)?.type === 'postgres') await refuseOnePartRolesOnSource(c, ch.name);
    events.push({
      decision: 'applied',
      operator: opts.operator,
      details: { digest, prune: !!opts.prune, summary: p.summary, sources: touchedSources(p, current, desired), changes: p.changes.map((ch) => `${ch.action} ${ch.kind} ${ch.name}${ch.fields.length ? `: ${ch.fields.map((f) => f.path).join(', ')}` : ''}`) },
    });
    await appendAuditRows(c, events.map(configRow));
    return p;
  });
  const scans: ApplyScan[] = [];
  if (!opts.plan && opts.scan !== false) {
    for (const ch of plan.changes) {
      if (ch.kind !== 'source' || ch.action === 'delete') continue;
      const s = desired.sources.get(ch.name);
      if (!s || s.type !== 'postgres' || !s.enabled) continue;
      if (ch.action === 'update' && !ch.fields.some((f) => CONNECTION.test(f.path) || f.path === 'enabled')) continue;
      try {
        const r = await scanSource(db, ch.name);
        scans.push({ sourceId: ch.name, relations: r.relations, ...(r.unreadable.length ? { unreadable: r.unreadable } : {}), ...(r.unwritable?.length ? { unwritable: r.unwritable } : {}) });
      } catch (err) {
        scans.push({ sourceId: ch.name, error: (err as Error).message });
      }
    }
  }
  return { applied: !opts.plan, digest, plan, scans };
}

/**
 * The ids of the sources an apply's changes concern, sorted: each changed source; each changed
 * grant's source; the sources a changed policy's applies_to.sources names, before or after the
 * change (a policy without that list applies to every source and names none); and the sources on
 * which a changed role is granted, before or after the apply; the sources a changed claim mapping's
 * role_grants name, before or after. Roles, policies, identities and claim mappings record no event
 * per source; their changes are found through this list of `applied`.
 */
export function touchedSources(plan: Plan, current: ConfigState, desired: ConfigState): string[] {
  const out = new Set<string>();
  for (const ch of plan.changes) {
    if (ch.kind === 'source') out.add(ch.name);
    else if (ch.kind === 'grant') out.add(ch.name.split('/')[2]);
    else if (ch.kind === 'policy') {
      for (const st of [current, desired]) for (const id of st.policies.get(ch.name)?.applies_to?.sources ?? []) out.add(id);
    } else if (ch.kind === 'role') {
      for (const st of [current, desired]) for (const g of st.grants.values()) if (g.role === ch.name) out.add(g.source);
    } else if (ch.kind === 'claim_mapping') {
      for (const st of [current, desired]) for (const g of st.claimMappings.get(ch.name)?.role_grants ?? []) out.add(g.source);
    }
  }
  return [...out].sort();
}

/** Notes pending approvals on source deletions; without force (and not planning) that is a ConflictError. */
async function notePendingApprovals(c: pg.ClientBase, plan: Plan, force: boolean): Promise<void> {
  const ids = plan.changes.filter((ch) => ch.kind === 'source' && ch.action === 'delete').map((ch) => ch.name);
  if (ids.length === 0) return;
  const r = await c.query<{ source_id: string; n: string }>(`SELECT source_id, count(*) AS n FROM approvals WHERE state = 'pending' AND source_id = ANY($1) GROUP BY source_id`, [ids]);
  for (const row of r.rows) {
    const ch = plan.changes.find((x) => x.kind === 'source' && x.name === row.source_id)!;
    ch.note = `${row.n} pending approval(s): ${force ? 'rejected by --force' : 'refused unless --force'}`;
  }
}

/**
 * Policies that name, in `applies_to.sources` / `applies_to.roles`, a source / role the plan removes
 * (trial nu40; roles: red team rt40b): with a `policies` section the file says what every policy
 * becomes, so one that keeps naming a removed source or role is refused (ValidationError, also on
 * --plan); without one the stored policies stay, and the removal treats them as `interlock source
 * remove` / `interlock role remove` do (refused unless --force, which removes a policy naming only
 * that source or role and takes it out of the others' lists): noted here.
 */
export function notePoliciesOnRemovals(plan: Plan, current: ConfigState, desired: DesiredState, force: boolean): void {
  const gone = plan.changes.filter((ch) => (ch.kind === 'source' || ch.kind === 'role') && ch.action === 'delete');
  if (gone.length === 0) return;
  const fromFile = desired.sections.has('policies');
  const after = fromFile ? desired.policies : current.policies;
  const lines: string[] = [];
  const kinds = new Set<string>();
  for (const ch of gone) {
    const list = ch.kind === 'source' ? 'sources' : 'roles';
    const naming = [...after.values()].filter((p) => p.applies_to?.[list]?.includes(ch.name)).map((p) => p.name);
    if (naming.length === 0) continue;
    if (fromFile) {
      kinds.add(ch.kind);
      lines.push(...naming.map((n) => `policy ${n}: applies_to.${list} names ${ch.kind} "${ch.name}", which this apply removes`));
    }
    else ch.note = `${ch.note ? `${ch.note}; ` : ''}named by policy(ies) ${naming.join(', ')}: ${force ? 'removed or detached by --force' : 'refused unless --force'}`;
  }
  if (lines.length === 0) return;
  const what = kinds.size === 2 ? ['a source or role', 'it', 'applies_to.sources / applies_to.roles'] : kinds.has('source') ? ['a source', 'the source', 'applies_to.sources'] : ['a role', 'the role', 'applies_to.roles'];
  throw new ValidationError(`the file keeps policies naming ${what[0]} it removes: take ${what[1]} out of their ${what[2]}, or leave the policies out`, lines);
}

/**
 * Stored claim mappings whose role_grants name a source the plan removes, when the file has no
 * `claim_mappings` section (with one, computePlan refuses a mapping of the file naming a removed
 * source): the removal treats them as `interlock source remove` does (untieClaimRules: refused
 * unless --force, which takes those rules out of their mappings): noted on the source's change.
 */
export function noteClaimRulesOnRemovedSources(plan: Plan, current: ConfigState, desired: DesiredState, force: boolean): void {
  if (desired.sections.has('claim_mappings')) return;
  for (const ch of plan.changes) {
    if (ch.kind !== 'source' || ch.action !== 'delete') continue;
    const issuers = [...current.claimMappings.values()].filter((m) => m.role_grants.some((g) => g.source === ch.name)).map((m) => m.issuer);
    if (issuers.length) ch.note = `${ch.note ? `${ch.note}; ` : ''}named by the claim mapping rules of issuer(s) ${issuers.join(', ')}: ${force ? 'taken out by --force' : 'refused unless --force'}`;
  }
}

/** Runs `fn`; a ConflictError it throws is rethrown with "force the removal" told as "apply with --force". */
async function withApplyForceHint<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ConflictError) throw new ConflictError(err.message.replace('force the removal', 'apply with --force'), err.details);
    throw err;
  }
}

async function identityIdOf(c: pg.ClientBase, name: string): Promise<string> {
  const r = await c.query<{ id: string }>('SELECT id FROM identities WHERE name = $1', [name]);
  return r.rows[0].id;
}

/**
 * The config events an identity change of an apply records, as the identity commands do
 * (src/control/identities.ts): identity_created for a new identity; identity_disabled or
 * identity_enabled when `disabled` changes (a pruned identity is disabled); and
 * identity_attributes_changed with the attribute names set (new or changed value) and removed —
 * never values — when they differ. Each carries {identityId, identity}, so `audit search
 * --identity` finds what an apply did to an identity. Empty when nothing changed.
 */
export function identityEvents(
  identityId: string,
  identity: string,
  c: { created: boolean; disabledBefore: boolean; disabledAfter: boolean; attributesBefore: Record<string, unknown>; attributesAfter: Record<string, unknown> },
): ItemEvent[] {
  const events: ItemEvent[] = [];
  if (c.created) events.push({ decision: 'identity_created', details: { identityId, identity } });
  if (c.disabledBefore !== c.disabledAfter) events.push({ decision: c.disabledAfter ? 'identity_disabled' : 'identity_enabled', details: { identityId, identity } });
  const set = Object.keys(c.attributesAfter).filter((k) => JSON.stringify(c.attributesBefore[k]) !== JSON.stringify(c.attributesAfter[k])).sort();
  const removed = Object.keys(c.attributesBefore).filter((k) => !(k in c.attributesAfter)).sort();
  if (set.length || removed.length) events.push({ decision: 'identity_attributes_changed', details: { identityId, identity, set, removed } });
  return events;
}

/** A change's own config event, without operator (the apply's) and digest (added by the caller). */
type ItemEvent = Omit<ConfigAuditEvent, 'operator'> & { details: Record<string, unknown> };

/**
 * Makes one change inside the apply transaction. Returns the event a change of one source's
 * grants or settings records (as `interlock grant/revoke/source add/source update` would), an
 * identity's events (identityEvents), the
 * grant_revoked events of the claim grants a claim-mapping change takes back, or null.
 */
async function execute(c: pg.ClientBase, ch: PlanChange, desired: DesiredState, opts: ApplyOptions): Promise<ItemEvent | ItemEvent[] | null> {
  switch (ch.kind) {
    case 'source': {
      if (ch.action === 'delete') {
        await withApplyForceHint(() => removeSourceIn(c, ch.name, { operator: opts.operator, force: opts.force }));
        return null; // removeSourceIn recorded source_removed
      }
      const s = desired.sources.get(ch.name)!;
      await c.query(
        `INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description, enabled = EXCLUDED.enabled, settings = EXCLUDED.settings, updated_at = now()`,
        [s.id, s.type, s.name, s.description, s.enabled, JSON.stringify(s.settings)],
      );
      return ch.action === 'create'
        ? { decision: 'source_added', sourceId: s.id, details: { type: s.type, name: s.name, enabled: s.enabled } }
        : { decision: 'source_updated', sourceId: s.id, details: { changed: ch.fields.map((f) => f.path) } };
    }
    case 'role': {
      if (ch.action === 'delete') {
        // As `role remove` does (red team rt40b): the policies naming the role are refused, or untied with --force.
        await withApplyForceHint(() => untiePolicies(c, 'roles', ch.name, { operator: opts.operator, force: opts.force, what: `role "${ch.name}"` }));
        await c.query('DELETE FROM roles WHERE name = $1', [ch.name]);
        return null;
      }
      const r = desired.roles.get(ch.name)!;
      await c.query(
        `INSERT INTO roles (name, description, audiences, statements) VALUES ($1, $2, $3, $4)
         ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, audiences = EXCLUDED.audiences, statements = EXCLUDED.statements, updated_at = now()`,
        [r.name, r.description, r.audiences, JSON.stringify(r.statements)],
      );
      return null;
    }
    case 'identity': {
      const disabled = ch.action === 'delete' ? true : desired.identities.get(ch.name)!.disabled;
      const attributes = ch.action === 'delete' ? undefined : desired.identities.get(ch.name)!.attributes;
      if (ch.action === 'create') {
        const id = newIdentityId();
        await c.query(`INSERT INTO identities (id, name, disabled, disabled_at, attributes) VALUES ($1, $2, $3, CASE WHEN $3 THEN now() END, $4::jsonb)`, [id, ch.name, disabled, JSON.stringify(attributes ?? {})]);
        return identityEvents(id, ch.name, { created: true, disabledBefore: false, disabledAfter: disabled, attributesBefore: {}, attributesAfter: attributes ?? {} });
      }
      const before = await c.query<{ id: string; disabled: boolean; attributes: Record<string, unknown> | null }>('SELECT id, disabled, attributes FROM identities WHERE name = $1 FOR UPDATE', [ch.name]);
      await c.query(`UPDATE identities SET disabled = $2, disabled_at = CASE WHEN $2 THEN COALESCE(disabled_at, now()) END, attributes = COALESCE($3::jsonb, attributes) WHERE name = $1`, [ch.name, disabled, attributes === undefined ? null : JSON.stringify(attributes)]);
      const b = before.rows[0];
      return identityEvents(b.id, ch.name, { created: false, disabledBefore: b.disabled, disabledAfter: disabled, attributesBefore: b.attributes ?? {}, attributesAfter: attributes ?? b.attributes ?? {} });
    }
    case 'grant': {
      const [identity, role, source] = ch.name.split('/');
      const id = await identityIdOf(c, identity);
      const changed =
        ch.action === 'delete'
          ? (await c.query('DELETE FROM grants WHERE identity_id = $1 AND role_name = $2 AND source_id = $3', [id, role, source])).rowCount === 1
          : await insertOperatorGrant(c, id, role, source);
      return changed ? { decision: ch.action === 'delete' ? 'grant_revoked' : 'grant_added', sourceId: source, details: { identityId: id, identity, role } } : null;
    }
    case 'policy': {
      if (ch.action === 'delete') {
        await c.query('DELETE FROM policies WHERE name = $1', [ch.name]);
        return null;
      }
      const p = desired.policies.get(ch.name)!;
      await c.query(
        `INSERT INTO policies (name, description, enabled, applies_to, rule) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, enabled = EXCLUDED.enabled, applies_to = EXCLUDED.applies_to, rule = EXCLUDED.rule, updated_at = now()`,
        [p.name, p.description, p.enabled, JSON.stringify(p.applies_to ?? {}), JSON.stringify(p.rule)],
      );
      return null;
    }
    case 'claim_mapping': {
      // Claim grants a removed or narrowed rule gave, and no rule names any more, are taken back now
      // (one grant_revoked each; red team rtcg: an identity that never signs in again kept them).
      const before = await c.query<{ role_grants: Array<{ role?: unknown; source?: unknown }> }>('SELECT role_grants FROM claim_mappings WHERE issuer = $1', [ch.name]);
      if (ch.action === 'delete') await deleteClaimMapping(c, ch.name);
      else await upsertClaimMapping(c, desired.claimMappings.get(ch.name)!);
      const old = (before.rows[0]?.role_grants ?? []).filter((g) => g && typeof g.role === 'string' && typeof g.source === 'string').map((g) => ({ issuer: ch.name, role: g.role as string, source: g.source as string }));
      return (await takeBackUnruledClaimGrants(c, old)).map((g) => ({ decision: 'grant_revoked', sourceId: g.sourceId, details: g.details }));
    }
  }
}

/**
 * The roles and policies the plan creates or updates, checked against the registered sources and
 * the file's own (a new source has no catalogue yet: names on it are not checked) and their scanned
 * catalogues (src/control/catalog-names.ts). Throws ValidationError, so `--plan` shows it too.
 */
async function refuseUnknownNamesIn(c: pg.PoolClient, plan: Plan, current: ConfigState, desired: DesiredState, allowUnknownNames: boolean): Promise<void> {
  const changed = (kind: 'role' | 'policy') => plan.changes.filter((ch) => ch.kind === kind && ch.action !== 'delete').map((ch) => ch.name);
  const roles = changed('role').map((n) => desired.roles.get(n)).filter((r) => r !== undefined);
  const policies = changed('policy').map((n) => desired.policies.get(n)).filter((p) => p !== undefined);
  const grantsAdded = plan.changes.some((ch) => (ch.kind === 'grant' && ch.action === 'create') || (ch.kind === 'claim_mapping' && ch.action !== 'delete'));
  if (roles.length === 0 && policies.length === 0 && !grantsAdded) return;
  const known = await loadKnownSources(c);
  for (const [id, s] of desired.sources) {
    if (known.ids.has(id)) continue;
    known.ids.add(id);
    if (s.type === 'postgres') known.catalogs.set(id, null);
  }
  for (const role of roles) refuseUnknownRoleNames(known, role, allowUnknownNames);
  if (policies.length) refuseUnknownPolicyNames(known, policies, allowUnknownNames);
  // The gateway configuration's claim rules (configured_claim_grants) grant too; apply does not change them (red team rt39).
  const configured = (await c.query<{ role: string; source: string }>('SELECT role_name AS role, source_id AS source FROM configured_claim_grants')).rows;
  refuseOnePartSqlGrants(plan, current, desired, known, configured);
}

/**
 * Refuses (refuseOnePartSqlResources's ValidationError, never lifted by allowUnknownNames) an apply
 * after which a role the plan creates or updates, or a grant or claim mapping the plan adds or
 * changes (its `role_grants`), puts a one-part relation or column resource on a PostgreSQL source
 * (red team rtn4 item 4b): the roles, grants and claim mappings as they will be once the plan is
 * applied, and the gateway configuration's claim rules `configured` ({role, source} pairs, which
 * apply leaves as they are; red team rt39), the sources' types as the file or the database has them.
 */
function refuseOnePartSqlGrants(plan: Plan, current: ConfigState, desired: DesiredState, known: KnownSources, configured: Array<{ role: string; source: string }>): void {
  const changedRoles = new Set(plan.changes.filter((ch) => ch.kind === 'role' && ch.action !== 'delete').map((ch) => ch.name));
  const removed = new Set(plan.changes.filter((ch) => ch.kind === 'grant' && ch.action === 'delete').map((ch) => ch.name));
  const added = plan.changes.filter((ch) => ch.kind === 'grant' && ch.action === 'create').map((ch) => ch.name);
  const after = [...[...current.grants.values()].map((g) => `${g.identity}/${g.role}/${g.source}`).filter((k) => !removed.has(k)), ...added];
  const isPostgres = (id: string) => (desired.sources.get(id)?.type ?? current.sources.get(id)?.type) === 'postgres';
  const pairs = after.map((key) => ({ role: key.split('/')[1], source: key.split('/')[2], changed: added.includes(key) }));
  for (const g of configured) pairs.push({ role: g.role, source: g.source, changed: false });
  const mappings = new Map(plan.changes.filter((ch) => ch.kind === 'claim_mapping').map((ch) => [ch.name, ch.action]));
  for (const issuer of new Set([...current.claimMappings.keys(), ...desired.claimMappings.keys()])) {
    const action = mappings.get(issuer);
    const m = action === 'delete' ? undefined : action ? desired.claimMappings.get(issuer) : current.claimMappings.get(issuer);
    // A stored mapping's role_grants may hold entries that are not rules (a row written outside apply): skipped, as takeBackUnruledClaimGrants does.
    for (const g of (m?.role_grants ?? []) as Array<{ role?: unknown; source?: unknown } | null>) {
      if (g && typeof g.role === 'string' && typeof g.source === 'string') pairs.push({ role: g.role, source: g.source, changed: action !== undefined });
    }
  }
  const targets = new Map<string, Set<string>>();
  for (const { role, source, changed } of pairs) {
    if ((!changedRoles.has(role) && !changed) || !isPostgres(source)) continue;
    (targets.get(role) ?? targets.set(role, new Set()).get(role)!).add(source);
  }
  for (const [name, sources] of targets) {
    const role = (changedRoles.has(name) ? desired.roles.get(name) : undefined) ?? current.roles.get(name);
    if (role) refuseOnePartSqlResources(role, [...sources].map((id) => ({ id, catalog: known.catalogs.get(id) ?? null })));
  }
}
