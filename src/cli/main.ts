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
 * database.embedded_data_dir), --json (machine output), --server URL with --token-env VAR (or
 * --token T, which warns on stderr: a command line is visible to every local user) for remote mode.
 *
 * Exit codes: 0 ok; 2 bad usage or invalid input (schema error paths are listed); 3 not found;
 * 1 anything else (unreachable database, a lock not granted within INTERLOCK_LOCK_TIMEOUT_MS, failed
 * execution). User errors never print stack traces.
 *
 * The control connection of every command but serve and demo is bounded (src/cli/bounds.ts):
 * connect 5 s, lock_timeout 10 s (INTERLOCK_LOCK_TIMEOUT_MS).
 */
import { resolve as resolvePath } from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { extname } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import pino, { type Logger } from 'pino';
import { knownLogLevel } from '../observability/logger';
import YAML from 'yaml';
import type { GatewayConfig } from '../../generated/config-v1';
import protocolSpec from '../../spec/protocol-v1.json';
import { loadConfig, type ResolvedGatewayConfig } from '../control/config';
import { ensureDatabase, grantOperatorRole, grantRuntimeRole, LOCK_NOT_AVAILABLE, lockTimeoutError, openControlDb, readMigrationStatus, redactUrl, roleForbiddenError, runMigrations, type ControlDb } from '../control/db';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../control/embedded';
import { issueDemoKey, provisionDemoSetup } from '../demo/provision';
import { ControlError, ValidationError } from '../control/errors';
import type { SourceDefinition } from '../control/sources';
import type { AuditKind, AuditRecord } from '../audit/writer';
import { APPROVAL_ACTIONS, CONFIG_DECISIONS, TOOL_CALL_DECISIONS } from '../audit/types';
import { closestName } from '../errors/suggest';
import { registerAuditChainCommands } from './audit';
import { auditKeyring, embeddedAuditKey, type AuditKeyring } from '../audit/key';
import { json, processIo, shortTime, table, type CliIo } from './output';
import { directBackend, type OperatorBackend } from '../admin/backend';
import { remoteBackend } from '../admin/client';
import { operatorOption, packageVersion, type CommandContext } from './context';
import { configuredClaimGrants, replaceConfiguredClaimGrants } from '../control/claim-rules';
import { registerSourceLifecycle, rowRulesWarningFor, sourceListTable, unreadableWarning } from './source';
import { listIndexStatus } from '../discovery/indexer';
import { dropRowViews } from '../control/row-views';
import { registerApply } from './apply';
import { registerExport } from './export';
import { EXIT_NOT_CONFIRMED, NotConfirmedError, registerApprovalCommands } from './approval';
import { cliCommandPrefix, hasCluster, missingDatabaseMessage, resolveEmbeddedDataDir, type ResolvedDataDir } from './data-dir';
import { homedir, userInfo } from 'node:os';
import { parsePositiveInt, parseTime } from './args';
import { registerIdentityCommands } from './identity';
import { registerKeyCommands } from './key';
import { registerIndexCommands } from './discovery-index';
import { registerRoleCommands } from './role';
import { registerPolicyCommands } from './policy';
import { registerOperatorTokenCommands } from './operator-token';
import { INSTALL_ROOT as INSTALL_ROOT_DIR } from '../install-root';
import { boundedCommand, cliControlBounds, type CliControlBounds } from './bounds';

