/**
 * The sql-gateway profile's fixture: a handful of `icf_` relations whose state the pack can read
 * before and after every payload, and masked values it can recognise in any answer.
 *
 * - `icf_items`: rows that writes would change (an escape changes their checksum).
 * - `icf_people`: `email` holds sentinel values `icf.<16 hex>@example.invalid`; the server under test
 *   must mask `public.icf_people.email` (any method that hides the hex part). `name` is not masked.
 * - `icf_log`: written only by the volatile function `icf_sidefx()` and the procedure `icf_proc()`.
 * - `icf_seq`: a sequence `nextval`/`setval` would advance.
 * - `icf_parts`: range-partitioned copy of icf_people (`icf_parts_a`; `icf_parts_b`, itself
 *   list-partitioned into `icf_parts_b_one`; the default `icf_parts_def`), and `icf_base` with the
 *   inheritance child `icf_kid` holding the same rows: the server must mask `email` on both parents,
 *   and the mask must cover every partition and child (class `partition`).
 * - `icf_rows`: rows of two tenants, `a` and `b` (rowTenant), labelled with the row sentinel
 *   (rowLabel); the `rows` class reads it as an identity that may read only tenant `a`'s rows.
 * - Operators `=`, `>=`, `<=` on (integer, text) in `public`, implemented by the volatile
 *   `icf_op_sidefx(int, text)`, which takes a session advisory lock (a side effect that survives a
 *   read-only transaction): every syntactic form that runs an operator can reach them, while
 *   `integer = integer` still resolves to the built-in operator.
 * - Functions the database's owner wrote that read the masked `icf_people.email` (a new user's finding,
 *   stop 41): `icf_email_of(int)` (LANGUAGE sql, STABLE, a string body), `icf_email_definer(int)` (the
 *   same, SECURITY DEFINER), `icf_email_atomic(int)` (a SQL-standard body), `icf_email_pl(int)`
 *   (plpgsql) and the set-returning `icf_emails()`: the server must not return the masked value
 *   through them (class `masked-leak`), whether it refuses the call or masks its result.
 */
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';

/** What the operator must configure on the server under test, printed by `sql-fixture`. */
export const FIXTURE_SETUP_TEXT = `Register this database as a source of the server under test and give the identity whose key you
pass with --api-key:
  - read on public.icf_items, public.icf_people, public.icf_log, public.icf_parts, public.icf_base
    (SELECT on every icf_ relation for the source's reader role; grants name the parents only);
  - a mask on public.icf_people.email, public.icf_parts.email and public.icf_base.email (any method that
    hides the value; the parents' masks must cover their partitions and inheritance children);
  - no write that runs without approval.
For the rows class (optional, --restricted-api-key): a second identity that may read public.icf_items
and public.icf_rows, restricted to the rows of icf_rows where tenant = 'a' (identity A may read only
rows where tenant = 'a'; how the server expresses that is its own business).
Then run: interlock-conformance --url … --profile sql-gateway --pg-url <url above> --source-id <its id> [--api-key …] [--restricted-api-key …] [--tool-map …]`;

/**
 * The fixture's DDL and rows; `emails` are the sentinel values of icf_people.email. `token` (issue 30
 * item 3) ends every icf_items name (`anvil-<token>`): a value only a real read of the database returns,
 * so the pack can tell rows from a tool that runs no SQL (sentinelToken; run.ts checks it first).
 */
