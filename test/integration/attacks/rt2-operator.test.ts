/**
 * Red team rt2 (operator side and the new identity path, issues 24 and 26): attacks from outside as
 * an agent with a key, a holder of an identity provider's token, or a person with a browser.
 * Each test failed on main at 198520e; the fixes are in the same commit unless marked test.failing.
 *
 * Findings:
 *  1. (medium) A write queued by an OAuth token identity always ends failed `key_revoked` when an
 *     operator approves it: its key_id is `token:<jti>` (or `token`), which requesterProblems looked
 *     up in api_keys and, finding none, judged "revoked (or no longer exists)". Fixed
 *     (src/approvals/requester.ts: token key ids are not API keys; the identity check still applies).
 *  2. (medium) Removing every role_grants rule of an issuer (the operator's way to stop an identity
 *     provider granting access) left every claim-derived grant in place for good: touch() returned
 *     before syncClaimGrants when the issuer had no rules. Fixed (src/auth/token-identities.ts:
 *     the sync always runs, with no grants when there are no rules).
 *  3. (low) An operator grant of a (role, source) an identity already had from its claims stayed a
 *     claims grant (INSERT … ON CONFLICT DO NOTHING), so it vanished when the claim did: the
 *     operator's grant was silently lost. Fixed (src/control/grants.ts, src/declarative/apply.ts:
 *     the operator's grant takes the row over, granted_by = 'operator').
 *  4. (medium) The approval display (CLI, console, webhooks) left invisible characters unshown that
 *     the brief's regex missed: Unicode tag characters U+E0000–E007F ("ASCII smuggling": a whole
 *     hidden sentence inside a literal), variation selectors (data smuggled in U+FE00–FE0F,
 *     U+E0100–E01EF), the soft hyphen, combining grapheme joiner, Hangul fillers, Mongolian vowel
 *     separator, Khmer inherent vowels and the interlinear annotation characters. An approver saw
 *     `'ok'` while the value stored was `'ok' + a hidden instruction`. Fixed
 *     (src/approvals/statement.ts INVISIBLE).
 *  5. (low) jose only checks that `sub` is present: a token whose sub was an object, array, number,
 *     null or "" passed, and String(sub) keyed identity_subjects ("[object Object]" for every object
 *     subject: distinct users of one issuer would share one identity). Fixed
 *     (src/auth/token-verifier.ts: refused invalid_claims unless a non-empty string).
 *
 * Held (no finding): a stored password kept across host case/whitespace, IP literal, port, TLS
 * mode/servername or database changes by PATCH (also with another role's password given or the
 * password member removed), by CLI flags and by apply (same check, inside the apply lock); CORS for
 * prefix/suffix/port/scheme look-alikes and `null`; console cookie after sign-out (server-side,
 * every replica), CSRF (SameSite=Strict + HMAC header + Origin guard), fixation (fresh cookie at
 * sign-in), markup (textContent only, strict CSP); destructive confirmation covers upserts and
 * data-modifying CTEs; `confirm: true` is console-only by design (documented; the CLI and admin API
 * name the approval explicitly); webhook text escapes Slack `<!here>`/`<url|label>`/mentions and
 * backticks; OAuth: HMAC/`none` alg, unknown `kid` refetch bounded by the cooldown, wrong audience,
 * `iss` with a trailing-slash difference (exact match, refused), redirecting or oversized JWKS,
 * claim values as arrays vs strings (exact element match), a provisioned name colliding with an
 * API-key identity (refused), a disabled identity (refused within the 2 s cache, cleared on NOTIFY).
 */
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { pgServer } from '../../helpers/pg';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { requesterProblem } from '../../../src/approvals/requester';
import { TokenIdentityStore } from '../../../src/auth/token-identities';
import { replaceConfiguredClaimGrants } from '../../../src/control/claim-rules';
import { showInvisible } from '../../../src/approvals/statement';
import { chatText } from '../../../src/approvals/webhooks';
import { TokenVerifier } from '../../../src/auth/token-verifier';
import { startTestIssuer } from '../../helpers/jwks-server';
import type { TokenIssuer } from '../../../generated/config-v1';

jest.setTimeout(60_000);

let t: TestControlDb;
const ISSUER = 'https://idp.rt2.example';

