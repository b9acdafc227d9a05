/**
 * The database of red teams rt47b J3/J3b and rt48c K4 (CVE-2018-1058's pattern): a fresh database on
 * this machine's PostgreSQL with a login role, the reader (SELECT on public.secret, one row, only;
 * its search_path default `readerPath` when given, set by an admin as a database owner would), and
 * an insider (USAGE, CREATE on public) who made public.loot (who text, v text), which anyone may
 * insert into, and then ran `insiderSql`. Loopback only; database and roles dropped afterwards.
 */
import { randomBytes } from 'node:crypto';
import { connectPinned, type PinnedClient } from '../../src/sources/postgres/pinned-client';
import { pinnedStartupOptions } from '../../src/sources/postgres/session-settings';
import { createTempDatabase, pgServer } from './pg';

/** What `run` gets: `admin` (the superuser, on the database) and `connectReader` (a new connection as the reader; the caller ends it). */
export interface InsiderDatabase {
  admin: PinnedClient;
  connectReader(extra?: { application_name?: string }): Promise<PinnedClient>;
}

/**
 * Makes the database (see the module comment), runs `run` and answers its result with the rows loot
 * holds then (`who`: the role whose session inserted them). `label`: a short lower-case tag for the
 * database and role names. Throws what `run` or a setup statement throws.
 */
export async function withInsiderDatabase<T>(label: string, insiderSql: string[], readerPath: string | undefined, run: (db: InsiderDatabase) => Promise<T>): Promise<{ result: T; loot: Array<{ who: string; v: string }> }> {
  const temp = await createTempDatabase(label);
  const tag = randomBytes(4).toString('hex');
  const reader = `${label}r_${tag}`;
  const insider = `${label}i_${tag}`;
  const { host, port } = pgServer();
  const admin = await connectPinned({ host, port, database: temp.name, user: 'root', options: pinnedStartupOptions() });
  try {
    await admin.query(`CREATE ROLE ${reader} LOGIN; CREATE ROLE ${insider}`);
    if (readerPath !== undefined) await admin.query(`ALTER ROLE ${reader} SET search_path = ${readerPath}`);
    await admin.query(`CREATE TABLE public.secret (v text); INSERT INTO public.secret VALUES ('only the reader may read this'); GRANT SELECT ON public.secret TO ${reader}`);
    await admin.query(`GRANT USAGE, CREATE ON SCHEMA public TO ${insider}`);
    await admin.query(`SET ROLE ${insider}`);
    await admin.query('CREATE TABLE public.loot (who text, v text); GRANT INSERT ON public.loot TO PUBLIC');
    for (const sql of insiderSql) await admin.query(sql);
    await admin.query('RESET ROLE');
    const result = await run({ admin, connectReader: (extra = {}) => connectPinned({ host, port, database: temp.name, user: reader, options: pinnedStartupOptions(), ...extra }) });
    return { result, loot: (await admin.query<{ who: string; v: string }>('SELECT who, v FROM public.loot LIMIT 1')).rows };
  } finally {
    await admin.query('RESET ROLE').catch(() => undefined);
    await admin.end();
    await temp.drop();
    const root = await connectPinned({ host, port, database: 'postgres', user: 'root', options: pinnedStartupOptions() });
    await root.query(`DROP ROLE IF EXISTS ${reader}; DROP ROLE IF EXISTS ${insider}`).catch(() => undefined);
    await root.end();
  }
}
