/**
 * `interlock audit verify`'s summary line (src/cli/audit.ts; hnu2 item 5): the explanation of open
 * writer chains ("a gateway running, or stopped without closing") is printed only when some are open.
 */
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { runCli } from '../../../src/cli/main';
import { ChainLane } from '../../../src/audit/chain';

jest.setTimeout(120_000);

let temp: TempDatabase;
let db: ControlDb;

async function verify(): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['--database-url', temp.url, 'audit', 'verify'], { out: (t) => (stdout += t.endsWith('\n') ? t : t + '\n'), err: (t) => (stderr += t.endsWith('\n') ? t : t + '\n') });
  return { code, stdout, stderr };
}

beforeAll(async () => {
  temp = await createTempDatabase('ctl_verify_words');
  db = await openControlDb(temp.url);
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
});

test('0 open: no explanation; 1 open: the explanation', async () => {
  const closed = new ChainLane(db.pool);
  await closed.append([], 5000);
  await closed.append([], 5000, 'seal');
  const r = await verify();
  expect([r.code, r.stderr]).toEqual([0, '']);
  expect(r.stdout).toBe('audit chain OK: 2 batch(es), 0 event(s) checked; 1 writer chain(s), 0 open\n');

  const running = new ChainLane(db.pool);
  await running.append([], 5000);
  const r2 = await verify();
  expect([r2.code, r2.stderr]).toEqual([0, '']);
  expect(r2.stdout).toBe('audit chain OK: 3 batch(es), 0 event(s) checked; 2 writer chain(s), 1 open (a gateway running, or stopped without closing)\n');
});
