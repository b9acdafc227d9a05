/**
 * The plan of `interlock apply` (issue 16): a pure comparison of the state a file describes with
 * the current state, change by change and field by field, and its rendering for people. Only the
 * sections the file has are compared; with `prune`, objects of those sections that the file leaves
 * out are deleted. Identities are never deleted (keys, approvals and the audit refer to them): a
 * pruned identity loses its grants and is disabled.
 */
import { changedPaths } from '../control/sources';
import { ValidationError } from '../control/errors';
import type { ConfigState, DesiredState, GrantState, Section } from './types';

/** The kinds of object a plan changes. */
export type ObjectKind = 'source' | 'role' | 'identity' | 'grant' | 'policy' | 'claim_mapping';

/** One field of a change. `before` is absent for a new field, `after` for a removed one; secrets show as "***". */
export interface FieldChange {
  path: string;
  before?: unknown;
  after?: unknown;
}

/** One create, update or delete. `name` is the id or name ("identity/role/source" for a grant, the issuer for a claim mapping). */
export interface PlanChange {
  action: 'create' | 'update' | 'delete';
  kind: ObjectKind;
  name: string;
  fields: FieldChange[];
  /** A remark for people (e.g. what deleting an identity does). */
  note?: string;
}

/** A plan: the changes in the order apply makes them, and counts. */
export interface Plan {
  changes: PlanChange[];
  summary: { create: number; update: number; delete: number };
}

const SECRET_PATH = /(^|\.)password$/;

/** A copy of `v` with every member named password replaced by "***" (defence in depth for object values). */
function redactDeep(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(redactDeep);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, k === 'password' ? '***' : redactDeep(x)]));
  return v;
}

function display(path: string, v: unknown): unknown {
  if (v === undefined) return undefined;
  if (SECRET_PATH.test(path)) return '***';
  if (v && typeof v === 'object') return redactDeep(v);
  if (/(^|\.)tls\.ca$/.test(path) && typeof v === 'string') return `<PEM, ${v.length} characters>`;
  return v;
}

function get(obj: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((o, k) => (o && typeof o === 'object' ? (o as Record<string, unknown>)[k] : undefined), obj);
}

function fieldChanges(before: unknown, after: unknown): FieldChange[] {
  return changedPaths(before ?? {}, after ?? {}).map((path) => {
    const f: FieldChange = { path };
    const b = display(path, get(before, path));
    const a = display(path, get(after, path));
    if (b !== undefined) f.before = b;
    if (a !== undefined) f.after = a;
    return f;
  });
}

function diffMap<T>(kind: ObjectKind, current: Map<string, T>, desired: Map<string, T>, prune: boolean): PlanChange[] {
  const out: PlanChange[] = [];
  for (const [name, want] of desired) {
    const have = current.get(name);
    if (have === undefined) out.push({ action: 'create', kind, name, fields: fieldChanges(undefined, want) });
    else {
      const fields = fieldChanges(have, want);
      if (fields.length) out.push({ action: 'update', kind, name, fields });
    }
  }
  if (prune) for (const [name, have] of current) if (!desired.has(name)) out.push({ action: 'delete', kind, name, fields: fieldChanges(have, undefined) });
  return out;
}

const grantName = (g: GrantState) => `${g.identity}/${g.role}/${g.source}`;

/**
 * The changes that make `current` what `desired` describes, in apply order: grant deletions,
 * sources, roles, identities, grant creations, policies, claim mappings, then role and source
 * deletions. Throws ValidationError when a grant or a claim mapping's role_grants rule names a role
 * or source that would not exist.
 */
