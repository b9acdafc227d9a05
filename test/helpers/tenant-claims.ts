/**
 * The governed gateway of the token-claim row-rule tests (issue 27, docs/row-rules.md "Writes"):
 * a test issuer whose tokens' `tenant` and `email` claims are identity attributes (unknown subjects
 * provisioned, named by `email`), `groups: writers` granting `role` on the Chinook copy, and `role`
 * reading only the playlists named like the caller's tenant (`name = identity.tenant`) and writing
 * them (a write allow without rows).
 */
import { startGovernedEnv, type GovernedEnv } from './governed';
import { startTestIssuer, type TestIssuer } from './jwks-server';
import { upsertRole } from '../../src/control/roles';

/** The running issuer and gateway. */
export interface TenantClaimsEnv {
  iss: TestIssuer;
  env: GovernedEnv;
}

/**
 * Registers the suite's hooks: issuer and gateway (for protected resource `resource`) with `role`
 * before all tests, both closed after all. Returns the getter of the started pair.
 */
export function useTenantClaimsEnv(resource: string, role: string): () => TenantClaimsEnv {
  let started: TenantClaimsEnv | undefined;
  beforeAll(async () => {
    const iss = await startTestIssuer(resource);
    const env = await startGovernedEnv({
      config: {
        auth: {
          resource,
          scopes_supported: ['interlock'],
          issuers: [{ issuer: iss.issuer, jwks_uri: iss.jwksUri, jwks_cooldown_seconds: 1, unknown_subjects: 'provision', identity_claim: 'email', attribute_claims: ['tenant', 'email'], role_grants: [{ claim: 'groups', value: 'writers', role, source: 'chinook' }] }],
        },
      },
    });
    started = { iss, env };
    await upsertRole(env.db, {
      name: role,
      statements: [
        { effect: 'allow', action: 'read', resource: 'public.playlist', rows: 'name = identity.tenant' },
        { effect: 'allow', action: 'write', resource: 'public.playlist' },
      ],
    });
  }, 180_000);
  afterAll(async () => {
    await started?.env.close();
    await started?.iss.close();
  });
  return () => started!;
}
