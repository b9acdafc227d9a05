/**
 * Loopback network fakes for connector tests:
 * - `startFakePg`: a minimal PostgreSQL wire-protocol server that fails on purpose (startup
 *   ErrorResponse, query-phase ErrorResponse, socket cut mid-query, silence, SSL refusal), with
 *   server text chosen by the test (to check that none of it reaches a SourceError). It holds the
 *   pinned session settings (ParameterStatus and the connector's check), so failures are the queries'.
 * - `startProxy`: a TCP proxy in front of a real server that counts connections and "flights"
 *   (bursts of client bytes between server answers) and records the client's protocol messages.
 */
import net from 'node:net';
import { PINNED_SESSION_SETTINGS } from '../../../src/sources/postgres/session-settings';

/** Builds one backend message: type byte, int32 length, body. */
function msg(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

/** An ErrorResponse with the given fields (S, V, C, M, D, H, …). */
export function errorResponse(fields: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(fields)) parts.push(Buffer.from(k, 'latin1'), Buffer.from(v + '\0', 'utf8'));
  parts.push(Buffer.from([0]));
  return msg('E', Buffer.concat(parts));
}

const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n, 0);
  return b;
};
const AUTH_OK = msg('R', int32(0));
const KEY_DATA = msg('K', Buffer.concat([int32(4242), int32(777)]));
const READY = msg('Z', Buffer.from('I'));
const cstr = (v: string) => Buffer.from(v + '\0', 'utf8');
const int16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n, 0);
  return b;
};
/** ParameterStatus for every pinned setting PostgreSQL reports, with the pinned value (a server that honoured the startup options). */
const PINNED_STATUS = Buffer.concat(PINNED_SESSION_SETTINGS.filter((s) => s.reported).map((s) => msg('S', Buffer.concat([cstr(s.name), cstr(s.expected)]))));
const SYNC = msg('S', Buffer.alloc(0));

/**
 * The answer to the connector's pinned-settings check (`SELECT pg_catalog.set_config('x', 'v', false)
 * AS c0, …, pg_catalog.current_setting('y') AS s0, …` over the extended protocol, pinned-client.ts):
 * one row holding each pinned value, in the statement's column order.
 */
