/**
 * The wire budget (issue 10, Build 1): memory per call is bounded while the bytes arrive, before
 * pg decodes anything.
 *
 * pg-protocol buffers each backend message whole before it decodes it (hardening.md), so a cap on
 * decoded rows comes too late: a 600 MB field is held (and, past V8's longest string, throws
 * ERR_STRING_TOO_LONG inside the driver's data handler). Every protocol byte of a connection passes
 * through the guard installed here, in front of pg's parser. The guard reads each message header
 * (1-byte code, int32 length that counts itself) as it arrives and decides before the body is
 * handed on:
 * - a message larger than the call's budget, or a DataRow ('D') that would take the call's running
 *   total of DataRow bytes past its budget, trips the guard: nothing from that message on reaches
 *   pg, so pg holds at most the budget; the call's owner is told at once (it cancels the statement
 *   and destroys the connection);
 * - while no call is armed (idle, connecting, between calls) the per-message cap is
 *   IDLE_MESSAGE_CAP and a trip destroys the connection.
 * An exception thrown by pg's parser while handling bytes (it should not happen within the budget)
 * is caught here and destroys the connection, so it fails the call instead of the process.
 */
import type { EventEmitter } from 'node:events';

/** Code of a DataRow message. */
export const DATA_ROW = 0x44; // 'D'

/**
 * Codes of backend messages that answer nothing the client sent: ErrorResponse ('E': also the FATAL
 * a server sends when it ends a session), NoticeResponse ('N'), ParameterStatus ('S') and
 * NotificationResponse ('A'). Every other message answers a command (WireMeter.answered).
 */
function unsolicited(code: number): boolean {
  return code === 0x45 || code === 0x4e || code === 0x53 || code === 0x41;
}

/** Per-message cap while no call is armed (bytes): startup, notices, parameter status (issue 10). */
export const IDLE_MESSAGE_CAP = 1024 * 1024;

/**
 * Wire budget of a read whose rows' JSON is capped at `maxBytes` (bytes). A row's JSON is rarely
 * smaller than its DataRow (names, quotes and separators outweigh the 4-byte field lengths), so a
 * quarter more, and at least 64 KiB, keeps every row the JSON cap would have kept.
 */
export function readWireBudget(maxBytes: number): number {
  return Math.min(Number.MAX_SAFE_INTEGER, Math.floor(maxBytes) + Math.max(64 * 1024, Math.ceil(maxBytes / 4)));
}

/** Why a guard tripped: the message's code (one character), its size on the wire and the call's DataRow bytes before it. */
export interface WireTrip {
  code: string;
  messageBytes: number;
  totalBytes: number;
  /** 'budget': over the armed call's budget; 'protocol': a malformed header (length below 4). */
  reason: 'budget' | 'protocol';
}

/**
 * Pure message framer and decider. `feed` tells how many leading bytes of a chunk may be handed to
 * the parser, and reports a trip once; after a trip it forwards nothing. Header bytes of the
 * offending message may be forwarded (at most 5 bytes, harmless: the connection is then dropped),
 * its body never is.
 */
export class WireMeter {
  private readonly header = Buffer.alloc(5);
  private headerFill = 0;
  private bodyLeft = 0;
  private total = 0;
  private answers = 0;
  private budget = IDLE_MESSAGE_CAP;
  private armed = false;
  private trippedAt: WireTrip | null = null;

  /** Arms the meter for one call: DataRow bytes from now on count against `budget`, and no message may exceed it. */
  arm(budget: number): void {
    this.budget = budget;
    this.total = 0;
    this.answers = 0;
    this.armed = true;
  }

  /** Back to idle: the per-message cap is IDLE_MESSAGE_CAP and nothing is counted. */
  disarm(): void {
    this.budget = IDLE_MESSAGE_CAP;
    this.total = 0;
    this.armed = false;
  }

  /** True while a call is armed. */
  get isArmed(): boolean {
    return this.armed;
  }

  /** The trip, once one happened (the meter forwards nothing more). */
  get tripped(): WireTrip | null {
    return this.trippedAt;
  }

  /** DataRow bytes seen since the meter was armed. */
  get dataRowBytes(): number {
    return this.total;
  }

