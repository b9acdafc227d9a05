/**
 * `interlock export [-o FILE]` (issue 16, Build 2), registered by main.ts: the current state as an
 * interlock file (YAML), passwords as password_env references. Without -o it goes to stdout.
 */
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { renderInterlockFile } from '../declarative/export';
import type { CommandContext } from './context';

/** Registers `export`. */
export function registerExport(program: Command, ctx: CommandContext): void {
  program
    .command('export')
    .description('write the current sources, roles, identities with grants, policies and claim mappings as an interlock file (passwords as references)')
    .option('-o, --output <file>', 'write to FILE instead of stdout')
    .action(async (o: { output?: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      const file = await (await s.backend()).exportFile();
      if (o.output) {
        writeFileSync(o.output, renderInterlockFile(file), { mode: 0o600 });
        s.print(`wrote ${o.output}: ${file.sources?.length ?? 0} source(s), ${file.roles?.length ?? 0} role(s), ${file.identities?.length ?? 0} identity(ies), ${file.policies?.length ?? 0} policy(ies)${file.claim_mappings?.length ? `, ${file.claim_mappings.length} claim mapping(s)` : ''}`, { file: o.output, document: file });
      } else if (s.opts.json) s.print('', file);
      else s.io.out(renderInterlockFile(file).trimEnd());
    });
}
