/**
 * The MCP authorization surface (issue 26 item 3; MCP authorization, RFC 9728 Protected Resource
 * Metadata): GET /.well-known/oauth-protected-resource and its path form for the resource at /mcp
 * (/.well-known/oauth-protected-resource/mcp) answer
 * `{resource, authorization_servers, scopes_supported?, bearer_methods_supported: ["header"]}`,
 * and 401 answers of tools/call carry `WWW-Authenticate: Bearer resource_metadata="<url>"`
 * (with `error="invalid_token"` when a token was refused; 403 insufficient_scope carries
 * `error="insufficient_scope"` and the required scopes), so OAuth-capable clients can start
 * their flow from the challenge. Modern dialect: always. Handshake dialect: only with
 * auth.handshake_challenge, which turns the contract's tool-result refusal of an unauthorized
 * tools/call into HTTP 401 with the challenge.
 */
import type { Express } from 'express';
import { refusalInfo } from '../errors/vocabulary';
import type { ToolOutcome } from '../pipeline/types';
import type { Dialect } from '../transport/admission';
import { hostOriginGuard } from '../transport/http-guard';
import type { OriginPolicy } from '../transport/http-headers';
import { renderOutcome, type RenderedOutcome } from '../protocol/tool-results';

/** The well-known path of RFC 9728 metadata. */
export const PROTECTED_RESOURCE_PATH = '/.well-known/oauth-protected-resource';

/** What the authorization surface publishes and how it challenges. */
export interface AuthSurface {
  /** auth.resource: the canonical resource URL, e.g. https://gw.example.com/mcp. */
  resource: string;
  /** Issuer identifiers (RFC 9728 authorization_servers). */
  authorizationServers: string[];
  /** auth.scopes_supported (omitted from the metadata when empty). */
  scopesSupported: string[];
  /** Scopes every issuer requires (for insufficient_scope challenges). */
  requiredScopes: string[];
  /** auth.handshake_challenge. */
  handshakeChallenge: boolean;
}

/** The metadata URL for `resource` (RFC 9728 section 3.1: the well-known path inserted before the resource's path). */
export function metadataUrl(resource: string): string {
  const u = new URL(resource);
  const path = u.pathname === '/' ? '' : u.pathname.replace(/\/+$/, '');
  return `${u.origin}${PROTECTED_RESOURCE_PATH}${path}`;
}

/** The RFC 9728 metadata document. */
export function protectedResourceMetadata(s: AuthSurface): Record<string, unknown> {
  return {
    resource: s.resource,
    authorization_servers: s.authorizationServers,
    ...(s.scopesSupported.length ? { scopes_supported: s.scopesSupported } : {}),
    bearer_methods_supported: ['header'],
  };
}

/** Serves the metadata at the well-known path and its /mcp path form, behind the Host/Origin guard. */
export function mountProtectedResource(app: Express, s: AuthSurface, policy: OriginPolicy): void {
  const paths = [PROTECTED_RESOURCE_PATH, `${PROTECTED_RESOURCE_PATH}/mcp`];
  app.use(paths, hostOriginGuard(policy));
  const body = protectedResourceMetadata(s);
  app.get(paths, (_req, res) => {
    res.set('Cache-Control', 'public, max-age=300').json(body);
  });
}

/**
 * The WWW-Authenticate value for a refusal `code` (401 codes and insufficient_scope). `realm`, when
 * given, comes first (the deprecated routes and /v1 have always named realm="interlock").
 */
export function challengeHeader(s: AuthSurface, code: string, realm?: string): string {
  const parts = [`Bearer ${realm ? `realm="${realm}", ` : ''}resource_metadata="${metadataUrl(s.resource)}"`];
  if (code === 'invalid_token') parts.push('error="invalid_token"');
  if (code === 'insufficient_scope') parts.push('error="insufficient_scope"', `scope="${s.requiredScopes.join(' ')}"`);
  return parts.join(', ');
}

/**
 * The rendered answer of a tools/call with the challenge applied: a 401 (or insufficient_scope 403)
 * of the modern dialect gets the challenge; in the handshake dialect, with handshakeChallenge, an
 * unauthorized refusal becomes HTTP 401 with the challenge and the modern dialect's error body. Any
 * other answer is returned unchanged.
 */
export function withChallenge(s: AuthSurface | undefined, outcome: ToolOutcome, dialect: Dialect, version: string, requestId: string, rendered: RenderedOutcome): RenderedOutcome {
  if (!s || outcome.kind !== 'refusal') return rendered;
  const info = refusalInfo(outcome.code);
  const challenged = info.http === 401 || outcome.code === 'insufficient_scope';
  if (!challenged) return rendered;
  if (dialect === 'modern') return rendered.kind === 'error' ? { ...rendered, headers: { ...rendered.headers, 'WWW-Authenticate': challengeHeader(s, outcome.code) } } : rendered;
  if (!s.handshakeChallenge || info.http !== 401) return rendered;
  const asModern = renderOutcome(outcome, 'modern', version, requestId);
  return asModern.kind === 'error' ? { ...asModern, headers: { ...asModern.headers, 'WWW-Authenticate': challengeHeader(s, outcome.code) } } : rendered;
}
