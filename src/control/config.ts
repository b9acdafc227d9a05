/**
 * Gateway configuration: defaults ← optional JSON/YAML file ← INTERLOCK_* environment variables ←
 * command-line overrides, validated against spec/config-v1.schema.json (generated validator).
 *
 * Unknown keys are errors at every level (the schema says additionalProperties: false), and so is
 * any INTERLOCK_* environment variable this module does not know: a misspelt safety setting must
 * never be silently ignored (issue 3, Build 1). ENV_VARS below is the full list; docs/operators.md
 * documents each.
 */
import { existsSync, readFileSync } from 'node:fs';
import { extname } from 'node:path';
import YAML from 'yaml';
import { validateGatewayConfig } from '../../generated/validators';
import type { GatewayConfig, RateLimit as RateLimitSetting } from '../../generated/config-v1';
import { formatSchemaErrors, ValidationError } from './errors';
import { closestName } from '../errors/suggest';
import configSchema from '../../spec/config-v1.schema.json';
import { AUDIT_KEY_TOO_SHORT } from '../audit/key';

export type { GatewayConfig } from '../../generated/config-v1';

/** A resolved rate limit: both fields filled in (a config layer may give one alone; loadConfig merges it over the defaults, task hnu41 item 4). */
export type RateLimit = Required<RateLimitSetting>;

/** A configuration with every default filled in (assignable to GatewayConfig). */
export interface ResolvedGatewayConfig {
  /** request_timeout_ms / headers_timeout_ms: node:http requestTimeout and headersTimeout (red-team F4). */
  listen: { host: string; port: number; request_timeout_ms: number; headers_timeout_ms: number; tls?: { cert_file: string; key_file: string } };
  /** operator_url: the operator connection of the admin API and console's governance changes (src/admin/governance-db.ts); unset: they use url's role. */
  database: { url?: string; embedded_data_dir: string; embedded_port: number; pool_size: number; operator_url?: string };
  allowed_hosts: string[];
  allowed_origins: string[];
  /** Express `trust proxy` (issue 24, item 3): which proxies' X-Forwarded-Proto/-For are believed. */
  trust_proxy: boolean | number | string[];
  /** Console sessions (issue 24, item 3), in seconds. */
  console: { session_idle_timeout_seconds: number; session_absolute_timeout_seconds: number };
  rate_limits: { per_identity: RateLimit; per_source: RateLimit };
  /**
   * The approval queue (issue 24 item 2): ttl_seconds until a pending write expires; the pending caps
   * per identity and per source (approval_queue_full beyond them); the sweeper's tick in ms and its
   * most expiries per tick.
   */
  approvals: { ttl_seconds: number; max_pending_per_identity: number; max_pending_per_source: number; sweep_interval_ms: number; sweep_batch: number };
  /** Approval notifications (spec/config-v1.schema.json notifications; src/approvals/webhooks.ts); coalesce_queued_at: queued events of one identity per poll sent as one delivery. */
  notifications: { webhooks: Array<{ url: string; events: string[]; secret_env: string }>; coalesce_queued_at: number };
  cache: { ttl_ms: number; max_bytes: number };
  /** Admission by capacity (issue 29; src/transport/capacity.ts). Absent in older hand-built configs: the defaults apply. */
  admission?: { enabled: boolean; initial_limit: number; min_limit: number; max_limit: number; queue_size: number; queue_timeout_ms: number; tolerance: number; max_event_loop_delay_ms: number; max_audit_queue: number; pause_refused_connections?: boolean; front_door?: boolean; controller?: 'long_average' | 'min_rtt'; min_rtt_interval_ms?: number; min_rtt_samples?: number; latency_percentile?: number; sample_source_time?: boolean; sample_pool_wait?: boolean; raise_on_slot_waiters?: boolean; identity_limit?: boolean; identity_slot_wait_ms?: number; identity_wait_ratio?: number };
  /**
   * Audit trail: commit_timeout_ms bounds how long a call waits for its event to commit (fail closed after it);
   * key / previous_keys the audit key that tags the writer lanes' batches and the older keys that still verify (src/audit/key.ts).
   */
  audit: { commit_timeout_ms: number; retention_min_days: number; key?: string; previous_keys?: string[] };
  log_level: NonNullable<GatewayConfig['log_level']>;
  key_pepper?: string;
  /** Separate listener of /healthz, /readyz, /metrics (unset: served on listen). */
  ops_listen?: { host?: string; port: number };
  client_limits: { keyless: RateLimit; streams_per_address: number; streams_per_identity: number; body_reads_per_address: number; body_bytes_in_flight: number; answer_write_timeout_ms?: number };
  /** OAuth 2.1 resource server (issue 26; src/auth/): trusted issuers of access tokens. Absent: API keys only. */
  auth?: GatewayConfig['auth'];
}

