/**
 * A throwaway self-signed certificate for 127.0.0.1 (issue 24, item 3 tests of listen.tls), made
 * with the openssl command line into a fresh temporary folder.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';

/** A certificate and key written to files, with the PEM text and SHA-256 fingerprint. */
export interface TestCert {
  certFile: string;
  keyFile: string;
  cert: string;
  /** X509Certificate.fingerprint256 ("AB:CD:…"). */
  fingerprint: string;
}

/** Writes a new P-256 self-signed certificate for CN and IP 127.0.0.1, valid one day, into `dir` (default: a new temp folder) under `name`. */
export function makeTestCert(name = 'gateway', dir = mkdtempSync(join(tmpdir(), 'il-tls-'))): TestCert {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  const cert = readFileSync(certFile, 'utf8');
  return { certFile, keyFile, cert, fingerprint: new X509Certificate(cert).fingerprint256 };
}
