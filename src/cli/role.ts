/**
 * `interlock role …` (source roles, spec/role-v1.schema.json) and the grant commands
 * (`grant`, `revoke`, `grants`), registered by main.ts.
 */
import type { Command } from 'commander';
import { shortTime, table } from './output';
import { operatorOption, type CommandContext } from './context';

/** Registers `role create|show|list|remove`, `grant`, `revoke` and `grants`. */
export function registerRoleCommands(program: Command, ctx: CommandContext): void {
  // ---- role ----------------------------------------------------------------------------------
  const role = program.command('role').description('source roles (spec/role-v1.schema.json)');
  role
    .command('create')
    .description('create or replace a role from a JSON or YAML file')
    .argument('<file>')
    .option('--allow-unknown-names', 'accept relation and column resources that no scanned catalogue has yet (tables created later)')
    .action(async (file: string, o: { allowUnknownNames?: boolean }, cmd: Command) => {
      const s = ctx.session(cmd);
      const data = ctx.readDataFile(file);
      const r = await (await s.backend()).putRole(data, { allowUnknownNames: o.allowUnknownNames });
      s.print(`${r.created ? 'created' : 'updated'} role ${r.role.name} (${r.role.statements.length} statement(s))`, r);
    });
  role
    .command('show')
    .description('show a role and its statements')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).getRole(name);
      s.print(
        [`role ${r.name}${r.description ? `: ${r.description}` : ''}`, ...(r.audiences.length ? [`audiences: ${r.audiences.join(', ')}`] : []), '', r.statements.some((x) => 'rows' in x && x.rows) ? table(['effect', 'action', 'resource', 'rows'], r.statements.map((x) => [x.effect, x.action, x.resource, ('rows' in x && x.rows) || ''])) : table(['effect', 'action', 'resource'], r.statements.map((x) => [x.effect, x.action, x.resource]))].join('\n'),
        r,
      );
    });
  role
    .command('remove')
    .description('remove a role; refused while claim rules name it, and while it is granted or policies name it unless --force')
    .argument('<name>')
    .option('--force', 'remove even while granted (the grants are revoked) or named by policies (a policy naming only it is removed, the others stop naming it)')
    .addOption(operatorOption())
    .action(async (name: string, o: { force?: boolean; operator: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).removeRole(name, { operator: o.operator, force: o.force });
      const parts = [
        r.grantsRevoked.length ? `; revoked ${r.grantsRevoked.length} grant(s): ${r.grantsRevoked.join(', ')}` : '',
        r.policiesRemoved.length ? `; removed policy(ies) naming only it: ${r.policiesRemoved.join(', ')}` : '',
        r.policiesDetached.length ? `; policy(ies) no longer naming it: ${r.policiesDetached.join(', ')}` : '',
      ];
      s.print(`removed role ${name}${parts.join('')}`, r);
    });
  role.command('list').description('list roles').action(async (_o: unknown, cmd: Command) => {
    const s = ctx.session(cmd);
    const rows = await (await s.backend()).listRoles();
    s.print(table(['name', 'statements', 'description'], rows.map((r) => [r.name, r.statements.length, r.description])), rows);
  });

  // ---- grant / revoke ------------------------------------------------------------------------
  const grantArgs = (c: Command) => c.argument('<identity>', 'identity name').argument('<role>', 'role name').argument('<source>', 'source id');
  grantArgs(program.command('grant').description('grant ROLE on SOURCE to IDENTITY')).action(async (identity: string, roleName: string, sourceId: string, _o: unknown, cmd: Command) => {
    const s = ctx.session(cmd);
    const r = await (await s.backend()).grant({ identity, role: roleName, source: sourceId });
    s.print(r.created ? `granted role ${roleName} on ${sourceId} to ${r.identity}` : `${r.identity} already holds role ${roleName} on ${sourceId}`, r);
  });
  grantArgs(program.command('revoke').description('revoke ROLE on SOURCE from IDENTITY')).action(async (identity: string, roleName: string, sourceId: string, _o: unknown, cmd: Command) => {
    const s = ctx.session(cmd);
    const r = await (await s.backend()).revoke({ identity, role: roleName, source: sourceId });
    s.print(`revoked role ${roleName} on ${sourceId} from ${r.identity}`, r);
  });
  program
    .command('grants')
    .description('list grants')
    .option('--identity <name>')
    .option('--source <id>')
    .option('--role <name>')
    .action(async (o: { identity?: string; source?: string; role?: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      const rows = await (await s.backend()).listGrants({ identity: o.identity, source: o.source, role: o.role });
      s.print(table(['identity', 'role', 'source', 'granted'], rows.map((g) => [g.identityName, g.roleName, g.sourceId, shortTime(g.createdAt)])), rows);
    });
}
