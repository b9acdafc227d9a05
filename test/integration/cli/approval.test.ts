/**
 * `interlock approval …` as a child process (issue 14 items 4 and 7): the list shows the statement
 * honestly (comments stripped and flagged, shortening marked, --full shows all); show prints the
 * comments and a failed approval's operator-only cause; requeue links a new pending approval.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { createTempDatabase, pgServer, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { createApproval, getApproval, transitionApproval } from '../../../src/control/approvals';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey, revokeApiKey } from '../../../src/control/keys';
import { putSource } from '../../../src/control/sources';
import { initStatementDisplay, statementForDisplay } from '../../../src/approvals/statement';
import { paramsForDisplay } from '../../../src/cli/approval';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
let temp: TempDatabase;
let db: ControlDb;
let identityId: string;

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) env[k] = v;
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, '--database-url', temp.url, ...args], { env, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

beforeAll(async () => {
  temp = await createTempDatabase('ctl_aprcli');
  db = await openControlDb(temp.url);
  await putSource(db, { id: 'local', type: 'postgres', name: 'Local', enabled: true, settings: { ...pgServer(), database: 'x', reader: { user: 'r' }, tls: { mode: 'off' } } } as never);
  identityId = (await createIdentity(db, 'apr-agent')).id;
  await initStatementDisplay();
}, 60_000);
afterAll(async () => {
  await db?.close();
  await temp?.drop();
});

const queue = (sql: string) => createApproval(db, { sourceId: 'local', identityId, keyId: null, requestId: 'req_x', sql, params: ['Focus'], classification: { fingerprint: 'f' } });

describe('statementForDisplay (pure)', () => {
  test('a leading comment is stripped and reported; the write itself is shown', () => {
    expect(statementForDisplay("/* add the playlist 'Focus' */ DELETE FROM playlist_track WHERE playlist_id > 0")).toEqual({
      text: 'DELETE FROM playlist_track WHERE playlist_id > 0', comments: ["/* add the playlist 'Focus' */"], truncated: false, fullLength: 48, invisible: 0,
    });
  });
  test('comment markers inside string and dollar constants are not comments; line comments go too', () => {
    const s = statementForDisplay("UPDATE t SET a = '/* x */', b = $$ -- y $$ -- real\n WHERE id = 1");
    expect(s).toEqual({ text: "UPDATE t SET a = '/* x */', b = $$ -- y $$ WHERE id = 1", comments: ['-- real'], truncated: false, fullLength: 55, invisible: 0 });
  });
  test('control, bidirectional and zero-width characters are shown as ⟨U+XXXX⟩ and counted (issue 24 item 5)', () => {
    expect(statementForDisplay("DELETE FROM t WHERE note = 'a\u202eb\u200b' /* \u2066x */")).toEqual({ text: "DELETE FROM t WHERE note = 'a⟨U+202E⟩b⟨U+200B⟩'", comments: ['/* ⟨U+2066⟩x */'], truncated: false, fullLength: 47, invisible: 3 });
    // A control character the scanner rejects: the whitespace-collapsing fallback still shows it.
    expect(statementForDisplay("DELETE FROM t WHERE note = 'a\u0007'").text).toBe("DELETE FROM t WHERE note = 'a⟨U+0007⟩'");
  });
  test('shortening always ends with the mark', () => {
    expect(statementForDisplay('DELETE FROM playlist_track WHERE playlist_id > 0', 10)).toEqual({ text: 'DELETE FR…', comments: [], truncated: true, fullLength: 48, invisible: 0 });
  });
});

describe('paramsForDisplay (pure)', () => {
  test('JSON of the values; none is empty; shortening ends with the mark', () => {
    expect(paramsForDisplay(['Focus', 3, null])).toEqual({ text: '["Focus",3,null]', truncated: false });
    expect(paramsForDisplay([])).toEqual({ text: '', truncated: false });
    // Shortened: …# and a digest of the full values (task low48 item 3), within the width.
    expect(paramsForDisplay(['x'.repeat(50)], 12)).toEqual({ text: `["xx…#${createHash('sha256').update(JSON.stringify(['x'.repeat(50)])).digest('hex').slice(0, 6)}`, truncated: true });
  });
});

