/**
 * `interlock approval show|approve` give an operator the console's care (new-user pass): the
 * statement, its parameters and the current row estimate (the console's one estimator, EXPLAIN as
 * the writer role) are printed first; approve asks on a terminal, refuses without one unless --yes
 * (exit 4, nothing runs), and --yes approves after printing the review.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { getApproval } from '../../../src/control/approvals';
import { runCli } from '../../../src/cli/main';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
let env: GovernedEnv;

beforeAll(async () => {
  env = await startGovernedEnv();
}, 120_000);
afterAll(async () => env?.close());

/** The CLI as a child process: stdin is not a terminal. */
function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const childEnv: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) childEnv[k] = v;
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, '--database-url', env.db.url, ...args], { env: childEnv, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** The CLI in this process with a terminal that answers `answer` (recording the questions). */
async function cliWithTerminal(answer: string | null, ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const asked: string[] = [];
  const code = await runCli(['--database-url', env.db.url, ...args], {
    out: (t) => out.push(t),
    err: (t) => err.push(t),
    ask: async (q) => {
      asked.push(q);
      return answer;
    },
  });
  return { code, stdout: out.join('\n'), stderr: err.join('\n'), asked };
}

const queue = async (sql: string, params: unknown[] = []) => {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey);
  expect(r.body.result.structuredContent).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return r.body.result.structuredContent.approval_id as string;
};

/** The planner's estimate of the rows DELETE … WHERE playlist_id = 1 feeds its Delete node, asked independently (FORMAT JSON). */
async function plannerRows(sql: string): Promise<number> {
  const [row] = await sourceQuery<{ 'QUERY PLAN': Array<{ Plan: { Plans: Array<{ 'Plan Rows': number }> } }> }>(env, `EXPLAIN (FORMAT JSON) ${sql}`);
  return row['QUERY PLAN'][0].Plan.Plans[0]['Plan Rows'];
}

const ESTIMATE = (n: number) =>
  `row estimate: about ${n} row(s) changed (the planner's estimate now, EXPLAIN as the writer role; nothing ran). This is an estimate, not a count: the rows changed may differ${n <= 1 ? ' (PostgreSQL never estimates fewer than 1 row, so 1 can mean none).' : '.'}`;

test('approve without a terminal and without --yes prints the review, refuses with exit 4 and runs nothing', async () => {
  const id = await queue('DELETE FROM playlist_track WHERE playlist_id = $1', [1]);
  const rows = await plannerRows('DELETE FROM playlist_track WHERE playlist_id = 1');
  expect(rows).toBeGreaterThan(1);
  const before = await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist_track WHERE playlist_id = 1');
  const r = await cli('approval', 'approve', id, '--operator', 'ops-anna');
  expect(r.code).toBe(4);
  expect(r.stderr).toBe(`error: approval ${id} not approved: no terminal to confirm on; review it (interlock approval show ${id}), then run interlock approval approve ${id} --yes\n`);
  expect(r.stdout).toMatch(new RegExp(`^approval ${id}: demo-agent on chinook, pending, expires \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ\n`));
  expect(r.stdout.split('\n').slice(1)).toEqual([
    'statement: DELETE FROM playlist_track WHERE playlist_id = $1',
    'parameters: [1]',
    ESTIMATE(rows),
    'destructive: yes (it deletes, updates or merges rows)',
    '',
  ]);
  expect((await getApproval(env.db, id))!.state).toBe('pending');
  expect(await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist_track WHERE playlist_id = 1')).toEqual(before);
  // --json: stdout stays empty (no decision), the refusal is the same.
  const j = await cli('--json', 'approval', 'approve', id, '--operator', 'ops-anna');
  expect([j.code, j.stdout]).toEqual([4, '']);
  expect(j.stderr.endsWith(`error: approval ${id} not approved: no terminal to confirm on; review it (interlock approval show ${id}), then run interlock approval approve ${id} --yes\n`)).toBe(true);
  expect(j.stderr).toContain(ESTIMATE(rows));
});

test('show prints the statement, parameters and current row estimate; --json carries the review beside the record', async () => {
  const id = await queue('UPDATE playlist SET name = $1 WHERE playlist_id = $2', ['Renamed', 3]);
  const rows = await plannerRows("UPDATE playlist SET name = 'Renamed' WHERE playlist_id = 3");
  const show = await cli('approval', 'show', id);
  expect(show.code).toBe(0);
  expect(show.stdout).toContain('sql: UPDATE playlist SET name = $1 WHERE playlist_id = $2\n');
  expect(show.stdout).toContain('params:\n  - Renamed\n  - 3\n');
  expect(show.stdout.endsWith(`${ESTIMATE(rows)}\ndestructive: yes (it deletes, updates or merges rows)\n`)).toBe(true);
  const json = JSON.parse((await cli('--json', 'approval', 'show', id)).stdout);
  expect([json.id, json.state, json.review.estimate, json.review.destructive, json.review.plan.ok]).toEqual([id, 'pending', rows, true, true]);
  expect(json.review.plan.lines[0]).toMatch(/^Update on playlist /);
});

test('--yes approves after printing the review; a decided approval shows no estimate', async () => {
  const id = await queue('INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', [9401, 'Focus']);
  const r = await cli('approval', 'approve', id, '--operator', 'ops-anna', '--yes');
  expect([r.code, r.stderr]).toEqual([0, '']);
  expect(r.stdout.split('\n').slice(1)).toEqual(['statement: INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', 'parameters: [9401,"Focus"]', ESTIMATE(1), `approved and executed ${id}: 1 row(s) affected`, '']);
  expect(await sourceQuery(env, 'SELECT name FROM playlist WHERE playlist_id = 9401')).toEqual([{ name: 'Focus' }]);
  const show = await cli('approval', 'show', id);
  expect(show.stdout.endsWith('row estimate: none (only a pending approval is planned; this one is executed)\n')).toBe(true);
  // Approving it again: the state conflict (exit 2), nothing asked or printed.
  expect(await cli('approval', 'approve', id, '--operator', 'ops-anna')).toEqual({ code: 2, stdout: '', stderr: `error: approval ${id} is executed, not pending\n` });
});

test('on a terminal: asked once; "n" (or nothing) leaves it pending with exit 4, "y" approves', async () => {
  const id = await queue('INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', [9402, 'Asked']);
  const no = await cliWithTerminal('', 'approval', 'approve', id, '--operator', 'ops-anna');
  expect([no.code, no.asked, no.stderr]).toEqual([4, [`Approve ${id} and run it once as the writer role? [y/N] `], `error: approval ${id} not approved: not confirmed (it stays pending)`]);
  expect(no.stdout).toContain(ESTIMATE(1));
  expect((await getApproval(env.db, id))!.state).toBe('pending');
  const closed = await cliWithTerminal(null, 'approval', 'approve', id, '--operator', 'ops-anna');
  expect(closed.code).toBe(4);
  const yes = await cliWithTerminal(' Y ', 'approval', 'approve', id, '--operator', 'ops-anna');
  expect([yes.code, yes.stderr, yes.asked.length]).toEqual([0, '', 1]);
  expect(yes.stdout.endsWith(`approved and executed ${id}: 1 row(s) affected`)).toBe(true);
  // --yes on a terminal: not asked.
  const id2 = await queue('INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', [9403, 'Unasked']);
  const unasked = await cliWithTerminal('n', 'approval', 'approve', id2, '--operator', 'ops-anna', '--yes');
  expect([unasked.code, unasked.asked]).toEqual([0, []]);
});
