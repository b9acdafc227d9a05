/** Gateway configuration: defaults, file, environment and overrides; unknown keys and variables are errors. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_CONFIG, ENV_VARS, loadConfig } from '../../../src/control/config';
import { ValidationError } from '../../../src/control/errors';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'il-config-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

function problems(fn: () => unknown): { message: string; details: string[] } {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return { message: (err as ValidationError).message, details: (err as ValidationError).details };
  }
  throw new Error('expected a ValidationError');
}

describe('loadConfig', () => {
  test('no file, no variables: the defaults', () => {
    expect(loadConfig({ env: { PATH: '/bin', HOME: '/root' } })).toEqual(DEFAULT_CONFIG);
    expect(DEFAULT_CONFIG).toEqual({
      listen: { host: '127.0.0.1', port: 8787, request_timeout_ms: 30000, headers_timeout_ms: 20000 },
      database: { embedded_data_dir: '.interlock/pg', embedded_port: 0, pool_size: 10 },
      allowed_hosts: [],
      allowed_origins: [],
      trust_proxy: false,
      console: { session_idle_timeout_seconds: 1800, session_absolute_timeout_seconds: 28800 },
      rate_limits: { per_identity: { points: 120, window_seconds: 60 }, per_source: { points: 600, window_seconds: 60 } },
      approvals: { ttl_seconds: 86400, max_pending_per_identity: 20, max_pending_per_source: 100, sweep_interval_ms: 10000, sweep_batch: 500 },
      notifications: { webhooks: [], coalesce_queued_at: 3 },
      cache: { ttl_ms: 30000, max_bytes: 67108864 },
      admission: { enabled: true, initial_limit: 16, min_limit: 4, max_limit: 512, queue_size: 32, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 100, max_audit_queue: 64, pause_refused_connections: true, front_door: true, controller: 'long_average', min_rtt_interval_ms: 10_000, min_rtt_samples: 25, latency_percentile: 90, sample_source_time: false, sample_pool_wait: false, raise_on_slot_waiters: true, identity_limit: false, identity_slot_wait_ms: 1, identity_wait_ratio: 2 },
      audit: { commit_timeout_ms: 2000, retention_min_days: 0 },
      log_level: 'info',
      client_limits: { keyless: { points: 600, window_seconds: 60 }, streams_per_address: 128, streams_per_identity: 64, body_reads_per_address: 64, body_bytes_in_flight: 134217728, answer_write_timeout_ms: 30000 },
    });
  });

  test('listen.tls, trust_proxy and console session timeouts from the environment and a file (issue 24, item 3)', () => {
    const cfg = loadConfig({ env: { INTERLOCK_TLS_CERT_FILE: '/etc/il/cert.pem', INTERLOCK_TLS_KEY_FILE: '/etc/il/key.pem', INTERLOCK_TRUST_PROXY: 'loopback, 10.0.0.0/8', INTERLOCK_CONSOLE_SESSION_IDLE_TIMEOUT_SECONDS: '600', INTERLOCK_CONSOLE_SESSION_ABSOLUTE_TIMEOUT_SECONDS: '3600' } });
    expect(cfg.listen.tls).toEqual({ cert_file: '/etc/il/cert.pem', key_file: '/etc/il/key.pem' });
    expect(cfg.trust_proxy).toEqual(['loopback', '10.0.0.0/8']);
    expect(cfg.console).toEqual({ session_idle_timeout_seconds: 600, session_absolute_timeout_seconds: 3600 });
    expect(loadConfig({ env: { INTERLOCK_TRUST_PROXY: 'true' } }).trust_proxy).toBe(true);
    expect(loadConfig({ env: { INTERLOCK_TRUST_PROXY: '2' } }).trust_proxy).toBe(2);
    expect(loadConfig({ env: {}, overrides: { trust_proxy: ['127.0.0.1'] } }).trust_proxy).toEqual(['127.0.0.1']);
    // A certificate without its key, and timeouts outside their ranges, are refused.
    expect(() => loadConfig({ env: { INTERLOCK_TLS_CERT_FILE: '/etc/il/cert.pem' } })).toThrow(/invalid configuration/);
    expect(() => loadConfig({ env: { INTERLOCK_CONSOLE_SESSION_IDLE_TIMEOUT_SECONDS: '5' } })).toThrow(/invalid configuration/);
    expect(() => loadConfig({ env: {}, overrides: { console: { session_absolute_timeout_seconds: 10 } } as never })).toThrow(/invalid configuration/);
  });

  test('ops_listen and client_limits from the environment (issue 10)', () => {
    const cfg = loadConfig({ env: { INTERLOCK_OPS_HOST: '0.0.0.0', INTERLOCK_OPS_PORT: '9464', INTERLOCK_KEYLESS_POINTS: '30', INTERLOCK_KEYLESS_WINDOW_SECONDS: '10', INTERLOCK_STREAMS_PER_ADDRESS: '8', INTERLOCK_STREAMS_PER_IDENTITY: '4', INTERLOCK_BODY_READS_PER_ADDRESS: '16', INTERLOCK_BODY_BYTES_IN_FLIGHT: '16777216', INTERLOCK_ANSWER_WRITE_TIMEOUT_MS: '5000' } });
    expect(cfg.ops_listen).toEqual({ host: '0.0.0.0', port: 9464 });
    expect(cfg.client_limits).toEqual({ keyless: { points: 30, window_seconds: 10 }, streams_per_address: 8, streams_per_identity: 4, body_reads_per_address: 16, body_bytes_in_flight: 16777216, answer_write_timeout_ms: 5000 });
    expect(() => loadConfig({ env: { INTERLOCK_BODY_BYTES_IN_FLIGHT: '1000' } })).toThrow(/invalid configuration/);
    expect(() => loadConfig({ env: { INTERLOCK_OPS_HOST: '0.0.0.0' } })).toThrow(/invalid configuration/);
    expect(() => loadConfig({ env: { INTERLOCK_STREAMS_PER_IDENTITY: '0' } })).toThrow(/invalid configuration/);
  });

  test('file < environment < overrides, YAML and JSON', () => {
    const yaml = file('gw.yaml', 'listen:\n  host: 0.0.0.0\n  port: 9000\ncache:\n  ttl_ms: 0\nrate_limits:\n  per_source: { points: 5, window_seconds: 10 }\n');
    const cfg = loadConfig({
      file: yaml,
      env: { INTERLOCK_PORT: '9100', INTERLOCK_ALLOWED_ORIGINS: 'https://a.example, https://b.example', INTERLOCK_RATE_LIMIT_IDENTITY_POINTS: '7', INTERLOCK_DATABASE_URL: 'postgres://u@db/interlock' },
      overrides: { listen: { port: 9200 } },
    });
    expect(cfg.listen).toEqual({ host: '0.0.0.0', port: 9200, request_timeout_ms: 30000, headers_timeout_ms: 20000 });
    expect(loadConfig({ env: { INTERLOCK_REQUEST_TIMEOUT_MS: '5000', INTERLOCK_HEADERS_TIMEOUT_MS: '4000' } }).listen).toEqual({ host: '127.0.0.1', port: 8787, request_timeout_ms: 5000, headers_timeout_ms: 4000 });
    expect(cfg.cache).toEqual({ ttl_ms: 0, max_bytes: 67108864 });
    expect(cfg.allowed_origins).toEqual(['https://a.example', 'https://b.example']);
    expect(cfg.rate_limits).toEqual({ per_identity: { points: 7, window_seconds: 60 }, per_source: { points: 5, window_seconds: 10 } });
    expect(cfg.database.url).toBe('postgres://u@db/interlock');
    const json = file('gw.json', JSON.stringify({ log_level: 'debug', approvals: { ttl_seconds: 600 } }));
    expect(loadConfig({ file: json, env: {} })).toMatchObject({ log_level: 'debug', approvals: { ttl_seconds: 600 } });
  });

  // Task hnu41 item 4 (a new user's finding): `rate_limits: { per_identity: { points: 60 } }` was refused
  // ("must have required property 'window_seconds'") though the variable alone worked.
  test('a rate limit given in part keeps the other field from the layer below (defaults, file, environment)', () => {
    const cfg = file('partial-rate.yaml', 'rate_limits:\n  per_identity: { points: 60 }\n  per_source: { window_seconds: 30 }\nclient_limits:\n  keyless: { points: 10 }\n');
    const loaded = loadConfig({ file: cfg, env: {} });
    expect({ rate: loaded.rate_limits, keyless: loaded.client_limits.keyless }).toEqual({ rate: { per_identity: { points: 60, window_seconds: 60 }, per_source: { points: 600, window_seconds: 30 } }, keyless: { points: 10, window_seconds: 60 } });
    const layered = loadConfig({ file: cfg, env: { INTERLOCK_RATE_LIMIT_IDENTITY_WINDOW_SECONDS: '10' }, overrides: { rate_limits: { per_source: { points: 5 } } } });
    expect(layered.rate_limits).toEqual({ per_identity: { points: 60, window_seconds: 10 }, per_source: { points: 5, window_seconds: 30 } });
    // Bounds and unknown keys still hold for a partial object.
    const bad = file('bad-rate.yaml', 'rate_limits:\n  per_identity: { points: 0, windows: 5 }\n');
    expect(problems(() => loadConfig({ file: bad, env: {} })).details).toEqual([`${bad} /rate_limits/per_identity: unknown key "windows" (not allowed here)`, `${bad} /rate_limits/per_identity/points: must be >= 1`]);
  });

  test('an unknown key in the file is an error naming the file and path, with a suggestion when one is close (task hnu4b item e)', () => {
    const p = file('typo.yaml', 'listen:\n  prot: 9000\nrequire_aproval: false\n');
    expect(problems(() => loadConfig({ file: p, env: {} }))).toEqual({
      message: 'invalid configuration',
      details: [`${p} /: unknown key "require_aproval" (not allowed here)`, `${p} /listen: unknown key "prot" (not allowed here; did you mean port?)`],
    });
    const nested = file('nested.yaml', 'listen:\n  tls: {crt_file: a.pem, cert_file: a.pem, key_file: k.pem}\nnotifications:\n  webhooks: [{url: "https://h.example/x", evnts: [approval.queued], events: [approval.queued], secret_env: HOOK_SECRET}]\n');
    expect(problems(() => loadConfig({ file: nested, env: {} }))).toEqual({
      message: 'invalid configuration',
      details: [`${nested} /listen/tls: unknown key "crt_file" (not allowed here; did you mean cert_file?)`, `${nested} /notifications/webhooks/0: unknown key "evnts" (not allowed here; did you mean events?)`],
    });
  });

  test('an unknown INTERLOCK_* variable is an error, with a suggestion when one is close', () => {
    expect(problems(() => loadConfig({ env: { INTERLOCK_PROT: '1', INTERLOCK_LOG_LEVLE: 'debug', INTERLOCK_SOMETHING_ELSE_ENTIRELY: 'x', OTHER_VAR: 'fine' } }))).toEqual({
      message: 'invalid configuration',
      details: [
        'INTERLOCK_LOG_LEVLE: unknown InterLock environment variable (did you mean INTERLOCK_LOG_LEVEL?)',
        'INTERLOCK_PROT: unknown InterLock environment variable (did you mean INTERLOCK_PORT?)',
        'INTERLOCK_SOMETHING_ELSE_ENTIRELY: unknown InterLock environment variable',
      ],
    });
    // Known non-config variables are accepted.
    expect(() => loadConfig({ env: { INTERLOCK_CONFIG: 'x.yaml', INTERLOCK_FIXTURES: '1', INTERLOCK_TEST_PG_URL: 'postgres://x' } })).not.toThrow();
  });

  test('bad values name the variable', () => {
    expect(problems(() => loadConfig({ env: { INTERLOCK_PORT: 'eighty', INTERLOCK_CACHE_TTL_MS: '-1', INTERLOCK_LOG_LEVEL: 'loud', INTERLOCK_KEY_PEPPER: 'short', INTERLOCK_DATABASE_URL: 'mysql://x' } })).details).toEqual([
      'INTERLOCK_CACHE_TTL_MS: must be a whole number, got "-1"',
      'INTERLOCK_PORT: must be a whole number, got "eighty"',
      'INTERLOCK_DATABASE_URL: must match pattern "^postgres(ql)?://"',
      'INTERLOCK_LOG_LEVEL: must be equal to one of the allowed values (fatal, error, warn, info, debug, trace, silent)',
      'INTERLOCK_KEY_PEPPER: must NOT have fewer than 32 characters',
    ]);
    expect(problems(() => loadConfig({ env: { INTERLOCK_PORT: '70000' } })).details).toEqual(['INTERLOCK_PORT: must be <= 65535']);
  });

  test('empty variables count as unset', () => {
    expect(loadConfig({ env: { INTERLOCK_DATABASE_URL: '', INTERLOCK_PORT: '' } })).toEqual(DEFAULT_CONFIG);
  });

  test('files: missing, unsupported extension, malformed, not an object, duplicate keys', () => {
    expect(problems(() => loadConfig({ file: join(dir, 'absent.yaml'), env: {} })).message).toBe(`config file not found: ${join(dir, 'absent.yaml')}`);
    expect(problems(() => loadConfig({ file: file('c.toml', 'x=1'), env: {} })).message).toMatch(/unsupported extension ".toml"/);
    expect(problems(() => loadConfig({ file: file('bad.json', '{"listen": '), env: {} })).message).toMatch(/is not valid JSON$/);
    expect(problems(() => loadConfig({ file: file('list.yaml', '- 1\n- 2\n'), env: {} })).message).toMatch(/must hold an object/);
    expect(problems(() => loadConfig({ file: file('dup.yaml', 'log_level: info\nlog_level: debug\n'), env: {} })).message).toMatch(/is not valid YAML$/);
    expect(loadConfig({ file: file('empty.yaml', ''), env: {} })).toEqual(DEFAULT_CONFIG);
  });

  test('every documented variable maps to a schema key', () => {
    for (const [name, [path]] of Object.entries(ENV_VARS)) {
      expect(name).toMatch(/^INTERLOCK_[A-Z_]+$/);
      expect(path.length).toBeGreaterThan(0);
    }
    const cfg = loadConfig({ env: { INTERLOCK_ALLOWED_HOSTS: 'gw.example.com:443', INTERLOCK_EMBEDDED_DATA_DIR: '/var/lib/interlock', INTERLOCK_EMBEDDED_PORT: '5433', INTERLOCK_APPROVAL_TTL_SECONDS: '600', INTERLOCK_HOST: '::1', INTERLOCK_DATABASE_POOL_SIZE: '4', INTERLOCK_CACHE_MAX_BYTES: '1024', INTERLOCK_RATE_LIMIT_SOURCE_POINTS: '9', INTERLOCK_RATE_LIMIT_SOURCE_WINDOW_SECONDS: '3', INTERLOCK_RATE_LIMIT_IDENTITY_WINDOW_SECONDS: '2', INTERLOCK_KEY_PEPPER: 'p'.repeat(32) } });
    expect(cfg).toMatchObject({
      allowed_hosts: ['gw.example.com:443'],
      database: { embedded_data_dir: '/var/lib/interlock', embedded_port: 5433, pool_size: 4 },
      approvals: { ttl_seconds: 600 },
      listen: { host: '::1', port: 8787 },
      cache: { max_bytes: 1024 },
      rate_limits: { per_source: { points: 9, window_seconds: 3 }, per_identity: { points: 120, window_seconds: 2 } },
      key_pepper: 'p'.repeat(32),
    });
  });
});

describe('database.operator_url: the operator connection of the admin API and console', () => {
  test('from INTERLOCK_OPERATOR_DATABASE_URL or the file; several hosts allowed; only postgres URLs; unset by default', () => {
    const url = 'postgres://il_ops:s3cret@db1:5432,db2:5433/interlock?target_session_attrs=read-write';
    expect(loadConfig({ env: { INTERLOCK_OPERATOR_DATABASE_URL: url } }).database).toEqual({ ...DEFAULT_CONFIG.database, operator_url: url });
    const p = file('operator.yaml', 'database:\n  url: postgres://il_rt@db/interlock\n  operator_url: postgresql://il_ops@db/interlock\n');
    expect(loadConfig({ file: p, env: {} }).database).toEqual({ ...DEFAULT_CONFIG.database, url: 'postgres://il_rt@db/interlock', operator_url: 'postgresql://il_ops@db/interlock' });
    // The variable wins over the file, like every other.
    expect(loadConfig({ file: p, env: { INTERLOCK_OPERATOR_DATABASE_URL: url } }).database.operator_url).toBe(url);
    expect(problems(() => loadConfig({ env: { INTERLOCK_OPERATOR_DATABASE_URL: 'mysql://x' } })).details).toEqual(['INTERLOCK_OPERATOR_DATABASE_URL: must match pattern "^postgres(ql)?://"']);
    expect(DEFAULT_CONFIG.database).not.toHaveProperty('operator_url');
    expect(loadConfig({ env: { INTERLOCK_OPERATOR_DATABASE_URL: '' } })).toEqual(DEFAULT_CONFIG);
  });
});

describe('audit.commit_timeout_ms (issue 11)', () => {
  test('set by INTERLOCK_AUDIT_COMMIT_TIMEOUT_MS; outside 100–60000 ms it is refused', () => {
    expect(loadConfig({ env: { INTERLOCK_AUDIT_COMMIT_TIMEOUT_MS: '500' } }).audit).toEqual({ commit_timeout_ms: 500, retention_min_days: 0 });
    expect(loadConfig({ env: { INTERLOCK_AUDIT_RETENTION_MIN_DAYS: '90' } }).audit).toEqual({ commit_timeout_ms: 2000, retention_min_days: 90 });
    expect(() => loadConfig({ env: { INTERLOCK_AUDIT_RETENTION_MIN_DAYS: '-1' } })).toThrow(/invalid configuration/);
    expect(() => loadConfig({ env: { INTERLOCK_AUDIT_COMMIT_TIMEOUT_MS: '50' } })).toThrow(/invalid configuration/);
  });
});
