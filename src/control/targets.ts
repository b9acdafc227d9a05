/**
 * Control-database URLs that name several hosts, and following the primary among them (issue 29,
 * item 2: control-database failover).
 *
 * node-postgres 8.23 takes one host per connection and has no `target_session_attrs`, so the
 * gateway does what libpq does itself: a URL such as
 * `postgresql://user@h1:5432,h2:5433/interlock?target_session_attrs=read-write` is parsed into its
 * hosts; every new connection goes to the host a `PrimaryLocator` last found writable, and the
 * connection is checked after connect (`SHOW transaction_read_only` is `off`, as libpq checks
 * `read-write`). A host that refuses, times out or turns out read-only is forgotten, and the next
 * connection probes every host again (all at once, each bounded by PROBE_TIMEOUT_MS), so pools
 * follow a promoted replica without a restart. A URL with one host and no `target_session_attrs`
 * is used exactly as before (node-postgres parses it).
 *
 * `target_session_attrs` values: `any` (default: the first host that answers) and `read-write`.
 * Other libpq values (read-only, primary, standby, prefer-standby) are refused: the control
 * database is written on every call.
 */
import pg from 'pg';
import { ControlError } from './errors';

/** How long one probe of one host may take to connect and answer, in ms. */
export const PROBE_TIMEOUT_MS = 2000;

/** One host of a control-database URL. */
export interface ControlHost {
  host: string;
  port: number;
}

/** A control-database URL taken apart. */
export interface ControlTargets {
  /** The hosts in URL order (at least one). */
  hosts: ControlHost[];
  /** `read-write`: only a host whose sessions are writable is used; `any`: the first that answers. */
  targetSessionAttrs: 'any' | 'read-write';
  /** True when the URL needs the locator (several hosts, or target_session_attrs given). */
  located: boolean;
  /** The URL for one host, with target_session_attrs removed (every other part as given). */
  urlFor(h: ControlHost): string;
}

const URL_SHAPE = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/s;

/**
 * Parses a control-database URL (`postgres://` or `postgresql://`; hosts separated by commas, each
 * `name`, `name:port`, `[v6]` or `[v6]:port`; default port 5432). Throws ControlError 'validation'
 * for an unknown target_session_attrs, a bad port, or a comma list in a URL that is not of this form.
 */
export function parseControlUrl(url: string): ControlTargets {
  const m = URL_SHAPE.exec(url);
  if (!m) {
    if (/^[a-z]+:\/\/[^/]*,/i.test(url)) throw new ControlError('validation', 'a control database URL with several hosts must start postgres:// or postgresql://');
    return { hosts: [{ host: '', port: 0 }], targetSessionAttrs: 'any', located: false, urlFor: () => url };
  }
  const [, scheme, userinfo = '', hostList, rest] = m;
  const hosts = hostList.split(',').map((h): ControlHost => {
    const v6 = /^\[([^\]]+)\](?::(\d*))?$/.exec(h);
    const [name, port] = v6 ? [v6[1], v6[2]] : [h.replace(/:\d*$/, ''), /:(\d*)$/.exec(h)?.[1]];
    const n = port === undefined || port === '' ? 5432 : Number(port);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new ControlError('validation', `the control database URL has a bad port in host "${h}"`);
    return { host: decodeURIComponent(name), port: n };
  });
  let attrs: 'any' | 'read-write' = 'any';
  let given = false;
  const q = rest.indexOf('?');
  let restOut = rest;
  if (q >= 0) {
    const params = new URLSearchParams(rest.slice(q + 1));
    const v = params.get('target_session_attrs');
    if (v !== null) {
      if (v !== 'any' && v !== 'read-write') throw new ControlError('validation', `target_session_attrs=${v} is not supported for the control database (use read-write or any)`);
      attrs = v;
      given = true;
      params.delete('target_session_attrs');
    }
    const qs = params.toString();
    restOut = rest.slice(0, q) + (qs ? `?${qs}` : '');
  }
  const shown = (h: ControlHost) => (h.host.includes(':') ? `[${h.host}]` : encodeURIComponent(h.host)) + `:${h.port}`;
  return {
    hosts,
    targetSessionAttrs: attrs,
    located: hosts.length > 1 || given,
    urlFor: (h) => `${scheme}${userinfo}${shown(h)}${restOut}`,
  };
}