function pinnedSettingsAnswer(text: string): Buffer {
  const cols = [...text.matchAll(/(?:set_config|current_setting)\('([^']+)'[^)]*\) AS ([cs]\d+)/g)].map((m) => ({ name: m[1], column: m[2] }));
  const values = cols.map((c) => PINNED_SESSION_SETTINGS.find((s) => s.name === c.name)?.expected ?? '');
  const columns = cols.map((c) => Buffer.concat([cstr(c.column), int32(0), int16(0), int32(25), int16(-1), int32(-1), int16(0)]));
  const cells = values.map((v) => Buffer.concat([int32(Buffer.byteLength(v)), Buffer.from(v, 'utf8')]));
  return Buffer.concat([
    msg('1', Buffer.alloc(0)),
    msg('2', Buffer.alloc(0)),
    msg('T', Buffer.concat([int16(cols.length), ...columns])),
    msg('D', Buffer.concat([int16(values.length), ...cells])),
    msg('C', cstr('SELECT 1')),
    READY,
  ]);
}

/** What the fake server does after reading the startup packet. */
export type FakeBehaviour =
  | { kind: 'startup_error'; fields: Record<string, string> }
  | { kind: 'query_error'; fields: Record<string, string> }
  | { kind: 'query_cut' }
  | { kind: 'query_silent' }
  /** The first session's first query gets no answer; any later session answers every query (an empty result): a healthy server busy with one statement. */
  | { kind: 'query_silent_first' }
  /** The first session starts and its queries get no answer until a CancelRequest (then 57014); every later session gets no answer to its startup: a source that stops accepting sessions. */
  | { kind: 'silent_after_first' }
  | { kind: 'silent' };

/** A started fake server. */
export interface FakePg {
  port: number;
  connections: number;
  /** CancelRequests received (pid 4242, key 777 is what every fake session announces). */
  cancels: number;
  /** Statement flights received on established sessions, the pinned-settings checks not counted. */
  queries: number;
  close(): Promise<void>;
}

/** Starts a fake PostgreSQL server on 127.0.0.1. SSLRequests are answered 'N' (no SSL). */
export function startFakePg(behaviour: FakeBehaviour): Promise<FakePg> {
  const sockets = new Set<net.Socket>();
  const state = { connections: 0, cancels: 0, queries: 0, silenced: false, sessions: 0, first: null as net.Socket | null };
  const server = net.createServer((sock) => {
    state.connections++;
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    let started = false;
    sock.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!started) {
        while (buf.length >= 8) {
          const len = buf.readInt32BE(0);
          if (buf.length < len) return;
          const code = buf.readInt32BE(4);
          buf = buf.subarray(len);
          if (code === 80877103) {
            sock.write('N');
            continue;
          }
          if (code === 80877102) {
            state.cancels++;
            if (behaviour.kind === 'silent_after_first') state.first?.write(Buffer.concat([errorResponse({ S: 'ERROR', V: 'ERROR', C: '57014', M: 'canceling statement due to user request' }), READY]));
            sock.destroy();
            return;
          }
          started = true;
          state.sessions++;
          if (behaviour.kind === 'silent_after_first' && state.sessions > 1) return;
          if (state.sessions === 1) state.first = sock;
          switch (behaviour.kind) {
            case 'startup_error':
              sock.end(errorResponse(behaviour.fields));
              return;
            case 'silent':
              return;
            default:
              sock.write(Buffer.concat([AUTH_OK, PINNED_STATUS, KEY_DATA, READY]));
              return;
          }
        }
        return;
      }
      // A query arrived on an established fake session.
      if (buf.length === 0) return;
      // The connector's pinned-settings check is answered like a server that honoured the pins.
      if (buf.includes('pg_catalog.current_setting(')) {
        if (!buf.subarray(-SYNC.length).equals(SYNC)) return; // wait for the whole P/B/D/E/S flight
        const text = buf.toString('utf8');
        buf = Buffer.alloc(0);
        sock.write(pinnedSettingsAnswer(text));
        return;
      }
      buf = Buffer.alloc(0);
      state.queries++;
      if (behaviour.kind === 'query_error') sock.write(Buffer.concat([errorResponse(behaviour.fields), READY]));
      else if (behaviour.kind === 'query_cut') sock.destroy();
      else if (behaviour.kind === 'query_silent_first') {
        if (!state.silenced) state.silenced = true;
        else sock.write(Buffer.concat([msg('C', Buffer.from('SELECT 0\0')), READY]));
      }
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      resolve({
        port,
        get connections() {
          return state.connections;
        },
        get cancels() {
          return state.cancels;
        },
        get queries() {
          return state.queries;
        },
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}

/** A counting TCP proxy in front of `target`. */
export interface Proxy {
  port: number;
  /** Connections accepted so far. */
  connections: number;
  /** Client→server flights since the last `reset()` (a flight ends when the server answers). */
  flights: number;
  /** Message type bytes of the client's frontend messages since the last `reset()` (after startup). */
  clientMessages: string[];
  reset(): void;
  /** Destroys every proxied connection (both sides). */
  cutAll(): void;
  /**
   * Call while every proxied connection is idle (at a message boundary): the next answer a server
   * sends is forwarded up to and including its first DataRow, then that connection is cut (both
   * sides, nothing more forwarded): a connection dying mid-result, after rows started (task hidle).
   */
  cutAfterFirstRow(): void;
  /**
   * Holds back what the servers of the connections open now send (data and their closing) until
   * the proxy's client next writes on that connection; then forwards it all at once (and the close)
   * and proxies as usual. Stages a session the server ended while the client's pool held it idle,
   * whose FATAL and socket end the client reads only after it sent its next statement (task hidle;
   * in the field: the checkout falling between the server's termination and the client's reading of it).
   */
  holdIdle(): void;
  /**
   * The next simple-protocol `COMMIT` a client sends (a Query message whose text is COMMIT) ends its
   * connection (task hcommit): 'after' forwards it to the server and then closes the server's side
   * (the server reads COMMIT, commits, then reads the end) and cuts the client's side at once (it gets
   * no answer); 'before' cuts both sides without forwarding it (the server sees its session end inside
   * the transaction and rolls back). `then` runs right after the cut.
   */
  cutAtCommit(when: 'before' | 'after', then?: () => void): void;
  /**
   * Task hfollow: the next simple-protocol `COMMIT` a client sends cuts the client's side at once (it
   * gets no answer) but is NOT forwarded, and the server's side stays open: the server's session sits
   * idle in its transaction (txid_status says 'in progress') until the returned handle's `commit()`
   * (forwards the COMMIT late, then closes: the server commits) or `abort()` (closes: it rolls back).
   * `ended` resolves when the server's side has closed (for whatever reason, a terminated backend too).
   */
  holdAtCommit(): HeldCommit;
  /**
   * Calls `fn` with each answer (the server's bytes up to ReadyForQuery, as latin1 text) to a client
   * message containing `text`, on any connection, after forwarding it to the client; until `off()`.
   */
  onAnswer(text: string, fn: (answer: string) => void): { off(): void };
  /** While down, new connections are closed at once and existing ones are cut (left open with `cutOpen` false). */
  setDown(down: boolean, cutOpen?: boolean): void;
  close(): Promise<void>;
}

/** A COMMIT holdAtCommit kept from the server (see there). */
export interface HeldCommit {
  /** Resolves once the COMMIT was held (the client's side cut). */
  held: Promise<void>;
  commit(): void;
  abort(): void;
  ended: Promise<void>;
}

/** True when `d` is exactly one simple-protocol Query message whose text is COMMIT. */
function isCommitQuery(d: Buffer): boolean {
  return d.length >= 5 && d[0] === 0x51 && d.readInt32BE(1) + 1 === d.length && /^COMMIT\0$/i.test(d.subarray(5).toString('latin1'));
}

/** Starts a proxy on 127.0.0.1 forwarding to `target`. */
export function startProxy(target: { host: string; port: number }): Promise<Proxy> {
  const pairs = new Set<[net.Socket, net.Socket]>();
  const holding = new Set<net.Socket>();
  const heldSides = new Set<net.Socket>();
  const watchers = new Set<{ text: string; fn: (answer: string) => void }>();
  let hold: null | { onHeld: (commitMsg: Buffer, upstream: net.Socket) => void } = null;
  const st = { connections: 0, flights: 0, clientMessages: [] as string[], down: false, cutAfterRow: false, cutAtCommit: null as null | { when: 'before' | 'after'; then?: () => void } };
  const server = net.createServer((client) => {
    st.connections++;
    if (st.down) {
      client.destroy();
      return;
    }
    const upstream = net.connect(target.port, target.host);
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    let lastFromClient = false;
    let pending = Buffer.alloc(0);
    let startupDone = false;
    const parseClient = (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        if (!startupDone) {
          if (pending.length < 4) return;
          const len = pending.readInt32BE(0);
          if (pending.length < len) return;
          pending = pending.subarray(len);
          startupDone = true;
          continue;
        }
        if (pending.length < 5) return;
        const len = pending.readInt32BE(1);
        if (pending.length < len + 1) return;
        st.clientMessages.push(String.fromCharCode(pending[0]));
        pending = pending.subarray(len + 1);
      }
    };
    /** What holdIdle held back of the server's side, and whether the server closed meanwhile. */
    const idleHeld: Buffer[] = [];
    let upstreamGone = false;
    /** Watchers whose text the client's last message contained, and the answer read so far. */
    let asked: Array<{ text: string; fn: (answer: string) => void }> = [];
    let answer = '';
    let detached = false;
    client.on('data', (d: Buffer) => {
      if (hold && isCommitQuery(d)) {
        const h = hold;
        hold = null;
        parseClient(d);
        pairs.delete(pair);
        detached = true;
        client.destroy();
        h.onHeld(d, upstream);
        return;
      }
      if (watchers.size > 0) {
        const text = d.toString('latin1');
        const hit = [...watchers].filter((w) => text.includes(w.text));
        if (hit.length > 0) {
          asked = hit;
          answer = '';
        }
      }
      const cut = st.cutAtCommit;
      if (cut && isCommitQuery(d)) {
        st.cutAtCommit = null;
        parseClient(d);
        pairs.delete(pair);
        if (cut.when === 'after') {
          upstream.end(d);
        } else upstream.destroy();
        client.destroy();
        cut.then?.();
        return;
      }
      if (!lastFromClient) st.flights++;
      lastFromClient = true;
      parseClient(d);
      if (holding.delete(client)) {
        for (const b of idleHeld.splice(0)) client.write(b);
        if (upstreamGone) return void client.end(() => end());
      }
      if (!upstreamGone) upstream.write(d);
    });
    let held = Buffer.alloc(0);
    upstream.on('data', (d: Buffer) => {
      if (detached) return;
      lastFromClient = false;
      if (asked.length > 0) {
        answer += d.toString('latin1');
        if (d.length >= 6 && d[d.length - 6] === 0x5a && d.readInt32BE(d.length - 5) === 5) {
          const fns = asked;
          const text = answer;
          asked = [];
          answer = '';
          client.write(d, () => {
            for (const w of fns) if (watchers.has(w)) w.fn(text);
          });
          return;
        }
      }
      if (holding.has(client)) return void idleHeld.push(d);
      if (!st.cutAfterRow) return void client.write(d);
      held = Buffer.concat([held, d]);
      for (let at = 0; held.length >= at + 5; ) {
        const next = at + 1 + held.readInt32BE(at + 1);
        if (held.length < next) break;
        if (held[at] === 0x44) {
          st.cutAfterRow = false;
          client.write(held.subarray(0, next), () => end());
          return;
        }
        at = next;
      }
    });
    const end = () => {
      if (detached) return void client.destroy();
      holding.delete(client);
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    const upstreamEnded = () => {
      upstreamGone = true;
      if (!holding.has(client)) end();
    };
    client.on('close', end);
    upstream.on('close', upstreamEnded);
    client.on('error', end);
    upstream.on('error', upstreamEnded);
  });
  const cutAll = () => {
    holding.clear();
    for (const u of heldSides) u.destroy();
    for (const [a, b] of pairs) {
      a.destroy();
      b.destroy();
    }
  };
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      resolve({
        port,
        get connections() {
          return st.connections;
        },
        get flights() {
          return st.flights;
        },
        get clientMessages() {
          return st.clientMessages;
        },
        reset() {
          st.flights = 0;
          st.clientMessages = [];
        },
        cutAll,
        cutAfterFirstRow() {
          st.cutAfterRow = true;
        },
        cutAtCommit(when: 'before' | 'after', then?: () => void) {
          st.cutAtCommit = { when, then };
        },
        holdAtCommit() {
          let markHeld!: () => void;
          let markEnded!: () => void;
          const held = new Promise<void>((r) => (markHeld = r));
          const ended = new Promise<void>((r) => (markEnded = r));
          let kept: null | { msg: Buffer; upstream: net.Socket } = null;
          hold = {
            onHeld(msg, upstream) {
              kept = { msg, upstream };
              heldSides.add(upstream);
              upstream.once('close', () => heldSides.delete(upstream));
              if (upstream.destroyed) markEnded();
              else upstream.once('close', () => markEnded());
              markHeld();
            },
          };
          return {
            held,
            ended,
            commit() {
              if (kept) kept.upstream.end(kept.msg);
            },
            abort() {
              kept?.upstream.destroy();
            },
          };
        },
        onAnswer(text: string, fn: (answer: string) => void) {
          const w = { text, fn };
          watchers.add(w);
          return { off: () => void watchers.delete(w) };
        },
        holdIdle() {
          for (const [c] of pairs) holding.add(c);
        },
        setDown(down: boolean, cutOpen = true) {
          st.down = down;
          if (down && cutOpen) cutAll();
        },
        close: () =>
          new Promise<void>((r) => {
            cutAll();
            server.close(() => r());
          }),
      });
    });
  });
}

