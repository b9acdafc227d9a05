/**
 * `interlock apply -f FILE [--plan] [--prune] [--force]` (issue 16, Build 1), registered by
 * main.ts. Direct mode applies on the control database; remote mode (--server) sends the file's
 * text to POST /admin/v1/apply, where the gateway resolves password_env / password_file.
 * --plan prints the changes field by field and changes nothing.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { ValidationError } from '../control/errors';
import { pruneOnly, renderPlan, renderPruneOnly } from '../declarative/plan';
import { operatorOption, type CommandContext } from './context';
import { unreadableWarning } from './source';

/** Registers `apply`. */
export function registerApply(program: Command, ctx: CommandContext): void {
  program
    .command('apply')
    .description('make the control plane what an interlock file describes (sources, roles, identities and grants, policies); one transaction')
    .requiredOption('-f, --file <file>', 'interlock file (YAML or JSON, spec/interlock-file-v1.schema.json)')
    .option('--plan', 'print the changes, field by field, and change nothing')
    .option('--prune', "delete objects of the file's sections that the file leaves out")
    .option('--force', 'with --prune, remove sources even with pending approvals (they are rejected)')
    .option('--allow-unknown-names', 'accept roles and policies naming relations or columns that no scanned catalogue has yet (tables created later)')
    .addOption(operatorOption())
    .action(async (o: { file: string; plan?: boolean; prune?: boolean; force?: boolean; allowUnknownNames?: boolean; operator: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      if (!existsSync(o.file)) throw new ValidationError(`file not found: ${o.file}`);
      const text = readFileSync(o.file, 'utf8');
      const r = await (await s.backend()).applyFile({ text }, { operator: o.operator, plan: o.plan, prune: o.prune, force: o.force, allowUnknownNames: o.allowUnknownNames });
      for (const sc of r.scans) if (sc.error) s.io.err(`warning: catalog scan of ${sc.sourceId} failed: ${sc.error}`);
      for (const sc of r.scans) {
        const unreadable = unreadableWarning(sc.sourceId, sc);
        if (unreadable) s.io.err(unreadable);
      }
      const tail = r.applied ? (r.plan.changes.length ? `\nApplied (${r.digest}).` : '') : r.plan.changes.length ? '\n(plan only: nothing was changed)' : '';
      // A plan without --prune also names what --prune would remove (issue 24, item 6): the same file planned with it.
      const extra = o.plan && !o.prune ? pruneOnly(r.plan, (await (await s.backend()).applyFile({ text }, { operator: o.operator, plan: true, prune: true, force: o.force, allowUnknownNames: o.allowUnknownNames })).plan) : [];
      s.print(renderPlan(r.plan) + renderPruneOnly(extra) + tail, o.plan && !o.prune ? { ...r, prunable: extra } : r);
    });
}
