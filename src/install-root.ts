/**
 * Where this installation lives, whether the code runs from `src/` (through tsx) or from the compiled
 * tree under `dist/` (issue 13, "Ship compiled JavaScript"): the nearest folder above this module
 * that holds InterLock's own package.json. Assets (migrations, data, examples, the console's static
 * files, package.json) are always read from there, never relative to the running module.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

function findInstallRoot(start: string): string {
  for (let dir = start; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'interlock') return dir;
      } catch {
        // not a readable manifest: keep looking
      }
    }
    if (dirname(dir) === dir) throw new Error(`InterLock's package.json was not found above ${start}`);
  }
}

/** Absolute path of the installation (the folder holding package.json, bin/, src/, migrations/). */
export const INSTALL_ROOT: string = findInstallRoot(__dirname);

/** An absolute path inside the installation, e.g. `installPath('migrations')`. */
export function installPath(...parts: string[]): string {
  return join(INSTALL_ROOT, ...parts);
}