/** The folder of this installation (the clone holding src/ and bin/). */
const INSTALL_ROOT = INSTALL_ROOT_DIR;

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
  /** Where the embedded server's folder was chosen from (null before it starts, or with a database URL). */
  dataDir: ResolvedDataDir | null = null;
  readonly logger: Logger;

  constructor(
    readonly opts: GlobalOpts,
    readonly io: CliIo,
    private readonly overrides: GatewayConfig = {},
  ) {
    // An unknown level is left to loadConfig to refuse (exit 2), not thrown by pino here (task hnu41 item 3).
    this.logger = pino({ level: knownLogLevel(process.env.INTERLOCK_LOG_LEVEL || undefined, 'warn'), base: undefined }, pino.destination(2));
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

  /**
   * True only for the gateway's start (serve, demo: `npm start`): it may initialise a new embedded
   * control database. Every other command refuses (not_found, exit 3) when the chosen folder holds
   * none, so a command run without the gateway's INTERLOCK_EMBEDDED_DATA_DIR never makes an empty
   * database in the default place (task fx45 item 1).
   */
  createsDatabase = false;

  /** False for serve and demo (the gateway's pool); true otherwise: the control connection gets the CLI's bounds. */
  bounded = true;

  /** The bounds the control connection was opened with (null before, or for serve and demo). */
  bounds: CliControlBounds | null = null;

  /**
   * The control database URL and, for the embedded server, the admin URL. Starts the embedded
   * server when no URL is configured, in the folder src/cli/data-dir.ts chooses; a command other
   * than serve or demo refuses (not_found) instead of creating an empty one.
   */
  async databaseUrls(): Promise<{ controlUrl: string; adminUrl: string }> {
    const cfg = this.config();
    if (cfg.database.url) return { controlUrl: cfg.database.url, adminUrl: cfg.database.url };
    if (!this.embedded) {
      const where = resolveEmbeddedDataDir(cfg.database.embedded_data_dir, { cwd: process.cwd(), home: homedir(), env: process.env, exists: existsSync, installRoot: INSTALL_ROOT, privateHome: process.getuid?.() === 0 });
      if (!this.createsDatabase && !hasCluster(where.dir, existsSync)) throw new ControlError('not_found', missingDatabaseMessage(where));
      this.dataDir = where;
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
    // An operator command prints what happened in its own words (a failed approved write names its
    // cause and what to do); the backend's warn-level lines would repeat it as raw JSON on stderr
    // (seen by a new user), so they are shown only when INTERLOCK_LOG_LEVEL asks for them.
    const logger = process.env.INTERLOCK_LOG_LEVEL ? this.logger : this.logger.child({}, { level: 'error' });
    // Direct mode: governance changes are audited in the OS user's name (as source update's --operator default).
    return directBackend(await this.db(), { logger, operator: userInfo().username });
  }

  /** In remote mode the approver is the token's operator: an explicit --operator is refused. */
  assertLocalOperator(cmd: Command): void {
    if (this.remote && cmd.getOptionValueSource('operator') === 'cli') {
      throw new ValidationError('--operator is not used with --server: the operator token names the operator');
    }
  }

  /** Asks a yes/no question on the terminal: true for y or yes (any case), false otherwise, null without a terminal. */
  async confirm(question: string): Promise<boolean | null> {
    const line = this.io.ask ? await this.io.ask(question) : null;
    return line === null ? null : /^\s*(y|yes)\s*$/i.test(line);
  }

  /** Refuses a command that needs the database host (serve, demo, db …) in remote mode. */
  assertDirect(what: string): void {
    if (this.remote) throw new ValidationError(`${what} works on the control database directly: run it without --server`);
  }

  /** The control database, opened once; a failed open is forgotten, so a later call tries again (serve retries, issue 29). */
  db(): Promise<ControlDb> {
    if (!this.dbp) {
      const p = (async () => {
        const cfg = this.config();
        const bounds = this.bounded ? cliControlBounds(process.env) : null;
        const { controlUrl } = await this.databaseUrls();
        this.bounds = bounds;
        // A command (not serve or demo) on a role that may not read the pepper (the operator role) still opens; creating a key is refused then.
        return openControlDb(controlUrl, { keyPepper: cfg.key_pepper, poolSize: Math.min(cfg.database.pool_size, 10), logger: this.logger, pepperOnlyIfReadable: this.bounded, ...(bounds ?? {}) });
      })();
      this.dbp = p;
      p.catch(() => {
        if (this.dbp === p) this.dbp = null;
      });
    }
    return this.dbp;
  }

  /**
   * True when a permission error (42501) came from the control database's role rather than a
   * source's (a source's reader or writer, e.g. in a scan): the object its message names exists in
   * the open control database. False when no control database is open or nothing is named.
   */
  async isControlPermissionError(err: unknown): Promise<boolean> {
    if ((err as { code?: string }).code !== '42501' || !this.dbp) return false;
    const name = /permission denied for (?:table|relation|sequence|function|schema) "?([A-Za-z0-9_.]+)"?/.exec(String((err as Error).message))?.[1];
    if (!name) return false;
    const db = await this.dbp.catch(() => null);
    if (!db) return false;
    const r = await db.pool
      .query<{ ours: boolean }>('SELECT (to_regclass($1) IS NOT NULL OR EXISTS (SELECT 1 FROM pg_proc WHERE proname = $1) OR to_regnamespace($1) IS NOT NULL) AS ours', [name])
      .catch(() => null);
    return r?.rows[0]?.ours === true;
  }

  /**
   * The audit keys (src/audit/key.ts): audit.key and audit.previous_keys; with the embedded control
   * database and no audit.key, the key in its data dir (generated there with `create`: serve, demo);
   * with the embedded database and audit.key, the data dir's key (if any) verifies as a previous key.
   * Call once databaseUrls() or db() has run (the embedded server's folder is known then). Throws
   * ValidationError for a key shorter than 32 characters (or too regular: auditKey).
   */
  auditKeys(create = false): AuditKeyring {
    const audit = this.config().audit;
    if (!this.embedded) return auditKeyring(audit);
    // A configured key takes the file's place in signing; the file's key still verifies (nu46: a demo
    // given a new key keeps verifying what the data dir's key tagged without listing it again).
    const key = embeddedAuditKey(this.embedded.dataDir, create && !audit.key);
    if (audit.key) return auditKeyring({ ...audit, previous_keys: [...(audit.previous_keys ?? []), ...(key ? [key] : [])] });
    return auditKeyring({ ...audit, key: key ?? undefined });
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

function loadGateway(): Pick<typeof import('../gateway'), 'startGovernedGateway' | 'serveGovernedGateway'> {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('../gateway') as typeof import('../gateway');
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

/**
 * A curl call of interlock_query against the demo source, with the headers of README's example
 * (Authorization, Content-Type, Accept, MCP-Protocol-Version: the newest handshake version of
 * spec/protocol-v1.json; hgov item 3).
 */
export function curlExample(mcpUrl: string, apiKey: string, sourceId: string): string {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: sourceId, sql: 'SELECT name FROM artist ORDER BY name LIMIT 5' } } });
  return `curl -s "${mcpUrl}" -H "Authorization: Bearer ${apiKey}" -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" -H "MCP-Protocol-Version: ${protocolSpec.versions.handshake[0]}" -d '${body}'`;
}

