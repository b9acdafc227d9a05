/**
 * Which code `bin/interlock.js` runs (issue 13, "Ship compiled JavaScript"): the compiled tree in
 * `dist/` (made by `npm run build`, also run by `npm ci`/`npm install` through `prepare`) when it is
 * at least as new as every file under src/, generated/ and spec/ and built from exactly their contents
 * (DIGEST, sourcesDigest); otherwise the TypeScript sources
 * through tsx, so an edited checkout never runs stale code. Plain JavaScript: it runs before tsx.
 *
 * Environment: INTERLOCK_RUNTIME=source|compiled forces one (compiled fails when dist/ is missing
 * or stale); INTERLOCK_DIST_DIR names another compiled tree (tests).
 */
'use strict';
const fs = require('node:fs');
const path = require('node:path');

/** Name of the file, inside a compiled tree, that records when its build started (ms since the epoch). */
const STAMP = '.built-at';

/** Name of the file, inside a compiled tree, that records sourcesDigest of the sources it was built from. */
const DIGEST = '.built-from';

/** The absolute paths of the files under `dirs` (absolute paths; a missing folder has none). */
function filesUnder(dirs) {
  const files = [];
  const walk = (dir) => {
    let entries;
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) files.push(p);
    }
  };
  for (const d of dirs) walk(d);
  return files;
}

/** Newest modification time (ms) of the files under `dirs` (absolute paths); 0 when there are none. */
function newestMtime(dirs) {
  let newest = 0;
  for (const p of filesUnder(dirs)) newest = Math.max(newest, fs.statSync(p).mtimeMs);
  return newest;
}

/**
 * SHA-256 (hex) of the files under `dirs` (absolute paths): each file's path relative to `root` and
 * its content, in path order. Unlike modification times it changes when a file is deleted, or
 * replaced by one with an older time (an archive extracted with its times, cp -p, rsync -a).
 */
function sourcesDigest(root, dirs) {
  const crypto = require('node:crypto');
  const h = crypto.createHash('sha256');
  for (const f of filesUnder(dirs).map((p) => path.relative(root, p).split(path.sep).join('/')).sort()) {
    h.update(f + '\0');
    h.update(fs.readFileSync(path.join(root, f)));
    h.update('\0');
  }
  return h.digest('hex');
}

/** The source folders a compiled tree is built from. */
function sourceDirs(root) {
  return ['src', 'generated', 'spec'].map((d) => path.join(root, d));
}

/** The sources digest a compiled tree `dir` records (DIGEST), or '' when it records none. */
function readDigest(dir) {
  try {
    return fs.readFileSync(path.join(dir, DIGEST), 'utf8');
  } catch {
    return '';
  }
}

/**
 * Decides the runtime for the installation at `root`: the compiled tree only when it is at least as
 * new as every source and records the digest of exactly these sources (sourcesDigest; red team
 * rt42b: files replaced by older-dated ones, or deleted, leave every time older than the stamp).
 * Returns {kind: 'compiled', dir} or {kind: 'source', reason}; throws when INTERLOCK_RUNTIME=compiled
 * cannot be honoured.
 */
function chooseRuntime(root, env = process.env) {
  const dir = env.INTERLOCK_DIST_DIR ? path.resolve(env.INTERLOCK_DIST_DIR) : path.join(root, 'dist');
  const forced = env.INTERLOCK_RUNTIME;
  if (forced === 'source') return { kind: 'source', reason: 'INTERLOCK_RUNTIME=source' };
  let builtAt = 0;
  try {
    builtAt = Number(fs.readFileSync(path.join(dir, STAMP), 'utf8'));
  } catch {
    builtAt = 0;
  }
  let reason = null;
  if (!builtAt || !fs.existsSync(path.join(dir, 'src', 'cli', 'main.js'))) reason = `no compiled tree in ${dir} (npm run build makes one)`;
  else if (newestMtime(sourceDirs(root)) > builtAt) reason = `${dir} is older than the sources (npm run build refreshes it)`;
  else if (readDigest(dir) !== sourcesDigest(root, sourceDirs(root))) reason = `${dir} was not built from these sources (npm run build refreshes it)`;
  if (reason && forced === 'compiled') throw new Error(`INTERLOCK_RUNTIME=compiled: ${reason}`);
  return reason ? { kind: 'source', reason } : { kind: 'compiled', dir };
}

module.exports = { chooseRuntime, newestMtime, sourceDirs, sourcesDigest, STAMP, DIGEST };
