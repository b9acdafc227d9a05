/**
 * `interlock source update ID` and `interlock source remove ID` (issue 16, Build 3), registered on
 * the `source` command by main.ts. Update takes a JSON/YAML merge patch file (--file) or flags,
 * and re-scans the catalog after a connection change; remove keeps the audit trail and refuses
 * while approvals of the source are pending, unless --force (they are then rejected).
 */
import { readFileSync } from 'node:fs';
import { Option, type Command } from 'commander';
import { ControlError, ValidationError } from '../control/errors';
import { operatorOption, type CommandContext } from './context';
import type { UnreadableRelation, UnwritableRelation } from '../control/scan';
import type { SourceView } from '../admin/backend';
import type { IndexStatus } from '../discovery/types';
import { shortTime, table } from './output';
import type { OperatorBackend } from '../admin/backend';
import type { SourceRoleRecord } from '../control/roles';
import type { PolicyRecord } from '../control/policies';

type Flags = Record<string, string | boolean | undefined>;

function passwordFromEnv(v: string | boolean | undefined, flag: string): string | undefined {
  if (typeof v !== 'string') return undefined;
  const value = process.env[v];
  if (value === undefined) throw new ValidationError(`${flag}: environment variable ${v} is not set`);
  return value;
}

function port(v: string | boolean | undefined): number | string | undefined {
  if (typeof v !== 'string') return undefined;
  return /^[0-9]{1,5}$/.test(v) ? Number(v) : v;
}

/** The merge patch the update flags describe (only the flags given). */
export function patchFromFlags(o: Flags): Record<string, unknown> {
  const str = (v: string | boolean | undefined) => (typeof v === 'string' ? v : undefined);
  const settings: Record<string, unknown> = {
    host: str(o.host),
    port: port(o.port),
    database: str(o.database),
    path: str(o.path),
  };
  const reader = { user: str(o.readerUser), password: passwordFromEnv(o.readerPasswordEnv, '--reader-password-env') };
  if (reader.user !== undefined || reader.password !== undefined) settings.reader = reader;
  const writer = { user: str(o.writerUser), password: passwordFromEnv(o.writerPasswordEnv, '--writer-password-env') };
  if (o.noWriter) settings.writer = null;
  else if (writer.user !== undefined || writer.password !== undefined) settings.writer = writer;
  const tls = { mode: str(o.tlsMode), ca: typeof o.tlsCaFile === 'string' ? readFileSync(o.tlsCaFile, 'utf8') : undefined, servername: str(o.tlsServername) };
  if (Object.values(tls).some((v) => v !== undefined)) settings.tls = tls;
  const patch: Record<string, unknown> = { name: str(o.name), description: str(o.description), settings };
  const clean = JSON.parse(JSON.stringify(patch)) as Record<string, unknown>;
  if (o.noWriter) (clean.settings as Record<string, unknown>).writer = null;
  if (Object.keys(clean.settings as object).length === 0) delete clean.settings;
  return clean;
}

/**
 * A refusal to keep a stored password for a changed endpoint (password_required; direct or through
 * the admin API, whose error keeps the details) with one more line naming the flags that give the
 * password again (task hnu4b item b); any other error as it is.
 */
export function withPasswordFlags(err: unknown): unknown {
  if (!(err instanceof ControlError)) return err;
  const roles = err.details.flatMap((d) => /^settings\.(reader|writer)\.password: /.exec(d)?.[1] ?? []);
  if (roles.length === 0) return err;
  const flags = roles.map((who) => `--${who}-password-env ${who.toUpperCase()}_VAR`).join(' ');
  return new ControlError(err.kind, err.message, [...err.details, `give it again in the same command: ${flags} (each VAR an environment variable holding that password)`]);
}

/**
 * The warning lines of a scan that found relations the reader role may not SELECT (task hnu4a item
 * 2) or tables the writer role may not INSERT, UPDATE or DELETE (task hnu42a finding 3), one line
 * each, or null when there is neither. Printed on stderr by `source add|update|scan` and `apply`.
 */
