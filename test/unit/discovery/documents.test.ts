/**
 * The documents source format (issue 4, Build 1): front matter, defaults, link resolution, and
 * fail-closed handling of metadata that cannot be read.
 */
import fc from 'fast-check';
import { documentFromText, splitFrontMatter } from '../../../src/discovery/documents';
import { cleanText, MetadataError, normAudience, normCategoryPath, normEntities, resolveDocumentLink } from '../../../src/discovery/metadata';
import { rowToAsset, documentTableSql } from '../../../src/discovery/tables';

describe('front matter', () => {
  test('YAML between --- lines; body is the rest', () => {
    const text = '---\ntitle: Hello\naudience: [staff, hr]\n---\n# Heading\nBody text\n';
    expect(splitFrontMatter(text)).toEqual({ frontMatter: 'title: Hello\naudience: [staff, hr]\n', body: '# Heading\nBody text\n' });
    const a = documentFromText('hb', 'ops/x.md', text);
    expect(a).toEqual({
      assetId: 'hb:ops/x.md',
      documentType: 'document',
      title: 'Hello',
      body: '# Heading\nBody text\n',
      categoryPath: ['ops'],
      timestamp: null,
      audience: ['staff', 'hr'],
      entities: [],
      links: [],
    });
  });

  test('defaults: title from the first heading, else the file name; category from the folder; CRLF and "..." closers', () => {
    expect(documentFromText('hb', 'a/b/c.md', 'intro\n# The Title #\nmore').title).toBe('The Title');
    expect(documentFromText('hb', 'a/b/c.md', 'no heading').title).toBe('c');
    expect(documentFromText('hb', 'a/b/c.md', 'x').categoryPath).toEqual(['a', 'b']);
    expect(documentFromText('hb', 'c.txt', 'x').categoryPath).toEqual([]);
    const crlf = documentFromText('hb', 'n.txt', '---\r\ntitle: T\r\ndocument_type: note\r\n...\r\nbody');
    expect(crlf).toMatchObject({ title: 'T', documentType: 'note', body: 'body' });
    // A .txt file's heading-like line is not a title source.
    expect(documentFromText('hb', 'n.txt', '# not a title').title).toBe('n');
  });

  test('every field: category_path (list or "a/b" string), timestamp, entities, links', () => {
    const text = [
      '---',
      'title: 42',
      'document_type: runbook',
      'category_path: operations/runbooks',
      'timestamp: 2025-01-02',
      'audience: staff',
      'entities:',
      '  - {type: service, value: ledger}',
      '  - {type: service, value: ledger}',
      '  - {type: port, value: 5432}',
      'links: [other.md, ../up.md, /root.md, "chinook:public.invoice", "https://example.com/x", "../../../escape.md", "x.md#part"]',
      '---',
      'body',
    ].join('\n');
    const a = documentFromText('hb', 'ops/rb/doc.md', text);
    expect(a.title).toBe('42');
    expect(a.documentType).toBe('runbook');
    expect(a.categoryPath).toEqual(['operations', 'runbooks']);
    expect(a.timestamp).toBe('2025-01-02T00:00:00.000Z');
    expect(a.audience).toEqual(['staff']);
    expect(a.entities).toEqual([{ type: 'service', value: 'ledger' }, { type: 'port', value: '5432' }]);
    expect(a.links).toEqual(['hb:ops/rb/other.md', 'hb:ops/up.md', 'hb:root.md', 'chinook:public.invoice', 'hb:ops/rb/x.md']);
  });

  test('JSON documents: metadata are the object fields; body is "body" or the other fields', () => {
    const withBody = documentFromText('hb', 't/a.json', JSON.stringify({ title: 'T', audience: ['hr'], body: 'the body', extra: 1 }));
    expect(withBody).toMatchObject({ title: 'T', audience: ['hr'], body: 'the body', categoryPath: ['t'] });
    const noBody = documentFromText('hb', 't/b.json', JSON.stringify({ title: 'Plans', plans: [{ name: 'Starter' }] }));
    expect(JSON.parse(noBody.body)).toEqual({ plans: [{ name: 'Starter' }] });
    const arr = documentFromText('hb', 'c.json', '[1,2]');
    expect(arr).toMatchObject({ title: 'c', body: '[1,2]', audience: [] });
  });

  test('metadata that cannot be read is an error (the file is skipped, never indexed as public)', () => {
    const bad = [
      '---\ntitle: x\nno closing line',
      '---\naudience: [unclosed\n---\nbody',
      '---\n- a list\n---\nbody',
      '---\naudience: {a: 1}\n---\nbody',
      '---\naudience: [{a: 1}]\n---\nbody',
      '---\ntimestamp: not a date\n---\nbody',
      '---\nentities: [service]\n---\nbody',
      '---\nentities: [{type: service}]\n---\nbody',
      '---\ndocument_type: [a]\n---\nbody',
    ];
    for (const text of bad) expect(() => documentFromText('hb', 'x.md', text)).toThrow(MetadataError);
    expect(() => documentFromText('hb', 'x.json', '{ not json')).toThrow(MetadataError);
    expect(() => documentFromText('hb', 'x.json', JSON.stringify({ audience: 5 }))).toThrow(MetadataError);
  });
});

