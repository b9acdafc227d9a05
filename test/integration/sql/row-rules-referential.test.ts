/**
 * Issue 27, rt27w finding B: writes by a row-ruled caller must not reach hidden rows through a
 * foreign key's referential action or a user trigger (PostgreSQL runs both without the row views).
 * The catalogue scan records the keys referencing each relation with a writing action and whether
 * triggers or rules run on its writes (src/sources/postgres/catalog.ts); the row-rule step refuses
 * such writes `row_rule_unenforceable` before they are queued and when the approved write is
 * planned (src/sql/referential-reach.ts, src/pipeline/row-rules.ts). Writes by a caller without row
 * rules, and keys with NO ACTION/RESTRICT, are unchanged.
 */
import { codeOf, useRowFixture, type RowFixture } from '../../helpers/row-rules';
import type { SourceRole } from '../../../src/control/roles';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { analyzeSql } from '../../../src/sql/analyze';
import { planRowRules } from '../../../src/pipeline/row-rules';
import { authorizeStatement } from '../../../src/pipeline/03-authorize';

const EXTRA = `
CREATE TABLE project (project_id int PRIMARY KEY, code text UNIQUE NOT NULL);
-- ruled for the agent; ON DELETE CASCADE and ON UPDATE CASCADE on the project's code
CREATE TABLE task (task_id int PRIMARY KEY, project_id int NOT NULL REFERENCES project ON DELETE CASCADE,
  project_code text REFERENCES project (code) ON UPDATE CASCADE, owner_id int NOT NULL);
-- ruled; ON DELETE SET NULL
CREATE TABLE team (team_id int PRIMARY KEY, name text);
CREATE TABLE member (member_id int PRIMARY KEY, team_id int REFERENCES team ON DELETE SET NULL, owner_id int NOT NULL);
-- ruled; NO ACTION (the control)
CREATE TABLE depot (depot_id int PRIMARY KEY, name text);
CREATE TABLE crate (crate_id int PRIMARY KEY, depot_id int REFERENCES depot, owner_id int NOT NULL);
-- an unruled table whose trigger writes the ruled task table
CREATE TABLE inbox (id int PRIMARY KEY, body text);
CREATE FUNCTION inbox_purge() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN DELETE FROM task WHERE owner_id <> 1; RETURN NEW; END$$;
CREATE TRIGGER inbox_purge AFTER INSERT OR UPDATE OR DELETE ON inbox FOR EACH ROW EXECUTE FUNCTION inbox_purge();
-- partitioned: the referencing side is a partitioned table (its partitions carry cloned keys)
CREATE TABLE region (region_id int PRIMARY KEY, name text);
CREATE TABLE shipment (shipment_id int, region_id int REFERENCES region ON DELETE CASCADE, owner_id int NOT NULL) PARTITION BY LIST (owner_id);
CREATE TABLE shipment_1 PARTITION OF shipment FOR VALUES IN (1);
CREATE TABLE shipment_2 PARTITION OF shipment FOR VALUES IN (2);
-- a chain: unruled link cascades into the ruled leaf
CREATE TABLE root (root_id int PRIMARY KEY);
CREATE TABLE link (link_id int PRIMARY KEY, root_id int REFERENCES root ON DELETE CASCADE);
CREATE TABLE leaf (leaf_id int PRIMARY KEY, link_id int REFERENCES link ON DELETE CASCADE, owner_id int NOT NULL);
-- a self-reference on a ruled table: deleting an own row cascades into hidden children
CREATE TABLE node (node_id int PRIMARY KEY, parent_id int REFERENCES node ON DELETE CASCADE, owner_id int NOT NULL);
`;
const RESET = `TRUNCATE project, task, team, member, depot, crate, inbox, region, shipment, root, link, leaf, node;
INSERT INTO inbox VALUES (1, 'x'); -- first: its trigger deletes other owners' tasks
INSERT INTO project SELECT g, 'p' || g FROM generate_series(1, 4) g;
INSERT INTO task SELECT g, 1 + g % 4, 'p' || (1 + g % 4), 1 + g % 2 FROM generate_series(1, 20) g;
INSERT INTO team SELECT g, 't' || g FROM generate_series(1, 4) g;
INSERT INTO member SELECT g, 1 + g % 4, 1 + g % 2 FROM generate_series(1, 20) g;
INSERT INTO depot SELECT g, 'd' || g FROM generate_series(1, 4) g;
INSERT INTO crate SELECT g, 1 + g % 4, 1 + g % 2 FROM generate_series(1, 20) g;
INSERT INTO region SELECT g, 'r' || g FROM generate_series(1, 4) g;
INSERT INTO shipment SELECT g, 1 + g % 4, 1 + g % 2 FROM generate_series(1, 20) g;
INSERT INTO root VALUES (1); INSERT INTO link VALUES (1, 1); INSERT INTO leaf VALUES (1, 1, 1), (2, 1, 2);
INSERT INTO node VALUES (1, NULL, 1), (2, 1, 2), (3, 1, 1);`;

