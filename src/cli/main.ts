/**
 * `interlock`, the operator CLI (issue 3, Build 2). It talks to the control database directly,
 * or, in remote mode (`--server URL --token T`, issue 6), to the gateway's admin API (/admin/v1)
 * with an operator token; never through agent keys, so nothing an agent holds can approve a write
 * or change a grant. Both modes run the same operations (src/admin/backend.ts). Operator tokens
 * themselves are made on the database directly (`interlock operator-token create NAME`), as are
 * serve, demo and db.
 *
 * Global options: --config FILE (or INTERLOCK_CONFIG), --database-url URL (else
 * INTERLOCK_DATABASE_URL / database.url, else the embedded PostgreSQL in
 * database.embedded_data_dir), --json (machine output), --server URL with --token T (or
 * --token-env VAR) for remote mode.
 *
 * Exit codes: 0 ok; 2 bad usage or invalid input (schema error paths are listed); 3 not found;
 * 1 anything else (unreachable database, failed execution). User errors never print stack traces.
 */
import { resolve as resolvePath } from 'node:path';
import { formatIndexProgress, indexSource, listIndexStatus } from '../discovery/indexer';
import { readFileSync, existsSync } from 'node:fs';
import { extname } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import pino, { type Logger } from 'pino';
import YAML from 'yaml';
import type { GatewayConfig } from '../../generated/config-v1';
import { loadConfig, type ResolvedGatewayConfig } from '../control/config';
import { ensureDatabase, grantRuntimeRole, migrationStatus, openControlDb, redactUrl, runMigrations, type ControlDb } from '../control/db';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../control/embedded';
import { issueDemoKey, provisionDemoSetup } from '../demo/provision';
import pg from 'pg';
import { ControlError, ValidationError } from '../control/errors';
import type { SourceDefinition } from '../control/sources';
import type { AuditKind, AuditRecord } from '../control/audit';
import { registerAuditChainCommands } from './audit';
import type { GovernedGatewayOptions, GovernedGateway } from '../gateway';
import { json, processIo, shortTime, table, type CliIo } from './output';
import { createOperatorToken, listOperatorTokens, revokeOperatorToken } from '../admin/tokens';
import { directBackend, type OperatorBackend } from '../admin/backend';
import { remoteBackend } from '../admin/client';
import { packageVersion, type CommandContext } from './context';
import { registerSourceLifecycle } from './source';
import { registerApply } from './apply';
import { registerExport } from './export';
import { registerApprovalCommands } from './approval';
import { hasCluster, missingDatabaseMessage, resolveEmbeddedDataDir } from './data-dir';
import { homedir } from 'node:os';
import { parsePositiveInt } from './args';

/** Commands that only read: with no control database they say where they looked instead of creating one. */
const READ_COMMANDS = new Set(['list', 'show', 'status', 'search', 'tail', 'grants', 'whoami']);

/** Name of the control database created on the embedded server. */
export const EMBEDDED_CONTROL_DB = 'interlock';

/** Global options. */
interface GlobalOpts {
  config?: string;
  databaseUrl?: string;
  json?: boolean;
  /** Remote mode: the gateway's base URL (the admin API is under /admin/v1). */
  server?: string;
  /** Remote mode: the operator token, or the environment variable holding it. */
  token?: string;
  tokenEnv?: string;
}

/** Lazily opened configuration, control database and embedded server of one CLI run. */
class Session {
  private cfg: ResolvedGatewayConfig | null = null;
  private dbp: Promise<ControlDb> | null = null;
  embedded: EmbeddedPostgres | null = null;
  readonly logger: Logger;

  constructor(
    readonly opts: GlobalOpts,
    readonly io: CliIo,
    private readonly overrides: GatewayConfig = {},
  ) {
    this.logger = pino({ level: process.env.INTERLOCK_LOG_LEVEL || 'warn', base: undefined }, pino.destination(2));
  }

  config(overrides: GatewayConfig = {}): ResolvedGatewayConfig {
    if (!this.cfg) {
      const file = this.opts.config ?? (process.env.INTERLOCK_CONFIG || undefined);
      const merged: GatewayConfig = { ...this.overrides, ...overrides };
      if (this.opts.databaseUrl) merged.database = { ...(merged.database ?? {}), url: this.opts.databaseUrl };
      this.cfg = loadConfig({ file, env: process.env, overrides: merged });
    }
    return this.cfg;
  }

  /** True for a command that only reads (list, show, …): it never creates an embedded database. */
  readOnly = false;