  /**
   * Backend messages that answer a command (anything but an ErrorResponse, notice, parameter
   * status or notification: ParseComplete, BindComplete, RowDescription, DataRow, CommandComplete,
   * ReadyForQuery…) whose header arrived since the meter was armed. 0 when a call's connection was
   * lost: the server answered nothing the call sent (task hidle, read.ts retryOnAnother).
   */
  get answered(): number {
    return this.answers;
  }

  /** Reads `chunk`: `forward` leading bytes may go to the parser; `trip` is set on the chunk where the guard trips. */
  feed(chunk: Buffer): { forward: number; trip: WireTrip | null } {
    if (this.trippedAt) return { forward: 0, trip: null };
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.bodyLeft > 0) {
        const take = Math.min(this.bodyLeft, n - i);
        this.bodyLeft -= take;
        i += take;
        continue;
      }
      const take = Math.min(5 - this.headerFill, n - i);
      chunk.copy(this.header, this.headerFill, i, i + take);
      this.headerFill += take;
      i += take;
      if (this.headerFill < 5) break;
      this.headerFill = 0;
      const code = this.header[0];
      const len = this.header.readInt32BE(1);
      const size = len + 1;
      const row = code === DATA_ROW;
      let reason: WireTrip['reason'] | null = null;
      if (len < 4) reason = 'protocol';
      else if (size > this.budget || (row && this.armed && this.total + size > this.budget)) reason = 'budget';
      if (reason) {
        this.trippedAt = { code: String.fromCharCode(code), messageBytes: size, totalBytes: this.total, reason };
        return { forward: i, trip: this.trippedAt };
      }
      if (row && this.armed) this.total += size;
      if (!unsolicited(code)) this.answers++;
      this.bodyLeft = len - 4;
    }
    return { forward: n, trip: null };
  }
}

/** What a call arms a connection's guard with: its budget and what to do when the guard trips. */
export type TripHandler = (trip: WireTrip) => void;

/**
 * A connection's guard: the meter plus the current call's trip handler. Created by `installWireGuard`.
 */
export class WireGuard {
  readonly meter = new WireMeter();
  private handler: TripHandler | null = null;

  constructor(private readonly destroy: (err: Error) => void) {}

  /** Arms the guard for one call. `onTrip` runs once, synchronously, after the rows before the offending message were handed to pg. */
  arm(budget: number, onTrip: TripHandler): void {
    this.meter.arm(budget);
    this.handler = onTrip;
  }

  /** Ends the call's watch (the connection goes back to idle limits). */
  disarm(): void {
    this.meter.disarm();
    this.handler = null;
  }

  /** Called by the stream wrapper when the meter trips. */
  onTrip(trip: WireTrip): void {
    const h = this.handler;
    this.handler = null;
    if (h) {
      try {
        h(trip);
      } catch (err) {
        this.destroy(err instanceof Error ? err : new Error('wire guard handler failed'));
      }
      return;
    }
    this.destroy(new Error(`protocol message over the idle cap (code ${trip.code}, ${trip.messageBytes} bytes)`));
  }

  /** Called by the stream wrapper when pg's parser threw while handling forwarded bytes. */
  onParserError(err: unknown): void {
    this.handler = null;
    this.destroy(err instanceof Error ? err : new Error('protocol parser failed'));
  }
}

/**
 * Puts a guard between `stream` (the connection's socket, or its TLS socket) and the listeners
 * already reading it (pg's parser). Must be called at a message boundary, i.e. once the connection
 * is ready for a query. `destroy` ends the connection (it is called with the reason).
 */
export function installWireGuard(stream: EventEmitter, destroy: (err: Error) => void): WireGuard {
  const guard = new WireGuard(destroy);
  const readers = stream.listeners('data') as Array<(chunk: Buffer) => void>;
  stream.removeAllListeners('data');
  stream.on('data', (chunk: Buffer) => {
    const { forward, trip } = guard.meter.feed(chunk);
    if (forward > 0) {
      const part = forward === chunk.length ? chunk : chunk.subarray(0, forward);
      for (const read of readers) {
        try {
          read.call(stream, part);
        } catch (err) {
          guard.onParserError(err);
          return;
        }
      }
    }
    if (trip) guard.onTrip(trip);
  });
  return guard;
}