/**
 * Stops in order: the gateway first (in-flight calls, the audit flush, then its pools), the session's
 * control database and embedded PostgreSQL last, even when the gateway's close failed, so no pool
 * still holds connections when the embedded server goes down (hgov item 5).
 */
async function stopGatewayThenDatabase(gw: { close(): Promise<void> }, s: { close(): Promise<void> }): Promise<void> {
  try {
    await gw.close();
  } finally {
    await s.close();
  }
}

/** The SIGHUP listener of a stopping `serve`/`demo`: does nothing, so the signal cannot end the shutdown. */
const ignoreHangup = (): void => undefined;

/** Waits for SIGINT/SIGTERM, then runs `stop` once and prints "InterLock stopped." when it is done; a second signal exits at once; SIGHUP is ignored from the first signal on. */
function untilSignal(io: CliIo, stop: () => Promise<void>): Promise<void> {
  return new Promise((resolve) => {
    let stopping = false;
    const onSignal = (sig: NodeJS.Signals) => {
      if (stopping) {
        io.err(`${sig} again: exiting now`);
        process.exit(1);
      }
      stopping = true;
      // SIGHUP is ignored from here until the process exits (task lows49b): the gateway logs one
      // that comes while it drains; after that the pools and the embedded server still close, and
      // Node's default for SIGHUP would end the process half-way. Never removed: the process exits.
      if (!process.listeners('SIGHUP').includes(ignoreHangup)) process.on('SIGHUP', ignoreHangup);
      io.err(`${sig}: shutting down (in-flight calls may finish; press Ctrl-C again to force)`);
      stop()
        .then(
          () => io.err('InterLock stopped.'),
          (err: unknown) => io.err(`error during shutdown: ${(err as Error).message}`),
        )
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

/**
 * The one stderr line printed when the operator token is given with `--token` (red team rt48a L1):
 * a command line is readable by every local user (`ps`, /proc/PID/cmdline) for the command's life,
 * an environment variable named by `--token-env` is not. `--token` keeps working.
 */
export const TOKEN_ON_COMMAND_LINE_WARNING =
  'warning: --token puts the operator token on the command line, where ps shows it to every local user; put it in an environment variable and pass its name instead: --token-env INTERLOCK_TOKEN';

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
    .option('--token <token>', 'remote mode: operator token (ilo_…); unsafe: the command line is visible to every local user (ps), prefer --token-env')
    .option('--token-env <var>', 'remote mode: environment variable holding the operator token (e.g. INTERLOCK_TOKEN; not shown by ps)')
    .version(packageVersion(), '-V, --version', 'print the InterLock version')
    // Every subcommand's --help lists the global options (--json, --config, …) too (task low47 item 3); subcommands inherit it.
    .configureHelp({ showGlobalOptions: true })
    .addHelpText('after', `\nExit codes: 0 success; 1 anything else (database unreachable, a lock on the control database not granted within INTERLOCK_LOCK_TIMEOUT_MS (default 10000 ms), execution failed); 2 bad usage or invalid input (also a name taken, a wrong approval state, self-approval, a database role not allowed to make the change); 3 not found; ${EXIT_NOT_CONFIRMED} an approval not confirmed (approval approve without a terminal and without --yes, or not answered y: nothing ran).`);

  const session = (cmd: Command): Session => {
    if (!state.session) {
      const o = cmd.optsWithGlobals() as GlobalOpts;
      state.session = new Session(o, io);
      // The token is on the command line already (ps, /proc/PID/cmdline): it still works (scripts use it), with one warning (red team rt48a L1).
      if (o.token !== undefined) io.err(TOKEN_ON_COMMAND_LINE_WARNING);
      const path = cmd.parent && cmd.parent.name() !== 'interlock' ? `${cmd.parent.name()} ${cmd.name()}` : cmd.name();
      state.session.createsDatabase = path === 'serve' || path === 'demo';
      if (/^(serve|demo|db )/.test(path + ' ')) state.session.assertDirect(`interlock ${path}`);
      state.session.bounded = boundedCommand(path);
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
      const { serveGovernedGateway } = loadGateway();
      // Without its control database the gateway still listens, not ready, and retries (issue 29).
      const gw = await serveGovernedGateway({ openDb: () => s.db(), config: cfg, fixtures: o.fixtures || process.env.INTERLOCK_FIXTURES === '1', auditKeys: () => s.auditKeys(true) });
      const where = async () => (s.embedded ? `embedded in ${s.embedded.dataDir}` : redactUrl((await s.databaseUrls()).controlUrl));
      if (gw.current()) io.out(`InterLock listening on ${gw.url} (control database ${await where()})`);
      else {
        // One line saying why (pending migrations name `interlock db migrate`; never driver text).
        io.out(`InterLock listening on ${gw.url}, NOT READY: the control database ${await where()} cannot be used yet (${gw.notReadyReason()}); retrying (governed calls are refused audit_unavailable until then)`);
        gw.ready.then(
          async () => io.out(`InterLock ready on ${gw.url} (control database ${await where()})`),
          (err: Error) => io.err(`the control database cannot be used: ${err.message}`),
        );
      }
      await untilSignal(io, () => stopGatewayThenDatabase(gw, s));
    });

  listenOpts(program.command('demo').description('load Chinook, provision demo-agent with a new API key, and run the gateway (npm start)')).action(
    async (o: { host?: string; port?: number }, cmd: Command) => {
      const s = session(cmd);
      const cfg = s.config({ listen: { ...(o.host ? { host: o.host } : {}), ...(o.port !== undefined ? { port: o.port } : {}) } });
      // The port first, before the embedded server starts, the demo file is applied or a key revoked:
      // a start that fails on a taken port changes nothing (task nu48fix item 1). The gateway takes this
      // listener over; until then it answers 503 `unavailable`.
      const { bindListener } = require('../server') as typeof import('../server'); // eslint-disable-line @typescript-eslint/no-require-imports
      const held = await bindListener({ host: cfg.listen.host, port: cfg.listen.port, requestTimeoutMs: cfg.listen.request_timeout_ms, headersTimeoutMs: cfg.listen.headers_timeout_ms, tls: cfg.listen.tls });
      let gw: Awaited<ReturnType<ReturnType<typeof loadGateway>['startGovernedGateway']>>;
      let setup: Awaited<ReturnType<typeof provisionDemoSetup>>;
      let db: ControlDb;
      try {
        const { adminUrl } = await s.databaseUrls();
        db = await s.db();
        setup = await provisionDemoSetup({ adminUrl, controlDb: db, logger: s.logger });
        const { startGovernedGateway } = loadGateway();
        gw = await startGovernedGateway({ db, config: cfg, server: held, auditKeys: () => s.auditKeys(true) });
      } catch (err) {
        await new Promise<void>((resolve) => held.close(() => resolve()));
        throw err;
      }
      // Only once the gateway serves: a failed start leaves no new key behind.
      const key = await issueDemoKey(db, setup.identityId);
      const demo = { ...setup, apiKey: key.apiKey, keyId: key.keyId };
      const consoleUrl = new URL('/console', gw.url).toString();
      // The CLI lines must reach this gateway's database: with a configured data folder they carry it
      // (the CLI alone searches only the default places; task fx45 item 1).
      const cli = `${s.dataDir ? cliCommandPrefix(s.dataDir) : ''}npm exec -- interlock`;
      const cliWhere = s.embedded ? 'in any folder of this clone' : 'with the same INTERLOCK_DATABASE_URL or --config FILE as this gateway';
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
        `Approve queued writes in the console at ${consoleUrl} (sign in with a token from: ${cli} operator-token create YOUR_NAME),`,
        `or from another terminal, ${cliWhere}: ${cli} approval list, then ${cli} approval approve <id>`,
        'Press Ctrl-C to stop.',
        '',
      ];
      if (s.opts.json) io.out(json({ url: gw.url, apiKey: demo.apiKey, keyId: demo.keyId, revokedKeys: key.revoked, console: consoleUrl, sourceId: demo.sourceId, claude: claudeMcpAddLine(gw.url, demo.apiKey) }));
      else io.out(lines.join('\n'));
      await untilSignal(io, () => stopGatewayThenDatabase(gw, s));
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
      const { connectTimeoutMs } = cliControlBounds(process.env);
      const { controlUrl } = await s.databaseUrls();
      const applied = await runMigrations(controlUrl, s.logger, { connectTimeoutMs });
      s.print(applied.length ? `applied ${applied.length} migration(s): ${applied.join(', ')}` : 'the control database is up to date', { applied });
    });
  dbCmd
    .command('status')
    .description('applied and pending migrations')
    .action(async (_o: unknown, cmd: Command) => {
      const s = session(cmd);
      s.config();
      const bounds = cliControlBounds(process.env);
      const { controlUrl } = await s.databaseUrls();
      const st = await readMigrationStatus(controlUrl, bounds);
      s.print(table(['migration', 'state'], [...st.applied.map((m) => [m, 'applied']), ...st.pending.map((m) => [m, 'pending'])]), st);
    });
  dbCmd
    .command('grant-runtime-role')
    .description("grant a database role what the gateway needs: read the control tables, append audit events (INSERT of its own chained batches, interlock_audit_append_v2 for approvals; never UPDATE/DELETE/TRUNCATE on the trail)")
    .argument('<role>', 'existing PostgreSQL role the gateway connects as')
    .action(async (role: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      await grantRuntimeRole(await s.db(), role);
      s.print(`granted the gateway runtime privileges to database role ${role}`, { role, granted: true });
    });
  dbCmd
    .command('grant-operator-role')
    .description('grant a database role what the admin API and console need to change governance state through the operator connection (INTERLOCK_OPERATOR_DATABASE_URL): identities, keys, sources, roles, grants, policies and their config events; nothing on the trail beyond appending, no DDL')
    .argument('<role>', 'existing PostgreSQL role of the operator connection (not the runtime role)')
    .action(async (role: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      await grantOperatorRole(await s.db(), role);
      s.print(`granted the operator privileges to database role ${role}`, { role, granted: true });
    });
  dbCmd
    .command('sync-claim-rules')
    .description("record the configuration's claim rules (auth.issuers[].role_grants of --config) in the control database, for a gateway that runs on the runtime role without an operator connection: token identities get a claim grant only for a (role, source) a recorded rule or a claim mapping of their issuer names; run as the owner or the operator role")
    .addOption(operatorOption())
    .action(async (o: { operator: string }, cmd: Command) => {
      const s = session(cmd);
      const issuers = s.config().auth?.issuers ?? [];
      const r = await replaceConfiguredClaimGrants(await s.db(), issuers, { operator: o.operator });
      const line = (g: { issuer: string; role: string; source: string }) => `${g.issuer} ${g.role} on ${g.source}`;
      const human = r.added.length + r.removed.length === 0
        ? `the control database already records the configuration's ${configuredClaimGrants(issuers).length} claim rule pair(s)`
        : [`recorded the configuration's claim rules: ${r.added.length} added, ${r.removed.length} removed`, ...r.added.map((g) => `  + ${line(g)}`), ...r.removed.map((g) => `  - ${line(g)}`)].join('\n');
      s.print(human, r);
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
      const unreadable = unreadableWarning(rec.id, scan);
      if (unreadable) io.err(unreadable);
      s.print(`added source ${rec.id} (${rec.type})${scan ? `; catalog: ${scan.relations} relation(s)${scan.truncated ? ', truncated' : ''}` : ''}`, { source: rec, scan, scanError });
    });
  src.command('list').description('list sources with their type, state and catalog scan').action(async (_o: unknown, cmd: Command) => {
    const s = session(cmd);
    const rows = await (await s.backend()).listSources();
    // The discovery index lives in the control database: shown in direct mode only.
    const index = s.remote ? undefined : await listIndexStatus(await s.db());
    s.print(sourceListTable(rows, index), rows);
  });
  src
    .command('show')
    .description('show one source (secrets redacted)')
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
      .description(enabled ? 'enable a source' : 'disable a source: calls to it are refused as unavailable')
      .argument('<id>')
      .action(async (id: string, _o: unknown, cmd: Command) => {
        const s = session(cmd);
        const r = await (await s.backend()).setSourceEnabled(id, enabled);
        s.print(`${enabled ? 'enabled' : 'disabled'} source ${r.id}${enabled ? '' : ': calls to it are refused as unavailable'}`, r);
      });
  }
  src
    .command('scan')
    .description('re-scan the catalog of a source')
    .argument('<id>')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = session(cmd);
      const backend = await s.backend();
      const r = await backend.scanSource(id);
      const unreadable = unreadableWarning(id, r);
      if (unreadable) s.io.err(unreadable);
      const ruled = await rowRulesWarningFor(backend, id);
      if (ruled) s.io.err(ruled);
      s.print(`scanned ${r.sourceId}: ${r.relations} relation(s)${r.truncated ? ' (truncated)' : ''} at ${shortTime(r.scannedAt)}`, r);
    });
  src
    .command('drop-row-views')
    .description("drop InterLock's row views (schema interlock_rows) on a source, as its writer, before a schema change of a table they read; reads make them again (docs/row-rules.md)")
    .argument('<id>')
    .option('--table <schema.table>', 'only the views that read this table (directly or through another view)')
    .action(async (id: string, o: { table?: string }, cmd: Command) => {
      const s = session(cmd);
      s.assertDirect('source drop-row-views');
      const r = await dropRowViews(await s.db(), id, { table: o.table });
      s.print(
        r.dropped.length
          ? `dropped ${r.dropped.length} row view(s) of ${id}: ${r.dropped.join(', ')}\nchange the table now, then run: interlock source scan ${id} (reads make the views again)`
          : `source ${id} has no row views${o.table ? ` reading ${o.table}` : ''}`,
        r,
      );
    });

  const ctx: CommandContext = { session, readDataFile };
  registerSourceLifecycle(src, ctx);
  registerApply(program, ctx);
  registerExport(program, ctx);

  // ---- identity, key (src/cli/identity.ts, key.ts) -----------------------------------------
  registerIdentityCommands(program, ctx);
  registerKeyCommands(program, ctx);
  // ---- index, role/grants, policy, approval, operator-token (one module per noun) -------------
  registerIndexCommands(program, ctx);
  registerRoleCommands(program, ctx);
  registerPolicyCommands(program, ctx);
  registerApprovalCommands(program, session);
  registerOperatorTokenCommands(program, ctx);

  // ---- audit ---------------------------------------------------------------------------------
  const aud = program.command('audit').description('the audit trail (append-only)');
  aud
    .command('tail')
    .description('print the latest audit events')
    .option('-n, --lines <n>', 'how many of the latest events', '20')
    .action(async (o: { lines: string }, cmd: Command) => {
      const s = session(cmd);
      const b = await s.backend();
      const rows = await b.tailAudit(parsePositiveInt(o.lines, '--lines', 1000));
      s.print(s.opts.json ? '' : await auditRows(b, rows), rows);
    });
  aud
    .command('search')
    .description('search the audit trail by identity, source, decision, kind, approval or time')
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
      if (o.decision !== undefined) checkAuditDecision(o.decision);
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

