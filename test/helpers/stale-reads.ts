/**
 * Reads through the gateway for the function-guard tests (tasks hg1, hg2; red team rt42b): what an
 * `interlock_query` on source `chinook` answered, and the same once the catalogue is current again.
 */
import pg from 'pg';
import { scanSource } from '../../src/control/scan';
import { callTool, type GovernedEnv } from './governed';

/** The refusal `{ code }` of `sql` on `chinook`, or the rows when the call was served (HTTP 200 either way). */
export async function queryOutcome(env: GovernedEnv, sql: string): Promise<unknown> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
  if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
  const res = r.body.result;
  if (res.isError) return { code: res.structuredContent.code };
  return res.structuredContent.rows;
}

/**
 * The rows of `sql` once the source's catalogue is current again: a rescan an earlier test caused
 * may still run, or may have recorded a state that test undid (then its analysis, not the guard,
 * refuses: the source is scanned again here). The waits (100 ms, at most 50) only stage it.
 */
export async function settledOutcome(env: GovernedEnv, sql: string): Promise<unknown> {
  for (let i = 0; ; i++) {
    const r = await queryOutcome(env, sql);
    if (i >= 50 || Array.isArray(r)) return r;
    if ((r as { code?: string }).code !== 'catalog_stale') await scanSource(env.db, 'chinook');
    await new Promise((res) => setTimeout(res, 100));
  }
}

/** The source's superuser session and an insider's (see `startInsider`). */
export interface Insider {
  admin: pg.Client;
  insider: pg.Client;
  /** The insider's login role: `<reader role>_<suffix>`. */
  role: string;
}

/**
 * Connects the source's superuser (`admin`, search_path public) and creates an insider: login role
 * `<reader role>_<suffix>` with CONNECT and USAGE, CREATE on a new schema `scratch` only, which is
 * not on the reader's path (the reader gets USAGE there, so it could name `scratch.f()` itself);
 * `insider` is its session. Undo with `stopInsider`.
 */
export async function startInsider(env: GovernedEnv, suffix: string): Promise<Insider> {
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  const role = `${env.demo.readerRole}_${suffix}`;
  const ins = admin.escapeIdentifier(role);
  await admin.query(`
    SET search_path = public;
    CREATE ROLE ${ins} LOGIN;
    GRANT CONNECT ON DATABASE ${admin.escapeIdentifier(new URL(env.sourceUrl).pathname.slice(1))} TO ${ins};
    CREATE SCHEMA scratch;
    GRANT USAGE ON SCHEMA scratch TO ${admin.escapeIdentifier(env.demo.readerRole)};
    GRANT USAGE, CREATE ON SCHEMA scratch TO ${ins};`);
  const url = new URL(env.sourceUrl);
  url.username = role;
  url.password = '';
  const insider = new pg.Client({ connectionString: url.toString() });
  await insider.connect();
  return { admin, insider, role };
}

/** Ends the insider's session, runs `extra` (cleanup SQL) as the superuser, drops schema scratch, the insider's objects and role, and ends the superuser's session. Never throws. */
export async function stopInsider(x: Insider | undefined, extra = ''): Promise<void> {
  if (!x) return;
  await x.insider.end().catch(() => undefined);
  const ins = x.admin.escapeIdentifier(x.role);
  await x.admin.query(`${extra}; DROP SCHEMA IF EXISTS scratch CASCADE; DROP OWNED BY ${ins}; DROP ROLE IF EXISTS ${ins}`).catch(() => undefined);
  await x.admin.end().catch(() => undefined);
}

/**
 * startInsider with CREATE on schema public too, the schema of the reader's and writer's search path
 * (red teams rt47b J3b, rt48c: the insider of CVE-2018-1058's pattern), and a table
 * `public.<suffix>_evidence (who text)` any role may insert into and read (what the insider's code
 * records). `stopInsider(x, 'DROP TABLE IF EXISTS public.<suffix>_evidence')` undoes it.
 */
export async function startPublicInsider(env: GovernedEnv, suffix: string): Promise<Insider> {
  const x = await startInsider(env, suffix);
  await x.admin.query(`CREATE TABLE public.${suffix}_evidence (who text NOT NULL);
    GRANT INSERT, SELECT ON public.${suffix}_evidence TO PUBLIC;
    GRANT CREATE ON SCHEMA public TO ${x.admin.escapeIdentifier(x.role)};`);
  return x;
}
