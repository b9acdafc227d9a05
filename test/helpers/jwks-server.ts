/**
 * A real issuer for token tests (issue 26): an HTTP server on 127.0.0.1:<random port> serving an
 * OpenID discovery document and a JWKS of freshly generated keys, whose behaviour a test switches
 * (`mode`: ok, down = connections reset, slow = never answers, junk = not JSON), and which counts
 * JWKS fetches. `mint` signs access tokens with jose (any header/claims override, for bad tokens).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { CompactSign, exportJWK, generateKeyPair, SignJWT, type JWK, type KeyLike } from 'jose';

export type JwksMode = 'ok' | 'down' | 'slow' | 'junk';

export interface TestIssuer {
  issuer: string;
  jwksUri: string;
  mode: JwksMode;
  /** JWKS fetches answered so far (any mode). */
  jwksFetches: number;
  /** The current signing key's kid. */
  kid: string;
  /** The public JWK of the current key (also the raw material for the HMAC key-confusion test). */
  publicJwk: JWK;
  /** Signs a token with the current key: defaults iss, aud, sub, exp (+5 min), iat; `header`/`claims` override. */
  mint(claims?: Record<string, unknown>, header?: Record<string, unknown>, key?: KeyLike): Promise<string>;
  /**
   * Signs `payload`, the payload's JSON text exactly as given (e.g. a number literal JavaScript
   * cannot hold, as an IdP may write it), with the current key and kid (RS256, typ at+jwt);
   * `header` adds to or overrides the protected header (a `crit` list is signed as given).
   */
  mintRaw(payload: string, header?: Record<string, unknown>): Promise<string>;
  /** Replaces the signing key (a rotation): new kid (the same one with `keepKid`), the JWKS serves only the new key. */
  rotate(opts?: { keepKid?: boolean }): Promise<void>;
  close(): Promise<void>;
}

/** Starts a test issuer whose tokens are for `audience`. */
export async function startTestIssuer(audience: string): Promise<TestIssuer> {
  let keys = await generateKeyPair('RS256');
  let n = 1;
  const slow: http.ServerResponse[] = [];
  const state = { mode: 'ok' as JwksMode, jwksFetches: 0, kid: `k${n}`, publicJwk: { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' } as JWK };
  const server = http.createServer((req, res) => {
    if (req.url === '/jwks') state.jwksFetches++;
    if (state.mode === 'down') return req.socket.destroy();
    if (state.mode === 'slow') return void slow.push(res);
    if (state.mode === 'junk') return void res.writeHead(200, { 'content-type': 'application/json' }).end('<html>oops</html>');
    if (req.url === '/.well-known/openid-configuration') return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ issuer: t.issuer, jwks_uri: t.jwksUri }));
    if (req.url === '/jwks') return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [state.publicJwk] }));
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const t: TestIssuer = {
    issuer: base,
    jwksUri: `${base}/jwks`,
    get mode() {
      return state.mode;
    },
    set mode(m: JwksMode) {
      state.mode = m;
    },
    get jwksFetches() {
      return state.jwksFetches;
    },
    get kid() {
      return state.kid;
    },
    get publicJwk() {
      return state.publicJwk;
    },
    async mint(claims = {}, header = {}, key) {
      const now = Math.floor(Date.now() / 1000);
      const payload = { iss: base, aud: audience, sub: 'user-1', iat: now, exp: now + 300, jti: `jti-${Math.random().toString(36).slice(2)}`, ...claims };
      return new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid: state.kid, typ: 'at+jwt', ...header } as never).sign(key ?? keys.privateKey);
    },
    async mintRaw(payload, header = {}) {
      const crit = Array.isArray(header.crit) ? Object.fromEntries(header.crit.map((c) => [String(c), true])) : undefined;
      return new CompactSign(new TextEncoder().encode(payload)).setProtectedHeader({ alg: 'RS256', kid: state.kid, typ: 'at+jwt', ...header } as never).sign(keys.privateKey, crit ? { crit } : undefined);
    },
    async rotate(opts = {}) {
      keys = await generateKeyPair('RS256');
      if (!opts.keepKid) {
        n++;
        state.kid = `k${n}`;
      }
      state.publicJwk = { ...(await exportJWK(keys.publicKey)), kid: state.kid, alg: 'RS256', use: 'sig' } as JWK;
    },
    async close() {
      for (const r of slow) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  return t;
}