/**
 * `audit search --decision`: one of the decisions the trail records (src/audit/types.ts), else a
 * ValidationError (exit 2) naming the nearest and every allowed value (task hnu4b item c).
 */
export function checkAuditDecision(decision: string): void {
  const groups = [TOOL_CALL_DECISIONS, APPROVAL_ACTIONS, CONFIG_DECISIONS] as const;
  if (groups.some((g) => (g as readonly string[]).includes(decision))) return;
  const near = closestName(decision, groups.flat());
  throw new ValidationError(
    `--decision: unknown decision ${JSON.stringify(decision)}${near ? ` (did you mean ${near}?)` : ''}`,
    [`tool calls: ${TOOL_CALL_DECISIONS.join(', ')}`, `approvals: ${APPROVAL_ACTIONS.join(', ')}`, `configuration changes: ${CONFIG_DECISIONS.join(', ')}`],
  );
}

/** The plural each noun's list command shows (task nu48fix item 2c). */
const LISTED_NOUNS: Record<string, string> = { role: 'roles', approval: 'approvals', source: 'sources', identity: 'identities' };

/**
 * The line of a "not found" error (ControlError not_found) about a role, approval, source or
 * identity, worded as src/control and the admin API word it (`role "x" not found`, `approval apr_… not
 * found`), with the command that lists them appended: `role "x" not found (interlock role list shows
 * the roles)` (a new user's trial, task nu48fix item 2c). Any other message is returned as it is.
 */
