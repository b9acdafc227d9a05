/**
 * What a format-3 batch row costs the control database (issue 28 item 3, h28d): the backend's CPU
 * (/proc) per one-row INSERT of a batch row with its own durable commit, into audit_batches and into
 * copies of it with fewer indexes or constraints, beside a one-column row into a plain table (the
 * commit's floor). At c=8 a call shares a batch with ~2–3 others, so each µs of a batch row is
 * ~0.3 µs of control-database CPU per call. Variants alternate within each of BENCH_ROUNDS (5)
 * rounds of BENCH_OPS (2,000) statements. Run: `npx tsx bench/audit-batch-row.ts`.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { createTempDatabase } from '../test/helpers/pg';
import { measureStatements } from './audit-parts-lib';
import { envInt, machineLine, runBench } from './lib/stats';

const COLS = 'committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors';

async function main(): Promise<void> {
  const ops = envInt('BENCH_OPS', 2000);
  const rounds = envInt('BENCH_ROUNDS', 5);
  console.log('# audit-batch-row: control-database backend CPU per batch row (one INSERT, one commit)');
  console.log(machineLine());
  const db = await createTempDatabase('bench_batchrow');
  try {
    await runMigrations(db.url);
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    await c.query('CREATE TABLE scratch (x int)');
    const copy = async (name: string, indexes: string[], constraints: boolean) => {
      await c.query(`CREATE TABLE ${name} (LIKE audit_batches INCLUDING DEFAULTS ${constraints ? 'INCLUDING CONSTRAINTS' : ''})`);
      await c.query(`ALTER TABLE ${name} ALTER COLUMN id SET DEFAULT nextval('audit_batches_id_seq')`);
      for (const ix of indexes) await c.query(ix.replace('$T', name));
    };
    await copy('b_none', [], true);
    await copy('b_pk', ['ALTER TABLE $T ADD PRIMARY KEY (id)'], true);
    await copy('b_pk_brin', ['ALTER TABLE $T ADD PRIMARY KEY (id)', 'CREATE INDEX ON $T USING brin (committed_at)'], true);
    await copy('b_pk_legacy', ['ALTER TABLE $T ADD PRIMARY KEY (id)', 'CREATE INDEX ON $T (id) WHERE format < 3'], true);
    await copy('b_all_nocheck', ['ALTER TABLE $T ADD PRIMARY KEY (id)', 'CREATE INDEX ON $T USING brin (committed_at)', 'CREATE INDEX ON $T (id) WHERE format < 3'], false);
    const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0].p;
    const chain = randomUUID();
    let seq = 0;
    const row = () => [new Date().toISOString(), '3', Buffer.alloc(32, 1), Buffer.alloc(32, 2), chain, String(seq++), null, null];
    const ins = (name: string, table: string) => () => c.query({ name, text: `INSERT INTO ${table} (${COLS}) VALUES ($1::timestamptz, $2::integer, $3::bytea, $4::bytea, 3, $5::uuid, $6::bigint, $7::text, $8::text) RETURNING id`, values: row() });
    await measureStatements(
      pid,
      {
        'one-column row, plain table': () => c.query({ name: 'a', text: 'INSERT INTO scratch VALUES (1)' }),
        'batch row → audit_batches': ins('b', 'audit_batches'),
        'copy, no index': ins('c', 'b_none'),
        'copy, primary key': ins('d', 'b_pk'),
        'copy, primary key + BRIN (committed_at)': ins('e', 'b_pk_brin'),
        'copy, primary key + legacy partial': ins('f', 'b_pk_legacy'),
        'copy, every index, no CHECK': ins('g', 'b_all_nocheck'),
      },
      rounds,
      ops,
      1,
    );
    await c.end();
  } finally {
    await db.drop();
  }
}

runBench(main);