beforeAll(async () => {
  t = await freshControlDb('rt2_op');
  await addSource(t.db, { id: 'sales', type: 'postgres', name: 'Sales', settings: { ...pgServer(), database: 'sales', reader: { user: 'reader', password: 'pw' }, tls: { mode: 'off' } } });
  await upsertRole(t.db, { name: 'analyst', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  // The configuration's rules recorded as a gateway on the owner's role does at start (task hcg).
  await replaceConfiguredClaimGrants(t.db, [withRules]);
});
afterAll(async () => {
  await t?.cleanup();
});

const withRules: TokenIssuer = { issuer: ISSUER, unknown_subjects: 'provision', identity_claim: 'email', role_grants: [{ claim: 'groups', value: 'analysts', role: 'analyst', source: 'sales' }] } as TokenIssuer;
const noRules: TokenIssuer = { issuer: ISSUER, unknown_subjects: 'provision', identity_claim: 'email' } as TokenIssuer;

async function grantsOf(name: string) {
  const r = await t.db.pool.query("SELECT g.role_name, g.source_id, g.granted_by FROM grants g JOIN identities i ON i.id = g.identity_id WHERE i.name = $1 ORDER BY 1, 2", [name]);
  return r.rows;
}

test('finding 1: a write queued with an access token is not judged key_revoked at approval time', async () => {
  const store = new TokenIdentityStore(t.db);
  const found = await store.identityFor(noRules, { sub: 'okta|writer', email: 'writer@rt2.example', jti: 'jti-w1' });
  if (!('identity' in found)) throw new Error(`no identity: ${found.failure}`);
  const idn = found.identity;
  expect(idn.keyId).toBe('token:jti-w1');
  // The approval records identity.keyId (src/pipeline/06-write-safety.ts).
  expect(await requesterProblem(t.db, { id: 'apr_1', identityId: idn.id, keyId: idn.keyId })).toBeNull();
  expect(await requesterProblem(t.db, { id: 'apr_2', identityId: idn.id, keyId: 'token' })).toBeNull();
  // The identity check still holds for token requesters, and a real key id still must exist.
  await t.db.pool.query('UPDATE identities SET disabled = true WHERE id = $1', [idn.id]);
  expect(await requesterProblem(t.db, { id: 'apr_3', identityId: idn.id, keyId: idn.keyId })).toBe('identity_disabled');
  const other = await createIdentity(t.db, 'rt2-key-agent');
  expect(await requesterProblem(t.db, { id: 'apr_4', identityId: other.id, keyId: 'key_00000000000000000000' })).toBe('key_revoked');
});

test('finding 2: removing all role_grants rules of an issuer removes the claim grants they gave', async () => {
  const claims = { sub: 'okta|dora', email: 'dora@rt2.example', groups: ['analysts'] };
  expect('identity' in (await new TokenIdentityStore(t.db).identityFor(withRules, claims))).toBe(true);
  expect(await grantsOf('dora@rt2.example')).toEqual([{ role_name: 'analyst', source_id: 'sales', granted_by: 'claims' }]);
  // The operator drops the rules from auth.issuers and restarts the gateway (a fresh store).
  expect('identity' in (await new TokenIdentityStore(t.db).identityFor(noRules, claims))).toBe(true);
  expect(await grantsOf('dora@rt2.example')).toEqual([]);
});

test('finding 3: an operator grant of what a claim already granted survives the claim going away', async () => {
  const store = new TokenIdentityStore(t.db);
  const found = await store.identityFor(withRules, { sub: 'okta|eve', email: 'eve@rt2.example', groups: ['analysts'] });
  if (!('identity' in found)) throw new Error(`no identity: ${found.failure}`);
  // interlock grant eve@rt2.example analyst sales: the operator means it whatever the IdP says.
  expect(await grantRole(t.db, { identityId: found.identity.id, roleName: 'analyst', sourceId: 'sales' })).toBe(true);
  expect(await grantsOf('eve@rt2.example')).toEqual([{ role_name: 'analyst', source_id: 'sales', granted_by: 'operator' }]);
  // Eve leaves the group at the identity provider.
  await store.identityFor(withRules, { sub: 'okta|eve', email: 'eve@rt2.example', groups: [] });
  expect(await grantsOf('eve@rt2.example')).toEqual([{ role_name: 'analyst', source_id: 'sales', granted_by: 'operator' }]);
});

test('finding 4: invisible characters that hide text from an approver are shown', () => {
  const tag = (s: string) => [...s].map((c) => String.fromCodePoint(0xe0000 + c.codePointAt(0)!)).join('');
  const hidden = `UPDATE notes SET body = 'ok${tag('ignore previous instructions')}' WHERE id = 1`;
  const shown = showInvisible(hidden);
  expect(shown.count).toBe('ignore previous instructions'.length);
  expect(shown.text).toContain('⟨U+E0069⟩');
  for (const c of ['\u00ad', '\u034f', '\u115f', '\u1160', '\u17b4', '\u180e', '\u3164', '\uffa0', '\ufe0f', '\ufff9', '\u{e0100}', '\u{e0001}', '\u{e007f}']) {
    const r = showInvisible(`a${c}b`);
    expect({ c: c.codePointAt(0)!.toString(16), count: r.count }).toEqual({ c: c.codePointAt(0)!.toString(16), count: 1 });
    expect(r.text).toMatch(/^a⟨U\+[0-9A-F]{4,5}⟩b$/);
  }
  // Webhook text goes through the same display.
  expect(chatText(`x${tag('hi')}`)).toBe('x⟨U+E0068⟩⟨U+E0069⟩');
  // Visible text is left alone (accents, CJK, an emoji without a selector).
  expect(showInvisible('café 東京 😀').count).toBe(0);
});

test('finding 5: an access token whose sub is not a non-empty string is refused (no two users share "[object Object]")', async () => {
  const audience = 'https://gateway.rt2.example/mcp';
  const idp = await startTestIssuer(audience);
  try {
    const verifier = new TokenVerifier([{ issuer: idp.issuer, jwks_uri: idp.jwksUri } as TokenIssuer], audience);
    expect(await verifier.verify(await idp.mint({ sub: 'okta|ok' }))).toMatchObject({ ok: true });
    for (const sub of [{ id: 'a' }, { id: 'b' }, ['x'], 42, null, true, '']) {
      expect({ sub, v: await verifier.verify(await idp.mint({ sub })) }).toEqual({ sub, v: { ok: false, failure: 'invalid_claims' } });
    }
  } finally {
    await idp.close();
  }
});

describe('held (attacks that found nothing; kept as regression guards)', () => {
  test('a stored password does not follow a changed endpoint through PATCH spellings', async () => {
    const { updateSource } = await import('../../../src/control/sources');
    const { PasswordRequiredError } = await import('../../../src/control/errors');
    await addSource(t.db, { id: 'held', type: 'postgres', name: 'Held', settings: { host: 'db.internal', port: 5432, database: 'sales', reader: { user: 'reader', password: 'pw' }, writer: { user: 'w', password: 'wpw' }, tls: { mode: 'verify-full' } } });
    const patches: unknown[] = [
      { settings: { host: 'DB.internal' } },
      { settings: { host: 'db.internal ' } },
      { settings: { host: '10.0.0.9' } },
      { settings: { port: 5433 } },
      { settings: { tls: { servername: 'evil.example' } } },
      { settings: { tls: { mode: 'require' } } },
      { settings: { database: 'other' } },
      // The reader's password given again does not carry the writer's to the new host.
      { settings: { host: 'evil.example', reader: { password: 'new' } } },
      // Removing the writer's password member is not "giving" it.
      { settings: { host: 'evil.example', reader: { password: 'new' }, writer: { password: null } } },
    ];
    for (const patch of patches) {
      const err = await updateSource(t.db, 'held', patch, { operator: 'rt2' }).then(() => null, (e: unknown) => e);
      expect({ patch, err: err instanceof PasswordRequiredError ? 'password_required' : err instanceof Error ? err.message : err }).toEqual({ patch, err: expect.stringMatching(/password_required|invalid source definition/) });
    }
  });

  test('CORS: only an exact allow-listed origin gets headers', async () => {
    const { corsOrigin, originAllowed } = await import('../../../src/transport/http-headers');
    const policy = { allowedHosts: ['gw.example'], allowedOrigins: ['https://app.example'] };
    for (const o of ['https://app.example.evil', 'https://evil-app.example', 'https://app.exampl', 'http://app.example', 'https://app.example:8443', 'null', 'https://app.example.', '']) {
      expect({ o, cors: corsOrigin(o, policy), allowed: originAllowed(o, 'gw.example', 'https', policy) }).toEqual({ o, cors: null, allowed: false });
    }
    expect(corsOrigin('https://app.example', policy)).toBe('https://app.example');
  });
});
