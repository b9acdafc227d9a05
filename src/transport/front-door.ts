/**
 * The front door (issue 29 (a), "a refusal costs at most a tenth of a served call's CPU"; h29a): a
 * refusal at capacity decided in front of node:http's parser. node:http's own floor per request (its
 * parser, IncomingMessage, ServerResponse) is about 0.13× a served call on the reference host, so a
 * refusal made inside its request listener (early-refusal.ts) cannot reach 0.1×; one framed from
 * the connection's bytes and answered with one socket.write can (bench/11-refusal-cost.ts).
 *
 * How it sits on the server (installFrontDoor): the http.Server's own 'connection' listeners
 * (node:http's connectionListener) are taken off and called by the front door, which is the
 * server's only 'connection' listener; handing a connection to node:http is calling them with the
 * socket, which is what node's documented `server.emit('connection', socket)` does. The server stays
 * the listening net.Server: address(), close(), maxConnections and the standby's takeover are
 * untouched. Plain HTTP only (with listen.tls the front door is not installed).
 *
 * Per new connection: while the capacity limiter is not shedding (CapacityLimiter.shedding(): no
 * refusal within the last second), the connection goes straight to node:http, with no other work
 * than that check. Otherwise the front door reads the connection's bytes itself and frames HTTP/1.1
 * requests in a strict subset:
 *  - request line exactly `POST /mcp HTTP/1.1`, header block ≤ HEADER_BLOCK_MAX bytes (and ≤ node's
 *    maxHeaderSize) ending in CRLFCRLF, at most HEADER_LINES_MAX header lines (node keeps
 *    only maxHeadersCount), only printable ASCII and HT, CRLF line ends, no obs-fold, every line
 *    `token ":" OWS value OWS`;
 *  - exactly one Content-Length (digits, ≤ EARLY_BODY_MAX), no Transfer-Encoding, Content-Encoding,
 *    Origin, Expect or Upgrade, Connection absent or `keep-alive`, no duplicate of any header it
 *    reads (READ_HEADERS);
 *  - the same header checks as the early refusal (early-refusal.ts earlyCall: modern
 *    MCP-Protocol-Version, Mcp-Method tools/call, Mcp-Name, Bearer token, Host served, Content-Type,
 *    Accept), then what node:http's path checks before that refusal, in the same order: the body-read
 *    cap (ClientLimits.openBodyRead; refused → handed over, node:http then refuses it as before) and
 *    the keyless gate (a token charged up front → handed over, node:http charges it).
 * For such a request whose identity refuseKnownFromHeaders refuses (counted at once, exactly as the
 * early refusal counts: aggregate audit, metrics, the limiter's `refused`), it waits for the body
 * (Content-Length bytes), reads the JSON-RPC id (JSON.parse), and writes the same bytes node:http's
 * early refusal writes (status line, X-Request-Id, Retry-After, Content-Type, Content-Length, Date,
 * Connection: keep-alive, Keep-Alive: timeout=…, body) with one socket.write, observed as
 * `tools/call modern 429`. The connection stays in the front door for its next request. With
 * admission.pause_refused_connections its bytes are not read (nor those already read, processed)
 * before the Retry-After, as pauseReadingAfter does on node:http's path.
 *
 * At the first request it does not refuse (admitted, outside the subset, HTTP/1.0, a query string,
 * anything it cannot frame), it gives the connection to node:http with every byte it has not
 * consumed (socket.unshift, then node's connection listener): always at a request boundary, before
 * any byte of that request was consumed, so node:http parses it (and answers it: 400, 413, 431, …)
 * exactly as without the front door. From then node:http owns the connection. While the front door
 * is installed, node:http's modern refusals at capacity carry `Connection: close`
 * (DispatchDeps.closeRefusedConnections), so under sustained overload a client's next connection
 * starts in the front door again.
 *
 * Request smuggling: the front door never forwards bytes anywhere but back to node:http on the same
 * connection, at a request boundary (the bytes of requests it answered are consumed, the rest handed
 * over untouched). Its framing is a subset of node's (one Content-Length, no Transfer-Encoding, no
 * obs-fold, no bare CR or LF, no duplicates of the framing headers, ASCII only), so a request it
 * frames is framed the same way by node:http and by any RFC 9112 parser in front of it; everything
 * else is handed over, and when in doubt it hands over.
 *
 * Guarantees kept: headers and request timeouts (a request whose headers are not complete within
 * headersTimeout, or which is not complete within requestTimeout, counted from its first byte or, for
 * a connection's first request, from the connection, gets node's `408 Request Timeout` and the
 * socket is destroyed; checked every connectionsCheckingInterval); an idle connection is destroyed
 * after server.keepAliveTimeout as node:http does; memory per connection ≤ HEADER_BLOCK_MAX +
 * EARLY_BODY_MAX buffered (beyond that the bytes are handed over with the connection), and up to
 * FRAMED_MAX header blocks of ≤ FRAMED_BLOCK_MAX characters remembered once framed (h29b: a block
 * seen again on the connection is not framed or checked again; frameHeaders and earlyCall are pure); an answer
 * not drained within the answer write timeout destroys the socket, and nothing more is read while
 * it waits; closeIdleConnections / closeAllConnections end front-door connections too (new
 * or between requests, resp. all), and after close() a refused request's connection is ended after its answer;
 * a socket error destroys that socket only; no raw error reaches a client. A request handed over
 * while its header block was still incomplete starts node:http's timeouts afresh: its headers may
 * take up to 2 × headersTimeout in all, once per connection (node:http owns it afterwards).
 */