describe('interlock approval', () => {
  test('list: comment stripped and flagged, long statements marked and explained, --full prints them whole', async () => {
    const hidden = await queue("/* add the playlist 'Focus' */ DELETE FROM playlist_track WHERE playlist_id > 0");
    const long = await queue(`UPDATE playlist SET name = $1 WHERE playlist_id IN (${Array.from({ length: 40 }, (_, i) => i + 1).join(', ')})`);
    const list = await cli('approval', 'list');
    expect(list.code).toBe(0);
    const line = (id: string, out: string) => out.split('\n').find((l) => l.startsWith(id))!;
    expect(line(hidden.id, list.stdout)).toMatch(/1 comment\(s\) stripped +\["Focus"\] +DELETE FROM playlist_track WHERE playlist_id > 0$/);
    expect(line(long.id, list.stdout)).toMatch(/\["Focus"\] +UPDATE playlist SET name = \$1 WHERE playlist_id IN \(1, 2, 3, .*…$/);
    expect(list.stdout).toContain('(statements ending in … or params ending in …#digest are shortened: approval list --full, or approval show ID for the exact text with comments)');
    const full = await cli('approval', 'list', '--full');
    expect(line(long.id, full.stdout)).toMatch(/, 39, 40\)$/);
    expect(full.stdout).not.toContain('…');
    const show = await cli('approval', 'show', hidden.id);
    expect(show.stdout).toContain("comments in the statement (not part of what runs, check they match it):\n  /* add the playlist 'Focus' */");
    expect(show.stdout).toContain("sql: /* add the playlist 'Focus' */ DELETE FROM playlist_track WHERE playlist_id > 0");
  });

  // Task hnu41 item 6 (a new user's finding): NOTES showed `-` for a pending write whose key was
  // revoked, though the console flags it `⚠ key_revoked`; the list (and its JSON) now says so too.
  test('list: a pending write whose key was revoked is flagged ⚠ key_revoked in NOTES and requesterProblem in --json', async () => {
    const key = await createApiKey(db, identityId);
    const a = await createApproval(db, { sourceId: 'local', identityId, keyId: key.keyId, requestId: 'req_rv', sql: 'DELETE FROM playlist WHERE playlist_id = 99', params: [], classification: { fingerprint: 'f' } });
    const line = async () => (await cli('approval', 'list', '--state', 'pending')).stdout.split('\n').find((l) => l.startsWith(a.id))!;
    const json = async () => (JSON.parse((await cli('--json', 'approval', 'list', '--state', 'pending')).stdout) as Array<{ id: string; requesterProblem: string | null }>).find((x) => x.id === a.id)!.requesterProblem;
    expect({ notes: (await line()).includes('⚠'), problem: await json() }).toEqual({ notes: false, problem: null });
    await revokeApiKey(db, key.keyId);
    expect(await line()).toMatch(/ ⚠ key_revoked +- +DELETE FROM playlist WHERE playlist_id = 99$/);
    expect(await json()).toBe('key_revoked');
    await transitionApproval(db, a.id, ['pending'], 'rejected', { decidedBy: 'ops-anna' });
  });

  test('show prints a failed approval\'s cause; requeue links a new pending approval', async () => {
    const a = await queue('INSERT INTO playlist (name) VALUES ($1)');
    await transitionApproval(db, a.id, ['pending'], 'approved', { decidedBy: 'ops-anna' });
    await transitionApproval(db, a.id, ['approved'], 'failed', {
      outcome: { error_code: 'statement_failed', sqlstate: '23502' },
      failure: { sqlstate: '23502', message: 'null value in column "playlist_id" of relation "playlist" violates not-null constraint', detail: 'Failing row contains (null, Focus).' },
    });
    const show = await cli('approval', 'show', a.id);
    expect(show.stdout).toContain('cause (operators only): SQLSTATE 23502: null value in column "playlist_id" of relation "playlist" violates not-null constraint (detail: Failing row contains (null, Focus).)');
    const json = JSON.parse((await cli('--json', 'approval', 'show', a.id)).stdout);
    expect(json.failure).toEqual({ sqlstate: '23502', message: 'null value in column "playlist_id" of relation "playlist" violates not-null constraint', detail: 'Failing row contains (null, Focus).' });
    const rq = await cli('approval', 'requeue', a.id, '--operator', 'ops-anna');
    expect(rq.code).toBe(0);
    const newId = /as (apr_[0-9a-f]{24})/.exec(rq.stdout)![1];
    expect(rq.stdout).toBe(`requeued ${a.id} as ${newId} (pending): approve it with interlock approval approve ${newId}\n`);
    expect(await getApproval(db, newId)).toMatchObject({ state: 'pending', requeuedFrom: a.id, sql: a.sql });
    expect(await cli('approval', 'requeue', newId)).toEqual({ code: 2, stdout: '', stderr: `error: approval ${newId} is pending: only a failed approval can be requeued\n` });
  });

  test('show prints the attribute values kept from a token identity\'s claims (issue 27); none: no line', async () => {
    const a = await createApproval(db, { sourceId: 'local', identityId, keyId: null, requestId: 'req_c', sql: "UPDATE playlist SET name = 'x'", params: [], classification: { fingerprint: 'f' }, claimAttributes: { tenant: 'a', regions: ['eu', 'us'] } });
    const show = await cli('approval', 'show', a.id);
    expect(show.stdout).toContain('attributes from token claims (kept with the write; the identity record\'s values win at approval): regions=["eu","us"] tenant="a"\n');
    expect(show.stdout).not.toContain('claimAttributes');
    expect(JSON.parse((await cli('--json', 'approval', 'show', a.id)).stdout).claimAttributes).toEqual({ tenant: 'a', regions: ['eu', 'us'] });
    const plain = await queue("UPDATE playlist SET name = 'y'");
    expect((await cli('approval', 'show', plain.id)).stdout).not.toContain('token claims');
  });
});