/** The defaults (docs/operators.md repeats them). */
export const DEFAULT_CONFIG: Readonly<ResolvedGatewayConfig> = Object.freeze({
  listen: { host: '127.0.0.1', port: 8787, request_timeout_ms: 30_000, headers_timeout_ms: 20_000 },
  database: { embedded_data_dir: '.interlock/pg', embedded_port: 0, pool_size: 10 },
  allowed_hosts: [],
  allowed_origins: [],
  trust_proxy: false,
  console: { session_idle_timeout_seconds: 1800, session_absolute_timeout_seconds: 28_800 },
  rate_limits: { per_identity: { points: 120, window_seconds: 60 }, per_source: { points: 600, window_seconds: 60 } },
  approvals: { ttl_seconds: 86_400, max_pending_per_identity: 20, max_pending_per_source: 100, sweep_interval_ms: 10_000, sweep_batch: 500 },
  notifications: { webhooks: [], coalesce_queued_at: 3 },
  cache: { ttl_ms: 30_000, max_bytes: 64 * 1024 * 1024 },
  admission: { enabled: true, initial_limit: 16, min_limit: 4, max_limit: 512, queue_size: 32, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 100, max_audit_queue: 64, pause_refused_connections: true, front_door: true, controller: 'long_average' as const, min_rtt_interval_ms: 10_000, min_rtt_samples: 25, latency_percentile: 90, sample_source_time: false, sample_pool_wait: false, raise_on_slot_waiters: true, identity_limit: false, identity_slot_wait_ms: 1, identity_wait_ratio: 2 },
  audit: { commit_timeout_ms: 2000, retention_min_days: 0 },
  log_level: 'info',
  client_limits: { keyless: { points: 600, window_seconds: 60 }, streams_per_address: 128, streams_per_identity: 64, body_reads_per_address: 64, body_bytes_in_flight: 128 * 1024 * 1024, answer_write_timeout_ms: 30_000 },
});

/** How a variable's text becomes a value: 'trust' is trust_proxy's (true/false, a hop count, else a comma-separated list). */
type EnvKind = 'string' | 'int' | 'list' | 'trust' | 'bool';