export function computePlan(current: ConfigState, desired: DesiredState, opts: { prune?: boolean } = {}): Plan {
  const prune = !!opts.prune;
  const has = (s: Section) => desired.sections.has(s);
  const sourceChanges = has('sources') ? diffMap('source', current.sources, desired.sources, prune) : [];
  const roleChanges = has('roles') ? diffMap('role', current.roles, desired.roles, prune) : [];
  const policyChanges = has('policies') ? diffMap('policy', current.policies, desired.policies, prune) : [];
  const claimChanges = has('claim_mappings') ? diffMap('claim_mapping', current.claimMappings, desired.claimMappings, prune) : [];
  const deleted = (changes: PlanChange[]) => new Set(changes.filter((c) => c.action === 'delete').map((c) => c.name));
  const goneSources = deleted(sourceChanges);
  const goneRoles = deleted(roleChanges);

  // Identities: created or updated from the file; pruned ones are disabled (kept for the audit trail).
  const identityChanges: PlanChange[] = [];
  const retired = new Set<string>();
  if (has('identities')) {
    for (const [name, want] of desired.identities) {
      const have = current.identities.get(name);
      if (!have) identityChanges.push({ action: 'create', kind: 'identity', name, fields: fieldChanges(undefined, want) });
      else {
        // Attributes the file leaves out are left as they are (issue 27); given ones become exactly these.
        const before = want.attributes === undefined ? { name: have.name, disabled: have.disabled } : { ...have, attributes: have.attributes ?? {} };
        const fields = fieldChanges(before, want);
        if (fields.length) identityChanges.push({ action: 'update', kind: 'identity', name, fields });
      }
    }
    if (prune) {
      for (const [name, have] of current.identities) {
        if (desired.identities.has(name)) continue;
        const holdsGrants = [...current.grants.values()].some((g) => g.identity === name);
        if (have.disabled && !holdsGrants) continue;
        retired.add(name);
        identityChanges.push({ action: 'delete', kind: 'identity', name, fields: have.disabled ? [] : [{ path: 'disabled', before: false, after: true }], note: 'disabled and its grants revoked; kept because keys, approvals and the audit trail refer to it' });
      }
    }
  }

  // Grants: every identity of the file holds exactly the grants it lists.
  const grantDeletes: PlanChange[] = [];
  const grantCreates: PlanChange[] = [];
  for (const [key, g] of current.grants) {
    const listed = has('identities') && desired.identities.has(g.identity);
    if ((listed && !desired.grants.has(key)) || retired.has(g.identity) || goneRoles.has(g.role) || goneSources.has(g.source)) {
      grantDeletes.push({ action: 'delete', kind: 'grant', name: grantName(g), fields: [] });
    }
  }
  for (const [key, g] of desired.grants) {
    const roleExists = (desired.sections.has('roles') ? desired.roles.has(g.role) : false) || (current.roles.has(g.role) && !goneRoles.has(g.role));
    const sourceExists = (desired.sections.has('sources') ? desired.sources.has(g.source) : false) || (current.sources.has(g.source) && !goneSources.has(g.source));
    if (!roleExists) throw new ValidationError(`identity ${g.identity}: grant of role ${g.role} on ${g.source}: no role "${g.role}" in the file or the control plane`);
    if (!sourceExists) throw new ValidationError(`identity ${g.identity}: grant of role ${g.role} on ${g.source}: no source "${g.source}" in the file or the control plane`);
    if (!current.grants.has(key)) grantCreates.push({ action: 'create', kind: 'grant', name: grantName(g), fields: [] });
  }

  const roleWillExist = (role: string) => (desired.sections.has('roles') ? desired.roles.has(role) : false) || (current.roles.has(role) && !goneRoles.has(role));
  const sourceWillExist = (source: string) => (desired.sections.has('sources') ? desired.sources.has(source) : false) || (current.sources.has(source) && !goneSources.has(source));
  for (const m of desired.claimMappings.values()) {
    for (const g of m.role_grants) {
      const rule = `claim mapping ${m.issuer}: rule ${g.claim}=${g.value} → role ${g.role} on ${g.source}`;
      if (!roleWillExist(g.role)) throw new ValidationError(`${rule}: no role "${g.role}" in the file or the control plane`);
      if (!sourceWillExist(g.source)) throw new ValidationError(`${rule}: no source "${g.source}" in the file or the control plane`);
    }
  }

  const upserts = (cs: PlanChange[]) => cs.filter((c) => c.action !== 'delete');
  const deletes = (cs: PlanChange[]) => cs.filter((c) => c.action === 'delete');
  const changes = [
    ...grantDeletes,
    ...upserts(sourceChanges),
    ...upserts(roleChanges),
    ...identityChanges,
    ...grantCreates,
    ...policyChanges,
    ...claimChanges,
    ...deletes(roleChanges),
    ...deletes(sourceChanges),
  ];
  const summary = { create: 0, update: 0, delete: 0 };
  for (const c of changes) summary[c.action] += 1;
  return { changes, summary };
}

/** The plan for people: one line per change ("+ create", "~ update", "- delete") with its fields indented, then the counts. */
export function renderPlan(plan: Plan): string {
  if (plan.changes.length === 0) return 'No changes: the control plane matches the file.';
  const sign = { create: '+', update: '~', delete: '-' } as const;
  const v = (x: unknown) => JSON.stringify(x);
  const lines: string[] = [];
  for (const c of plan.changes) {
    lines.push(`${sign[c.action]} ${c.action} ${c.kind} ${c.name}${c.note ? ` (${c.note})` : ''}`);
    for (const f of c.fields) {
      if (f.before === undefined) lines.push(`    + ${f.path}: ${v(f.after)}`);
      else if (f.after === undefined) lines.push(`    - ${f.path}: ${v(f.before)}`);
      else lines.push(`    ~ ${f.path}: ${v(f.before)} → ${v(f.after)}`);
    }
  }
  lines.push('', `Plan: ${plan.summary.create} to create, ${plan.summary.update} to update, ${plan.summary.delete} to delete.`);
  return lines.join('\n');
}

/**
 * The deletions `withPrune` (the plan of the same file with --prune) holds beyond `plan`: what
 * `--prune` would remove (or, for identities, disable) that the plain apply leaves alone. Issue 24, item 6.
 */
export function pruneOnly(plan: Plan, withPrune: Plan): PlanChange[] {
  const key = (c: PlanChange) => `${c.action} ${c.kind} ${c.name}`;
  const have = new Set(plan.changes.map(key));
  return withPrune.changes.filter((c) => c.action === 'delete' && !have.has(key(c)));
}

/** Lines naming what `--prune` would also remove (renderPlan's form), or '' when nothing. */
export function renderPruneOnly(changes: PlanChange[]): string {
  if (changes.length === 0) return '';
  return [`\nWith --prune this file would also delete ${changes.length}:`, ...changes.map((c) => `- delete ${c.kind} ${c.name}${c.note ? ` (${c.note})` : ''}`)].join('\n');
}
