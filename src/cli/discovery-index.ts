/**
 * `interlock index SOURCE` and `interlock index status` (the discovery index, src/discovery/),
 * on the control database directly. Registered by main.ts.
 */
import type { Command } from 'commander';
import { formatIndexProgress, indexSource, listIndexStatus } from '../discovery/indexer';
import type { IndexStatus } from '../discovery/types';
import { shortTime, table } from './output';
import type { CommandContext } from './context';

/** `index status` for people: one row per source, problems counted (their detail is in --json). */
export function indexStatusTable(rows: IndexStatus[]): string {
  return table(
    ['source', 'indexed', 'ms', 'assets', 'added', 'updated', 'unchanged', 'removed', 'skipped', 'problems'],
    rows.map((r) => [r.sourceId, shortTime(r.indexedAt), r.durationMs, r.assets, r.added, r.updated, r.unchanged, r.removed, r.skipped, r.problems.length]),
  );
}

/** The help line of `interlock index`: what it does with and without SOURCE (the behaviour below). */
export const INDEX_HELP = 'discovery index: `index SOURCE` indexes a source (only changed items are re-indexed); `index` or `index status` shows index status';

/**
 * Registers `index [SOURCE]` and `index status`: with SOURCE it indexes that source; without it,
 * like `index status`, it shows when each source was indexed (help and behaviour agree, hgov item 2).
 */
export function registerIndexCommands(program: Command, ctx: CommandContext): void {
  // ---- index (discovery) ---------------------------------------------------------------------
  const idx = program.command('index').description(INDEX_HELP);
  const showStatus = async (cmd: Command) => {
    const s = ctx.session(cmd);
    s.assertDirect('index status');
    const rows = await listIndexStatus(await s.db());
    s.print(rows.length ? indexStatusTable(rows) : 'no source has been indexed yet', rows);
  };
  idx
    .argument('[source]', 'source id to index (none: show index status)')
    .action(async (sourceId: string | undefined, _o: unknown, cmd: Command) => {
      if (!sourceId) return showStatus(cmd);
      const s = ctx.session(cmd);
      s.assertDirect('index');
      const db = await s.db();
      const r = await indexSource(db, sourceId, { onProgress: (p) => s.io.err(formatIndexProgress(p)) });
      s.print(`indexed ${sourceId}: ${r.assets} asset(s) — ${r.added} added, ${r.updated} updated, ${r.unchanged} unchanged, ${r.removed} removed, ${r.skipped} skipped (${r.durationMs} ms)`, r);
    });
  idx
    .command('status')
    .description('when each source was indexed, with counts')
    .action(async (_o: unknown, cmd: Command) => showStatus(cmd));
}
