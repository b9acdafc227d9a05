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
 * Only the gateway's start (serve, demo: `npm start`) creates a database; every other command,
 * reading or writing, refuses when the chosen folder holds no cluster, and `missingDatabaseMessage`
 * says where the CLI looked and how to point it elsewhere (task fx45 item 1). The demo's banner
 * gives the CLI lines with INTERLOCK_EMBEDDED_DATA_DIR when its folder is configured
 * (`cliCommandPrefix`).
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

/**
 * The message of a command that found no control database (exit 3, not_found): the places really
 * looked at (for the default search: `.interlock/pg` in the current folder and each parent, then the
 * fallback folder `r.dir`, the per-user one or, as root, the installation's own), that nothing was
 * created, and how to point the CLI elsewhere, INTERLOCK_EMBEDDED_DATA_DIR first (task fx45 item 3).
 */
export function missingDatabaseMessage(r: ResolvedDataDir): string {
  const where = r.source === 'configured' ? r.dir : `${PROJECT_DATA_DIR} in ${dirname(dirname(r.looked[0]))} and every parent folder, and ${r.dir}`;
  return `no InterLock control database found (looked for ${where}); nothing was created. Start one with npm start (or interlock demo / serve), or point the CLI at yours with INTERLOCK_EMBEDDED_DATA_DIR=FOLDER (the gateway's "Control data:" folder), --database-url URL, INTERLOCK_DATABASE_URL, or database.embedded_data_dir in --config FILE`;
}

/** `value` quoted for a POSIX shell when it holds anything but safe path characters. */
function shellWord(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * What goes before `npm exec -- interlock …` in a line the demo's banner prints, so the CLI finds
 * the gateway's embedded database: `INTERLOCK_EMBEDDED_DATA_DIR=<absolute folder> ` (shell-quoted
 * when needed) when the folder was configured, "" when the CLI's default search finds it anyway.
 */
export function cliCommandPrefix(r: ResolvedDataDir): string {
  return r.source === 'configured' ? `INTERLOCK_EMBEDDED_DATA_DIR=${shellWord(r.dir)} ` : '';
}
