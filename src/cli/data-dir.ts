/**
 * Where the CLI finds the embedded control database (issue 14, item 8): the same one from any
 * folder. Pure apart from the injected file check.
 *
 * With database.embedded_data_dir left at its default (".interlock/pg"):
 *   1. walk up from the current folder to the filesystem root; the first ".interlock/pg" holding a
 *      cluster (data/PG_VERSION) is used: a clone's database is found from any of its subfolders;
 *   2. otherwise the per-user data folder: $XDG_DATA_HOME/interlock/pg, else
 *      ~/.local/share/interlock/pg (where `npm start` creates it when no clone database exists);
 *   2'. except as root (`privateHome`): the embedded server then runs as an unprivileged system
 *      user that cannot enter /root, so the installation's own `.interlock/pg` (`installRoot`, the
 *      clone holding this code) is used instead, found there from any folder.
 * A configured folder (config file or INTERLOCK_EMBEDDED_DATA_DIR) other than the default is used
 * as given, relative to the current folder.
 *
 * Read commands (list, show, search, …) never create a database: when the chosen folder holds no
 * cluster, `missingDatabaseMessage` says where the CLI looked and how to point it elsewhere.
 */
import { dirname, join, resolve } from 'node:path';

/** The default (and project-relative) embedded data folder. */
export const PROJECT_DATA_DIR = '.interlock/pg';

/** How the folder was chosen. */
export type DataDirSource = 'configured' | 'found' | 'user';

/** The chosen folder, how it was chosen, and every folder looked at (for messages). */
export interface ResolvedDataDir {
  dir: string;
  source: DataDirSource;
  looked: string[];
}

/** What resolveEmbeddedDataDir reads from the environment. */
export interface DataDirContext {
  cwd: string;
  home: string;
  env: NodeJS.ProcessEnv;
  /** True when the path exists. */
  exists(path: string): boolean;
  /** The folder of this InterLock installation (a clone); with `privateHome` its `.interlock/pg` replaces the per-user folder. */
  installRoot?: string;
  /** True when the home folder is not usable by the embedded server's system user (running as root). */
  privateHome?: boolean;
}

/** True when `dir` holds an initialised cluster. */
export function hasCluster(dir: string, exists: (p: string) => boolean): boolean {
  return exists(join(dir, 'data', 'PG_VERSION'));
}

/** The per-user data folder of the embedded database. */
export function userDataDir(ctx: Pick<DataDirContext, 'home' | 'env'>): string {
  const base = ctx.env.XDG_DATA_HOME && ctx.env.XDG_DATA_HOME.startsWith('/') ? ctx.env.XDG_DATA_HOME : join(ctx.home, '.local', 'share');
  return join(base, 'interlock', 'pg');
}

/** Chooses the embedded data folder (see the module comment). */
export function resolveEmbeddedDataDir(configured: string, ctx: DataDirContext): ResolvedDataDir {
  if (configured !== PROJECT_DATA_DIR) return { dir: resolve(ctx.cwd, configured), source: 'configured', looked: [resolve(ctx.cwd, configured)] };
  const looked: string[] = [];
  for (let d = resolve(ctx.cwd); ; d = dirname(d)) {
    const candidate = join(d, PROJECT_DATA_DIR);
    looked.push(candidate);
    if (hasCluster(candidate, ctx.exists)) return { dir: candidate, source: 'found', looked };
    if (dirname(d) === d) break;
  }
  if (ctx.privateHome && ctx.installRoot) {
    const own = join(resolve(ctx.installRoot), PROJECT_DATA_DIR);
    if (!looked.includes(own)) looked.push(own);
    return { dir: own, source: hasCluster(own, ctx.exists) ? 'found' : 'user', looked };
  }
  const user = userDataDir(ctx);
  looked.push(user);
  return { dir: user, source: 'user', looked };
}

/** The message of a read command that found no control database. */
export function missingDatabaseMessage(r: ResolvedDataDir): string {
  const where = r.source === 'configured' ? r.dir : `${PROJECT_DATA_DIR} in ${dirname(dirname(r.looked[0]))} and every parent folder, and ${r.looked.at(-1)}`;
  return `no InterLock control database found (looked for ${where}); nothing was created. Start one with npm start (or interlock demo / serve), or point the CLI at yours with --database-url URL, INTERLOCK_DATABASE_URL, or database.embedded_data_dir in --config FILE`;
}