/** Every INTERLOCK_* variable that sets a config key: variable → [config path, value kind]. */
export const ENV_VARS: Readonly<Record<string, readonly [string[], EnvKind]>> = Object.freeze({
  INTERLOCK_HOST: [['listen', 'host'], 'string'],
  INTERLOCK_PORT: [['listen', 'port'], 'int'],
  INTERLOCK_REQUEST_TIMEOUT_MS: [['listen', 'request_timeout_ms'], 'int'],
  INTERLOCK_HEADERS_TIMEOUT_MS: [['listen', 'headers_timeout_ms'], 'int'],
  INTERLOCK_DATABASE_URL: [['database', 'url'], 'string'],
  INTERLOCK_EMBEDDED_DATA_DIR: [['database', 'embedded_data_dir'], 'string'],
  INTERLOCK_EMBEDDED_PORT: [['database', 'embedded_port'], 'int'],
  INTERLOCK_DATABASE_POOL_SIZE: [['database', 'pool_size'], 'int'],
  INTERLOCK_OPERATOR_DATABASE_URL: [['database', 'operator_url'], 'string'],
  INTERLOCK_ALLOWED_HOSTS: [['allowed_hosts'], 'list'],
  INTERLOCK_ALLOWED_ORIGINS: [['allowed_origins'], 'list'],
  INTERLOCK_TLS_CERT_FILE: [['listen', 'tls', 'cert_file'], 'string'],
  INTERLOCK_TLS_KEY_FILE: [['listen', 'tls', 'key_file'], 'string'],
  INTERLOCK_TRUST_PROXY: [['trust_proxy'], 'trust'],
  INTERLOCK_CONSOLE_SESSION_IDLE_TIMEOUT_SECONDS: [['console', 'session_idle_timeout_seconds'], 'int'],
  INTERLOCK_CONSOLE_SESSION_ABSOLUTE_TIMEOUT_SECONDS: [['console', 'session_absolute_timeout_seconds'], 'int'],
  INTERLOCK_RATE_LIMIT_IDENTITY_POINTS: [['rate_limits', 'per_identity', 'points'], 'int'],
  INTERLOCK_RATE_LIMIT_IDENTITY_WINDOW_SECONDS: [['rate_limits', 'per_identity', 'window_seconds'], 'int'],
  INTERLOCK_RATE_LIMIT_SOURCE_POINTS: [['rate_limits', 'per_source', 'points'], 'int'],
  INTERLOCK_RATE_LIMIT_SOURCE_WINDOW_SECONDS: [['rate_limits', 'per_source', 'window_seconds'], 'int'],
  INTERLOCK_APPROVAL_TTL_SECONDS: [['approvals', 'ttl_seconds'], 'int'],
  INTERLOCK_APPROVAL_MAX_PENDING_PER_IDENTITY: [['approvals', 'max_pending_per_identity'], 'int'],
  INTERLOCK_APPROVAL_MAX_PENDING_PER_SOURCE: [['approvals', 'max_pending_per_source'], 'int'],
  INTERLOCK_APPROVAL_SWEEP_INTERVAL_MS: [['approvals', 'sweep_interval_ms'], 'int'],
  INTERLOCK_APPROVAL_SWEEP_BATCH: [['approvals', 'sweep_batch'], 'int'],
  INTERLOCK_CACHE_TTL_MS: [['cache', 'ttl_ms'], 'int'],
  INTERLOCK_CACHE_MAX_BYTES: [['cache', 'max_bytes'], 'int'],
  INTERLOCK_ADMISSION_ENABLED: [['admission', 'enabled'], 'bool'],
  INTERLOCK_ADMISSION_MIN_LIMIT: [['admission', 'min_limit'], 'int'],
  INTERLOCK_ADMISSION_MAX_LIMIT: [['admission', 'max_limit'], 'int'],
  INTERLOCK_ADMISSION_QUEUE_SIZE: [['admission', 'queue_size'], 'int'],
  INTERLOCK_ADMISSION_PAUSE_REFUSED_CONNECTIONS: [['admission', 'pause_refused_connections'], 'bool'],
  INTERLOCK_ADMISSION_FRONT_DOOR: [['admission', 'front_door'], 'bool'],
  INTERLOCK_ADMISSION_CONTROLLER: [['admission', 'controller'], 'string'],
  INTERLOCK_ADMISSION_SAMPLE_SOURCE_TIME: [['admission', 'sample_source_time'], 'bool'],
  INTERLOCK_ADMISSION_SAMPLE_POOL_WAIT: [['admission', 'sample_pool_wait'], 'bool'],
  INTERLOCK_ADMISSION_RAISE_ON_SLOT_WAITERS: [['admission', 'raise_on_slot_waiters'], 'bool'],
  INTERLOCK_ADMISSION_IDENTITY_LIMIT: [['admission', 'identity_limit'], 'bool'],
  INTERLOCK_AUDIT_COMMIT_TIMEOUT_MS: [['audit', 'commit_timeout_ms'], 'int'],
  INTERLOCK_AUDIT_RETENTION_MIN_DAYS: [['audit', 'retention_min_days'], 'int'],
  INTERLOCK_AUDIT_KEY: [['audit', 'key'], 'string'],
  INTERLOCK_AUDIT_PREVIOUS_KEYS: [['audit', 'previous_keys'], 'list'],
  INTERLOCK_LOG_LEVEL: [['log_level'], 'string'],
  INTERLOCK_KEY_PEPPER: [['key_pepper'], 'string'],
  INTERLOCK_OPS_HOST: [['ops_listen', 'host'], 'string'],
  INTERLOCK_OPS_PORT: [['ops_listen', 'port'], 'int'],
  INTERLOCK_KEYLESS_POINTS: [['client_limits', 'keyless', 'points'], 'int'],
  INTERLOCK_KEYLESS_WINDOW_SECONDS: [['client_limits', 'keyless', 'window_seconds'], 'int'],
  INTERLOCK_STREAMS_PER_ADDRESS: [['client_limits', 'streams_per_address'], 'int'],
  INTERLOCK_STREAMS_PER_IDENTITY: [['client_limits', 'streams_per_identity'], 'int'],
  INTERLOCK_ANSWER_WRITE_TIMEOUT_MS: [['client_limits', 'answer_write_timeout_ms'], 'int'],
  INTERLOCK_BODY_READS_PER_ADDRESS: [['client_limits', 'body_reads_per_address'], 'int'],
  INTERLOCK_BODY_BYTES_IN_FLIGHT: [['client_limits', 'body_bytes_in_flight'], 'int'],
});

