/**
 * What the connector uses of pg below its typings: the Connection's extended-protocol methods, the
 * client's cancel key, and pg's own parameter encoder.
 */
import { localFailure } from './errors';

// pg's own parameter encoder (Date, arrays, JSON, Buffers → wire values). pg exports ./lib/* for this.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const pgUtils = require('pg/lib/utils') as { prepareValue(value: unknown): unknown };

/** pg's own parameter encoder (a JS array of strings → a PostgreSQL array literal, escaped); throws on values it cannot encode. */
export const prepareValue: (value: unknown) => unknown = pgUtils.prepareValue;

/** What pg's Connection offers below its typings (the methods the extended protocol needs). */
export interface WireConnection {
  stream: NodeJS.WritableStream & NodeJS.EventEmitter & { destroy?(err?: Error): void; cork?(): void; uncork?(): void; remoteAddress?: string; remotePort?: number };
  parse(msg: { text: string; name?: string }): void;
  bind(msg: { portal: string; statement: string; values: unknown[] }): void;
  describe(msg: { type: 'P' | 'S'; name: string }): void;
  execute(msg: { portal: string; rows: number }): void;
  /** Close message: 'S' a named statement, 'P' a portal (closing an unknown name is not an error). */
  close(msg: { type: 'S' | 'P'; name: string }): void;
  sync(): void;
  sendCopyFail(msg: string): void;
  on(ev: string, fn: (...a: unknown[]) => void): void;
  removeListener(ev: string, fn: (...a: unknown[]) => void): void;
}

/** Client internals used for cancellation. */
export interface ClientInternals {
  processID: number | null;
  secretKey: number | null;
  connection: WireConnection;
  getTransactionStatus?(): string | null;
}

/** Encodes parameters as pg would; a value pg cannot encode is the caller's error (not a source failure). */
export function encodeParams(params: unknown[]): unknown[] {
  if (!Array.isArray(params)) throw localFailure('params must be an array');
  try {
    return params.map((p) => prepareValue(p));
  } catch (err) {
    throw localFailure('a parameter could not be encoded', err);
  }
}

