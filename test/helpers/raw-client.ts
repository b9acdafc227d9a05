/**
 * A raw HTTP/1.1 client for tests that need the exact bytes of answers on one keep-alive connection
 * (status line, header lines in order, body), pipelined requests and requests written in pieces.
 */
import { connect, type Socket } from 'node:net';

/** One HTTP/1.1 keep-alive connection that sends a request and reads one Content-Length answer. */
export class RawClient {
  private buf: Buffer = Buffer.alloc(0);
  private readonly waiting: Array<{ resolve: (r: RawAnswer) => void; head: boolean }> = [];
  /** Resolves when the server has closed the connection. */
  readonly ended: Promise<void>;
  private constructor(private readonly sock: Socket) {
    this.ended = new Promise((resolve) => sock.once('close', () => resolve()));
    sock.on('data', (d: Buffer) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      this.parse();
    });
  }
  /** Opens a connection to 127.0.0.1:`port` (no Nagle delay). */
  static open(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => resolve(new RawClient(s)));
      s.once('error', reject);
      s.setNoDelay(true);
    });
  }
  private parse(): void {
    while (this.waiting.length && this.parseOne());
  }
  /** Parses one answer off the buffer for the first waiter; false when it is not complete yet. */
  private parseOne(): boolean {
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) return false;
    const head = this.buf.subarray(0, end).toString('latin1').split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of head.slice(1)) {
      const i = line.indexOf(':');
      headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
    }
    let body: string;
    if (headers['transfer-encoding'] === 'chunked') {
      // A served call may switch to a request-scoped event stream: read the chunks to the last one.
      let at = end + 4;
      const parts: Buffer[] = [];
      for (;;) {
        const eol = this.buf.indexOf('\r\n', at);
        if (eol < 0) return false;
        const size = parseInt(this.buf.subarray(at, eol).toString('latin1'), 16);
        if (this.buf.length < eol + 2 + size + 2) return false;
        parts.push(this.buf.subarray(eol + 2, eol + 2 + size));
        at = eol + 2 + size + 2;
        if (size === 0) break;
      }
      const sse = Buffer.concat(parts).toString('utf8');
      body = sse.split('\n').filter((l) => l.startsWith('data: ')).at(-1)?.slice(6) ?? sse;
      this.buf = this.buf.subarray(at);
    } else if (this.waiting[0].head) {
      // The answer to HEAD: Content-Length gives the size of a body that is not sent.
      body = '';
      this.buf = this.buf.subarray(end + 4);
    } else {
      const len = Number(headers['content-length']);
      if (this.buf.length < end + 4 + len) return false;
      body = this.buf.subarray(end + 4, end + 4 + len).toString('utf8');
      this.buf = this.buf.subarray(end + 4 + len);
    }
    const w = this.waiting.shift()!.resolve;
    let parsed: unknown = body;
    try {
      parsed = JSON.parse(body);
    } catch {
      // not JSON: kept as text, so the test's expectation names it
    }
    w({ status: Number(head[0].split(' ')[1]), headers, body: parsed, raw: `${head.join('\r\n')}\r\n\r\n${body}` });
    return true;
  }
  send(raw: string): Promise<RawAnswer> {
    return this.sendAll([raw], 1).then((a) => a[0]);
  }
  /** Writes `parts` one by one (each its own socket write, in order) and resolves with the next `answers` answers. */
  sendAll(parts: Array<string | Buffer>, answers: number, head = false): Promise<RawAnswer[]> {
    const got = Array.from({ length: answers }, () => new Promise<RawAnswer>((resolve) => this.waiting.push({ resolve, head })));
    for (const p of parts) this.sock.write(p);
    return Promise.all(got);
  }
  close(): void {
    this.sock.destroy();
  }
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: any;
  /** The status line, header lines in order and the body (the decoded data for a chunked one), as received. */
  raw: string;
}