  /**
   * The control database URL and, for the embedded server, the admin URL. Starts the embedded
   * server when no URL is configured, in the folder src/cli/data-dir.ts chooses; a read-only
   * command refuses (not_found) instead of creating an empty one.
   */
  async databaseUrls(): Promise<{ controlUrl: string; adminUrl: string }> {
    const cfg = this.config();
    if (cfg.database.url) return { controlUrl: cfg.database.url, adminUrl: cfg.database.url };
    if (!this.embedded) {
      const where = resolveEmbeddedDataDir(cfg.database.embedded_data_dir, { cwd: process.cwd(), home: homedir(), env: process.env, exists: existsSync });
      if (this.readOnly && !hasCluster(where.dir, existsSync)) throw new ControlError('not_found', missingDatabaseMessage(where));
      this.embedded = await startEmbeddedPostgres({ dataDir: where.dir, port: cfg.database.embedded_port, logger: this.logger });
      await ensureDatabase(this.embedded.adminUrl, EMBEDDED_CONTROL_DB);
    }
    return { controlUrl: this.embedded.urlFor(EMBEDDED_CONTROL_DB), adminUrl: this.embedded.adminUrl };
  }

  /** True in remote mode (--server): commands go through the admin API. */
  get remote(): boolean {
    return !!this.opts.server;
  }

  /**
   * The operator operations: over the admin API with --server URL --token T (or --token-env VAR),
   * else on the control database directly.
   */
  async backend(): Promise<OperatorBackend> {
    if (this.opts.server) {
      let token = this.opts.token;
      if (!token && this.opts.tokenEnv) {
        token = process.env[this.opts.tokenEnv];
        if (!token) throw new ValidationError(`--token-env: environment variable ${this.opts.tokenEnv} is not set`);
      }
      if (!token) throw new ValidationError('--server needs --token or --token-env: an operator token from `interlock operator-token create NAME`');
      return remoteBackend(this.opts.server, token);
    }
    return directBackend(await this.db(), { logger: this.logger });
  }

  /** In remote mode the approver is the token's operator: an explicit --operator is refused. */
  assertLocalOperator(cmd: Command): void {
    if (this.remote && cmd.getOptionValueSource('operator') === 'cli') {
      throw new ValidationError('--operator is not used with --server: the operator token names the operator');
    }
  }

  /** Refuses a command that needs the database host (serve, demo, db …) in remote mode. */
  assertDirect(what: string): void {
    if (this.remote) throw new ValidationError(`${what} works on the control database directly: run it without --server`);
  }

  db(): Promise<ControlDb> {
    this.dbp ??= (async () => {
      const cfg = this.config();
      const { controlUrl } = await this.databaseUrls();
      return openControlDb(controlUrl, { keyPepper: cfg.key_pepper, poolSize: Math.min(cfg.database.pool_size, 10), logger: this.logger });
    })();
    return this.dbp;
  }

  async close(): Promise<void> {
    if (this.dbp) await this.dbp.then((d) => d.close(), () => undefined);
    if (this.embedded) await this.embedded.stop();
  }

  print(human: string, machine: unknown): void {
    this.io.out(this.opts.json ? json(machine) : human);
  }
}

/** Reads a JSON or YAML file (by extension; other extensions are tried as YAML, which accepts JSON). */
function readDataFile(file: string): unknown {
  if (!existsSync(file)) throw new ValidationError(`file not found: ${file}`);
  const text = readFileSync(file, 'utf8');
  try {
    return extname(file).toLowerCase() === '.json' ? JSON.parse(text) : YAML.parse(text, { uniqueKeys: true });
  } catch (err) {
    throw new ValidationError(`${file} is not valid ${extname(file).toLowerCase() === '.json' ? 'JSON' : 'YAML'}`, [String((err as Error).message).split('\n')[0]]);
  }
}

/** "30d", "12h", "45m", "90s" → milliseconds. */
function parseDuration(text: string, what: string): number {
  const m = /^([0-9]{1,9})([smhd])$/.exec(text.trim());
  if (!m) throw new ValidationError(`${what}: expected a duration such as 90s, 45m, 12h or 30d, got ${JSON.stringify(text)}`);
  return Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
}

/** An ISO-8601 time or a duration before now ("2h" = two hours ago). */
function parseTime(text: string, what: string): Date {
  if (/^[0-9]+[smhd]$/.test(text.trim())) return new Date(Date.now() - parseDuration(text, what));
  const d = new Date(text);
  if (Number.isNaN(d.getTime())) throw new ValidationError(`${what}: expected an ISO-8601 time (2026-11-29T12:00:00Z) or a duration (2h), got ${JSON.stringify(text)}`);
  return d;
}

function loadGateway(): { startGovernedGateway(opts: GovernedGatewayOptions): Promise<GovernedGateway> } {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('../gateway') as { startGovernedGateway(opts: GovernedGatewayOptions): Promise<GovernedGateway> };
}

