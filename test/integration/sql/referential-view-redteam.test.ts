/**
 * Red team (rtfk3) of commit d4998f2: an UPDATE through a view now follows only the base columns its
 * written view columns pass through (WriteAccess.baseColumns, src/sql/analyzer/dml.ts
 * viewUpdateBases) when src/sql/referential-reach.ts looks for ON UPDATE actions. Each probe is an
 * 'update' write on a view (or its base) that PostgreSQL runs and that writes a base column a key
 * with ON UPDATE CASCADE references, into a table the caller may not write: it must be refused
 * `source_role_denied` with nothing changed. Honest writes of unreferenced columns through the same
 * views must keep running (queued, then run on approval). `test.failing` marks an open finding
 * (named in its comment).
 */
import { useRowFixture, type RowFixture } from '../../helpers/row-rules';
import type { SourceRole } from '../../../src/control/roles';
import { authorizeStatement, CASCADE_DENIED_MESSAGE } from '../../../src/pipeline/03-authorize';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { analyzeSql } from '../../../src/sql/analyze';
import { withReferentialKeys } from '../../../src/sources/postgres/referential-keys';

const EXTRA = `
CREATE TABLE acct (acct_id int PRIMARY KEY, code text UNIQUE NOT NULL, name text, note text);
CREATE TABLE ledger (ledger_id int PRIMARY KEY, acct_code text REFERENCES acct (code) ON UPDATE CASCADE);
CREATE VIEW acct_v AS SELECT acct_id, code, name, note FROM acct;
-- a table alias with a column list: a(x, y, z) is (acct_id, code, name), so acct_a.name is acct.code
CREATE VIEW acct_a AS SELECT x AS acct_id, z AS code, y AS name FROM acct a(x, y, z);
-- one base column under two names
CREATE VIEW acct_dup AS SELECT acct_id, code AS a, code AS b, name FROM acct;
-- quoted mixed-case names swapping meaning: "Name" is acct.code
CREATE VIEW "Acct Q" AS SELECT acct_id AS "Id", code AS "Name", name AS "Code" FROM acct;
-- nested views with column lists: acct_n2.name is acct_n1.z is acct.code
CREATE VIEW acct_n1 (x, y, z) AS SELECT acct_id, name, code FROM acct;
CREATE VIEW acct_n2 (name, code) AS SELECT z, y FROM acct_n1;
-- security barrier and check option, columns swapped
CREATE VIEW acct_sb WITH (security_barrier) AS SELECT acct_id, name AS code, code AS name FROM acct WHERE acct_id > 0 WITH CHECK OPTION;
-- replaced after the scan by a definition with the same names and types (CREATE OR REPLACE VIEW allows it)
CREATE VIEW acct_sw AS SELECT acct_id, code, name FROM acct;
-- a stored generated column referenced by an ON UPDATE CASCADE key: an UPDATE of name changes name_key
CREATE TABLE gacct (gacct_id int PRIMARY KEY, name text, name_key text GENERATED ALWAYS AS (lower(name)) STORED UNIQUE, note text);
CREATE TABLE gtag (gtag_id int PRIMARY KEY, name_key text REFERENCES gacct (name_key) ON UPDATE CASCADE);
CREATE VIEW gacct_v AS SELECT gacct_id, name FROM gacct;
-- a BEFORE UPDATE trigger that rewrites the referenced code when name is written
CREATE TABLE tacct (tacct_id int PRIMARY KEY, code text UNIQUE NOT NULL, name text);
CREATE TABLE tledger (tledger_id int PRIMARY KEY, code text REFERENCES tacct (code) ON UPDATE CASCADE);
CREATE FUNCTION tacct_recode() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.code := NEW.code || '-' || NEW.name; RETURN NEW; END$$;
CREATE TRIGGER tacct_recode BEFORE UPDATE OF name ON tacct FOR EACH ROW EXECUTE FUNCTION tacct_recode();
CREATE VIEW tacct_v AS SELECT tacct_id, code, name FROM tacct;
-- a view whose INSTEAD OF UPDATE trigger writes the referenced base column from the written name
CREATE VIEW iacct_v AS SELECT acct_id, code, name FROM acct;
CREATE FUNCTION iacct_upd() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN UPDATE acct SET code = NEW.name WHERE acct_id = OLD.acct_id; RETURN NEW; END$$;
CREATE TRIGGER iacct_upd INSTEAD OF UPDATE ON iacct_v FOR EACH ROW EXECUTE FUNCTION iacct_upd();
-- an automatically updatable view over it: PostgreSQL rewrites to an update of iacct_v, whose trigger runs
CREATE VIEW iacct_vv AS SELECT acct_id, name AS label FROM iacct_v;
-- a partitioned base: the BEFORE UPDATE trigger is on one partition only
CREATE TABLE pacct (id int, k int, code text, name text, PRIMARY KEY (id, k), UNIQUE (code, k)) PARTITION BY LIST (k);
CREATE TABLE pacct_1 PARTITION OF pacct FOR VALUES IN (1);
CREATE TABLE pacct_2 PARTITION OF pacct FOR VALUES IN (2);
CREATE TABLE pledger (pledger_id int PRIMARY KEY, code text, k int, FOREIGN KEY (code, k) REFERENCES pacct (code, k) ON UPDATE CASCADE);
CREATE TRIGGER pacct_1_recode BEFORE UPDATE OF name ON pacct_1 FOR EACH ROW EXECUTE FUNCTION tacct_recode();
CREATE VIEW pacct_v AS SELECT id, k, name FROM pacct;
`;
const RESET = `TRUNCATE acct, ledger, gacct, gtag, tacct, tledger, pacct, pledger;
INSERT INTO pacct VALUES (1, 1, 'p1', 'n1'), (2, 2, 'p2', 'n2'); INSERT INTO pledger VALUES (1, 'p1', 1), (2, 'p2', 2);
INSERT INTO acct SELECT g, 'a' || g, 'n' || g, 'o' || g FROM generate_series(1, 4) g;
INSERT INTO ledger SELECT g, 'a' || (1 + g % 4) FROM generate_series(1, 8) g;
INSERT INTO gacct (gacct_id, name) SELECT g, 'N' || g FROM generate_series(1, 4) g;
INSERT INTO gtag SELECT g, 'n' || (1 + g % 4) FROM generate_series(1, 8) g;
INSERT INTO tacct SELECT g, 't' || g, 'n' || g FROM generate_series(1, 4) g;
INSERT INTO tledger SELECT g, 't' || (1 + g % 4) FROM generate_series(1, 8) g;
CREATE OR REPLACE VIEW acct_sw AS SELECT acct_id, code, name FROM acct;`;

