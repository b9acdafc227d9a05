/**
 * Function policy tooling (issue 12, Build 3).
 *
 *   npx tsx scripts/function-policy.ts snapshot URL   # merges a server's pg_proc into src/sql/builtin-functions/pg-proc.json
 *   npx tsx scripts/function-policy.ts render         # writes docs/function-policy.md from the snapshots and the rules
 *   npx tsx scripts/function-policy.ts check          # exits 1 when docs/function-policy.md is stale or a row is unclassified
 *
 * A snapshot lists every function of the built-in schemas (`pg_catalog`, `information_schema`) of
 * one PostgreSQL major version, one row per pg_proc entry (see `ProcRow`); pg-proc.json stores all
 * of them, each distinct row once with its versions. Take one per supported
 * major version after an upgrade; `render` and the unit tests then show every new function, which
 * stays refused until a rule or the reviewed allow-list classifies it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { formatSnapshotFile, mergeSnapshot, PROC_SNAPSHOT_SQL, type ProcSnapshot, type ProcSnapshotFile } from '../src/sql/builtin-functions/snapshot';
import { renderPolicyMarkdown } from '../src/sql/builtin-functions/render';
import { loadSnapshots, unclassifiedRows } from '../src/sql/builtin-functions/classes';

const ROOT = join(__dirname, '..');
const DOC = join(ROOT, 'docs', 'function-policy.md');

async function snapshot(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const major = Number((await client.query<{ server_version_num: string }>('SHOW server_version_num')).rows[0].server_version_num.slice(0, 2));
    const rows = (await client.query<{ r: ProcSnapshot['rows'][number] }>(PROC_SNAPSHOT_SQL)).rows.map((x) => x.r);
    const snap: ProcSnapshot = { postgres: major, rows };
    const file = join(ROOT, 'src', 'sql', 'builtin-functions', 'pg-proc.json');
    const stored = JSON.parse(readFileSync(file, 'utf8')) as ProcSnapshotFile;
    writeFileSync(file, formatSnapshotFile(mergeSnapshot(stored, snap)));
    console.log(`${file}: ${rows.length} functions of PostgreSQL ${major} merged`);
  } finally {
    await client.end();
  }
}

function main(): void {
  const [cmd, arg] = process.argv.slice(2);
  if (cmd === 'snapshot' && arg) {
    snapshot(arg).catch((err) => {
      console.error(String(err));
      process.exit(1);
    });
    return;
  }
  const md = renderPolicyMarkdown(loadSnapshots());
  if (cmd === 'render') {
    writeFileSync(DOC, md);
    console.log(`${DOC} written`);
    return;
  }
  if (cmd === 'check') {
    const missing = unclassifiedRows(loadSnapshots());
    const stale = readFileSync(DOC, 'utf8') !== md;
    if (missing.length) console.error(`unclassified: ${missing.map((r) => `${r[0]}.${r[1]}(${r[2]})`).join(', ')}`);
    if (stale) console.error('docs/function-policy.md is stale: run npx tsx scripts/function-policy.ts render');
    process.exit(missing.length || stale ? 1 : 0);
  }
  console.error('usage: function-policy.ts snapshot URL | render | check');
  process.exit(2);
}

main();
