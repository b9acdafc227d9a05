/**
 * A fake PostgreSQL server on 127.0.0.1 that records the passwords it is sent (issue 24, item 1):
 * it answers every startup packet with AuthenticationCleartextPassword (`R`, type 3), records the
 * client's PasswordMessage (`p`) with the user name of the startup packet, then refuses the login
 * (ErrorResponse 28P01) and closes. SSLRequests are answered 'N'.
 */
import net from 'node:net';

/** One password the fake was sent, with the startup packet's user and database. */
export interface RecordedLogin {
  user: string;
  database: string;
  password: string;
}

/** A started recording server. */
export interface RecordingPg {
  port: number;
  /** Every password sent so far, in order. */
  logins: RecordedLogin[];
  close(): Promise<void>;
}

function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

const CLEARTEXT = (() => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(3, 0);
  return message('R', b);
})();

const AUTH_FAILED = message('E', Buffer.from('SFATAL\0C28P01\0Mpassword authentication failed\0\0', 'utf8'));

/** The key/value pairs of a StartupMessage body (after length and protocol version). */
function startupParams(body: Buffer): Record<string, string> {
  const parts = body.toString('utf8').split('\0');
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < parts.length && parts[i] !== ''; i += 2) out[parts[i]] = parts[i + 1];
  return out;
}

/** Starts the recording server on a free port. */
export function startRecordingPg(): Promise<RecordingPg> {
  const logins: RecordedLogin[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    let params: Record<string, string> | null = null;
    sock.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      while (!params && buf.length >= 8) {
        const len = buf.readInt32BE(0);
        if (buf.length < len) return;
        const code = buf.readInt32BE(4);
        const body = buf.subarray(8, len);
        buf = buf.subarray(len);
        if (code === 80877103) {
          sock.write('N');
          continue;
        }
        params = startupParams(body);
        sock.write(CLEARTEXT);
      }
      if (!params || buf.length < 5) return;
      const len = buf.readInt32BE(1);
      if (buf.length < len + 1) return;
      // One password message per connection: the message is consumed, so a later Terminate ('X', sent
      // by a client ending the failed connection) is not read as a second login.
      const msg = buf.subarray(0, len + 1);
      buf = buf.subarray(len + 1);
      if (msg[0] === 'p'.charCodeAt(0)) logins.push({ user: params.user ?? '', database: params.database ?? '', password: msg.subarray(5).toString('utf8').replace(/\0$/, '') });
      sock.end(AUTH_FAILED);
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        logins,
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}