export function fixtureSql(emails: string[], token: string): string {
  const item = (name: string) => `'${name}-${token}'`;
  const people = emails.map((e, i) => `(${i + 1}, 'person ${i + 1}', '${e}')`).join(', ');
  return `
CREATE TABLE IF NOT EXISTS icf_items (id int PRIMARY KEY, name text NOT NULL, price numeric(8,2) NOT NULL);
CREATE TABLE IF NOT EXISTS icf_people (id int PRIMARY KEY, name text NOT NULL, email text NOT NULL);
CREATE TABLE IF NOT EXISTS icf_log (id serial PRIMARY KEY, what text NOT NULL);
CREATE SEQUENCE IF NOT EXISTS icf_seq;
CREATE TABLE IF NOT EXISTS icf_parts (id int NOT NULL, name text NOT NULL, email text NOT NULL) PARTITION BY RANGE (id);
CREATE TABLE IF NOT EXISTS icf_parts_a PARTITION OF icf_parts FOR VALUES FROM (1) TO (2);
CREATE TABLE IF NOT EXISTS icf_parts_b PARTITION OF icf_parts FOR VALUES FROM (2) TO (3) PARTITION BY LIST (id);
CREATE TABLE IF NOT EXISTS icf_parts_b_one PARTITION OF icf_parts_b FOR VALUES IN (2);
CREATE TABLE IF NOT EXISTS icf_parts_def PARTITION OF icf_parts DEFAULT;
CREATE TABLE IF NOT EXISTS icf_base (id int NOT NULL, name text NOT NULL, email text NOT NULL);
CREATE TABLE IF NOT EXISTS icf_kid (extra int NOT NULL DEFAULT 7) INHERITS (icf_base);
CREATE TABLE IF NOT EXISTS icf_rows (id int PRIMARY KEY, tenant text NOT NULL, item_id int NOT NULL, amount int NOT NULL, label text NOT NULL);
CREATE OR REPLACE FUNCTION icf_sidefx() RETURNS int VOLATILE LANGUAGE sql AS $f$ INSERT INTO icf_log (what) VALUES ('sidefx') RETURNING 1 $f$;
CREATE OR REPLACE PROCEDURE icf_proc() LANGUAGE sql AS $p$ DELETE FROM icf_items $p$;
CREATE OR REPLACE FUNCTION icf_op_sidefx(int, text) RETURNS bool VOLATILE LANGUAGE sql AS $f$ SELECT true FROM (SELECT pg_advisory_lock(4245)) s $f$;
CREATE OR REPLACE FUNCTION icf_email_of(int) RETURNS text STABLE LANGUAGE sql AS $f$ SELECT email FROM icf_people WHERE id = $1 $f$;
CREATE OR REPLACE FUNCTION icf_email_definer(int) RETURNS text STABLE SECURITY DEFINER SET search_path = public, pg_catalog LANGUAGE sql AS $f$ SELECT email FROM icf_people WHERE id = $1 $f$;
CREATE OR REPLACE FUNCTION icf_email_atomic(i int) RETURNS text STABLE LANGUAGE sql BEGIN ATOMIC SELECT email FROM public.icf_people WHERE id = i; END;
CREATE OR REPLACE FUNCTION icf_email_pl(int) RETURNS text STABLE LANGUAGE plpgsql AS $f$ BEGIN RETURN (SELECT email FROM icf_people WHERE id = $1); END $f$;
CREATE OR REPLACE FUNCTION icf_emails() RETURNS SETOF text STABLE LANGUAGE sql AS $f$ SELECT email FROM icf_people $f$;
DO $d$ BEGIN
  CREATE OPERATOR public.= (LEFTARG = int, RIGHTARG = text, FUNCTION = icf_op_sidefx);
  CREATE OPERATOR public.>= (LEFTARG = int, RIGHTARG = text, FUNCTION = icf_op_sidefx);
  CREATE OPERATOR public.<= (LEFTARG = int, RIGHTARG = text, FUNCTION = icf_op_sidefx);
EXCEPTION WHEN duplicate_function THEN NULL;
END $d$;
TRUNCATE icf_items, icf_people, icf_log, icf_parts, icf_base, icf_rows;
INSERT INTO icf_items VALUES (1, ${item('anvil')}, 10.50), (2, ${item('bucket')}, 3.25), (3, ${item('crate')}, 7.00), (4, ${item('drum')}, 12.00), (5, ${item('easel')}, 45.90);
INSERT INTO icf_people VALUES ${people};
INSERT INTO icf_parts SELECT * FROM icf_people;
INSERT INTO icf_kid (id, name, email) SELECT * FROM icf_people;
INSERT INTO icf_rows ${rowsValues(token)};
`;
}

/** Rows of `icf_rows` (issue 30, the `rows` class): 12 rows, tenant 'b' on every third id, the rest tenant 'a'. */
export const ROW_IDS = Array.from({ length: 12 }, (_, i) => i + 1);

/** The tenant of `icf_rows` row `id`. */
export function rowTenant(id: number): 'a' | 'b' {
  return id % 3 === 0 ? 'b' : 'a';
}

/**
 * The label of `icf_rows` row `id`: `row<tenant>-<id>-<token>`, a value only a real read returns; a
 * tenant 'b' label in an answer to the restricted identity is a hidden row.
 */
export function rowLabel(id: number, token: string): string {
  return `row${rowTenant(id)}-${id}-${token}`;
}

function rowsValues(token: string): string {
  return 'VALUES ' + ROW_IDS.map((id) => `(${id}, '${rowTenant(id)}', ${1 + (id % 5)}, ${1 + ((id * 7) % 23)}, '${rowLabel(id, token)}')`).join(', ');
}

/** Fresh sentinel e-mail values: `icf.<16 hex>@example.invalid`. */
export function sentinelEmails(n = 3): string[] {
  return Array.from({ length: n }, () => `icf.${randomBytes(8).toString('hex')}@example.invalid`);
}

/** A fresh row sentinel for fixtureSql: 12 hex digits. */
export function sentinelToken(): string {
  return randomBytes(6).toString('hex');
}

/** The row sentinel of a fixture, read back from one of its icf_items names, or undefined when they carry none. */
export function tokenOf(itemName: string): string | undefined {
  return /-([0-9a-f]{12})$/.exec(itemName)?.[1];
}

/** A created fixture: its database name and connection URL (same credentials as the --pg-url given). */
export interface Fixture {
  database: string;
  url: string;
}

/**
 * Creates the fixture. Without `database`, creates a new database `icf_<random>` through `pgUrl`
 * (its role needs CREATEDB); with `database`, creates the relations in that existing database.
 * Throws the server's error when it cannot connect or create.
 */
export async function createFixture(pgUrl: string, database?: string): Promise<Fixture> {
  const base = new URL(pgUrl);
  let name = database;
  if (!name) {
    name = `icf_${randomBytes(5).toString('hex')}`;
    const admin = new Client({ connectionString: pgUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE "${name}"`);
    } finally {
      await admin.end();
    }
  }
  const url = new URL(base.toString());
  url.pathname = '/' + name;
  const c = new Client({ connectionString: url.toString() });
  await c.connect();
  try {
    await c.query(fixtureSql(sentinelEmails(), sentinelToken()));
  } finally {
    await c.end();
  }
  return { database: name, url: url.toString() };
}
