/**
 * `interlock key …`: API keys of identities (create shows the secret once; list; revoke, which says
 * when a key was already revoked),
 * registered by main.ts.
 */
import type { Command } from 'commander';
import { ValidationError } from '../control/errors';
import { parseDuration, parseTime } from './args';
import { shortTime, table } from './output';
import type { CommandContext } from './context';

/** Registers `key create|list|revoke`. */
export function registerKeyCommands(program: Command, ctx: CommandContext): void {
  // ---- key -----------------------------------------------------------------------------------
  const key = program.command('key').description('API keys (the secret is shown once, at creation)');
  key
    .command('create')
    .description('create an API key for IDENTITY (the secret is shown once)')
    .argument('<identity>', 'identity name')
    .option('--expires-in <duration>', 'expire after a duration: 90s, 45m, 12h, 30d')
    .option('--expires-at <time>', 'expire at an ISO-8601 time')
    .action(async (name: string, o: { expiresIn?: string; expiresAt?: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      if (o.expiresIn && o.expiresAt) throw new ValidationError('use --expires-in or --expires-at, not both');
      const expiresAt = o.expiresIn ? new Date(Date.now() + parseDuration(o.expiresIn, '--expires-in')) : o.expiresAt ? parseTime(o.expiresAt, '--expires-at') : undefined;
      const k = await (await s.backend()).createKey(name, { expiresAt: expiresAt?.toISOString() });
      s.print(
        [`API key ${k.keyId} for ${k.identity}${k.expiresAt ? ` (expires ${shortTime(k.expiresAt)})` : ''}:`, '', `  ${k.secret}`, '', k.warning].join('\n'),
        { keyId: k.keyId, identity: k.identity, secret: k.secret, prefix: k.prefix, expiresAt: k.expiresAt, warning: k.warning },
      );
    });
  key
    .command('list')
    .description('list API keys (prefixes only, never secrets)')
    .option('--identity <name>', 'only this identity')
    .action(async (o: { identity?: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      const rows = await (await s.backend()).listKeys(o.identity);
      s.print(
        table(['id', 'identity', 'prefix', 'status', 'created', 'expires', 'last used'], rows.map((k) => [k.id, k.identityName, k.prefix + '…', k.status, shortTime(k.createdAt), shortTime(k.expiresAt), shortTime(k.lastUsedAt)])),
        rows,
      );
    });
  key
    .command('revoke')
    .description('revoke an API key (a key already revoked keeps its first revocation time)')
    .argument('<key-id>', 'key_… id (see key list)')
    .action(async (keyId: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const b = await s.backend();
      // Revoking is idempotent; whether it already was is read first, to say so (task hnu4b item h).
      const already = (await b.listKeys()).some((k) => k.id === keyId && k.revokedAt !== null);
      const k = await b.revokeKey(keyId);
      s.print(already ? `${k.id} (${k.identityName}) was already revoked (at ${shortTime(k.revokedAt)}): nothing changed` : `revoked ${k.id} (${k.identityName}); running gateways refuse it within 2 s`, k);
    });
}