export function unreadableWarning(sourceId: string, scan: { unreadable?: UnreadableRelation[]; unwritable?: UnwritableRelation[] } | null | undefined): string | null {
  const lines: string[] = [];
  const u = scan?.unreadable ?? [];
  if (u.length > 0) {
    const list = u.map((x) => (x.columns ? `${x.relation} (columns ${x.columns.join(', ')})` : x.relation)).join(', ');
    lines.push(
      `warning: the reader role of source ${sourceId} may not SELECT ${u.length} relation(s): ${list}; ` +
        `agents' reads of them are refused (source_permission_denied) until it may: GRANT SELECT ON ${u[0].relation} TO <reader role>, then run: interlock source scan ${sourceId}`,
    );
  }
  const w = scan?.unwritable ?? [];
  if (w.length > 0) {
    const list = w.map((x) => `${x.relation} (${x.privileges.join(', ')})`).join(', ');
    lines.push(
      `note: the writer role of source ${sourceId} may not modify ${w.length} table(s) as shown: ${list}; ` +
        `agents' writes that need it are refused (source_permission_denied) instead of queued; if agents should write one: GRANT ${w[0].privileges.join(', ')} ON ${w[0].relation} TO <writer role>`,
    );
  }
  return lines.length > 0 ? lines.join('\n') : null;
}

/**
 * The `source list` table (task hnu42b item 5: say what is true). Column `catalog`: a PostgreSQL
 * source's scan (`N relations, time`, or `not scanned`); a documents source has no catalogue to scan
 * (`none (documents)`). Column `index` (with `index`, the discovery index status per source, read
 * on the control database in direct mode): `N assets, time`, or `not indexed`; without it (remote
 * mode) the column is left out.
 */
export function sourceListTable(rows: ReadonlyArray<Pick<SourceView, 'id' | 'type' | 'name' | 'enabled' | 'catalog'>>, index?: readonly IndexStatus[]): string {
  const byId = index ? new Map(index.map((i) => [i.sourceId, i])) : null;
  const head = ['id', 'type', 'name', 'enabled', 'catalog', ...(byId ? ['index'] : [])];
  return table(
    head,
    rows.map((r) => {
      const c = r.catalog;
      const catalog = c ? `${c.relations} relations, ${shortTime(c.scannedAt)}${c.truncated ? ' (truncated)' : ''}` : r.type === 'postgres' ? 'not scanned' : `none (${r.type})`;
      const i = byId?.get(r.id);
      return [r.id, r.type, r.name, r.enabled ? 'yes' : 'no', catalog, ...(byId ? [i ? `${i.assets} assets, ${shortTime(i.indexedAt)}` : 'not indexed'] : [])];
    }),
  );
}

/**
 * The warning line for a PostgreSQL source with row rules but no writer role (task hnu42b item 1),
 * or null: row views are created by the writer role, so without one every read, search, related
 * document and get_document over a ruled table is refused `row_rules_unavailable`. Row rules here:
 * a `rows` statement of a role granted on the source (`grantedRoles`), or an enabled
 * `restrict_rows` policy whose `applies_to.sources` is absent or names the source.
 */
export function rowRulesWithoutWriterWarning(source: { id: string; type: string; settings: Record<string, unknown> }, grantedRoles: readonly SourceRoleRecord[], policies: readonly PolicyRecord[]): string | null {
  if (source.type !== 'postgres') return null;
  const writer = (source.settings.writer as { user?: unknown } | undefined)?.user;
  if (typeof writer === 'string' && writer !== '') return null;
  const roles = grantedRoles.filter((r) => r.statements.some((st) => typeof (st as { rows?: unknown }).rows === 'string')).map((r) => r.name);
  const pols = policies.filter((p) => p.enabled && p.rule.type === 'restrict_rows' && (!p.applies_to?.sources || p.applies_to.sources.includes(source.id))).map((p) => p.name);
  if (roles.length === 0 && pols.length === 0) return null;
  const what = [roles.length ? `role(s) ${[...new Set(roles)].sort().join(', ')}` : '', pols.length ? `policy(ies) ${pols.sort().join(', ')}` : ''].filter(Boolean).join(' and ');
  return (
    `warning: source ${source.id} has row rules (${what}) but no writer role to create its row views: ` +
    `agents' reads, searches and documents of the ruled tables are refused (row_rules_unavailable) until it has one: ` +
    `interlock source update ${source.id} --writer-user <role> --writer-password-env <var> (docs/row-rules.md)`
  );
}

/** rowRulesWithoutWriterWarning for source `id`, read through `backend`; null when it cannot be read (the warning is advice, never a failure). */
export async function rowRulesWarningFor(backend: Pick<OperatorBackend, 'getSource' | 'listGrants' | 'listRoles' | 'listPolicies'>, id: string): Promise<string | null> {
  try {
    const [source, grants, roles, policies] = await Promise.all([backend.getSource(id), backend.listGrants({ source: id }), backend.listRoles(), backend.listPolicies()]);
    const granted = new Set(grants.map((g) => g.roleName));
    return rowRulesWithoutWriterWarning(source, roles.filter((r) => granted.has(r.name)), policies);
  } catch {
    return null;
  }
}

