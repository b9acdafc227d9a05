/**
 * Starts test/helpers/oidc-provider.mjs (a real oidc-provider, ESM-only) as a child process and
 * resolves with its issuer URL once it listens. `stderr()` is what it wrote to stderr so far. `close()` ends it (stdin closed, then SIGKILL after 2 s).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';

export interface RunningProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  stderr(): string;
  close(): Promise<void>;
}

/**
 * Spawns the provider with one client_credentials client, open dynamic registration and a headless
 * interaction that signs in `account` (tokens: sub = account, email <account>@example.com, groups
 * ["analysts"]). Rejects after 20 s without a URL.
 */
export async function startOidcProvider(clientId = 'agent', clientSecret = 'agent-secret-0123456789', account = 'alice'): Promise<RunningProvider> {
  const child = spawn(process.execPath, [join(__dirname, 'oidc-provider.mjs'), clientId, clientSecret, account], { stdio: ['pipe', 'pipe', 'pipe'] });
  let errText = '';
  child.stderr.on('data', (d) => (errText += String(d)));
  const issuer = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`oidc-provider did not start: ${errText}`)), 20_000);
    child.stdout.on('data', (d) => {
      out += String(d);
      const line = out.split('\n')[0];
      if (out.includes('\n')) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { issuer: string }).issuer);
      }
    });
    child.once('exit', (code) => reject(new Error(`oidc-provider exited (${code}): ${errText}`)));
  });
  return {
    issuer,
    clientId,
    clientSecret,
    stderr: () => errText,
    async close() {
      if (child.exitCode !== null) return;
      const done = new Promise<void>((r) => child.once('exit', () => r()));
      child.stdin.end();
      const kill = setTimeout(() => child.kill('SIGKILL'), 2000);
      await done;
      clearTimeout(kill);
    },
  };
}