const WRITABLE = ['acct', 'acct_v', 'acct_a', 'acct_dup', 'Acct Q', 'acct_n1', 'acct_n2', 'acct_sb', 'acct_sw', 'gacct', 'gacct_v', 'tacct', 'tacct_v', 'iacct_v', 'iacct_vv', 'pacct', 'pacct_v'];
/** Reads everything; writes acct, gacct, tacct and their views; may not write ledger, gtag, tledger or pledger. */
const CLERK: SourceRole = {
  name: 'view-clerk',
  statements: [{ effect: 'allow', action: 'read', resource: '*' }, ...WRITABLE.map((t) => ({ effect: 'allow' as const, action: 'write' as const, resource: `public.${t}` }))],
};

const suite = useRowFixture(EXTRA, RESET, { clerk: [CLERK] });
let fx: RowFixture;
beforeAll(() => {
  fx = suite();
});
/** Every value the referencing tables hold (what a cascade would change). */
const snapshot = async () =>
  fx.admin(`SELECT (SELECT string_agg(acct_code, ',' ORDER BY ledger_id) FROM ledger) AS l,
    (SELECT string_agg(name_key, ',' ORDER BY gtag_id) FROM gtag) AS g,
    (SELECT string_agg(code, ',' ORDER BY tledger_id) FROM tledger) AS t,
    (SELECT string_agg(code, ',' ORDER BY pledger_id) FROM pledger) AS p`);
const REFUSED = { kind: 'refusal', code: 'source_role_denied', message: CASCADE_DENIED_MESSAGE };
/** `sql` from the clerk is refused before it is queued (CASCADE_DENIED_MESSAGE), nothing changed. */
async function refusedUnchanged(sql: string): Promise<void> {
  const before = await snapshot();
  expect(await fx.call('clerk', undefined, sql)).toEqual(REFUSED);
  expect(await snapshot()).toEqual(before);
}