/** Audit events as a table, identities shown by name. */
async function auditRows(backend: OperatorBackend, events: AuditRecord[]): Promise<string> {
  const names = new Map((await backend.listIdentities()).map((i) => [i.id, i.name]));
  return table(
    ['id', 'time', 'kind', 'decision', 'reason', 'identity', 'tool', 'source', 'action', 'rows', 'ms', 'approval', 'operator'],
    events.map((e) => [
      e.id,
      shortTime(e.time),
      e.kind,
      e.decision,
      e.reasonCode,
      e.identityId ? (names.get(e.identityId) ?? e.identityId) : null,
      e.canonicalTool ?? e.tool,
      e.sourceId,
      e.action,
      e.rowCount,
      e.durationMs === null ? null : Math.round(e.durationMs),
      e.approvalId,
      e.operator,
    ]),
  );
}

/** The exact `claude mcp add` line for a gateway URL and key (contract: mcp-clients.txt). */
export function claudeMcpAddLine(mcpUrl: string, apiKey: string): string {
  return `claude mcp add --transport http interlock "${mcpUrl}" --header "Authorization: Bearer ${apiKey}"`;
}

/** A curl call of interlock_query against the demo source. */
export function curlExample(mcpUrl: string, apiKey: string, sourceId: string): string {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: sourceId, sql: 'SELECT name FROM artist ORDER BY name LIMIT 5' } } });
  return `curl -s "${mcpUrl}" -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" -H "Authorization: Bearer ${apiKey}" -d '${body}'`;
}

