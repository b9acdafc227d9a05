/**
 * Every error code the admin API and the console can send is listed in spec/errors-v1.json (task
 * hsm2 item 2). The codes are read from the code itself, not from a hand list: the string literals
 * in an error-code position of src/admin, src/console, the route helpers they use (src/http/common.ts)
 * and the control-plane errors they map (src/control/errors.ts) — `sendError(res, 'x'`, `code: 'x'`,
 * `code = 'x'` and the values of sendControlError's kind → code map. A code added there without
 * its spec entry fails this test.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import errors from '../../spec/errors-v1.json';

const SRC = join(__dirname, '..', '..', 'src');

/** The source files whose codes reach admin API and console clients. */
function files(): string[] {
  const dir = (d: string) => readdirSync(join(SRC, d)).filter((f) => f.endsWith('.ts')).map((f) => join(SRC, d, f));
  return [...dir('admin'), ...dir('console'), join(SRC, 'http', 'common.ts'), join(SRC, 'http', 'closed-body.ts'), join(SRC, 'transport', 'http-guard.ts'), join(SRC, 'control', 'errors.ts')];
}

/** The error codes `text` sends: literals in an error-code position. */
export function emittedCodes(text: string): string[] {
  const out = new Set<string>();
  for (const re of [/\bsendError\(\s*[A-Za-z_.]+\s*,\s*'([a-z][a-z0-9_]*)'/g, /\bcode\s*:\s*'([a-z][a-z0-9_]*)'/g, /\bcode\s*=\s*'([a-z][a-z0-9_]*)'/g]) {
    for (const m of text.matchAll(re)) out.add(m[1]!);
  }
  // sendControlError's map from ControlError kinds to codes: `const map: Record<…, HttpErrorCode> = { kind: 'code', … }`.
  for (const m of text.matchAll(/Record<[^>]*HttpErrorCode>\s*=\s*\{([^}]*)\}/g)) for (const v of m[1]!.matchAll(/:\s*'([a-z][a-z0-9_]*)'/g)) out.add(v[1]!);
  return [...out].sort();
}

const specCodes = new Set<string>([
  ...errors.httpErrors.map((e) => e.code),
  ...errors.operatorRefusals.map((e) => e.code),
  ...errors.refusals.map((e) => e.code),
  ...errors.toolErrors.map((e) => e.code),
  ...errors.approvalFailures.map((e) => e.code),
]);

test('the extraction finds the codes of the admin API and console (validation_failed, conflict, not_found, self_approval_forbidden, password_required …)', () => {
  const found = new Set(files().flatMap((f) => emittedCodes(readFileSync(f, 'utf8'))));
  for (const c of ['validation_failed', 'conflict', 'not_found', 'forbidden', 'unavailable', 'self_approval_forbidden', 'password_required', 'missing_operator_token', 'invalid_operator_token', 'unknown_route', 'internal_error', 'invalid_json']) expect(found).toContain(c);
});

test('every code the admin API and console can send is in spec/errors-v1.json', () => {
  const unlisted = files().flatMap((f) => emittedCodes(readFileSync(f, 'utf8')).filter((c) => !specCodes.has(c)).map((c) => `${f.slice(SRC.length + 1)}: ${c}`));
  expect(unlisted).toEqual([]);
});

test('an unlisted code in an error-code position is caught', () => {
  expect(emittedCodes("sendError(res, 'brand_new_code', 'x'); res.json({ code: 'other_new' })").filter((c) => !specCodes.has(c))).toEqual(['brand_new_code', 'other_new']);
});