describe('probes: an update through a view whose written column is a referenced base column, under another name', () => {
  it.each([
    ['an alias column list in the view (acct a(x, y, z))', "UPDATE acct_a SET name = 'zz' WHERE acct_id = 2"],
    ['the second of two names of one base column', "UPDATE acct_dup SET b = 'zz' WHERE acct_id = 2"],
    ['a quoted mixed-case name', `UPDATE "Acct Q" SET "Name" = 'zz' WHERE "Id" = 2`],
    ['nested views with column lists', "UPDATE acct_n2 SET name = 'zz' WHERE code = 'n2'"],
    ['a security-barrier view WITH CHECK OPTION', "UPDATE acct_sb SET name = 'zz' WHERE acct_id = 2"],
    ['a multi-assignment from a sub-SELECT', "UPDATE acct_sb SET (code, name) = (SELECT 'c', 'zz') WHERE acct_id = 2"],
    ['ON CONFLICT DO UPDATE through the view', "INSERT INTO acct_sb VALUES (2, 'n', 'zz') ON CONFLICT (acct_id) DO UPDATE SET name = excluded.name"],
  ])('%s: refused, nothing changed', (_what, sql) => refusedUnchanged(sql));
});

describe('probes: base columns PostgreSQL writes beyond the ones the view passes through', () => {
  // FINDING V1 (rtfk3, medium, fixed in src/sql/referential-reach.ts): a stored generated column is
  // recomputed by every UPDATE of its row, and a key may reference it (ON UPDATE CASCADE fires when
  // it changes). The walk followed only the written columns, so an UPDATE of `name` (through
  // gacct_v since d4998f2; of gacct directly before it too) cascaded into gtag unchecked.
  it.each([
    ['through the view', "UPDATE gacct_v SET name = 'Q' WHERE gacct_id = 2"],
    ['the table itself', "UPDATE gacct SET name = 'Q' WHERE gacct_id = 2"],
    ['ON CONFLICT DO UPDATE through the view', "INSERT INTO gacct_v VALUES (2, 'Q') ON CONFLICT (gacct_id) DO UPDATE SET name = excluded.name"],
  ])('a stored generated column a key references, %s: refused, nothing changed', (_what, sql) => refusedUnchanged(sql));

  // FINDING V1 at approval: a generated column and a key referencing it, both added after the scan.
  // The keys are read live at approval, the columns are the scan's: a referenced column the scan
  // did not see counts as written by any update of its relation.
  it('a generated column and its ON UPDATE CASCADE key added after the scan: decided with the live keys, refused', async () => {
    await fx.admin(`ALTER TABLE acct ADD COLUMN note_key text GENERATED ALWAYS AS (lower(note)) STORED UNIQUE;
      ALTER TABLE ledger ADD COLUMN note_key text REFERENCES acct (note_key) ON UPDATE CASCADE`);
    try {
      const evaluator = new AccessEvaluator(await fx.store.grantsForIdentity('clerk'));
      const live = withReferentialKeys(fx.catalog, await fx.connector.referentialKeys());
      for (const sql of ["UPDATE acct_v SET note = 'Q' WHERE acct_id = 2", "UPDATE acct SET note = 'Q' WHERE acct_id = 2"]) {
        const analysis = analyzeSql(sql, live);
        if (!analysis.ok) throw new Error('analysis failed');
        expect(authorizeStatement(evaluator, 'rows', analysis, live)).toEqual(REFUSED);
      }
    } finally {
      await fx.admin('ALTER TABLE ledger DROP COLUMN note_key; ALTER TABLE acct DROP COLUMN note_key');
    }
  });

  // FINDING V2 (rtfk3, medium, fixed in src/sql/referential-reach.ts): a BEFORE UPDATE trigger may
  // set any column of the new row, and an INSTEAD OF trigger of a view writes its base as it likes;
  // the referential action the changed key fires runs as the referencing table's owner, not under
  // the writer role's privileges. Before d4998f2 an update through a view counted every base column;
  // after it only the mapped one, so these cascaded into tledger / ledger unchecked (the trigger on
  // the table itself, UPDATE tacct SET name, was missed before too).
  it.each([
    ['a BEFORE UPDATE trigger on the base, through the view', "UPDATE tacct_v SET name = 'q' WHERE tacct_id = 2"],
    ['a BEFORE UPDATE trigger on the table itself', "UPDATE tacct SET name = 'q' WHERE tacct_id = 2"],
    ['an INSTEAD OF UPDATE trigger on the view', "UPDATE iacct_v SET name = 'zz' WHERE acct_id = 2"],
    ['an INSTEAD OF UPDATE trigger on the inner view of a nested one', "UPDATE iacct_vv SET label = 'zz' WHERE acct_id = 2"],
    ['a BEFORE UPDATE trigger on one partition of the base', "UPDATE pacct_v SET name = 'q' WHERE id = 1"],
  ])('%s: refused, nothing changed', (_what, sql) => refusedUnchanged(sql));

  it('what PostgreSQL does with those writes (run as the superuser): the key column changes and cascades', async () => {
    await fx.admin("UPDATE gacct_v SET name = 'Q' WHERE gacct_id = 2; UPDATE tacct_v SET name = 'q' WHERE tacct_id = 2; UPDATE iacct_vv SET label = 'zz' WHERE acct_id = 2; UPDATE pacct_v SET name = 'q' WHERE id = 1");
    expect(await snapshot()).toEqual([{ l: 'zz,a3,a4,a1,zz,a3,a4,a1', g: 'q,n3,n4,n1,q,n3,n4,n1', t: 't2-q,t3,t4,t1,t2-q,t3,t4,t1', p: 'p1-q,p2' }]);
    // the partition without the trigger: only name changes
    await fx.admin("UPDATE pacct_v SET name = 'q' WHERE id = 2");
    expect(await fx.admin('SELECT code, name FROM pacct ORDER BY id')).toEqual([{ code: 'p1-q', name: 'q' }, { code: 'p2', name: 'q' }]);
  });

  // FINDING V3 (rtfk3, medium, fixed at approval): CREATE OR REPLACE VIEW may keep every column's
  // name and type and change what each passes through, so the scan's mapping of a view column to its
  // base column can go stale. src/approvals/execute.ts reads the definitions of the views on the
  // write's path live and drops the mapping when one differs (every base column counts again):
  // test/integration/approvals/referential-live.test.ts "an UPDATE through a view redefined after the scan".
});