const own = (table: string) => [
  { effect: 'allow' as const, action: 'read' as const, resource: `public.${table}`, rows: 'owner_id = identity.employee_id' },
  { effect: 'allow' as const, action: 'write' as const, resource: `public.${table}` },
];
const OWNER: SourceRole = {
  name: 'owner',
  statements: [
    ...['task', 'member', 'crate', 'shipment', 'leaf', 'node'].flatMap(own),
    ...['project', 'team', 'depot', 'inbox', 'region', 'root', 'link'].map((t) => ({ effect: 'allow' as const, action: '*' as const, resource: `public.${t}` })),
  ] as SourceRole['statements'],
};
const BOSS: SourceRole = { name: 'boss', statements: [{ effect: 'allow', action: '*', resource: 'public.*' }] };
/** No row rules: reads everything, writes the referenced tables but not the referencing ones (or only some of their columns). */
const CLERK: SourceRole = {
  name: 'clerk',
  statements: [
    { effect: 'allow', action: 'read', resource: 'public.*' },
    ...['project', 'team', 'depot', 'region', 'root', 'link', 'inbox'].map((t) => ({ effect: 'allow' as const, action: 'write' as const, resource: `public.${t}` })),
    { effect: 'allow', action: 'write', resource: 'public.member' },
    { effect: 'deny', action: 'write', resource: 'public.member.team_id' },
  ],
};
/** CLERK plus the write on every referencing table. */
const CLERK_ALL: SourceRole = {
  name: 'clerk-all',
  statements: [...CLERK.statements.filter((s) => s.effect === 'allow'), ...['task', 'member', 'shipment', 'leaf'].map((t) => ({ effect: 'allow' as const, action: 'write' as const, resource: `public.${t}` }))] as SourceRole['statements'],
};
const ME = { employee_id: 1 };

const suite = useRowFixture(EXTRA, RESET, { agent: [OWNER], boss: [BOSS], clerk: [CLERK], 'clerk-all': [CLERK_ALL] });
let fx: RowFixture;
beforeAll(() => {
  fx = suite();
});

/** Writes whose referential actions reach the third element's table: [what, statement, table reached]. */
const REACHING: Array<[string, string, string]> = [
  ['ON UPDATE CASCADE of the referenced key', "UPDATE project SET code = 'q2' WHERE project_id = 2", 'task'],
  ['ON DELETE SET NULL', 'DELETE FROM team WHERE team_id = 2', 'member'],
  ['a cascade into a partitioned table', 'DELETE FROM region WHERE region_id = 2', 'shipment'],
  ['a cascade through link into leaf', 'DELETE FROM root', 'leaf'],
  ['a data-modifying CTE', 'WITH d AS (DELETE FROM project WHERE project_id = 2 RETURNING 1) SELECT count(*) FROM d', 'task'],
];