describe('metadata normalisation', () => {
  test('cleanText removes NUL and replaces lone surrogates (PostgreSQL-safe), keeps valid pairs', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.constantFrom('', '\u0000', '\uD800', '\uDC00x', 'a\uD83D\uDE00b'), (s, extra) => {
        const c = cleanText(s + extra + s);
        expect(c.includes('\u0000')).toBe(false);
        expect(() => encodeURIComponent(c)).not.toThrow(); // throws on a lone surrogate
      }),
    );
    expect(cleanText('a\uD83D\uDE00b')).toBe('a\uD83D\uDE00b');
  });

  test('audience, category path and entities: types are checked, values kept exactly', () => {
    expect(normAudience(['Staff', 'staff', ' hr '])).toEqual(['Staff', 'staff', 'hr']);
    expect(normAudience('a, b')).toEqual(['a', 'b']);
    expect(() => normAudience({})).toThrow(MetadataError);
    expect(normCategoryPath(['a/b', 'c'])).toEqual(['a/b', 'c']);
    expect(normCategoryPath('a//b/')).toEqual(['a', 'b']);
    expect(normEntities('[{"type":"t","value":"v"}]')).toEqual([{ type: 't', value: 'v' }]);
  });

  test('links: asset ids kept, relative paths resolved inside the folder, escapes and URLs dropped', () => {
    expect(resolveDocumentLink('hb', 'a/b.md', 'c.md')).toBe('hb:a/c.md');
    expect(resolveDocumentLink('hb', 'a/b.md', './c/../d.md')).toBe('hb:a/d.md');
    expect(resolveDocumentLink('hb', 'a/b.md', '../../x.md')).toBeNull();
    expect(resolveDocumentLink('hb', 'a/b.md', 'other-src:path/x.md')).toBe('other-src:path/x.md');
    expect(resolveDocumentLink('hb', 'a/b.md', 'mailto://x')).toBeNull();
    expect(resolveDocumentLink('hb', 'a/b.md', '#top')).toBeNull();
  });
});

describe('document table rows', () => {
  const m = { table: 'public.tickets', id_column: 'id', title_column: 'subject', body_column: 'details', category_column: 'tags', audience_column: 'aud', entities_column: 'ents', links_column: 'refs', time_column: 'created' };

  test('the SELECT quotes every identifier and only parameterises the row cap', () => {
    const sql = documentTableSql({ ...m, table: 'we"ird.ta ble' as string, id_column: 'i"d' });
    expect(sql).toContain('"we""ird"."ta ble"');
    expect(sql).toContain('("i""d")::pg_catalog.text AS id'); // types pinned (red team rt47b J3b)
    expect(sql).toMatch(/LIMIT \$1$/);
  });

  test('a row maps to an asset; defaults from the mapping; links to bare ids stay in the table', () => {
    const a = rowToAsset('crm', { ...m, audience: ['support'], document_type: 'ticket' }, { id: '7', title: 'Broken', body: 'text', document_type: null, category: null, ts: new Date('2025-01-01T00:00:00Z'), audience: null, entities: [{ type: 'customer', value: 'ACME' }], links: ['8', 'hb:x.md'] });
    expect(a).toEqual({
      assetId: 'crm:public.tickets/7',
      documentType: 'ticket',
      title: 'Broken',
      body: 'text',
      categoryPath: ['public', 'tickets'],
      timestamp: '2025-01-01T00:00:00.000Z',
      audience: ['support'],
      entities: [{ type: 'customer', value: 'ACME' }],
      links: ['crm:public.tickets/8', 'hb:x.md'],
      origin: {
        relation: 'public.tickets',
        fields: { id: ['id'], title: ['subject', 'id'], body: ['details'], document_type: [], category_path: ['tags'], timestamp: ['created'], audience: ['aud'], entities: ['ents'], links: ['refs'] },
      },
    });
    const b = rowToAsset('crm', m, { id: '9', title: null, body: null, document_type: 'faq', category: 'help/billing', ts: null, audience: 'staff,hr', entities: null, links: null });
    expect(b).toMatchObject({ title: '9', body: '', documentType: 'faq', categoryPath: ['help', 'billing'], audience: ['staff', 'hr'] });
    expect(() => rowToAsset('crm', m, { id: ' ', title: null, body: null, document_type: null, category: null, ts: null, audience: null, entities: null, links: null })).toThrow(MetadataError);
  });
});