export function withListCommand(message: string): string {
  const noun = /^(role|approval|source|identity) (?:"[^"]*"|\S+) not found$/.exec(message)?.[1];
  return noun ? `${message} (interlock ${noun} list shows the ${LISTED_NOUNS[noun]})` : message;
}

/**
 * Exit code for an error thrown by a command (docs/operators.md "Exit codes", the program's --help):
 * 3 not found; 2 validation, conflict, forbidden (self-approval); EXIT_NOT_CONFIRMED (4) an approval
 * nobody confirmed; 1 anything else.
 */
function exitCodeFor(err: unknown): number {
  if (err instanceof ControlError) {
    if (err.kind === 'not_found') return 3;
    if (err.kind === 'validation' || err.kind === 'conflict' || err.kind === 'forbidden') return 2;
    return 1;
  }
  const code = (err as { code?: string }).code;
  if (code === 'self_approval_forbidden') return 2;
  if (err instanceof NotConfirmedError) return EXIT_NOT_CONFIRMED;
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
      // Direct mode on a role that may not do this (the runtime role's URL): one line naming the fix, no driver text.
      if (state.session && !state.session.remote && (await state.session.isControlPermissionError(err))) {
        const s = state.session;
        err = roleForbiddenError(await s.databaseUrls().then((u) => redactUrl(u.controlUrl), () => 'INTERLOCK_DATABASE_URL'));
      }
      // Direct mode, a lock on the control database not granted within the CLI's lock_timeout: one line naming what to check, no driver text.
      if (state.session?.bounds && !state.session.remote && (err as { code?: string }).code === LOCK_NOT_AVAILABLE && !(err instanceof ControlError)) {
        const s = state.session;
        err = lockTimeoutError(await s.databaseUrls().then((u) => redactUrl(u.controlUrl), () => 'INTERLOCK_DATABASE_URL'), s.bounds!.lockTimeoutMs);
      }
      code = exitCodeFor(err);
      const e = err as Error & { details?: string[] };
      io.err(`error: ${err instanceof ControlError && err.kind === 'not_found' ? withListCommand(e.message) : (e.message ?? String(err))}`);
      if ((e as { code?: string }).code === 'EADDRINUSE') io.err('  the port is taken (another gateway running?): choose another with --port N or INTERLOCK_PORT=N');
      for (const d of e.details ?? []) io.err(`  ${d}`);
      if (!(err instanceof ControlError) && !(e as { code?: string }).code && process.env.INTERLOCK_LOG_LEVEL === 'debug') io.err(String(e.stack));
    }
  } finally {
    await state.session?.close().catch(() => undefined);
  }
  return code;
}

/** The whole commander tree of `interlock`, without running anything (for tests that inspect help lines). */
export function cliProgram(io: CliIo = processIo): Command {
  return buildProgram(io, { session: null });
}