const rel = (c: SourceCatalog, name: string) => c.relations.find((r) => r.schema === 'public' && r.name === name)!;
const hidden = async (table: string, where = 'owner_id <> 1') => (await fx.admin<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE ${where}`))[0].n;

describe('the catalogue scan', () => {
  it('records the keys referencing a table with a writing action: referencing relation, columns, actions', () => {
    const c = fx.catalog;
    expect(rel(c, 'project').referencedBy).toEqual([
      // in constraint-name order: task_project_code_fkey, task_project_id_fkey
      { schema: 'public', name: 'task', columns: ['project_code'], referencedColumns: ['code'], onDelete: 'no_action', onUpdate: 'cascade' },
      { schema: 'public', name: 'task', columns: ['project_id'], referencedColumns: ['project_id'], onDelete: 'cascade', onUpdate: 'no_action' },
    ]);
    expect(rel(c, 'team').referencedBy).toEqual([{ schema: 'public', name: 'member', columns: ['team_id'], referencedColumns: ['team_id'], onDelete: 'set_null', onUpdate: 'no_action' }]);
    // NO ACTION both ways: not listed.
    expect(rel(c, 'depot').referencedBy).toEqual([]);
    expect(rel(c, 'node').referencedBy).toEqual([{ schema: 'public', name: 'node', columns: ['parent_id'], referencedColumns: ['node_id'], onDelete: 'cascade', onUpdate: 'no_action' }]);
  });

  it('a partitioned referencing table: the parent and each partition (cloned keys) are listed', () => {
    expect(rel(fx.catalog, 'region').referencedBy!.map((k) => k.name)).toEqual(['shipment', 'shipment_1', 'shipment_2']);
  });

  it('the live read at approval (connector.referentialKeys) gives every relation the keys the scan recorded', async () => {
    const live = await fx.connector.referentialKeys();
    const scanned = fx.catalog.relations.filter((r) => r.referencedBy && r.referencedBy.length > 0);
    expect(scanned.map((r) => r.name).sort()).toEqual(['link', 'node', 'project', 'region', 'root', 'team']);
    for (const r of fx.catalog.relations) expect([r.name, live.get(`${r.schema}\u0000${r.name}`) ?? []]).toEqual([r.name, r.referencedBy ?? []]);
  });

  it('records user triggers (not the internal ones of foreign keys)', () => {
    expect(rel(fx.catalog, 'inbox').writeHooks).toEqual({ triggers: true, rules: false });
    expect(rel(fx.catalog, 'task').writeHooks).toEqual({ triggers: false, rules: false });
    expect(rel(fx.catalog, 'project').writeHooks).toEqual({ triggers: false, rules: false });
  });
});

describe('refused for a row-ruled caller (row_rule_unenforceable), nothing changed', () => {
  it('finding B: DELETE of a project cascades into hidden tasks — refused before it is queued', async () => {
    const r = await fx.call('agent', ME, 'DELETE FROM project WHERE project_id = 2');
    expect(codeOf(r)).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toBe(
      "this write reaches rows of public.task, which is row-ruled for the caller, through a foreign key's ON DELETE CASCADE action on public.project; PostgreSQL runs it without the caller's row rules",
    );
    expect(await hidden('task')).toBe(10);
  });

  it.each([
    ...REACHING,
    ['a self-referencing cascade on the ruled table itself', 'DELETE FROM node WHERE node_id = 1', 'node'],
    ['INSERT … ON CONFLICT DO UPDATE of the referenced key', "INSERT INTO project VALUES (2, 'x') ON CONFLICT (project_id) DO UPDATE SET code = 'q2'", 'task'],
  ])('%s', async (_what, sql, table) => {
    const before = await fx.admin(`SELECT * FROM ${table} ORDER BY 1`);
    expect(await fx.write('agent', ME, sql)).toEqual({ code: 'row_rule_unenforceable' });
    expect(fx.lastAudit().row_rule_refusal).toMatch(new RegExp(`^this write reaches rows of public\\.${table}\\b`));
    expect(await fx.admin(`SELECT * FROM ${table} ORDER BY 1`)).toEqual(before);
  });

  it.each([
    ['INSERT', "INSERT INTO inbox VALUES (2, 'y')"],
    ['UPDATE', "UPDATE inbox SET body = 'z'"],
    ['DELETE', 'DELETE FROM inbox'],
  ])('%s into an unruled table whose user trigger writes a ruled one', async (_op, sql) => {
    expect(await fx.write('agent', ME, sql)).toEqual({ code: 'row_rule_unenforceable' });
    expect(fx.lastAudit().row_rule_refusal).toBe("this write runs the user triggers of public.inbox, which PostgreSQL runs without the caller's row rules");
    expect(await hidden('task')).toBe(10);
    expect(await fx.admin('SELECT id, body FROM inbox')).toEqual([{ id: 1, body: 'x' }]);
  });

  it('when the approved write is planned: a queued write meets a cascade created (and scanned) since', async () => {
    await fx.admin('ALTER TABLE crate DROP CONSTRAINT crate_depot_id_fkey');
    try {
      await fx.admin('ALTER TABLE crate ADD CONSTRAINT crate_depot_id_fkey FOREIGN KEY (depot_id) REFERENCES depot ON DELETE CASCADE');
      const sql = 'DELETE FROM depot WHERE depot_id = 3';
      const plan = async () => {
        const catalog = fx.catalog;
        const analysis = analyzeSql(sql, catalog);
        if (!analysis.ok) throw new Error('analysis failed');
        const d = planRowRules({ evaluator: new AccessEvaluator((await fx.store.grantsForIdentity('agent'))), sourceId: 'rows', analysis, catalog, attributes: ME, sql });
        return d.kind === 'refused' ? [codeOf(d.outcome), d.reason] : [d.kind];
      };
      // Planned on the catalogue scanned before the change: NO ACTION, nothing ruled is touched.
      expect(await plan()).toEqual(['none']);
      await fx.rescan();
      expect(await plan()).toEqual(['row_rule_unenforceable', "this write reaches rows of public.crate, which is row-ruled for the caller, through a foreign key's ON DELETE CASCADE action on public.depot; PostgreSQL runs it without the caller's row rules"]);
      expect(await fx.write('agent', ME, sql)).toEqual({ code: 'row_rule_unenforceable' });
      expect(await hidden('crate')).toBe(10);
    } finally {
      await fx.admin('ALTER TABLE crate DROP CONSTRAINT crate_depot_id_fkey; ALTER TABLE crate ADD CONSTRAINT crate_depot_id_fkey FOREIGN KEY (depot_id) REFERENCES depot');
      await fx.rescan();
    }
  });

  it('a catalogue scanned before keys and triggers were recorded: unknown, refused with a rescan hint', async () => {
    const old: SourceCatalog = { ...fx.catalog, relations: fx.catalog.relations.map(({ referencedBy: _r, writeHooks: _h, ...r }): CatalogRelation => r) };
    const sql = "UPDATE depot SET name = 'x' WHERE depot_id = 1";
    const analysis = analyzeSql(sql, old);
    if (!analysis.ok) throw new Error('analysis failed');
    const d = planRowRules({ evaluator: new AccessEvaluator(await fx.store.grantsForIdentity('agent')), sourceId: 'rows', analysis, catalog: old, attributes: ME, sql });
    expect(d).toMatchObject({ kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_unenforceable' }, reason: 'the catalogue does not record the foreign keys and triggers of public.depot, so what this write reaches beyond its target is unknown: rescan the source' });
  });
});

describe('allowed', () => {
  it('the control: a key with NO ACTION — the delete runs and fails on the referencing rows as PostgreSQL reports it', async () => {
    // crate rows of owners 1 and 2 reference depot 2: the delete fails (foreign key violation), nothing changes.
    expect(await fx.write('agent', ME, 'DELETE FROM depot WHERE depot_id = 2')).toEqual({ code: 'statement_failed' });
    await fx.admin('DELETE FROM crate WHERE depot_id = 4');
    expect(await fx.write('agent', ME, 'DELETE FROM depot WHERE depot_id = 4')).toEqual({ rowCount: 1 });
    expect(await fx.write('agent', ME, "UPDATE depot SET name = 'renamed' WHERE depot_id = 1")).toEqual({ rowCount: 1 });
  });

  it('an UPDATE of the referenced table that changes no referenced column', async () => {
    // project.name is not a key of any foreign key: ON UPDATE CASCADE on code does not fire.
    await fx.admin('ALTER TABLE project ADD COLUMN IF NOT EXISTS note text');
    await fx.rescan();
    try {
      expect(await fx.write('agent', ME, "UPDATE project SET note = 'n' WHERE project_id = 2")).toEqual({ rowCount: 1 });
    } finally {
      await fx.admin('ALTER TABLE project DROP COLUMN note');
      await fx.rescan();
    }
  });

  it('an own row of a ruled table no key references with an action', async () => {
    expect(await fx.write('agent', ME, 'DELETE FROM task WHERE task_id = 2')).toEqual({ rowCount: 1 });
    expect(await hidden('task')).toBe(10);
  });

  it('a caller without row rules: unchanged (the cascade and the trigger run)', async () => {
    expect(await fx.write('boss', undefined, 'DELETE FROM project WHERE project_id = 2')).toEqual({ rowCount: 1 });
    expect(await fx.admin('SELECT count(*)::int AS n FROM task WHERE project_id = 2')).toEqual([{ n: 0 }]);
    expect(await fx.write('boss', undefined, "INSERT INTO inbox VALUES (2, 'y')")).toEqual({ rowCount: 1 });
    expect(await hidden('task')).toBe(0);
  });
});

describe('every caller: a referential action writes only what the caller may write (source_role_denied)', () => {
  // clerk may write project, team, root and link, not task, shipment or leaf, and not member.team_id.
  it.each([['ON DELETE CASCADE', 'DELETE FROM project WHERE project_id = 2', 'task'], ...REACHING])('%s: refused before it is queued, nothing changed', async (_what, sql, table) => {
    const before = await fx.admin(`SELECT * FROM ${table} ORDER BY 1`);
    const r = await fx.call('clerk', undefined, sql);
    expect(r).toEqual({
      kind: 'refusal',
      code: 'source_role_denied',
      message:
        "This write would also write rows of another relation through a foreign key's referential action (ON DELETE or ON UPDATE CASCADE, SET NULL or SET DEFAULT), and no source role granted to this identity allows writing that relation. Ask an operator to grant the write on the referencing table too, or change the statement.",
    });
    expect(await fx.admin(`SELECT * FROM ${table} ORDER BY 1`)).toEqual(before);
  });

  it('the same writes are queued and run for a caller who may write the referencing tables too', async () => {
    expect(await fx.write('clerk-all', undefined, 'DELETE FROM project WHERE project_id = 2')).toEqual({ rowCount: 1 });
    expect(await fx.admin('SELECT count(*)::int AS n FROM task WHERE project_id = 2')).toEqual([{ n: 0 }]);
    expect(await fx.write('clerk-all', undefined, 'DELETE FROM team WHERE team_id = 2')).toEqual({ rowCount: 1 });
    expect(await fx.admin('SELECT count(*)::int AS n FROM member WHERE team_id IS NULL')).toEqual([{ n: 5 }]);
    expect(await fx.write('clerk-all', undefined, 'DELETE FROM root')).toEqual({ rowCount: 1 });
  });

  it('writes no referential action reaches are unchanged: NO ACTION keys, an UPDATE of no referenced column, an INSERT, a trigger', async () => {
    await fx.admin('DELETE FROM crate WHERE depot_id = 4');
    expect(await fx.write('clerk', undefined, 'DELETE FROM depot WHERE depot_id = 4')).toEqual({ rowCount: 1 });
    expect(await fx.write('clerk', undefined, "UPDATE team SET name = 'renamed' WHERE team_id = 1")).toEqual({ rowCount: 1 });
    expect(await fx.write('clerk', undefined, "INSERT INTO project VALUES (9, 'p9')")).toEqual({ rowCount: 1 });
    // inbox's trigger deletes tasks as the writer role: code, not a catalogue fact (a row-ruled caller is refused it).
    expect(await fx.write('clerk', undefined, "INSERT INTO inbox VALUES (2, 'y')")).toEqual({ rowCount: 1 });
  });

  it('decided again when the approved write is planned: a grant removed after queueing refuses it', async () => {
    const queued = await fx.call('clerk-all', undefined, 'DELETE FROM project WHERE project_id = 3');
    expect(codeOf(queued)).toBe('queued');
    const evaluator = new AccessEvaluator(await fx.store.grantsForIdentity('clerk'));
    const analysis = analyzeSql('DELETE FROM project WHERE project_id = 3', fx.catalog);
    if (!analysis.ok) throw new Error('analysis failed');
    expect(authorizeStatement(evaluator, 'rows', analysis, fx.catalog)).toMatchObject({ kind: 'refusal', code: 'source_role_denied' });
    expect(authorizeStatement(new AccessEvaluator(await fx.store.grantsForIdentity('clerk-all')), 'rows', analysis, fx.catalog)).toBeNull();
  });
});
