/**
 * `interlock policy …` (spec/policy-v1.schema.json): add, list, show, remove; registered by main.ts.
 */
import type { Command } from 'commander';
import YAML from 'yaml';
import { table } from './output';
import type { CommandContext } from './context';

/** Registers `policy add|list|show|remove`. */
export function registerPolicyCommands(program: Command, ctx: CommandContext): void {
  // ---- policy --------------------------------------------------------------------------------
  const pol = program.command('policy').description('policies (spec/policy-v1.schema.json)');
  pol
    .command('add')
    .description('add one policy or a list from a JSON or YAML file')
    .argument('<file>')
    .option('--replace', 'replace policies of the same names')
    .option('--allow-unknown-names', 'accept relations and columns that no scanned catalogue has yet (tables created later); an unregistered source is refused all the same')
    .action(async (file: string, o: { replace?: boolean; allowUnknownNames?: boolean }, cmd: Command) => {
      const s = ctx.session(cmd);
      const data = ctx.readDataFile(file);
      const r = await (await s.backend()).addPolicies(data, { replace: o.replace, allowUnknownNames: o.allowUnknownNames });
      s.print(r.map((x) => `${x.created ? 'added' : 'replaced'} policy ${x.policy.name} (${x.policy.rule.type})`).join('\n'), r);
    });
  pol.command('list').description('list policies').action(async (_o: unknown, cmd: Command) => {
    const s = ctx.session(cmd);
    const rows = await (await s.backend()).listPolicies();
    s.print(table(['name', 'rule', 'enabled', 'applies to', 'description'], rows.map((p) => [p.name, p.rule.type, p.enabled ? 'yes' : 'no', p.applies_to ? JSON.stringify(p.applies_to) : 'everyone', p.description])), rows);
  });
  pol
    .command('show')
    .description('show one policy')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const p = await (await s.backend()).getPolicy(name);
      s.print(YAML.stringify(p).trimEnd(), p);
    });
  pol
    .command('remove')
    .description('remove a policy')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).removePolicy(name);
      s.print(`removed policy ${name}`, r);
    });
}