/** Adds `update` and `remove` to the `source` command. */
export function registerSourceLifecycle(src: Command, ctx: CommandContext): void {
  src
    .command('update')
    .description('change a source from flags or a merge-patch file (JSON/YAML); re-scans the catalog after a connection change')
    .argument('<id>', 'source id')
    .option('-f, --file <file>', 'JSON/YAML merge patch of the source definition (null removes a member)')
    .option('--name <name>', 'display name')
    .option('--description <text>', 'description')
    .option('--host <host>', 'PostgreSQL host')
    .option('--port <port>', 'PostgreSQL port')
    .option('--database <name>', 'PostgreSQL database')
    .option('--reader-user <user>', 'reader role')
    .option('--reader-password-env <var>', 'environment variable holding the reader password')
    .option('--writer-user <user>', 'writer role')
    .option('--writer-password-env <var>', 'environment variable holding the writer password')
    .option('--no-writer', 'remove the writer credentials')
    .addOption(new Option('--tls-mode <mode>', 'upstream TLS').choices(['off', 'require', 'verify-ca', 'verify-full']))
    .option('--tls-ca-file <file>', 'PEM file of trusted CAs')
    .option('--tls-servername <name>', 'expected certificate host name')
    .option('--path <dir>', 'documents folder (type documents)')
    .option('--no-scan', 'do not scan the catalog after a connection change')
    .addOption(operatorOption())
    .action(async (id: string, o: Flags, cmd: Command) => {
      const s = ctx.session(cmd);
      const flags: Flags = { ...o, noWriter: o.writer === false };
      const flagGiven = ['name', 'description', 'host', 'port', 'database', 'readerUser', 'readerPasswordEnv', 'writerUser', 'writerPasswordEnv', 'tlsMode', 'tlsCaFile', 'tlsServername', 'path'].some((k) => o[k] !== undefined) || flags.noWriter;
      if (o.file && flagGiven) throw new ValidationError('give --file or flags, not both');
      if (!o.file && !flagGiven) throw new ValidationError('nothing to change: give --file FILE or flags such as --tls-mode, --host, --port, --database, --reader-user');
      const patch = o.file ? ctx.readDataFile(String(o.file)) : patchFromFlags(flags);
      const r = await (await s.backend())
        .updateSource(id, patch, { operator: String(o.operator), scan: o.scan !== false })
        .catch((err: unknown) => {
          throw o.file ? err : withPasswordFlags(err);
        });
      if (r.scanError) s.io.err(`warning: source ${id} was updated but its catalog scan failed: ${r.scanError}\n(fix the settings or the server, then run: interlock source scan ${id})`);
      const unreadable = unreadableWarning(id, r.scan);
      if (unreadable) s.io.err(unreadable);
      const human = r.changed.length
        ? `updated source ${id}: ${r.changed.join(', ')}${r.scan ? `; catalog: ${r.scan.relations} relation(s)${r.scan.truncated ? ', truncated' : ''}` : ''}`
        : `source ${id} unchanged`;
      s.print(human, r);
    });
  src
    .command('remove')
    .description('remove a source (its audit trail and approvals stay); refused while approvals are pending, or policies or claim mapping rules name it, unless --force')
    .argument('<id>', 'source id')
    .option('--force', 'remove even with pending approvals (they are rejected), policies naming it (a policy naming only it is removed, the others stop naming it) or claim mapping rules naming it (taken out of their mappings)')
    .addOption(operatorOption())
    .action(async (id: string, o: { force?: boolean; operator: string }, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).removeSource(id, { operator: o.operator, force: o.force });
      const policies = `${r.policiesRemoved.length ? `; removed policy(ies) naming only it: ${r.policiesRemoved.join(', ')}` : ''}${r.policiesDetached.length ? `; policy(ies) no longer naming it: ${r.policiesDetached.join(', ')}` : ''}`;
      // (claimRulesUntied: absent from a server older than task hlow.)
      const rules = r.claimRulesUntied?.length ? `; claim mapping rule(s) naming it taken out for issuer(s): ${r.claimRulesUntied.join(', ')}` : '';
      s.print(`removed source ${id}${r.grantsRemoved ? ` and ${r.grantsRemoved} grant(s)` : ''}${r.rejectedApprovals.length ? `; rejected pending approval(s): ${r.rejectedApprovals.join(', ')}` : ''}${policies}${rules}`, r);
    });
}