describe('probes: honest writes through the same views that must keep running', () => {
  it.each([
    ['acct_v.note', "UPDATE acct_v SET note = 'x' WHERE acct_id = 2", { code: 'a2', name: 'n2', note: 'x' }],
    ['acct_a.code (acct.name)', "UPDATE acct_a SET code = 'x' WHERE acct_id = 2", { code: 'a2', name: 'x', note: 'o2' }],
    ['acct_dup.name', "UPDATE acct_dup SET name = 'x' WHERE acct_id = 2", { code: 'a2', name: 'x', note: 'o2' }],
    ['"Acct Q"."Code" (acct.name)', `UPDATE "Acct Q" SET "Code" = 'x' WHERE "Id" = 2`, { code: 'a2', name: 'x', note: 'o2' }],
    ['acct_n2.code (acct.name)', "UPDATE acct_n2 SET code = 'x' WHERE name = 'a2'", { code: 'a2', name: 'x', note: 'o2' }],
    ['acct_sb.code (acct.name)', "UPDATE acct_sb SET code = 'x' WHERE acct_id = 2", { code: 'a2', name: 'x', note: 'o2' }],
    ['acct_sb.code by ON CONFLICT DO UPDATE', "INSERT INTO acct_sb VALUES (2, 'x', 'a2') ON CONFLICT (acct_id) DO UPDATE SET code = excluded.code", { code: 'a2', name: 'x', note: 'o2' }],
    ['acct_sw.name before any redefinition', "UPDATE acct_sw SET name = 'x' WHERE acct_id = 2", { code: 'a2', name: 'x', note: 'o2' }],
  ])('an update of %s: queued, runs on approval, writes only that column', async (_what, sql, row) => {
    const before = await snapshot();
    expect(await fx.write('clerk', undefined, sql)).toEqual({ rowCount: 1 });
    expect(await fx.admin('SELECT code, name, note FROM acct WHERE acct_id = 2')).toEqual([row]);
    expect(await snapshot()).toEqual(before);
  });

});
