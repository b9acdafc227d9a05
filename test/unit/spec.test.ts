import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import errors from '../../spec/errors-v1.json';
import protocol from '../../spec/protocol-v1.json';

const md = readFileSync(join(__dirname, '..', '..', 'spec', 'errors-v1.md'), 'utf8');

test('errors-v1.md names every code of errors-v1.json', () => {
  const missing = [
    ...errors.jsonrpc.map((e) => String(e.code)),
    ...errors.statuses.map((s) => `\`${s.status}\``),
    ...errors.refusals.map((r) => `\`${r.code}\``),
    ...errors.toolErrors.map((t) => `\`${t.code}\``),
    ...errors.operatorRefusals.map((o) => `\`${o.code}\``),
    ...errors.approvalFailures.map((f) => `\`${f.code}\``),
  ].filter((k) => !md.includes(k));
  expect(missing).toEqual([]);
});

test('every JSON-RPC code the protocol checks use is in the error table', () => {
  const codes = new Set(errors.jsonrpc.map((e) => e.code));
  expect(protocol.checks.filter((c) => !codes.has(c.code)).map((c) => c.id)).toEqual([]);
});

test('-32022 data.supported equals server/discover supportedVersions (newest first)', () => {
  expect(protocol.versions.supported).toEqual(['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26']);
  expect([...protocol.versions.modern, ...protocol.versions.handshake]).toEqual(protocol.versions.supported);
});
