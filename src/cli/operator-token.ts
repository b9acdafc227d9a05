/**
 * `interlock operator-token …`: operator tokens for the admin API (/admin/v1), made and managed on
 * the control database directly, never through the API (src/admin/tokens.ts). Registered by main.ts.
 */
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { createOperatorToken, listOperatorTokens, revokeOperatorToken } from '../admin/tokens';
import { ValidationError } from '../control/errors';
import { parseDuration } from './args';
import { shortTime, table } from './output';
import type { CommandContext } from './context';

/** Registers `operator-token create|list|revoke`. */
export function registerOperatorTokenCommands(program: Command, ctx: CommandContext): void {
  // ---- operator-token ------------------------------------------------------------------------
  const opt = program.command('operator-token').description('operator tokens for the admin API (/admin/v1); made on the database directly, never through the API');
  opt
    .command('create')
    .description('create a token for operator NAME (recorded as the approver); the secret is shown once')
    .argument('<name>', 'operator name, e.g. ops-anna')
    .option('--expires-in <duration>', 'expire after a duration: 90s, 45m, 12h, 30d')
    .action(async (name: string, o: { expiresIn?: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      if (s.remote) throw new ValidationError('operator tokens are created on the control database directly: run this without --server');
      const expiresAt = o.expiresIn ? new Date(Date.now() + parseDuration(o.expiresIn, '--expires-in')) : undefined;
      const t = await createOperatorToken(await s.db(), name, { expiresAt }, { operator: userInfo().username });
      const warning = 'Store this token now: it is shown only once and cannot be recovered. It signs in to the console (/console) and authenticates the admin API (/admin/v1, remote CLI); it is not an agent key.';
      s.print([`operator token ${t.tokenId} for ${t.name}${t.expiresAt ? ` (expires ${shortTime(t.expiresAt)})` : ''}:`, '', `  ${t.secret}`, '', warning].join('\n'), { ...t, warning });
    });
  opt
    .command('list')
    .description('list operator tokens (prefixes only, never secrets)')
    .option('--name <name>', 'only this operator')
    .action(async (o: { name?: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      if (s.remote) throw new ValidationError('operator tokens are managed on the control database directly: run this without --server');
      const rows = await listOperatorTokens(await s.db(), { name: o.name });
      s.print(table(['id', 'operator', 'prefix', 'status', 'created', 'expires', 'last used'], rows.map((t) => [t.id, t.name, t.prefix + '…', t.status, shortTime(t.createdAt), shortTime(t.expiresAt), shortTime(t.lastUsedAt)])), rows);
    });
  opt
    .command('revoke')
    .description('revoke an operator token')
    .argument('<token-id>', 'opt_… id (see operator-token list)')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      if (s.remote) throw new ValidationError('operator tokens are managed on the control database directly: run this without --server');
      const t = await revokeOperatorToken(await s.db(), id, { operator: userInfo().username });
      s.print(`revoked operator token ${t.id} (${t.name})`, t);
    });
}