/** Waits for SIGINT/SIGTERM, then runs `stop` once; a second signal exits at once. */
function untilSignal(io: CliIo, stop: () => Promise<void>): Promise<void> {
  return new Promise((resolve) => {
    let stopping = false;
    const onSignal = (sig: NodeJS.Signals) => {
      if (stopping) {
        io.err(`${sig} again: exiting now`);
        process.exit(1);
      }
      stopping = true;
      io.err(`${sig}: shutting down (in-flight calls may finish; press Ctrl-C again to force)`);
      stop()
        .catch((err: unknown) => io.err(`error during shutdown: ${(err as Error).message}`))
        .finally(() => {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
          resolve();
        });
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

/** Builds the commander program. `session()` gives the run's Session (created on first use). */
function buildProgram(io: CliIo, state: { session: Session | null }): Command {
  const program = new Command();
  program
    .name('interlock')
    .description('InterLock operator CLI: identities, keys, sources, roles, grants, policies, approvals and audit in the control database.')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.replace(/\n$/, '')), writeErr: (s) => io.err(s.replace(/\n$/, '')) })
    .showHelpAfterError('(run with --help for usage)')
    .option('--config <file>', 'configuration file (JSON or YAML; default INTERLOCK_CONFIG)')
    .option('--database-url <url>', 'control database URL (default INTERLOCK_DATABASE_URL, else the embedded PostgreSQL)')
    .option('--json', 'machine-readable JSON output')
    .option('--server <url>', 'remote mode: send commands to the admin API (/admin/v1) of the gateway at URL')
    .option('--token <token>', 'remote mode: operator token (ilo_…)')
    .option('--token-env <var>', 'remote mode: environment variable holding the operator token')
    .version(packageVersion(), '-V, --version', 'print the InterLock version');

  const session = (cmd: Command): Session => {
    if (!state.session) {
      const o = cmd.optsWithGlobals() as GlobalOpts;
      state.session = new Session(o, io);
      state.session.readOnly = READ_COMMANDS.has(cmd.name()) && !(cmd.parent?.name() === 'db' && cmd.name() !== 'status');
      const path = cmd.parent && cmd.parent.name() !== 'interlock' ? `${cmd.parent.name()} ${cmd.name()}` : cmd.name();
      if (/^(serve|demo|db )/.test(path + ' ')) state.session.assertDirect(`interlock ${path}`);
    }
    return state.session;
  };

  // ---- serve / demo -------------------------------------------------------------------------
  const listenOpts = (c: Command) =>
    c
      .option('--host <host>', 'interface to listen on (default listen.host, 127.0.0.1)')
      .addOption(new Option('--port <port>', 'TCP port (default listen.port, 8787)').argParser((v) => {
        if (!/^[0-9]{1,5}$/.test(v) || Number(v) > 65535) throw new ValidationError(`--port must be 0-65535, got ${JSON.stringify(v)}`);
        return Number(v);
      }));

  listenOpts(program.command('serve').description('run the governed MCP gateway'))
    .option('--fixtures', 'add the test-only conformance fixture tools (never in production)')
    .action(async (o: { host?: string; port?: number; fixtures?: boolean }, cmd: Command) => {
      const s = session(cmd);
      const cfg = s.config({ listen: { ...(o.host ? { host: o.host } : {}), ...(o.port !== undefined ? { port: o.port } : {}) } });
      const db = await s.db();
      const { startGovernedGateway } = loadGateway();
      const gw = await startGovernedGateway({ db, config: cfg, fixtures: o.fixtures || process.env.INTERLOCK_FIXTURES === '1' });
      io.out(`InterLock listening on ${gw.url} (control database ${s.embedded ? `embedded in ${s.embedded.dataDir}` : redactUrl(db.url)})`);
      await untilSignal(io, async () => {
        await gw.close();
        await s.close();
      });
    });

  listenOpts(program.command('demo').description('load Chinook, provision demo-agent with a new API key, and run the gateway (npm start)')).action(
    async (o: { host?: string; port?: number }, cmd: Command) => {
      const s = session(cmd);
      const cfg = s.config({ listen: { ...(o.host ? { host: o.host } : {}), ...(o.port !== undefined ? { port: o.port } : {}) } });
      const { adminUrl } = await s.databaseUrls();
      const db = await s.db();
      const setup = await provisionDemoSetup({ adminUrl, controlDb: db, logger: s.logger });
      const { startGovernedGateway } = loadGateway();
      const gw = await startGovernedGateway({ db, config: cfg });
      // Only once the gateway listens: a failed start (a busy port) leaves no new key behind.
      const key = await issueDemoKey(db, setup.identityId);
      const demo = { ...setup, apiKey: key.apiKey, keyId: key.keyId };
      const consoleUrl = new URL('/console', gw.url).toString();
      const lines = [
        '',
        'InterLock demo is running.',
        '',
        `  MCP endpoint:   ${gw.url}`,
        `  Sources:        ${demo.sourceId} (Chinook, database "${demo.databaseName}"); handbook (demo documents for interlock_discover)`,
        `  Identity:       demo-agent (role demo-analyst; customer e-mail, phone and fax masked; playlist writes need approval)`,
        `  Control data:   ${s.embedded ? s.embedded.dataDir : redactUrl(db.url)}`,
        '',
        `  API key (shown once, not stored; a new one is made on every start and ${key.revoked.length ? `the ${key.revoked.length} earlier demo key(s) were revoked` : 'there was no earlier demo key'}, so only this key works):`,
        '',
        `    ${demo.apiKey}`,
        '',
        'Add it to Claude Code:',
        '',
        claudeMcpAddLine(gw.url, demo.apiKey),
        '',
        'Or try it with curl:',
        '',
        curlExample(gw.url, demo.apiKey, demo.sourceId),
        '',
        `Approve queued writes in the console at ${consoleUrl} (sign in with a token from: npm exec -- interlock operator-token create YOUR_NAME),`,
        'or from another terminal, in any folder of this clone: npm exec -- interlock approval list, then npm exec -- interlock approval approve <id>',
        'Press Ctrl-C to stop.',
        '',
      ];
      if (s.opts.json) io.out(json({ url: gw.url, apiKey: demo.apiKey, keyId: demo.keyId, revokedKeys: key.revoked, console: consoleUrl, sourceId: demo.sourceId, claude: claudeMcpAddLine(gw.url, demo.apiKey) }));
      else io.out(lines.join('\n'));
      await untilSignal(io, async () => {
        await gw.close();
        await s.close();
      });
    },
  );

  // ---- db ------------------------------------------------------------------------------------
  const dbCmd = program.command('db').description('control database maintenance');
  dbCmd
    .command('migrate')
    .description('apply pending migrations')
    .action(async (_o: unknown, cmd: Command) => {
      const s = session(cmd);
      s.config();
      const { controlUrl } = await s.databaseUrls();
      const applied = await runMigrations(controlUrl, s.logger);
      s.print(applied.length ? `applied ${applied.length} migration(s): ${applied.join(', ')}` : 'the control database is up to date', { applied });
    });
  dbCmd
    .command('status')
    .description('applied and pending migrations')
    .action(async (_o: unknown, cmd: Command) => {
      const s = session(cmd);
      s.config();
      const { controlUrl } = await s.databaseUrls();
      const pool = new pg.Pool({ connectionString: controlUrl, max: 1 });
      try {
        const st = await migrationStatus({ pool, url: controlUrl, close: () => pool.end() });
        s.print(table(['migration', 'state'], [...st.applied.map((m) => [m, 'applied']), ...st.pending.map((m) => [m, 'pending'])]), st);
      } finally {
        await pool.end();
      }
    });
  dbCmd
    .command('grant-runtime-role')
    .description("grant a database role what the gateway needs: read the control tables, append audit events only through interlock_audit_append (never INSERT/UPDATE/DELETE on audit_events)")
    .argument('<role>', 'existing PostgreSQL role the gateway connects as')
    .action(async (role: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      await grantRuntimeRole(await s.db(), role);
      s.print(`granted the gateway runtime privileges to database role ${role}`, { role, granted: true });
    });

  // ---- identity ------------------------------------------------------------------------------
  const idn = program.command('identity').description('agent identities');
  idn
    .command('create')
    .argument('<name>', 'lower-case name, e.g. etl-agent')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).createIdentity(name);
      s.print(`created identity ${r.name} (${r.id}); next: interlock key create ${r.name}`, r);
    });
  idn.command('list').action(async (_o: unknown, cmd: Command) => {
    const s = session(cmd);
    const rows = await (await s.backend()).listIdentities();
    s.print(table(['name', 'id', 'status', 'created'], rows.map((r) => [r.name, r.id, r.disabled ? 'disabled' : 'enabled', shortTime(r.createdAt)])), rows);
  });
  idn
    .command('disable')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).setIdentityEnabled(name, false);
      s.print(`disabled identity ${r.name}: its keys stop working (within 2 s on running gateways)`, r);
    });
  idn
    .command('enable')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).setIdentityEnabled(name, true);
      s.print(`enabled identity ${r.name}`, r);
    });

  // ---- key -----------------------------------------------------------------------------------
  const key = program.command('key').description('API keys (the secret is shown once, at creation)');
  key
    .command('create')
    .argument('<identity>', 'identity name')
    .option('--expires-in <duration>', 'expire after a duration: 90s, 45m, 12h, 30d')
    .option('--expires-at <time>', 'expire at an ISO-8601 time')
    .action(async (name: string, o: { expiresIn?: string; expiresAt?: string }, cmd: Command) => {
      const s = session(cmd);
      if (o.expiresIn && o.expiresAt) throw new ValidationError('use --expires-in or --expires-at, not both');
      const expiresAt = o.expiresIn ? new Date(Date.now() + parseDuration(o.expiresIn, '--expires-in')) : o.expiresAt ? parseTime(o.expiresAt, '--expires-at') : undefined;
      const k = await (await s.backend()).createKey(name, { expiresAt: expiresAt?.toISOString() });
      s.print(
        [`API key ${k.keyId} for ${k.identity}${k.expiresAt ? ` (expires ${shortTime(k.expiresAt)})` : ''}:`, '', `  ${k.secret}`, '', k.warning].join('\n'),
        { keyId: k.keyId, identity: k.identity, secret: k.secret, prefix: k.prefix, expiresAt: k.expiresAt, warning: k.warning },
      );
    });
  key
    .command('list')
    .option('--identity <name>', 'only this identity')
    .action(async (o: { identity?: string }, cmd: Command) => {
      const s = session(cmd);
      const rows = await (await s.backend()).listKeys(o.identity);
      s.print(
        table(['id', 'identity', 'prefix', 'status', 'created', 'expires', 'last used'], rows.map((k) => [k.id, k.identityName, k.prefix + '…', k.status, shortTime(k.createdAt), shortTime(k.expiresAt), shortTime(k.lastUsedAt)])),
        rows,
      );
    });
  key
    .command('revoke')
    .argument('<key-id>', 'key_… id (see key list)')
    .action(async (keyId: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const k = await (await s.backend()).revokeKey(keyId);
      s.print(`revoked ${k.id} (${k.identityName}); running gateways refuse it within 2 s`, k);
    });

  // ---- source --------------------------------------------------------------------------------
  const src = program.command('source').description('data sources');
  src
    .command('add')
    .description('register a source from a JSON/YAML file (spec/source-v1.schema.json) or from flags, then scan its catalog')
    .argument('[file]', 'source definition file')
    .option('--id <id>', 'source id (flags form)')
    .option('--name <name>', 'display name (default: the id)')
    .option('--description <text>', 'description')
    .addOption(new Option('--type <type>', 'source type').choices(['postgres', 'documents']).default('postgres'))
    .option('--host <host>', 'PostgreSQL host')
    .option('--port <port>', 'PostgreSQL port', '5432')
    .option('--database <name>', 'PostgreSQL database')
    .option('--reader-user <user>', 'reader role (SELECT only)')
    .option('--reader-password-env <var>', 'environment variable holding the reader password')
    .option('--writer-user <user>', 'writer role (used only for approved writes)')
    .option('--writer-password-env <var>', 'environment variable holding the writer password')
    .addOption(new Option('--tls-mode <mode>', 'upstream TLS').choices(['off', 'require', 'verify-ca', 'verify-full']).default('verify-full'))
    .option('--tls-ca-file <file>', 'PEM file of trusted CAs')
    .option('--tls-servername <name>', 'expected certificate host name')
    .option('--path <dir>', 'documents folder (type documents)')
    .option('--disabled', 'register it disabled')
    .option('--no-scan', 'do not scan the catalog now')
    .action(async (file: string | undefined, o: Record<string, string | boolean | undefined>, cmd: Command) => {
      const s = session(cmd);
      let def: unknown;
      if (file) {
        if (o.id) throw new ValidationError('give a definition file or --id with flags, not both');
        def = readDataFile(file);
      } else {
        if (!o.id) throw new ValidationError('give a definition file, or --id and the connection flags');
        const pw = (v: string | boolean | undefined, flag: string) => {
          if (typeof v !== 'string') return undefined;
          const value = process.env[v];
          if (value === undefined) throw new ValidationError(`${flag}: environment variable ${v} is not set`);
          return value;
        };
        if (o.type === 'documents') {
          def = { id: o.id, type: 'documents', name: o.name ?? o.id, description: o.description, settings: { path: typeof o.path === 'string' ? resolvePath(o.path) : o.path } };
        } else {
          const readerPassword = pw(o.readerPasswordEnv, '--reader-password-env') ?? '';
          const writerPassword = pw(o.writerPasswordEnv, '--writer-password-env');
          def = {
            id: o.id,
            type: 'postgres',
            name: o.name ?? o.id,
            ...(o.description ? { description: o.description } : {}),
            settings: {
              host: o.host,
              port: /^[0-9]+$/.test(String(o.port)) ? Number(o.port) : o.port,
              database: o.database,
              reader: o.readerUser ? { user: o.readerUser, password: readerPassword } : undefined,
              ...(o.writerUser ? { writer: { user: o.writerUser, password: writerPassword ?? '' } } : {}),
              tls: {
                mode: o.tlsMode,
                ...(o.tlsCaFile ? { ca: readFileSync(String(o.tlsCaFile), 'utf8') } : {}),
                ...(o.tlsServername ? { servername: o.tlsServername } : {}),
              },
            },
          };
        }
        def = JSON.parse(JSON.stringify(def)) as unknown; // drop undefined members so the schema names what is missing
      }
      if (o.disabled) (def as SourceDefinition).enabled = false;
      const { source: rec, scan, scanError } = await (await s.backend()).addSource(def, { scan: o.scan !== false });
      if (scanError) io.err(`warning: source ${rec.id} was added but its catalog scan failed: ${scanError}\n(fix the settings or the server, then run: interlock source scan ${rec.id})`);
      s.print(`added source ${rec.id} (${rec.type})${scan ? `; catalog: ${scan.relations} relation(s)${scan.truncated ? ', truncated' : ''}` : ''}`, { source: rec, scan, scanError });
    });
  src.command('list').action(async (_o: unknown, cmd: Command) => {
    const s = session(cmd);
    const rows = await (await s.backend()).listSources();
    s.print(
      table(
        ['id', 'type', 'name', 'enabled', 'catalog'],
        rows.map((r) => {
          const c = r.catalog;
          return [r.id, r.type, r.name, r.enabled ? 'yes' : 'no', c ? `${c.relations} relations, ${shortTime(c.scannedAt)}${c.truncated ? ' (truncated)' : ''}` : 'not scanned'];
        }),
      ),
      rows,
    );
  });
  src
    .command('show')
    .argument('<id>')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const shown = await (await s.backend()).getSource(id);
      s.print(YAML.stringify(shown).trimEnd(), shown);
    });
  for (const [name, enabled] of [
    ['enable', true],
    ['disable', false],
  ] as const) {
    src
      .command(name)
      .argument('<id>')
      .action(async (id: string, _o: unknown, cmd: Command) => {
        const s = session(cmd);
        const r = await (await s.backend()).setSourceEnabled(id, enabled);
        s.print(`${enabled ? 'enabled' : 'disabled'} source ${r.id}${enabled ? '' : ': calls to it are refused as unavailable'}`, r);
      });
  }
  src
    .command('scan')
    .argument('<id>')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).scanSource(id);
      s.print(`scanned ${r.sourceId}: ${r.relations} relation(s)${r.truncated ? ' (truncated)' : ''} at ${shortTime(r.scannedAt)}`, r);
    });

  const ctx: CommandContext = { session, readDataFile };
  registerSourceLifecycle(src, ctx);
  registerApply(program, ctx);
  registerExport(program, ctx);

  // ---- index (discovery) ---------------------------------------------------------------------
  const idx = program.command('index').description('discovery index: index a source (only changed items are re-indexed) or show index status');
  idx
    .argument('[source]', 'source id to index')
    .action(async (sourceId: string | undefined, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      s.assertDirect('index');
      if (!sourceId) throw new ValidationError('usage: interlock index SOURCE, or interlock index status');
      const db = await s.db();
      const r = await indexSource(db, sourceId, { onProgress: (p) => s.io.err(formatIndexProgress(p)) });
      s.print(`indexed ${sourceId}: ${r.assets} asset(s) — ${r.added} added, ${r.updated} updated, ${r.unchanged} unchanged, ${r.removed} removed, ${r.skipped} skipped (${r.durationMs} ms)`, r);
    });
  idx
    .command('status')
    .description('when each source was indexed, with counts')
    .action(async (_o: unknown, cmd: Command) => {
      const s = session(cmd);
      s.assertDirect('index status');
      const rows = await listIndexStatus(await s.db());
      s.print(rows.length ? rows.map((r) => JSON.stringify(r)).join('\n') : 'no source has been indexed yet', rows);
    });

  // ---- role ----------------------------------------------------------------------------------
  const role = program.command('role').description('source roles (spec/role-v1.schema.json)');
  role
    .command('create')
    .description('create or replace a role from a JSON or YAML file')
    .argument('<file>')
    .action(async (file: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const data = readDataFile(file);
      const r = await (await s.backend()).putRole(data);
      s.print(`${r.created ? 'created' : 'updated'} role ${r.role.name} (${r.role.statements.length} statement(s))`, r);
    });
  role
    .command('show')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).getRole(name);
      s.print(
        [`role ${r.name}${r.description ? `: ${r.description}` : ''}`, ...(r.audiences.length ? [`audiences: ${r.audiences.join(', ')}`] : []), '', table(['effect', 'action', 'resource'], r.statements.map((x) => [x.effect, x.action, x.resource]))].join('\n'),
        r,
      );
    });
  role.command('list').action(async (_o: unknown, cmd: Command) => {
    const s = session(cmd);
    const rows = await (await s.backend()).listRoles();
    s.print(table(['name', 'statements', 'description'], rows.map((r) => [r.name, r.statements.length, r.description])), rows);
  });

  // ---- grant / revoke ------------------------------------------------------------------------
  const grantArgs = (c: Command) => c.argument('<identity>', 'identity name').argument('<role>', 'role name').argument('<source>', 'source id');
  grantArgs(program.command('grant').description('grant ROLE on SOURCE to IDENTITY')).action(async (identity: string, roleName: string, sourceId: string, _o: unknown, cmd: Command) => {
    const s = session(cmd);
    const r = await (await s.backend()).grant({ identity, role: roleName, source: sourceId });
    s.print(r.created ? `granted role ${roleName} on ${sourceId} to ${r.identity}` : `${r.identity} already holds role ${roleName} on ${sourceId}`, r);
  });
  grantArgs(program.command('revoke').description('revoke ROLE on SOURCE from IDENTITY')).action(async (identity: string, roleName: string, sourceId: string, _o: unknown, cmd: Command) => {
    const s = session(cmd);
    const r = await (await s.backend()).revoke({ identity, role: roleName, source: sourceId });
    s.print(`revoked role ${roleName} on ${sourceId} from ${r.identity}`, r);
  });
  program
    .command('grants')
    .description('list grants')
    .option('--identity <name>')
    .option('--source <id>')
    .option('--role <name>')
    .action(async (o: { identity?: string; source?: string; role?: string }, cmd: Command) => {
      const s = session(cmd);
      const rows = await (await s.backend()).listGrants({ identity: o.identity, source: o.source, role: o.role });
      s.print(table(['identity', 'role', 'source', 'granted'], rows.map((g) => [g.identityName, g.roleName, g.sourceId, shortTime(g.createdAt)])), rows);
    });

  // ---- policy --------------------------------------------------------------------------------
  const pol = program.command('policy').description('policies (spec/policy-v1.schema.json)');
  pol
    .command('add')
    .description('add one policy or a list from a JSON or YAML file')
    .argument('<file>')
    .option('--replace', 'replace policies of the same names')
    .action(async (file: string, o: { replace?: boolean }, cmd: Command) => {
      const s = session(cmd);
      const data = readDataFile(file);
      const r = await (await s.backend()).addPolicies(data, { replace: o.replace });
      s.print(r.map((x) => `${x.created ? 'added' : 'replaced'} policy ${x.policy.name} (${x.policy.rule.type})`).join('\n'), r);
    });
  pol.command('list').action(async (_o: unknown, cmd: Command) => {
    const s = session(cmd);
    const rows = await (await s.backend()).listPolicies();
    s.print(table(['name', 'rule', 'enabled', 'applies to', 'description'], rows.map((p) => [p.name, p.rule.type, p.enabled ? 'yes' : 'no', p.applies_to ? JSON.stringify(p.applies_to) : 'everyone', p.description])), rows);
  });
  pol
    .command('show')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const p = await (await s.backend()).getPolicy(name);
      s.print(YAML.stringify(p).trimEnd(), p);
    });
  pol
    .command('remove')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const r = await (await s.backend()).removePolicy(name);
      s.print(`removed policy ${name}`, r);
    });

  // ---- approval (src/cli/approval.ts) -------------------------------------------------------
  registerApprovalCommands(program, session);

  // ---- operator-token ------------------------------------------------------------------------
  const opt = program.command('operator-token').description('operator tokens for the admin API (/admin/v1); made on the database directly, never through the API');
  opt
    .command('create')
    .description('create a token for operator NAME (recorded as the approver); the secret is shown once')
    .argument('<name>', 'operator name, e.g. ops-anna')
    .option('--expires-in <duration>', 'expire after a duration: 90s, 45m, 12h, 30d')
    .action(async (name: string, o: { expiresIn?: string }, cmd: Command) => {
      const s = session(cmd);
      if (s.opts.server) throw new ValidationError('operator tokens are created on the control database directly: run this without --server');
      const expiresAt = o.expiresIn ? new Date(Date.now() + parseDuration(o.expiresIn, '--expires-in')) : undefined;
      const t = await createOperatorToken(await s.db(), name, { expiresAt });
      const warning = 'Store this token now: it is shown only once and cannot be recovered. It works on /admin/v1 only.';
      s.print([`operator token ${t.tokenId} for ${t.name}${t.expiresAt ? ` (expires ${shortTime(t.expiresAt)})` : ''}:`, '', `  ${t.secret}`, '', warning].join('\n'), { ...t, warning });
    });
  opt
    .command('list')
    .option('--name <name>', 'only this operator')
    .action(async (o: { name?: string }, cmd: Command) => {
      const s = session(cmd);
      if (s.opts.server) throw new ValidationError('operator tokens are managed on the control database directly: run this without --server');
      const rows = await listOperatorTokens(await s.db(), { name: o.name });
      s.print(table(['id', 'operator', 'prefix', 'status', 'created', 'expires', 'last used'], rows.map((t) => [t.id, t.name, t.prefix + '…', t.status, shortTime(t.createdAt), shortTime(t.expiresAt), shortTime(t.lastUsedAt)])), rows);
    });
  opt
    .command('revoke')
    .argument('<token-id>', 'opt_… id (see operator-token list)')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      if (s.opts.server) throw new ValidationError('operator tokens are managed on the control database directly: run this without --server');
      const t = await revokeOperatorToken(await s.db(), id);
      s.print(`revoked operator token ${t.id} (${t.name})`, t);
    });

  // ---- audit ---------------------------------------------------------------------------------
  const aud = program.command('audit').description('the audit trail (append-only)');
  aud
    .command('tail')
    .option('-n, --lines <n>', 'how many of the latest events', '20')
    .action(async (o: { lines: string }, cmd: Command) => {
      const s = session(cmd);
      const b = await s.backend();
      const rows = await b.tailAudit(parsePositiveInt(o.lines, '--lines', 1000));
      s.print(s.opts.json ? '' : await auditRows(b, rows), rows);
    });
  aud
    .command('search')
    .option('--identity <name>', 'identity name or id')
    .option('--source <id>')
    .option('--decision <decision>', 'allowed, refused, queued, invalid, failed, cancelled; or an approval action')
    .addOption(new Option('--kind <kind>').choices(['tool_call', 'approval', 'config']))
    .option('--approval <id>')
    .option('--since <time>', 'ISO-8601 time or a duration ago (2h, 7d)')
    .option('--until <time>', 'ISO-8601 time or a duration ago')
    .option('--limit <n>', 'page size (default 100)', '100')
    .option('--cursor <cursor>', 'next page (printed after a full page)')
    .action(async (o: { identity?: string; source?: string; decision?: string; kind?: AuditKind; approval?: string; since?: string; until?: string; limit: string; cursor?: string }, cmd: Command) => {
      const s = session(cmd);
      const b = await s.backend();
      const page = await b.searchAudit({
        identity: o.identity,
        source: o.source,
        decision: o.decision,
        kind: o.kind,
        approval: o.approval,
        since: o.since ? parseTime(o.since, '--since').toISOString() : undefined,
        until: o.until ? parseTime(o.until, '--until').toISOString() : undefined,
        limit: parsePositiveInt(o.limit, '--limit', 1000),
        cursor: o.cursor ?? null,
      });
      s.print(s.opts.json ? '' : (await auditRows(b, page.events)) + (page.nextCursor ? `\n(more: --cursor ${page.nextCursor})` : ''), page);
    });
  registerAuditChainCommands(aud, session);

  return program;
}