/** Connection error of a located connect: code '08001' (no usable host) or '25006' (the host is read-only). */
function connectError(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

/**
 * Finds and remembers the usable host of one control-database URL. `target()` resolves the host
 * last found usable, else probes every host at once (one probe at a time per locator) and takes
 * the first usable in URL order; it rejects with code 08001 when none is. `forget(h)` drops a host
 * that failed, so the next connection probes again.
 */
export class PrimaryLocator {
  private current: ControlHost | null = null;
  private probing: Promise<ControlHost> | null = null;
  /** Called with the host found by each probe that changed it (for the log). */
  onChange?: (h: ControlHost, previous: ControlHost | null) => void;
  private last: ControlHost | null = null;

  constructor(readonly targets: ControlTargets) {}

  /** The usable host (see class). */
  target(): Promise<ControlHost> {
    if (this.current) return Promise.resolve(this.current);
    this.probing ??= this.probe().finally(() => {
      this.probing = null;
    });
    return this.probing;
  }

  /** Forgets `h` when it is the remembered host. */
  forget(h: ControlHost): void {
    if (this.current && this.current.host === h.host && this.current.port === h.port) this.current = null;
  }

  /** True when `client`'s session is usable for this URL's target_session_attrs. */
  async usable(client: pg.Client): Promise<boolean> {
    if (this.targets.targetSessionAttrs === 'any') return true;
    const r = await client.query<{ transaction_read_only: string }>('SHOW transaction_read_only');
    return r.rows[0]?.transaction_read_only === 'off';
  }

  private async probe(): Promise<ControlHost> {
    const verdicts = await Promise.all(
      this.targets.hosts.map(async (h) => {
        const c = new pg.Client({ connectionString: this.targets.urlFor(h), connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS, application_name: 'interlock-locate' });
        c.on('error', () => undefined);
        try {
          await c.connect();
          return await this.usable(c);
        } catch {
          return false;
        } finally {
          void c.end().catch(() => undefined);
        }
      }),
    );
    const i = verdicts.indexOf(true);
    if (i < 0) throw connectError(`no ${this.targets.targetSessionAttrs === 'read-write' ? 'read-write ' : ''}control database host answered (${this.targets.hosts.length} tried)`, '08001');
    const found = this.targets.hosts[i];
    if (!this.last || this.last.host !== found.host || this.last.port !== found.port) this.onChange?.(found, this.last);
    this.last = found;
    this.current = found;
    return found;
  }
}

const locators = new Map<string, PrimaryLocator>();

/** The one PrimaryLocator of `url` in this process (pools and listeners of one URL share it). */
export function locatorFor(url: string): PrimaryLocator {
  let l = locators.get(url);
  if (!l) {
    l = new PrimaryLocator(parseControlUrl(url));
    locators.set(url, l);
  }
  return l;
}

/** A pg.Client subclass that connects to its locator's usable host and checks it (see the module). */
function locatedClientClass(locator: PrimaryLocator): typeof pg.Client {
  return class LocatedClient extends ControlClient {
    override connect(): Promise<pg.Client>;
    override connect(callback: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): void;
    override connect(callback?: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): Promise<pg.Client> | void {
      const run = async (): Promise<pg.Client> => {
        const h = await locator.target();
        // pg.Pool's connectionTimeoutMillis destroys the socket when it passes; it may pass while probing.
        if ((this as unknown as { connection: { stream: { destroyed?: boolean } } }).connection.stream.destroyed) throw connectError('timeout while finding the control database primary', '08001');
        // node-postgres reads host and port when it opens the socket (and for cancel requests).
        const self = this as unknown as { host: string; port: number; connectionParameters: { host: string; port: number } };
        self.host = self.connectionParameters.host = h.host;
        self.port = self.connectionParameters.port = h.port;
        try {
          await super.connect();
        } catch (err) {
          locator.forget(h);
          throw err;
        }
        let ok = false;
        try {
          ok = await locator.usable(this);
        } catch (err) {
          locator.forget(h);
          throw err;
        }
        if (!ok) {
          locator.forget(h);
          await this.end().catch(() => undefined);
          throw connectError('the control database host is read-only (not the primary)', '25006');
        }
        return this;
      };
      const p = run();
      if (!callback) return p;
      const cb = callback as (err: Error | null, c?: pg.Client) => void;
      p.then((c) => cb(null, c), (err: Error) => cb(err));
    }
  };
}

/**
 * The startup option every control connection carries: its transactions run at READ COMMITTED
 * whatever the database's or role's default_transaction_isolation (a startup option overrides
 * both). The database-sealed audit chains refuse appends at any other level (0A000, migration
 * 20261212150000000_audit-append-read-committed_hrr), so without it a control database set to
 * repeatable read would fail every honest approval, config and pending-event append.
 */
export const CONTROL_ISOLATION_OPTION = '-c default_transaction_isolation=read\\ committed';

/**
 * The startup `options` of a control connection: what node-postgres resolved (`resolved`: the
 * URL's `options` parameter, else the settings' `options`, else PGOPTIONS), then the settings' own
 * `own` when the URL replaced it (e.g. the operator pool's lock_timeout), then
 * CONTROL_ISOLATION_OPTION. PostgreSQL applies `-c` settings in order, so a later one wins.
 */
export function controlStartupOptions(resolved: string | undefined, own: string | undefined): string {
  const parts: string[] = [];
  if (resolved) parts.push(resolved);
  if (own && own !== resolved) parts.push(own);
  parts.push(CONTROL_ISOLATION_OPTION);
  return parts.join(' ');
}

/**
 * The pg.Client of every control connection: node-postgres's client with its startup options
 * extended by controlStartupOptions after node-postgres has resolved them (a URL's `options`
 * parameter no longer replaces the isolation or the settings' own options).
 */
class ControlClient extends pg.Client {
  constructor(config?: string | pg.ClientConfig) {
    super(config);
    const params = (this as unknown as { connectionParameters: { options?: string } }).connectionParameters;
    params.options = controlStartupOptions(params.options, typeof config === 'object' ? config.options : undefined);
  }
}

/**
 * node-postgres client/pool settings for the control database at `url` plus `extra`
 * (application_name, timeouts, `options` …). The settings always carry `Client`: ControlClient
 * (startup options per controlStartupOptions), or for a located URL (several hosts or
 * target_session_attrs) the located client class built on it, which pg.Pool uses for every
 * connection; `connectionString` is `url`, or the first host's URL when located.
 */
export function controlConnectionConfig(url: string, extra: Omit<pg.PoolConfig, 'Client'>): Omit<pg.PoolConfig, 'Client'> & { connectionString: string; Client: typeof pg.Client } {
  const l = locatorFor(url);
  if (!l.targets.located) return { ...extra, connectionString: url, Client: ControlClient };
  return { ...extra, connectionString: l.targets.urlFor(l.targets.hosts[0]), Client: locatedClientClass(l) };
}

/** A pg.Pool on the control database at `url` (see controlConnectionConfig). */
export function controlPool(url: string, extra: Omit<pg.PoolConfig, 'Client'> = {}): pg.Pool {
  return new pg.Pool(controlConnectionConfig(url, extra));
}

/** A pg.Client (not connected) on the control database at `url` (see controlConnectionConfig). */
export function controlClient(url: string, extra: pg.ClientConfig = {}): pg.Client {
  const cfg = controlConnectionConfig(url, extra as pg.PoolConfig);
  return new cfg.Client(cfg);
}
