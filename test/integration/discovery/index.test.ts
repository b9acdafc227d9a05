/**
 * The indexer on real PostgreSQL (issue 4, Build 1–3 and 7): documents folders (changed items
 * re-indexed by content hash, deleted ones removed, unreadable metadata fails closed, hidden files
 * and symbolic links skipped), index status, a model-based property over random edit sequences,
 * document tables read as the source's reader role, and the demo handbook.
 */
import fc from 'fast-check';
import { mkdtemp, mkdir, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { putSource } from '../../../src/control/sources';
import { createIdentity } from '../../../src/control/identities';
import { listGrants } from '../../../src/control/grants';
import { formatIndexProgress, getIndexStatus, indexAssets, indexSource } from '../../../src/discovery/indexer';
import { DocumentsFolderError } from '../../../src/discovery/documents';
import { DocumentTableError } from '../../../src/discovery/tables';
import { provisionHandbook } from '../../../src/discovery/handbook';
import type { AssetInput, IndexProgress } from '../../../src/discovery/types';
import { ADMIN_URL, createTempDatabase, urlFor, type TempDatabase } from '../../helpers/pg';

let control: TempDatabase;
let db: ControlDb;
let folder: string;

beforeAll(async () => {
  control = await createTempDatabase('disc_index');
  db = await openControlDb(control.url);
  folder = await mkdtemp(join(tmpdir(), 'il-docs-'));
}, 60_000);
afterAll(async () => {
  await db?.close();
  await control?.drop();
  if (folder) await rm(folder, { recursive: true, force: true });
});

async function assetRows(sourceId: string): Promise<Map<string, { content_hash: string; indexed_at: Date; audience: string[]; title: string }>> {
  const r = await db.pool.query('SELECT asset_id, content_hash, indexed_at, audience, title FROM assets WHERE source_id = $1', [sourceId]);
  return new Map(r.rows.map((x) => [x.asset_id, x]));
}

describe('documents folder', () => {
  test('index, re-index unchanged, change, delete, unreadable metadata, missing folder', async () => {
    await mkdir(join(folder, 'ops', 'runbooks'), { recursive: true });
    await mkdir(join(folder, '.git'), { recursive: true });
    await writeFile(join(folder, 'a.md'), '---\ntitle: Alpha\naudience: [staff]\n---\nalpha body\n');
    await writeFile(join(folder, 'ops', 'runbooks', 'c.md'), '---\ndocument_type: runbook\nlinks: [../../a.md]\n---\n# Charlie\nbody');
    await writeFile(join(folder, 'd.json'), JSON.stringify({ title: 'Delta', body: 'delta body' }));
    await writeFile(join(folder, 'notes.txt'), 'plain text');
    await writeFile(join(folder, 'ignored.pdf'), 'not indexed');
    await writeFile(join(folder, '.hidden.md'), 'hidden');
    await writeFile(join(folder, '.git', 'x.md'), 'hidden folder');
    const outside = await mkdtemp(join(tmpdir(), 'il-outside-'));
    await writeFile(join(outside, 'secret.md'), 'outside the folder');
    await symlink(join(outside, 'secret.md'), join(folder, 'link.md'));
    await symlink(outside, join(folder, 'linkdir'));
    await putSource(db, { id: 'docs', type: 'documents', name: 'Docs', settings: { path: folder } });

    const progress: IndexProgress[] = [];
    const first = await indexSource(db, 'docs', { onProgress: (p) => progress.push(p) });
    expect(first).toMatchObject({ assets: 4, added: 4, updated: 0, unchanged: 0, removed: 0, skipped: 0 });
    expect(progress.map((p) => p.phase)).toEqual(expect.arrayContaining(['read', 'write', 'done']));
    expect(progress.at(-1)).toMatchObject({ phase: 'done', added: 4 });
    expect(formatIndexProgress(progress.at(-1)!)).toBe('docs: done, 4 assets (added 4, updated 0, unchanged 0, removed 0, skipped 0)');
    const rows = await assetRows('docs');
    expect([...rows.keys()].sort()).toEqual(['docs:a.md', 'docs:d.json', 'docs:notes.txt', 'docs:ops/runbooks/c.md']);
    const c = await db.pool.query("SELECT title, document_type, category_path, category_key, links FROM assets WHERE asset_id = 'docs:ops/runbooks/c.md'");
    expect(c.rows[0]).toEqual({ title: 'Charlie', document_type: 'runbook', category_path: ['ops', 'runbooks'], category_key: 'ops/runbooks', links: ['docs:a.md'] });
    const status1 = await getIndexStatus(db, 'docs');
    expect(status1).toMatchObject({ sourceId: 'docs', assets: 4, added: 4 });

    // Unchanged: nothing rewritten.
    const again = await indexSource(db, 'docs');
    expect(again).toMatchObject({ assets: 4, added: 0, updated: 0, unchanged: 4, removed: 0 });
    const rows2 = await assetRows('docs');
    for (const [id, r] of rows) expect(rows2.get(id)!.indexed_at.getTime()).toBe(r.indexed_at.getTime());
    const status2 = await getIndexStatus(db, 'docs');
    expect(Date.parse(status2!.indexedAt)).toBeGreaterThanOrEqual(Date.parse(status1!.indexedAt));

    // A metadata-only change (audience) re-indexes that item only.
    await writeFile(join(folder, 'a.md'), '---\ntitle: Alpha\naudience: [staff, hr]\n---\nalpha body\n');
    const changed = await indexSource(db, 'docs');
    expect(changed).toMatchObject({ added: 0, updated: 1, unchanged: 3, removed: 0 });
    expect((await assetRows('docs')).get('docs:a.md')!.audience).toEqual(['staff', 'hr']);

    // Deleted file → removed.
    await unlink(join(folder, 'd.json'));
    expect(await indexSource(db, 'docs')).toMatchObject({ assets: 3, removed: 1, unchanged: 3 });

    // Unreadable metadata: skipped AND its previous version removed (never left visible with stale or guessed metadata).
    await writeFile(join(folder, 'a.md'), '---\naudience: [staff\n---\nalpha body\n');
    const bad = await indexSource(db, 'docs');
    expect(bad).toMatchObject({ assets: 2, removed: 1, skipped: 1 });
    expect(bad.problems).toEqual([expect.objectContaining({ item: 'a.md', skipped: true })]);
    expect((await assetRows('docs')).has('docs:a.md')).toBe(false);
    expect((await getIndexStatus(db, 'docs'))!.problems).toEqual([expect.objectContaining({ item: 'a.md' })]);

    // A folder that cannot be read: an error, and the index stays as it was.
    await putSource(db, { id: 'docs', type: 'documents', name: 'Docs', settings: { path: join(folder, 'missing') } });
    await expect(indexSource(db, 'docs')).rejects.toBeInstanceOf(DocumentsFolderError);
    expect((await assetRows('docs')).size).toBe(2);
    await rm(outside, { recursive: true, force: true });
  });

  test('the index is per source: another source with the same paths is independent; deleting a source removes its assets', async () => {
    const other = await mkdtemp(join(tmpdir(), 'il-docs2-'));
    await writeFile(join(other, 'notes.txt'), 'other notes');
    await putSource(db, { id: 'docs2', type: 'documents', name: 'Docs 2', settings: { path: other } });
    expect(await indexSource(db, 'docs2')).toMatchObject({ added: 1 });
    expect((await assetRows('docs')).has('docs:notes.txt')).toBe(true);
    expect([...(await assetRows('docs2')).keys()]).toEqual(['docs2:notes.txt']);
    await expect(indexAssets(db, 'docs2', 'documents', [{ ...(await sample('docs2:x.md')), assetId: 'docs:x.md' }])).rejects.toThrow(/does not belong/);
    await db.pool.query("DELETE FROM sources WHERE id = 'docs2'");
    expect((await assetRows('docs2')).size).toBe(0);
    expect(await getIndexStatus(db, 'docs2')).toBeNull();
    await rm(other, { recursive: true, force: true });
  });
});

async function sample(assetId: string): Promise<AssetInput> {
  return { assetId, documentType: 'document', title: 't', body: 'b', categoryPath: [], timestamp: null, audience: [], entities: [], links: [] };
}

test('model-based: over random edit sequences the counts match a model and the index holds exactly the last items', async () => {
  await putSource(db, { id: 'model', type: 'documents', name: 'Model', settings: { path: '/nonexistent' } });
  const item = (k: number, v: number): AssetInput => ({
    assetId: `model:item-${k}.md`,
    documentType: v % 2 ? 'runbook' : 'guide',
    title: `Item ${k}`,
    body: `version ${v} of item ${k}`,
    categoryPath: v % 3 ? ['a'] : [],
    timestamp: null,
    audience: v % 4 ? [] : ['staff'],
    entities: [],
    links: [],
  });
  await fc.assert(
    fc.asyncProperty(fc.array(fc.dictionary(fc.integer({ min: 0, max: 12 }).map(String), fc.integer({ min: 0, max: 3 }), { maxKeys: 10 }), { minLength: 1, maxLength: 5 }), async (steps) => {
      await indexAssets(db, 'model', 'documents', []);
      let model = new Map<string, number>();
      for (const step of steps) {
        const next = new Map(Object.entries(step).map(([k, v]) => [k, v]));
        const r = await indexAssets(db, 'model', 'documents', [...next].map(([k, v]) => item(Number(k), v)));
        let added = 0;
        let updated = 0;
        let unchanged = 0;
        for (const [k, v] of next) {
          if (!model.has(k)) added++;
          else if (model.get(k) !== v) updated++;
          else unchanged++;
        }
        const removed = [...model.keys()].filter((k) => !next.has(k)).length;
        expect(r).toMatchObject({ assets: next.size, added, updated, unchanged, removed });
        model = next;
        const rows = await db.pool.query("SELECT asset_id, body FROM assets WHERE source_id = 'model' ORDER BY asset_id");
        expect(rows.rows.map((x) => [x.asset_id, x.body]).sort()).toEqual([...model].map(([k, v]) => [`model:item-${k}.md`, `version ${v} of item ${k}`]).sort());
      }
    }),
    { numRuns: 30 },
  );
}, 120_000);

describe('document tables on a PostgreSQL source', () => {
  let source: TempDatabase;
  const reader = `il_disc_rd_${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    source = await createTempDatabase('disc_src');
    const c = new pg.Client({ connectionString: source.url });
    await c.connect();
    try {
      await c.query(`CREATE ROLE ${reader} LOGIN PASSWORD 'reader-pw'`);
      await c.query(`
        CREATE TABLE tickets (id int PRIMARY KEY, subject text, details text, kind text, tags text[], created timestamp, aud text, ents jsonb, refs text[]);
        INSERT INTO tickets VALUES
          (1, 'Refund stuck', 'A refund is pending since Monday', 'ticket', ARRAY['support','billing'], '2025-03-01 10:00', 'staff', '[{"type":"customer","value":"ACME"}]', ARRAY['2']),
          (2, 'Webhook timeouts', 'Deliveries time out after 10 seconds', NULL, NULL, NULL, NULL, NULL, NULL),
          (3, NULL, 'No subject', 'ticket', ARRAY['support'], '2025-03-03 00:00', 'staff,hr', '[]', NULL);
        CREATE TABLE salaries (id int, name text, amount int);
        INSERT INTO salaries VALUES (1, 'x', 1);
        CREATE TABLE notes (id int, title text, secret text);
        INSERT INTO notes VALUES (1, 't', 's');
      `);
      await c.query(`GRANT USAGE ON SCHEMA public TO ${reader}`);
      await c.query(`GRANT SELECT ON tickets TO ${reader}`);
      await c.query(`GRANT SELECT (id, title) ON notes TO ${reader}`);
    } finally {
      await c.end();
    }
  }, 60_000);
  afterAll(async () => {
    await source?.drop();
    const a = new pg.Client({ connectionString: ADMIN_URL });
    await a.connect();
    await a.query(`DROP ROLE IF EXISTS ${reader}`).catch(() => undefined);
    await a.end();
  });

  function settings(tables: unknown[]) {
    const u = new URL(urlFor(source.name));
    return { host: u.hostname, port: Number(u.port || 5432), database: source.name, reader: { user: reader, password: 'reader-pw' }, tls: { mode: 'off' }, document_tables: tables };
  }
  const mapping = { table: 'public.tickets', id_column: 'id', title_column: 'subject', body_column: 'details', type_column: 'kind', category_column: 'tags', time_column: 'created', audience_column: 'aud', entities_column: 'ents', links_column: 'refs', document_type: 'record', audience: ['support'] };

  test('rows become assets (read as the reader); changes and deletions are picked up', async () => {
    await putSource(db, { id: 'crm', type: 'postgres', name: 'CRM', settings: settings([mapping]) });
    const r = await indexSource(db, 'crm');
    expect(r).toMatchObject({ assets: 3, added: 3, skipped: 0 });
    const rows = (await db.pool.query("SELECT asset_id, source_type, title, document_type, category_path, ts, audience, entities, links FROM assets WHERE source_id = 'crm' ORDER BY asset_id")).rows;
    expect(rows).toEqual([
      { asset_id: 'crm:public.tickets/1', source_type: 'postgres', title: 'Refund stuck', document_type: 'ticket', category_path: ['support', 'billing'], ts: new Date('2025-03-01T10:00:00Z'), audience: ['staff'], entities: [{ type: 'customer', value: 'ACME' }], links: ['crm:public.tickets/2'] },
      { asset_id: 'crm:public.tickets/2', source_type: 'postgres', title: 'Webhook timeouts', document_type: 'record', category_path: ['public', 'tickets'], ts: null, audience: ['support'], entities: [], links: [] },
      { asset_id: 'crm:public.tickets/3', source_type: 'postgres', title: '3', document_type: 'ticket', category_path: ['support'], ts: new Date('2025-03-03T00:00:00Z'), audience: ['staff', 'hr'], entities: [], links: [] },
    ]);
    const c = new pg.Client({ connectionString: source.url });
    await c.connect();
    await c.query("UPDATE tickets SET details = 'Refund completed' WHERE id = 1; DELETE FROM tickets WHERE id = 3");
    await c.end();
    expect(await indexSource(db, 'crm')).toMatchObject({ assets: 2, added: 0, updated: 1, unchanged: 1, removed: 1 });
  });

  test('a table or column the reader may not SELECT fails the run and leaves the index as it was', async () => {
    for (const extra of [
      { table: 'public.salaries', id_column: 'id', title_column: 'name', body_column: 'name' },
      { table: 'public.notes', id_column: 'id', title_column: 'title', body_column: 'secret' },
      { table: 'public.missing', id_column: 'id', title_column: 'x', body_column: 'y' },
    ]) {
      await putSource(db, { id: 'crm', type: 'postgres', name: 'CRM', settings: settings([mapping, extra]) });
      const err = await indexSource(db, 'crm').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DocumentTableError);
      expect(String((err as Error).message)).not.toContain('reader-pw');
      expect((await assetRows('crm')).size).toBe(2);
    }
    // The column the reader may read is enough.
    await putSource(db, { id: 'crm', type: 'postgres', name: 'CRM', settings: settings([mapping, { table: 'public.notes', id_column: 'id', title_column: 'title', body_column: 'title' }]) });
    expect(await indexSource(db, 'crm')).toMatchObject({ assets: 3, added: 1 });
  });

  test('a PostgreSQL source without document tables has no assets', async () => {
    await putSource(db, { id: 'crm', type: 'postgres', name: 'CRM', settings: settings([]) });
    expect(await indexSource(db, 'crm')).toMatchObject({ assets: 0, removed: 3 });
  });
});

test('the demo handbook: about three dozen documents, idempotent provisioning, a grant for the identity', async () => {
  const idn = await createIdentity(db, `agent-${randomBytes(3).toString('hex')}`);
  const first = await provisionHandbook(db, { identityId: idn.id });
  expect(first.index).toMatchObject({ skipped: 0, problems: [] });
  expect(first.index.assets).toBeGreaterThanOrEqual(30);
  const second = await provisionHandbook(db, { identityId: idn.id });
  expect(second.index).toMatchObject({ added: 0, updated: 0, removed: 0, unchanged: first.index.assets });
  expect(await listGrants(db, { identityId: idn.id })).toEqual([expect.objectContaining({ roleName: 'handbook-reader', sourceId: 'handbook' })]);
  const aud = await db.pool.query("SELECT DISTINCT unnest(audience) AS a FROM assets WHERE source_id = 'handbook' ORDER BY 1");
  expect(aud.rows.map((r) => r.a)).toEqual(['hr', 'security', 'staff']);
  const cats = await db.pool.query("SELECT DISTINCT category_path[1] AS c FROM assets WHERE source_id = 'handbook' AND cardinality(category_path) > 0 ORDER BY 1");
  expect(cats.rows.map((r) => r.c)).toEqual(['hr', 'operations', 'product', 'security', 'support']);
  const links = await db.pool.query("SELECT count(*)::int AS n FROM assets a, unnest(a.links) l WHERE a.source_id = 'handbook' AND l LIKE 'handbook:%' AND NOT EXISTS (SELECT 1 FROM assets b WHERE b.asset_id = l)");
  expect(links.rows[0].n).toBe(0); // every same-source link resolves to a document
});
