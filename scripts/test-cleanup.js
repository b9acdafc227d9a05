#!/usr/bin/env node
/**
 * Lists (default) or drops (--drop) what interrupted test runs left behind on the test PostgreSQL
 * server (INTERLOCK_TEST_PG_URL, default postgres://root@127.0.0.1:5432/postgres), without touching
 * anyone else's run on a shared server:
 *
 * - databases named il_… created more than --older-than-hours ago (default 6; the age is that of
 *   the database's PG_VERSION file, so this needs a superuser, as the tests do) with no session
 *   connected; dropped WITHOUT FORCE, so one that gains a session meanwhile is left alone;
 * - login roles named il_… that no session uses and that nothing depends on in any database
 *   (pg_shdepend: no object owned, no privilege held, no membership), i.e. roles whose databases
 *   are gone; a plain DROP ROLE refuses any other. A role a running test created a moment ago and
 *   has not granted anything yet is the one case it could take: keep --drop for when no run is
 *   starting.
 *
 *   node scripts/test-cleanup.js [--older-than-hours N] [--prefix il_…] [--drop]
 *
 * --prefix narrows it to names starting with that (it must start with il_), e.g. il_ctl_cli_ for
 * one test file's databases.
 *
 * Prints one line per database and role ("would drop" / "dropped" / "skipped: reason"), then a
 * count. Exit code 0, or 1 when the server cannot be reached (its URL is printed without password).
 */
'use strict';
const { Client } = require('pg');

const args = process.argv.slice(2);
const opts = { drop: false, hours: 6, prefix: 'il_' };
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--drop') opts.drop = true;
  else if (args[i] === '--older-than-hours') opts.hours = Number(args[++i]);
  else if (args[i] === '--prefix') opts.prefix = String(args[++i]);
  else opts.hours = NaN;
}
if (!Number.isFinite(opts.hours) || opts.hours < 0 || !/^il_[a-z0-9_]*$/.test(opts.prefix)) {
  console.error('usage: node scripts/test-cleanup.js [--older-than-hours N] [--prefix il_…] [--drop]');
  process.exit(2);
}
const { drop, hours } = opts;
/** LIKE pattern of the names considered: the prefix, its underscores literal. */
const pattern = opts.prefix.replace(/_/g, '\\_') + '%';
const url = process.env.INTERLOCK_TEST_PG_URL || 'postgres://root@127.0.0.1:5432/postgres';

function redacted(u) {
  try {
    const x = new URL(u);
    if (x.password) x.password = '***';
    return x.toString();
  } catch {
    return '<unparseable URL>';
  }
}

const quote = (name) => `"${name.replace(/"/g, '""')}"`;

/** Prints "would drop" (without --drop) or drops `name` (a plain DROP, which PostgreSQL refuses when it is in use); 1 when listed or dropped, else 0. */
async function dropOne(c, kind, name, note) {
  const label = `${kind.toLowerCase()} ${name}`;
  if (!drop) {
    console.log(`${label}: would drop${note}`);
    return 1;
  }
  try {
    await c.query(`DROP ${kind} ${quote(name)}`);
    console.log(`${label}: dropped`);
    return 1;
  } catch (err) {
    console.log(`${label}: skipped: ${err.message}`);
    return 0;
  }
}

async function main() {
  const c = new Client({ connectionString: url });
  try {
    await c.connect();
  } catch (err) {
    console.error(`cannot reach the test PostgreSQL at ${redacted(url)} (${err.code || 'error'}): start it as README "Test it" says, or set INTERLOCK_TEST_PG_URL`);
    return 1;
  }
  let count = 0;
  try {
    const dbs = await c.query(
      `SELECT d.datname,
              (pg_stat_file('base/' || d.oid || '/PG_VERSION', true)).modification AS created,
              EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname) AS busy
         FROM pg_database d
        WHERE d.datname LIKE $1 AND NOT d.datistemplate
        ORDER BY d.datname`,
      [pattern],
    );
    for (const d of dbs.rows) {
      const ageH = d.created ? (Date.now() - new Date(d.created).getTime()) / 3_600_000 : null;
      if (ageH === null) console.log(`database ${d.datname}: skipped: age unknown`);
      else if (ageH < hours) console.log(`database ${d.datname}: skipped: ${ageH.toFixed(1)} h old (< ${hours} h)`);
      else if (d.busy) console.log(`database ${d.datname}: skipped: in use`);
      else count += await dropOne(c, 'DATABASE', d.datname, ` (${ageH.toFixed(1)} h old)`);
    }
    const roles = await c.query(
      `SELECT r.rolname,
              EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.usename = r.rolname) AS busy,
              EXISTS (SELECT 1 FROM pg_shdepend s WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = r.oid)
                OR EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.roleid = r.oid OR m.member = r.oid) AS used
         FROM pg_roles r
        WHERE r.rolname LIKE $1
        ORDER BY r.rolname`,
      [pattern],
    );
    for (const r of roles.rows) {
      if (r.busy) console.log(`role ${r.rolname}: skipped: logged in`);
      else if (r.used) console.log(`role ${r.rolname}: skipped: owns or holds something (its run's database still exists)`);
      else count += await dropOne(c, 'ROLE', r.rolname, '');
    }
  } finally {
    await c.end();
  }
  console.log(drop ? `${count} dropped` : `${count} would be dropped (run again with --drop)`);
  return 0;
}

main().then((code) => process.exit(code));