/** Exit code for an error thrown by a command. */
function exitCodeFor(err: unknown): number {
  if (err instanceof ControlError) {
    if (err.kind === 'not_found') return 3;
    if (err.kind === 'validation' || err.kind === 'conflict' || err.kind === 'forbidden') return 2;
    return 1;
  }
  const code = (err as { code?: string }).code;
  if (code === 'self_approval_forbidden') return 2;
  return 1;
}

/**
 * Runs the CLI on `argv` (without node and script) and resolves to the exit code. Never throws:
 * user errors are printed as "error: …" (plus detail lines) on stderr.
 */
export async function runCli(argv: string[], io: CliIo = processIo): Promise<number> {
  const state: { session: Session | null } = { session: null };
  const program = buildProgram(io, state);
  let code = 0;
  try {
    if (argv.length === 0) {
      program.outputHelp();
      return 2;
    }
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) {
      code = err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help' ? 0 : 2;
    } else {
      code = exitCodeFor(err);
      const e = err as Error & { details?: string[] };
      io.err(`error: ${e.message ?? String(err)}`);
      if ((e as { code?: string }).code === 'EADDRINUSE') io.err('  the port is taken (another gateway running?): choose another with --port N or INTERLOCK_PORT=N');
      for (const d of e.details ?? []) io.err(`  ${d}`);
      if (!(err instanceof ControlError) && !(e as { code?: string }).code && process.env.INTERLOCK_LOG_LEVEL === 'debug') io.err(String(e.stack));
    }
  } finally {
    await state.session?.close().catch(() => undefined);
  }
  return code;
}
