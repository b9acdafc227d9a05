/**
 * `--json` on every list, show and status command of the operator CLI (issue 16, Build 4), run in
 * process against a temporary control database. The commands are found by walking the commander
 * tree, so a new list/show/status command without a case here fails the test.
 */
import type { Command } from 'commander';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { cliProgram, runCli } from '../../../src/cli/main';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { createApproval } from '../../../src/control/approvals';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let temp: TempDatabase;
let db: ControlDb;
let dir: string;
let approvalId: string;
let tokenId: string;

async function cli(...args: string[]): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(['--database-url', temp.url, ...args], { out: (t) => out.push(t), err: (t) => err.push(t) });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

/** The commands that list, show or report status, as "noun verb" paths. */
function listShowStatus(c: Command, path: string[] = []): string[] {
  return c.commands.flatMap((sub) => {
    const p = [...path, sub.name()];
    const here = /^(list|show|status|grants|tail|search)$/.test(sub.name()) ? [p.join(' ')] : [];
    return [...here, ...listShowStatus(sub, p)];
  });
}

beforeAll(async () => {
  temp = await createTempDatabase('ctl_cli_json');
  dir = mkdtempSync(join(tmpdir(), 'il-cli-json-'));
  expect((await cli('db', 'migrate')).code).toBe(0);
  db = await openControlDb(temp.url, { migrate: false });
  const u = new URL(temp.url);
  const def = { id: 'local', type: 'postgres', name: 'Local', settings: { host: u.hostname, port: Number(u.port || 5432), database: temp.name, reader: { user: decodeURIComponent(u.username), password: 'x' }, tls: { mode: 'off' } } };
  for (const args of [
    ['identity', 'create', 'json-agent'],
    ['key', 'create', 'json-agent'],
    ['source', 'add', file('local.json', JSON.stringify(def))],
    ['role', 'create', '--allow-unknown-names', file('analyst.yaml', 'name: analyst\nstatements:\n  - { effect: allow, action: read, resource: public.album }\n')],
    ['grant', 'json-agent', 'analyst', 'local'],
    ['policy', 'add', file('p.yaml', 'name: need-where\nrule: { type: require_where }\n')],
    ['index', 'local'],
  ]) {
    const r = await cli(...args);
    expect({ args, code: r.code }).toEqual({ args, code: 0 });
  }
  const idn = (await db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'json-agent'")).rows[0];
  approvalId = (await createApproval(db, { sourceId: 'local', identityId: idn.id, keyId: null, requestId: 'req_json', sql: 'DELETE FROM t WHERE id = $1', params: [1], classification: { fingerprint: 'f' } })).id;
  tokenId = (JSON.parse((await cli('--json', 'operator-token', 'create', 'ops-json')).stdout) as { tokenId: string }).tokenId;
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe('--json on every list, show and status command', () => {
  /** Arguments per command path, and what the parsed JSON must look like. */
  const cases: Record<string, { args: () => string[]; check: (v: unknown) => void }> = {
    'source list': { args: () => [], check: (v) => expect(v).toMatchObject([{ id: 'local', type: 'postgres' }]) },
    'source show': { args: () => ['local'], check: (v) => expect(v).toMatchObject({ id: 'local' }) },
    'identity list': { args: () => [], check: (v) => expect(v).toMatchObject([{ name: 'json-agent' }]) },
    'identity show': { args: () => ['json-agent'], check: (v) => expect(v).toMatchObject({ name: 'json-agent', subjects: [], grants: [{ role: 'analyst', source: 'local', grantedBy: 'operator' }], keys: { active: 1, total: 1 } }) },
    'key list': { args: () => [], check: (v) => expect(v).toMatchObject([{ identityName: 'json-agent', status: 'active' }]) },
    'index status': { args: () => [], check: (v) => expect(v).toMatchObject([{ sourceId: 'local' }]) },
    'role show': { args: () => ['analyst'], check: (v) => expect(v).toMatchObject({ name: 'analyst', statements: [{ effect: 'allow' }] }) },
    'role list': { args: () => [], check: (v) => expect(v).toMatchObject([{ name: 'analyst' }]) },
    grants: { args: () => [], check: (v) => expect(v).toMatchObject([{ identityName: 'json-agent', roleName: 'analyst', sourceId: 'local' }]) },
    'policy list': { args: () => [], check: (v) => expect(v).toMatchObject([{ name: 'need-where' }]) },
    'policy show': { args: () => ['need-where'], check: (v) => expect(v).toMatchObject({ name: 'need-where', rule: { type: 'require_where' } }) },
    'approval list': { args: () => [], check: (v) => expect(v).toMatchObject([{ id: approvalId, state: 'pending' }]) },
    'approval show': { args: () => [approvalId], check: (v) => expect(v).toMatchObject({ id: approvalId, state: 'pending' }) },
    'operator-token list': { args: () => [], check: (v) => expect(v).toMatchObject([{ id: tokenId, name: 'ops-json' }]) },
    'audit tail': { args: () => [], check: (v) => expect(Array.isArray(v)).toBe(true) },
    'audit search': { args: () => ['--kind', 'config'], check: (v) => expect(Array.isArray((v as { events?: unknown }).events)).toBe(true) },
    'db status': { args: () => [], check: (v) => expect(v).toMatchObject({ pending: [] }) },
  };

  test('the cases cover exactly the commands of the tree', () => {
    expect(listShowStatus(cliProgram({ out: () => undefined, err: () => undefined })).sort()).toEqual(Object.keys(cases).sort());
  });

  test.each(Object.keys(cases))('%s --json prints one JSON document', async (path) => {
    const c = cases[path];
    const r = await cli(...path.split(' '), ...c.args(), '--json');
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    c.check(JSON.parse(r.stdout));
  });

  test('index status for people is a table, not JSON', async () => {
    const r = await cli('index', 'status');
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')[0]).toMatch(/^SOURCE +INDEXED +MS +ASSETS +ADDED +UPDATED +UNCHANGED +REMOVED +SKIPPED +PROBLEMS$/);
    expect(r.stdout.split('\n')[1]).toMatch(/^local +\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ +\d+ +\d+ /);
  });

  test('index without a source shows the index status, as its help says (hgov item 2)', async () => {
    expect(cliProgram({ out: () => undefined, err: () => undefined }).commands.find((c) => c.name() === 'index')!.description()).toContain('`index` or `index status` shows index status');
    const bare = await cli('index');
    expect(bare).toEqual(await cli('index', 'status'));
    expect(bare.code).toBe(0);
    expect(bare.stdout.split('\n')[0]).toMatch(/^SOURCE +INDEXED /);
  });
});
