/**
 * Shapes of the declarative configuration (issue 16): the control plane's governed objects as
 * comparable values, so a file and the database can be diffed (plan.ts), applied (apply.ts) and
 * written back (export.ts). Keys and operator tokens are not part of it (they stay imperative).
 */
import type { SourceDefinition } from '../control/sources';
import type { SourceRole } from '../control/roles';
import type { Policy } from '../control/policies';
import type { StoredClaimMapping } from '../control/claim-mappings';

/** The sections of an interlock file. Extension point: a new section (e.g. notifications.webhooks once its schema exists) is added here, in schema.ts, state.ts, plan.ts and apply.ts. */
export const SECTIONS = ['sources', 'roles', 'identities', 'policies', 'claim_mappings'] as const;
/** One section of an interlock file. */
export type Section = (typeof SECTIONS)[number];

/** A role with its defaults filled in (description "", audiences []). */
export type RoleState = Required<Pick<SourceRole, 'name' | 'description' | 'audiences' | 'statements'>>;
/** A policy with its defaults filled in (description "", enabled true; applies_to absent when empty). */
export type PolicyState = Policy & { description: string; enabled: boolean };
/** A source definition with its defaults filled in (description "", enabled true); credentials hold real passwords. */
export type SourceState = SourceDefinition & { description: string; enabled: boolean };

/** A grant as one value. */
export interface GrantState {
  identity: string;
  role: string;
  source: string;
}

/** The governed objects, keyed by id or name (Maps keep insertion order: ordered by key). */
export interface ConfigState {
  sources: Map<string, SourceState>;
  roles: Map<string, RoleState>;
  /** Identity name → disabled. */
  /** `attributes` (issue 27): in the current state only when non-empty; in the desired state only when the file gives them. */
  identities: Map<string, { name: string; disabled: boolean; attributes?: Record<string, unknown> }>;
  /** Grants keyed by grantKey(). */
  grants: Map<string, GrantState>;
  policies: Map<string, PolicyState>;
  /** Token issuers' claim mappings keyed by issuer (issue 26): absent fields omitted, role_grants always an array. */
  claimMappings: Map<string, ClaimMappingState>;
}

/** A claim mapping with its defaults filled in (role_grants [] when absent). */
export type ClaimMappingState = StoredClaimMapping;

/** What a file asks for: the state it describes and which sections it has (only those are compared and pruned). */
export interface DesiredState extends ConfigState {
  sections: Set<Section>;
}

/** Key of a grant in ConfigState.grants. */
export function grantKey(g: GrantState): string {
  return `${g.identity} ${g.role} ${g.source}`;
}