/**
 * INTERLOCK_* variables that are known but are not config keys: INTERLOCK_CONFIG (path of the
 * config file, like --config), INTERLOCK_FIXTURES (=1 adds the test-only conformance fixture tools
 * to `interlock serve`), INTERLOCK_TEST_PG_URL (the test suite's PostgreSQL server), and the launcher's
 * INTERLOCK_RUNTIME, INTERLOCK_DIST_DIR and INTERLOCK_RUNTIME_REPORT (bin/runtime.js: compiled tree or sources),
 * INTERLOCK_LOCK_TIMEOUT_MS (the operator CLI's lock_timeout on the control database, src/cli/bounds.ts),
 * and INTERLOCK_TOKEN (the operator token the remote CLI reads with `--token-env INTERLOCK_TOKEN`, as
 * docs/operators.md and the --token warning name it: exported in a shell, it must not make that
 * shell's direct-mode commands refuse their configuration).
 */
export const OTHER_ENV_VARS: readonly string[] = Object.freeze(['INTERLOCK_CONFIG', 'INTERLOCK_FIXTURES', 'INTERLOCK_TEST_PG_URL', 'INTERLOCK_RUNTIME', 'INTERLOCK_DIST_DIR', 'INTERLOCK_RUNTIME_REPORT', 'INTERLOCK_LOCK_TIMEOUT_MS', 'INTERLOCK_TOKEN']);

/** Options of loadConfig. */
export interface LoadConfigOptions {
  /** Path of a .json, .yaml or .yml file (optional). */
  file?: string;
  /** The environment to read INTERLOCK_* variables from (usually process.env). */
  env: Record<string, string | undefined>;
  /** Values that win over file and environment (command-line flags), in config shape. */
  overrides?: GatewayConfig;
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function deepMerge(base: Obj, over: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    out[k] = isObj(v) && isObj(out[k]) ? deepMerge(out[k] as Obj, v) : v;
  }
  return out;
}

function setPath(target: Obj, path: string[], value: unknown): void {
  let o = target;
  for (const p of path.slice(0, -1)) {
    if (!isObj(o[p])) o[p] = {};
    o = o[p] as Obj;
  }
  o[path[path.length - 1]] = value;
}

function suggestion(name: string): string {
  const best = closestName(name, [...Object.keys(ENV_VARS), ...OTHER_ENV_VARS], 4);
  return best ? ` (did you mean ${best}?)` : '';
}

/**
 * What a JSON or YAML parse error says, without any text of the file (red team rt47a H4): the file may
 * hold secrets (audit.key, key_pepper, database URLs), and V8's JSON message quotes the text around the
 * error (`Unexpected token 'S', ..."key":S3CRET"... is not valid JSON`), YAML's an unresolved alias's
 * name. Keeps the message's first line when it quotes nothing (`… at line 2, column 8:`, `… at position
 * 58`); else the YAML error's code and position, or the message's words before anything it quotes.
 */