import { maxHeaderSize, STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { bodyId, EARLY_BODY_MAX, earlyCall, type HeaderCall } from './early-refusal';
import { JSON_CONTENT_TYPE, DEFAULT_ANSWER_WRITE_TIMEOUT_MS } from './channel';
import type { OriginPolicy } from './http-headers';
import { bodyReservation, chargedUpFront, clientAddressKey } from './client-limits';
import { answerExpired, modernOverCapacityAnswer, refuseKnownFromHeaders, type DispatchDeps } from '../protocol/dispatch';

/** The largest header block (request line to CRLFCRLF included, bytes) the front door frames; larger ones are handed over. */
export const HEADER_BLOCK_MAX = 16 * 1024;
/** The most header lines the front door frames (node:http keeps at most maxHeadersCount, 2000); more are handed over. */
export const HEADER_LINES_MAX = 100;

const REQUEST_LINE = Buffer.from('POST /mcp HTTP/1.1\r\n', 'latin1');
const CRLFCRLF = Buffer.from('\r\n\r\n', 'latin1');
/** Header blocks up to this many characters are remembered per connection once framed (Connection.frame), at most FRAMED_MAX of them. */
const FRAMED_BLOCK_MAX = 2048;
const FRAMED_MAX = 4;
/** The headers the front door reads: each at most once. */
const READ_HEADERS = new Set(['content-length', 'transfer-encoding', 'content-encoding', 'origin', 'expect', 'upgrade', 'connection', 'host', 'content-type', 'accept', 'authorization', 'mcp-protocol-version', 'mcp-method', 'mcp-name']);
/** Headers whose presence hands the request over. */
const HANDED_OVER = ['transfer-encoding', 'content-encoding', 'origin', 'expect', 'upgrade'];
/** One header line: a token, a colon, the value between optional whitespace; only printable ASCII and HT. */
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([\x21-\x7e](?:[\t\x20-\x7e]*[\x21-\x7e])?)?[ \t]*$/;
const ignore = (): void => undefined;
/** node:http's answer to a request past its headers or request timeout (then the socket is destroyed). */
const TIMEOUT_ANSWER = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n';

/** A request the front door refuses: counted already; its answer is written once its body (`length` bytes) has arrived. */
export interface FrontDoorRefusal {
  length: number;
  version: string;
  requestId: string;
  retryAfterMs: number;
  canonical: string;
  /** The body-read cap's release (idempotent), or null when the request took none. */
  release: (() => void) | null;
}

/** What the front door asks of the gateway: built by frontDoorRefuser from the MCP endpoint's own dependencies. */
export interface FrontDoorRefuser {
  /** True while the capacity limiter is shedding (CapacityLimiter.shedding). */
  shedding(): boolean;
  /** The refusal of a request with headers `h` (lower-case names, trimmed values) on `socket`, counted; null when node:http must serve it. */
  take(h: Readonly<Record<string, string>>, socket: Socket): FrontDoorRefusal | null;
  /** The answer's bytes (one HTTP/1.1 response, as node:http writes the early refusal) for refusal `r` and body `body`; `keepAliveS` is Keep-Alive's timeout (s, 0: none). Observes it. */
  answer(r: FrontDoorRefusal, body: Buffer, keepAliveS: number): string;
  /** Ms a refused connection is not read (admission.pause_refused_connections: the Retry-After), 0 for none. */
  pauseMs(r: FrontDoorRefusal): number;
  /** Ms a written answer may wait undrained before its socket is destroyed (0: no limit). */
  writeTimeoutMs: number;
  /** Logs an answer whose write deadline passed. */
  expired(r: FrontDoorRefusal): void;
}

/**
 * The front door's side of the MCP endpoint (see the module): null when admission by capacity or the
 * aggregate audit is off (the early refusal is off then too). `policy`, `observe` and `bodyLimit` are
 * the endpoint's own (Host/Origin policy, request observer, body limit in bytes).
 */
export function frontDoorRefuser(deps: DispatchDeps, policy: OriginPolicy, observe: ((method: string, dialect: string, status: number, seconds: number) => void) | undefined, bodyLimit: number): FrontDoorRefuser | null {
  const capacity = deps.capacity;
  if (!capacity || !deps.keylessAudit) return null;
  // earlyCall is pure in `h` (and `policy`): a connection's repeated header block (Connection.frame) is checked once.
  const calls = new WeakMap<object, HeaderCall | null>();
  return {
    shedding: () => capacity.shedding(),
    take(h, socket) {
      let call = calls.get(h);
      if (call === undefined) {
        call = earlyCall(h, policy);
        calls.set(h, call);
      }
      // The keyless gate charges a token that fails by its form before anything else: node:http's.
      if (!call || chargedUpFront(deps.identityResolver, call.apiKey)) return null;
      const clientAddress = clientAddressKey(socket.remoteAddress);
      // The body-read cap first, as node:http's listener takes it (admitBody); refused: node:http refuses it.
      let release: (() => void) | null = null;
      const bytes = deps.clientLimits ? bodyReservation(h, bodyLimit) : null;
      if (bytes !== null) {
        const r = deps.clientLimits!.openBodyRead(clientAddress, bytes);
        if (!r.ok) return null;
        release = r.release;
      }
      // A literal of a fixed shape, not `{ ...call, … }`: V8 adds the properties after a spread clone
      // on its slow path, a new hidden class each time (~1.5 µs a refusal; h29k).
      const early = refuseKnownFromHeaders(deps, { apiKey: call.apiKey, tool: call.tool, version: call.version, clientAddress, scope: socket });
      if (!early) {
        release?.();
        return null;
      }
      return { length: Number(h['content-length']), version: call.version, requestId: early.requestId, retryAfterMs: early.refusal.retryAfterMs, canonical: early.canonical, release };
    },
    answer(r, body, keepAliveS) {
      const a = modernOverCapacityAnswer(r.version, bodyId(body.toString('utf8')), r.requestId, r.retryAfterMs)!;
      const keepAlive = keepAliveS > 0 ? `Connection: keep-alive\r\nKeep-Alive: timeout=${keepAliveS}\r\n` : 'Connection: keep-alive\r\n';
      const text = `HTTP/1.1 ${a.status} ${STATUS_CODES[a.status]}\r\nX-Request-Id: ${r.requestId}\r\nRetry-After: ${a.headers['Retry-After']}\r\nContent-Type: ${JSON_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(a.text)}\r\nDate: ${httpDate()}\r\n${keepAlive}\r\n${a.text}`;
      observe?.('tools/call', 'modern', a.status, 0);
      return text;
    },
    pauseMs: (r) => (capacity.settings.pauseRefusedConnections ? r.retryAfterMs : 0),
    writeTimeoutMs: deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS,
    expired: (r) => answerExpired(deps, r.requestId, r.canonical),
  };
}

let dateSecond = -1;
let dateText = '';
/** The Date header's value now (RFC 7231 IMF-fixdate, as node:http writes it), made once per second. */
function httpDate(): string {
  const s = Math.floor(Date.now() / 1000);
  if (s !== dateSecond) {
    dateSecond = s;
    dateText = new Date(s * 1000).toUTCString();
  }
  return dateText;
}

/**
 * The header lines `block` (between the request line and CRLFCRLF, latin1) of a request the front
 * door may refuse, as node:http would give them for the headers it reads (lower-case names, values
 * without surrounding whitespace); null to hand the request over: a line that is not `token ":"
 * OWS value OWS` in printable ASCII and HT (so no obs-fold, bare CR or LF, or non-ASCII byte), more
 * than HEADER_LINES_MAX lines, a duplicate of a header it reads, Transfer-Encoding,
 * Content-Encoding, Origin, Expect or Upgrade, a Connection other than keep-alive, no
 * Content-Length of digits ≤ EARLY_BODY_MAX. Pure.
 */
export function frameHeaders(block: string): Record<string, string> | null {
  const lines = block.split('\r\n');
  if (lines.length > HEADER_LINES_MAX) return null;
  const h: Record<string, string> = {};
  for (const line of lines) {
    const m = HEADER_LINE.exec(line);
    if (!m) return null;
    const name = m[1].toLowerCase();
    if (!READ_HEADERS.has(name)) continue;
    if (h[name] !== undefined) return null;
    h[name] = m[2] ?? '';
  }
  for (const name of HANDED_OVER) if (h[name] !== undefined) return null;
  const connection = h.connection;
  if (connection !== undefined && connection.toLowerCase() !== 'keep-alive') return null;
  const length = h['content-length'];
  if (length === undefined || !/^[0-9]{1,6}$/.test(length) || Number(length) > EARLY_BODY_MAX) return null;
  return h;
}

/** Timeouts of the front door's connections (ms), as the server's (serverTimeouts in src/server.ts). */
export interface FrontDoorTimeouts {
  headersTimeout: number;
  requestTimeout: number;
  connectionsCheckingInterval: number;
}

/** A front door installed on a server (installFrontDoor). */
export interface FrontDoor {
  /** Connections the front door holds now. */
  readonly size: number;
  /** Refusals the front door has written since it was installed. */
  readonly refused: number;
  /** Connections the front door has taken (read itself) since it was installed. */
  readonly adopted: number;
  /** Ends the front door's connections without a byte of a request (new, or between requests; server.closeIdleConnections calls it) and ends the others after their answer. */
  closeIdle(): void;
  /** Destroys every front-door connection (server.closeAllConnections calls it). */
  closeAll(): void;
}

const INSTALLED = Symbol('interlock.frontDoor');

/** The front door installed on `server` (installFrontDoor), or null. */
export function frontDoorOf(server: Server): FrontDoor | null {
  return (server as { [INSTALLED]?: Door })[INSTALLED] ?? null;
}

/**
 * Installs the front door (see the module) on plain-HTTP `server`, deciding with `refuser`: the
 * server's 'connection' listeners are taken off and called by the front door; the server's
 * closeIdleConnections and closeAllConnections end front-door connections too. Installing again on
 * the same server (the standby's takeover) replaces the refuser and timeouts. Returns the door.
 */
export function installFrontDoor(server: Server, refuser: FrontDoorRefuser, timeouts: FrontDoorTimeouts): FrontDoor {
  const prior = (server as { [INSTALLED]?: Door })[INSTALLED];
  if (prior) {
    prior.refuser = refuser;
    prior.timeouts = timeouts;
    return prior;
  }
  const handlers = server.listeners('connection') as Array<(socket: Socket) => void>;
  server.removeAllListeners('connection');
  const door = new Door(server, refuser, timeouts, (socket) => {
    for (const l of handlers) l.call(server, socket);
  });
  (server as { [INSTALLED]?: Door })[INSTALLED] = door;
  server.on('connection', (socket: Socket) => {
    if (!door.closing && door.refuser.shedding()) door.adopt(socket);
    else door.handOver(socket);
  });
  const closeIdle = server.closeIdleConnections.bind(server);
  const closeAll = server.closeAllConnections.bind(server);
  server.closeIdleConnections = () => {
    door.closeIdle();
    closeIdle();
  };
  server.closeAllConnections = () => {
    door.closeAll();
    closeAll();
  };
  return door;
}

/** The front door of one server: its connections, their timeouts and the handover. */
class Door implements FrontDoor {
  readonly conns = new Set<Connection>();
  closing = false;
  refused = 0;
  adopted = 0;
  private timer: NodeJS.Timeout | null = null;
  constructor(
    readonly server: Server,
    public refuser: FrontDoorRefuser,
    public timeouts: FrontDoorTimeouts,
    readonly handOver: (socket: Socket) => void,
  ) {}

  get size(): number {
    return this.conns.size;
  }

  adopt(socket: Socket): void {
    const c = new Connection(this, socket);
    this.conns.add(c);
    this.adopted++;
    this.timer ??= setInterval(() => this.check(), this.timeouts.connectionsCheckingInterval).unref();
  }

  /** The front door no longer holds `c` (handed over or closed). */
  drop(c: Connection): void {
    this.conns.delete(c);
    if (this.conns.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  /** Destroys connections past their headers or request timeout (408 first, as node:http) or idle past keepAliveTimeout. */
  private check(): void {
    const now = Date.now();
    const { headersTimeout, requestTimeout } = this.timeouts;
    const keepAlive = this.server.keepAliveTimeout;
    for (const c of this.conns) {
      if (c.started >= 0) {
        if ((!c.refusal && now - c.started > headersTimeout) || now - c.started > requestTimeout) c.timedOut();
      } else if (keepAlive > 0 && c.holds === 0 && now - c.idleSince > keepAlive) c.destroy();
    }
  }

  closeIdle(): void {
    this.closing = true;
    // As node:http's closeIdleConnections: every connection without a byte of a request yet, a new
    // one included (red team rt41b F6: left open, it held shutdown and was later handed over and served).
    for (const c of this.conns) if (c.idle) c.destroy();
  }

  closeAll(): void {
    this.closing = true;
    for (const c of this.conns) c.destroy();
  }
}

/** One connection in the front door. */
class Connection {
  /** Bytes read and not consumed (the current request's), or null. */
  private buf: Buffer | null = null;
  /**
   * Header blocks this connection sent that frameHeaders framed (not null), by their text, each with
   * its result frozen: a client repeating its headers (Content-Length varying with the body) is framed
   * once per distinct block (issue 29, h29b). At most FRAMED_MAX blocks of ≤ FRAMED_BLOCK_MAX characters.
   */
  private framed: Map<string, Readonly<Record<string, string>>> | null = null;
  /** Clock (ms) at which the current request started (its first byte; the connection for the first), or -1 between requests. */
  started: number;
  idleSince = 0;
  /** The request being refused, waiting for its body. */
  refusal: FrontDoorRefusal | null = null;
  /** Reasons reading is paused (answer not drained, Retry-After); bytes are processed only at 0. */
  holds = 0;
  answered = 0;
  private gone = false;
  /** True when no byte of a request is held or awaited (a new connection, or between requests). */
  get idle(): boolean {
    return this.refusal === null && this.buf === null;
  }
  private readonly onData = (chunk: Buffer): void => {
    this.buf = this.buf ? Buffer.concat([this.buf, chunk]) : chunk;
    this.process();
  };
  private readonly onEnd = (): void => {
    // The client ended its side: nothing more can be framed (node:http, half-open, ends after its answers).
    if (this.started < 0 && !this.buf) this.socket.end();
    else this.destroy();
  };
  private readonly onClose = (): void => this.release();
  private readonly onError = (): void => this.destroy();

  constructor(
    private readonly door: Door,
    readonly socket: Socket,
  ) {
    this.started = Date.now();
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
    socket.on('close', this.onClose);
    socket.on('error', this.onError);
  }

  /** Frames and refuses what the buffer holds, until a request it does not refuse (then hands over) or the bytes run out. */
  private process(): void {
    try {
      while (this.holds === 0 && !this.gone) {
        if (!this.refusal) {
          const buf = this.buf;
          if (!buf) return;
          if (this.started < 0) this.started = Date.now();
          if (!this.takeRequest(buf)) return;
        }
        const r = this.refusal!;
        if (!this.buf || this.buf.length < r.length) return;
        this.answer(r);
      }
    } catch {
      // Nothing here should throw; if it does, the connection's state is unknown: end it.
      this.destroy();
    }
  }

  /** Frames the request at the start of `buf`: true when it is refused (this.refusal set, its header block consumed), false when waiting for more or handed over. */
  private takeRequest(buf: Buffer): boolean {
    const prefix = Math.min(buf.length, REQUEST_LINE.length);
    if (buf.compare(REQUEST_LINE, 0, prefix, 0, prefix) !== 0) return this.handOverNow();
    const limit = Math.min(HEADER_BLOCK_MAX, maxHeaderSize);
    const end = buf.indexOf(CRLFCRLF, REQUEST_LINE.length - 2);
    if (end < 0) {
      if (buf.length >= limit) return this.handOverNow();
      return false;
    }
    const blockEnd = end + 4;
    if (blockEnd > limit || end < REQUEST_LINE.length || this.door.server.maxRequestsPerSocket) return this.handOverNow();
    const h = this.frame(buf.toString('latin1', REQUEST_LINE.length, end));
    const r = h && !this.door.closing ? this.door.refuser.take(h, this.socket) : null;
    if (!r) return this.handOverNow();
    this.refusal = r;
    this.buf = buf.length > blockEnd ? buf.subarray(blockEnd) : null;
    if (r.length === 0) this.buf ??= Buffer.alloc(0);
    return true;
  }

  /** frameHeaders(block), remembered for this connection when it frames (see `framed`); the same frozen object for the same text. */
  private frame(block: string): Readonly<Record<string, string>> | null {
    const known = this.framed?.get(block);
    if (known) return known;
    const h = frameHeaders(block);
    if (h && block.length <= FRAMED_BLOCK_MAX) {
      const m = (this.framed ??= new Map());
      if (m.size >= FRAMED_MAX) m.clear();
      m.set(block, Object.freeze(h));
    }
    return h;
  }

  /** Writes the refusal of `r` (its body is in the buffer) with one socket.write; then the next request. */
  private answer(r: FrontDoorRefusal): void {
    const buf = this.buf!;
    const body = buf.subarray(0, r.length);
    this.buf = buf.length > r.length ? buf.subarray(r.length) : null;
    this.refusal = null;
    r.release?.();
    const text = this.door.refuser.answer(r, body, Math.floor(this.door.server.keepAliveTimeout / 1000));
    this.started = -1;
    this.idleSince = Date.now();
    this.answered++;
    this.door.refused++;
    const socket = this.socket;
    socket.write(text);
    if (this.door.closing) {
      // After close(): this connection's answer is its last, as node:http ends its connections.
      this.detach();
      socket.end();
      return;
    }
    if (socket.writableLength > 0) this.awaitDrain(r);
    const pause = this.door.refuser.pauseMs(r);
    if (pause > 0) {
      this.hold();
      setTimeout(() => this.unhold(), pause).unref();
    }
  }

  /** Reads nothing while the answer waits in memory; destroys the socket when it has not drained within the write timeout. */
  private awaitDrain(r: FrontDoorRefusal): void {
    this.hold();
    const ms = this.door.refuser.writeTimeoutMs;
    const timer = ms > 0 ? setTimeout(() => {
      this.door.refuser.expired(r);
      this.destroy();
    }, ms).unref() : null;
    this.socket.once('drain', () => {
      if (timer) clearTimeout(timer);
      this.unhold();
    });
  }

  private hold(): void {
    if (this.holds++ === 0) this.socket.pause();
  }

  private unhold(): void {
    if (--this.holds > 0 || this.gone) return;
    this.socket.resume();
    this.process();
  }

  /** Gives the connection to node:http with every byte not consumed (at a request boundary). Returns false (nothing refused). */
  private handOverNow(): false {
    const socket = this.socket;
    this.detach();
    if (this.buf) socket.unshift(this.buf);
    this.buf = null;
    this.door.handOver(socket);
    if (socket.isPaused()) socket.resume();
    return false;
  }

  /** Past the headers or request timeout: node:http's 408, then the socket destroyed. */
  timedOut(): void {
    if (this.gone) return;
    this.socket.write(TIMEOUT_ANSWER);
    this.destroy();
  }

  destroy(): void {
    this.detach();
    this.socket.destroy();
  }

  /** The front door lets go of the connection: its listeners off (an error listener kept: a late socket error never reaches the process), the body-read cap given back. */
  private detach(): void {
    if (this.gone) return;
    this.gone = true;
    const socket = this.socket;
    socket.removeListener('data', this.onData);
    socket.removeListener('end', this.onEnd);
    socket.removeListener('close', this.onClose);
    socket.removeListener('error', this.onError);
    socket.on('error', ignore);
    this.release();
  }

  private release(): void {
    this.refusal?.release?.();
    this.refusal = null;
    this.door.drop(this);
  }
}