/** A proxy that forwards everything, but drops the `options` parameter from the startup packet (and can override others). */
export interface StrippingProxy {
  port: number;
  /** Startup packets seen: the parameters the client sent, before stripping. */
  startups: Array<Record<string, string>>;
  close(): Promise<void>;
}

/**
 * Starts a proxy on 127.0.0.1 in front of `target` that behaves like a connection pooler dropping
 * startup options (issue 22 item 2): the client's `options` (`-c name=value …`) never reach the
 * server, so role and database defaults stay in force; `override` replaces startup parameters the way
 * a pooler sets its own (e.g. client_encoding). Plain TCP only (no SSLRequest handling).
 */
export function startOptionsStrippingProxy(target: { host: string; port: number }, override: Record<string, string> = {}): Promise<StrippingProxy> {
  const sockets = new Set<net.Socket>();
  const startups: Array<Record<string, string>> = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(client).add(upstream);
    let head = Buffer.alloc(0);
    let started = false;
    const onData = (d: Buffer) => {
      if (started) {
        upstream.write(d);
        return;
      }
      head = Buffer.concat([head, d]);
      if (head.length < 4 || head.length < head.readInt32BE(0)) return;
      const len = head.readInt32BE(0);
      const parts = head.subarray(8, len - 1).toString('utf8').split('\0');
      const params: Record<string, string> = {};
      for (let i = 0; i + 1 < parts.length; i += 2) params[parts[i]] = parts[i + 1];
      startups.push(params);
      const kept = Object.entries({ ...params, ...override }).filter(([k]) => k !== 'options').flatMap(([k, v]) => [k, v]);
      const body = Buffer.from(kept.join('\0') + '\0\0', 'utf8');
      const packet = Buffer.alloc(8);
      packet.writeInt32BE(8 + body.length, 0);
      packet.writeInt32BE(head.readInt32BE(4), 4);
      upstream.write(Buffer.concat([packet, body, head.subarray(len)]));
      started = true;
    };
    client.on('data', onData);
    upstream.on('data', (d: Buffer) => client.write(d));
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on('close', end);
      s.on('error', end);
    }
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        startups,
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}
