/**
 * The gateway's OAuth 2.1 resource-server wiring (issue 26): from config `auth`, the identity
 * resolver for step 1 (API keys beside access tokens) and the authorization surface (protected
 * resource metadata and 401 challenges). Without issuers, the API-key resolver is returned as is
 * and there is no surface.
 */
import type { Logger } from 'pino';
import type { GatewayConfig } from '../../generated/config-v1';
import type { ControlDb } from '../control/db';
import type { IdentityResolver } from '../control/identities';
import { ValidationError } from '../control/errors';
import { ClaimMappingCache } from '../control/claim-mappings';
import { FederatedIdentityResolver } from './federated-resolver';
import type { AuthSurface } from './protected-resource';
import { TokenIdentityStore } from './token-identities';
import { TokenVerifier } from './token-verifier';
import type { IssuerKeysOptions } from './issuer-keys';

/** A resolver that can be invalidated on control-table changes and closed on shutdown. */
export type ManagedResolver = IdentityResolver & { invalidate(): void; close(): Promise<void> };

/**
 * Builds step 1's resolver and the authorization surface from `auth` (config), and the token
 * identity store behind the resolver (`subjects`, absent without issuers). Throws
 * ValidationError when issuers are configured without auth.resource.
 * `onValidation` receives every token validation outcome (metrics); `onClaimGrantsSynced` is told
 * each identity whose claim grants a sign-in just synced (TokenIdentityStore's constructor: the
 * gateway drops the identity's cached grants before the call is authorised, red team rt48d R6).
 */
export function federatedIdentity(
  auth: GatewayConfig['auth'],
  keys: ManagedResolver,
  db: ControlDb,
  opts: { logger?: Logger; onValidation?: (outcome: string) => void; keys?: IssuerKeysOptions; onClaimGrantsSynced?: (identityId: string) => void } = {},
): { resolver: ManagedResolver; surface?: AuthSurface; subjects?: TokenIdentityStore } {
  const issuers = auth?.issuers ?? [];
  if (issuers.length === 0) return { resolver: keys };
  if (!auth?.resource) throw new ValidationError('invalid configuration', ['/auth/resource: required when auth.issuers is set (the audience tokens must name)']);
  const verifier = new TokenVerifier(issuers, auth.resource, { ...opts.keys, logger: opts.logger });
  const subjects = new TokenIdentityStore(db, opts.logger, new ClaimMappingCache(db), opts.onClaimGrantsSynced);
  const resolver = new FederatedIdentityResolver(keys, verifier, subjects, { logger: opts.logger, onValidation: opts.onValidation });
  const surface: AuthSurface = {
    resource: auth.resource,
    authorizationServers: verifier.issuers(),
    scopesSupported: auth.scopes_supported ?? [],
    requiredScopes: [...new Set(issuers.flatMap((i) => i.required_scopes ?? []))],
    handshakeChallenge: auth.handshake_challenge === true,
  };
  return { resolver, surface, subjects };
}