export function parseErrorDetail(err: unknown): string {
  const first = String((err as Error | null)?.message ?? err).split('\n')[0];
  if (!/["'`]/.test(first) && (/at line [0-9]+, column [0-9]+:?$/.test(first) || /at position [0-9]+/.test(first) || /^Unexpected end of JSON input$/.test(first))) return first;
  const y = err as { code?: unknown; linePos?: Array<{ line: number; col: number }> } | null;
  if (typeof y?.code === 'string' && /^[A-Z_]+$/.test(y.code)) return `${y.code}${y.linePos?.[0] ? ` at line ${y.linePos[0].line}, column ${y.linePos[0].col}` : ''} (the rest of the parser's message is left out: it quotes the file)`;
  // The words before anything quoted or named (`Unexpected token`, `Unresolved alias (…)`).
  const words = (/^[A-Za-z][A-Za-z ()-]*/.exec(first)?.[0] ?? '').trim();
  return `${words || 'syntax error'} (the rest of the parser's message is left out: it quotes the file)`;
}

/** Reads and parses a config file; throws ValidationError with a clear message. */
function readConfigFile(file: string): Obj {
  if (!existsSync(file)) throw new ValidationError(`config file not found: ${file}`);
  const text = readFileSync(file, 'utf8');
  const ext = extname(file).toLowerCase();
  let parsed: unknown;
  try {
    if (ext === '.json') parsed = JSON.parse(text);
    // logLevel 'error': a YAML warning (an unresolved tag) would print the line it is on to stderr, secret or not.
    else if (ext === '.yaml' || ext === '.yml') parsed = YAML.parse(text, { uniqueKeys: true, prettyErrors: true, logLevel: 'error' });
    else throw new ValidationError(`config file ${file}: unsupported extension "${ext}" (use .json, .yaml or .yml)`);
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    throw new ValidationError(`config file ${file} is not valid ${ext === '.json' ? 'JSON' : 'YAML'}`, [parseErrorDetail(err)]);
  }
  if (parsed === null || parsed === undefined) return {};
  if (!isObj(parsed)) throw new ValidationError(`config file ${file} must hold an object (a mapping of settings)`);
  return parsed;
}

/** The variables named by notifications.webhooks[].secret_env of config layers (they hold secrets, not settings). */
function webhookSecretVars(...layers: Obj[]): Set<string> {
  const names = new Set<string>();
  for (const layer of layers) {
    const hooks = isObj(layer.notifications) ? layer.notifications.webhooks : undefined;
    if (Array.isArray(hooks)) for (const h of hooks) if (isObj(h) && typeof h.secret_env === 'string') names.add(h.secret_env);
  }
  return names;
}

/**
 * Converts the INTERLOCK_* variables of `env` to a partial config; unknown variables and bad values
 * are collected in `problems`. A variable in `secretVars` (a webhook's secret_env, e.g. the
 * documented INTERLOCK_WEBHOOK_SECRET) is known: it holds a secret, read by the webhook dispatcher.
 */
function configFromEnv(env: Record<string, string | undefined>, problems: string[], secretVars: ReadonlySet<string>): Obj {
  const out: Obj = {};
  for (const [name, raw] of Object.entries(env).sort(([a], [b]) => a.localeCompare(b))) {
    if (!name.startsWith('INTERLOCK_')) continue;
    const spec = ENV_VARS[name];
    if (!spec) {
      if (!OTHER_ENV_VARS.includes(name) && !secretVars.has(name)) problems.push(`${name}: unknown InterLock environment variable${suggestion(name)}`);
      continue;
    }
    if (raw === undefined || raw === '') continue;
    const [path, kind] = spec;
    if (kind === 'int') {
      if (!/^[0-9]{1,15}$/.test(raw.trim())) {
        problems.push(`${name}: must be a whole number, got ${JSON.stringify(raw)}`);
        continue;
      }
      setPath(out, path, Number(raw.trim()));
    } else if (kind === 'trust') {
      const t = raw.trim();
      setPath(out, path, t === 'true' ? true : t === 'false' ? false : /^[0-9]{1,3}$/.test(t) ? Number(t) : t.split(',').map((x) => x.trim()).filter((x) => x.length > 0));
    } else if (kind === 'bool') {
      const t = raw.trim();
      if (t !== 'true' && t !== 'false') {
        problems.push(`${name}: must be true or false, got ${JSON.stringify(raw)}`);
        continue;
      }
      setPath(out, path, t === 'true');
    } else if (kind === 'list') {
      setPath(out, path, raw.split(',').map((s) => s.trim()).filter((s) => s.length > 0));
    } else {
      setPath(out, path, raw);
    }
  }
  return out;
}

/**
 * The audit keys' pattern in spec/config-v1.schema.json (audit.key, audit.previous_keys[]): at least
 * AUDIT_KEY_MIN_CHARACTERS characters once whitespace around is left out, as src/audit/key.ts checks at start.
 */
const AUDIT_KEY_PATTERN = (configSchema as { properties: { audit: { properties: { key: { pattern: string } } } } }).properties.audit.properties.key.pattern;

function check(where: string, value: unknown): string[] {
  if (validateGatewayConfig(value)) return [];
  // The audit key's pattern said in words (never the value), as auditKey (src/audit/key.ts) says it.
  const patternText = `must match pattern "${AUDIT_KEY_PATTERN}"`;
  return formatSchemaErrors(validateGatewayConfig.errors, '', configKeysAt).map((l) => `${where}${l.endsWith(patternText) ? l.slice(0, -patternText.length) + AUDIT_KEY_TOO_SHORT : l}`);
}

/**
 * The keys spec/config-v1.schema.json allows where an ajv schemaPath ("#/properties/listen/additionalProperties")
 * refuses an unknown one, for "did you mean port?" (task hnu4b item e); undefined when the path does not lead to properties.
 */
export function configKeysAt(schemaPath: string): string[] | undefined {
  if (!schemaPath.startsWith('#/') || !schemaPath.endsWith('/additionalProperties')) return undefined;
  let node: unknown = configSchema;
  const at = (n: unknown, k: string): unknown => (isObj(n) ? n[k] : undefined);
  for (const seg of schemaPath.slice(2, -'/additionalProperties'.length).split('/').filter(Boolean)) node = at(node, seg.replace(/~1/g, '/').replace(/~0/g, '~'));
  const ref = at(node, '$ref');
  if (typeof ref === 'string' && ref.startsWith('#/')) node = ref.slice(2).split('/').reduce(at, configSchema as unknown);
  const props = at(node, 'properties');
  return isObj(props) ? Object.keys(props) : undefined;
}

/**
 * Loads the gateway configuration: defaults, then `file` (JSON or YAML), then the INTERLOCK_*
 * variables of `env`, then `overrides`; validates each layer and the result against
 * spec/config-v1.schema.json. Returns a ResolvedGatewayConfig (every default filled in).
 * Throws ValidationError listing every problem ("config.yaml /listen/prot: unknown key …",
 * "INTERLOCK_PROT: unknown InterLock environment variable (did you mean INTERLOCK_PORT?)").
 */
export function loadConfig(opts: LoadConfigOptions): ResolvedGatewayConfig {
  const problems: string[] = [];
  let fromFile: Obj = {};
  if (opts.file) {
    fromFile = readConfigFile(opts.file);
    problems.push(...check(`${opts.file} `, fromFile));
  }
  const fromEnv = configFromEnv(opts.env, problems, webhookSecretVars(fromFile, (opts.overrides ?? {}) as Obj));
  if (Object.keys(fromEnv).length > 0) {
    // Report env problems by variable name rather than by config path.
    const envErrors = check('', deepMerge(DEFAULT_CONFIG as unknown as Obj, fromEnv));
    for (const line of envErrors) {
      const path = line.split(':')[0];
      const variable = Object.entries(ENV_VARS).find(([, [p]]) => path === '/' + p.join('/') || path.startsWith('/' + p.join('/') + '/'));
      problems.push(variable ? `${variable[0]}: ${line.slice(line.indexOf(':') + 2)}` : `environment ${line}`);
    }
  }
  if (opts.overrides) problems.push(...check('command line ', opts.overrides));
  if (problems.length > 0) {
    throw new ValidationError('invalid configuration', problems);
  }
  const merged = deepMerge(deepMerge(deepMerge(structuredClone(DEFAULT_CONFIG) as unknown as Obj, fromFile), fromEnv), (opts.overrides ?? {}) as Obj);
  const final = check('', merged);
  if (final.length > 0) throw new ValidationError('invalid configuration', final);
  // A webhook's signing secret must be strong enough (task hnu43 item 6); an unset one is skipped at start, as before.
  const hooks = (merged as unknown as ResolvedGatewayConfig).notifications?.webhooks ?? [];
  const weak = hooks.flatMap((h, i) => {
    const why = webhookSecretProblem(h.secret_env, opts.env[h.secret_env]);
    return why ? [`/notifications/webhooks/${i}/secret_env: ${why}`] : [];
  });
  if (weak.length > 0) throw new ValidationError('invalid configuration', weak);
  return merged as unknown as ResolvedGatewayConfig;
}

/**
 * Fewest bytes (UTF-8) of a webhook signing secret (task hnu43 item 6). HMAC-SHA-256 keys shorter
 * than the hash's 32-byte output are "strongly discouraged" (RFC 2104 section 3); Standard Webhooks
 * requires 24 to 64 bytes, GitHub asks for a high-entropy value. 32 is also key_pepper's floor.
 */
export const WEBHOOK_SECRET_MIN_BYTES = 32;

/**
 * Why the value of webhook secret variable `name` cannot sign (too short: fewer than
 * WEBHOOK_SECRET_MIN_BYTES UTF-8 bytes), or null when it can or is unset (an unset variable skips the
 * webhook with a warning: src/approvals/webhooks.ts). The text names the variable and the length,
 * never the value. Used at config load (loadConfig) and by the webhook dispatcher.
 */
export function webhookSecretProblem(name: string, value: string | undefined): string | null {
  if (value === undefined || value === '') return null;
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes >= WEBHOOK_SECRET_MIN_BYTES) return null;
  return `${name} holds a ${bytes}-byte webhook signing secret; at least ${WEBHOOK_SECRET_MIN_BYTES} bytes are required (random, e.g. openssl rand -hex 32)`;
}
