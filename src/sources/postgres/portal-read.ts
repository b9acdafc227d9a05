/**
 * One read on the wire (sql-safety layers 4 and 6): the result shapes, and the pg Submittable that
 * runs the agent's statement as Parse/Bind/Describe/Execute(row limit)/Sync in one round trip and
 * keeps rows only while their JSON fits the byte cap. Values are decoded by the value mapping
 * (values.ts, issue 23), never by node-postgres's default parsers. The wire budget (wire-budget.ts) bounds what
 * reaches it before decoding; this module bounds what it keeps after.
 */
import { jsonBytes } from './raw-json';
import type { Decoder, SourceTypes } from './values';
import { prepareValue, type WireConnection } from './wire';

/** A column of a read result: its name and the PostgreSQL type OID. */
export interface ReadField {
  name: string;
  dataTypeId: number;
}

/**
 * A read's result.
 * - `fields`: the columns in order.
 * - `rows`: one object per row keyed by column name (for duplicate names the later column wins),
 *   built from `rowsArray` on first access.
 * - `rowsArray`: the same rows as arrays in column order (nothing lost to duplicate names).
 * - `truncated`: more rows existed than maxRows, or rows were dropped to stay within maxBytes.
 * - `bytes`: UTF-8 length of the rows' JSON text (`jsonText(rows)`, always ≤ maxBytes unless even `[]` is larger).
 */
export interface ReadResult {
  fields: ReadField[];
  rows: Record<string, unknown>[];
  rowsArray: unknown[][];
  truncated: boolean;
  /** When `truncated`: `max_bytes` if rows were dropped to stay within maxBytes (or the wire budget), else `max_rows`; null otherwise. */
  truncatedBy: 'max_rows' | 'max_bytes' | null;
  bytes: number;
  /**
   * Set when the read's `guard` raised an error: the statement was not executed (the server skips
   * everything after an error up to Sync), `rows` is empty, and the caller must decide again
   * before reading. Absent when the read had no guard or the guard passed.
   */
  guardTripped?: true;
  /**
   * Set when the read's `functionGuard` raised its error (task hf5): a user function the statement
   * runs is not the one the catalogue scan recorded; the statement was not executed, `rows` is empty.
   */
  functionsChanged?: true;
  /**
   * Set when a reader connection opened for this read, with `searchPath` pinned, resolves names on
   * another lookup path (read.ts readFrom, task flake47): the source changed since the catalogue
   * scan; the statement was not run, `rows` is empty.
   */
  searchPathChanged?: true;
}

/**
 * A precondition run in the same round trip and implicit transaction right before the statement
 * (issue 23, bench 01: the live hierarchy probe). `text` must return no rows and raise an error
 * when the precondition does not hold; `values` are its text parameters. It runs as a named
 * prepared statement like the statement itself.
 */
export interface ReadGuard {
  text: string;
  values: string[];
}

/**
 * Options of a read: `maxRows` (integer ≥ 0), `maxBytes` (bytes of the rows' JSON; the call's wire
 * budget derives from it, see readWireBudget), the caller's cancellation signal, and `identityId`
 * (the agent identity whose per-source concurrency cap applies; absent: no per-identity cap).
 */
export interface ReadOptions {
  maxRows: number;
  maxBytes: number;
  signal?: AbortSignal;
  identityId?: string;
  /**
   * Custom settings bound right before the statement (issue 27: row-rule attribute values,
   * `interlock.attr.*`), as name/value pairs sent as bound parameters of one `set_config(…, true)`
   * statement (BIND_SETTINGS_SQL), never spliced into text. It runs in the read's own round trip and
   * implicit transaction, so the values end with it (commit, error or lost connection alike) and no
   * later read on the connection can see them.
   */
  settings?: ReadonlyArray<readonly [string, string]>;
  /** A precondition run right before the statement in the same round trip (ReadGuard); when it fails the statement does not run. */
  guard?: ReadGuard;
  /**
   * The lookup path the statement was analysed on (the catalogue's `searchPath`, the reader's
   * `current_schemas(false)` at the scan). When given, the read runs only on a connection whose path
   * was the same when it connected (PinnedClient.searchPath): an older connection that differs is
   * dropped and another taken; a fresh one that differs ends the read with `searchPathChanged`, its
   * statement not run, since the server would resolve the statement's unqualified names elsewhere
   * than the analysis did (red team rt42 G3; the pipeline answers `catalog_stale` and the gateway
   * rescans, task flake47).
   */
  searchPath?: readonly string[];
  /**
   * A second precondition of the same kind (task hf5; src/sources/postgres/function-guard.ts): the
   * user functions the statement runs are still the scanned ones. Run after the settings and
   * before `guard`; when it raises GUARD_SQLSTATE the read resolves with `functionsChanged`.
   */
  functionGuard?: ReadGuard;
  /**
   * When given, the read adds to `poolMs` the milliseconds it waited for a connection of the
   * source's shared reader pool (SourcePools.checkout), after its identity's slot was granted: the
   * wait for its own identity's slot (fair-share.ts) is not in it. Admission by capacity counts this
   * wait in its latency sample and leaves out the rest of the read (issue 29, src/transport/capacity.ts).
   * The connector (connector.ts `read`) adds to `slotMs` the milliseconds the read waited for its
   * identity's own slot (0 when one was free), whether or not it got one: admission by capacity's
   * per-identity limit samples that wait (issue 29, h29i).
   */
  poolWait?: { poolMs: number; slotMs?: number };
  /**
   * False when the statement runs user functions (`SqlAnalysisOk.userFunctions`; red team rt43a B1):
   * a connection lost before the server answered anything is then NOT retried on another
   * (read.ts readFrom), since the server may have run the statement (a reset after it arrived, a
   * backend terminated mid-statement) and a trusted function can have an effect outside the read's
   * transaction (dblink, a mislabelled volatile function): never run twice. Default true: a statement
   * of built-ins only has no effect outside its read-only transaction, so running it again is safe.
   */
  retryIfLost?: boolean;
}

/**
 * The statement that binds a read's `settings` (issue 27): `$1` the names, `$2` the values (text
 * arrays, pg's own array encoding), each set with `is_local = true` — transaction-local, so they
 * last only until the read's Sync ends its implicit transaction. Returns one small row, the count
 * (ignored by the read): the values themselves never come back, so a long attribute list costs
 * nothing of the read's wire budget. Prepared once per connection like the statement itself.
 */
export const BIND_SETTINGS_SQL = 'SELECT pg_catalog.count(pg_catalog.set_config(s.name, s.value, true)) FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) AS s(name, value)';

/** A command run before the statement in the same Sync: the settings' binding, then the guard. */
type Prelude = 'settings' | 'functions' | 'guard';

/** A type not loaded yet: its text, as the mapping gives every non-array type it does not list. */
const textValue: Decoder = (s) => s;

type FieldMsg = { name: string; dataTypeID: number; format?: string };

/** Most named statements a reader connection keeps (least recently used first out, closed on the wire). */
export const STATEMENTS_PER_CONNECTION = 100;

/**
 * Longest statement text (characters) kept as a named statement; longer texts run as the unnamed
 * statement, freed by the next Parse. A prepared statement holds several times its text in the
 * source's backend (red team: ~530 KB for a 95 KB text), so an agent sending long distinct texts
 * could otherwise pin pool_size × 100 of them on the operator's database.
 */
export const NAMED_STATEMENT_MAX_CHARS = 4096;

/** Most statement text (characters, summed) a reader connection keeps as named statements. */
export const NAMED_STATEMENT_CHARS_PER_CONNECTION = 128 * 1024;

/**
 * A named statement's result columns as a read uses them: `fields` (frozen, shared by every result
 * of the statement), `names`, and the columns a row object keeps (the last of duplicate names) with
 * the UTF-8 bytes of `"name":`.
 */
interface Description {
  fields: ReadField[];
  names: string[];
  objectColumns: Array<{ index: number; keyBytes: number }>;
}

/**
 * The named statements of one connection: statement text → name, least recently used first. A
 * text is entered only once PostgreSQL confirmed its Parse (ParseComplete), so a name here always
 * exists on that connection and was parsed from exactly that text, with no declared parameter
 * types (PostgreSQL infers them from the text, as for the unnamed statement). `toClose`: names
 * evicted or abandoned, closed (Close 'S') at the head of the next read on the connection. Kept per
 * pg Connection object: a replaced or destroyed connection takes its names with it.
 *
 * `described`: name → the result columns a read of it was told (RowDescription). A statement
 * prepared over the protocol has a fixed result type: when a catalogue change would alter its
 * columns (names, types or type modifiers), PostgreSQL refuses its Bind with 0A000 "cached plan
 * must not change result type" before any row (isStaleStatementError: the read parses the text
 * again under a new name). So a later read of a described name sends no Describe and uses the kept
 * columns (issue 28, h28x: one RowDescription less to build, send and parse per read).
 */
interface ConnectionStatements {
  byText: Map<string, string>;
  described: Map<string, Description>;
  /** Characters of the texts in byText. */
  chars: number;
  next: number;
  toClose: string[];
}

const statementsByConnection = new WeakMap<object, ConnectionStatements>();

function statementsOf(connection: object): ConnectionStatements {
  let st = statementsByConnection.get(connection);
  if (!st) statementsByConnection.set(connection, (st = { byText: new Map(), described: new Map(), chars: 0, next: 1, toClose: [] }));
  return st;
}

/**
 * Whether a read failed only because of its connection's named statement, so parsing the text again
 * will do: the plan's result columns changed under it (0A000 "cached plan must not change result
 * type", after a catalogue change) or the name is unknown to the server (26000).
 */
export function isStaleStatementError(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown };
  return e.code === '26000' || (e.code === '0A000' && typeof e.message === 'string' && e.message.includes('cached plan must not change result type'));
}

/**
 * One read as a pg Submittable: Parse of a named statement the first time the connection sees the
 * text (then Bind to that name only), Bind (unnamed portal, text results), Describe portal (only
 * until the connection knows the named statement's columns: ConnectionStatements `described`),
 * Execute with row limit `maxRows + 1`, Sync — written in one go, so the read is one round trip and
 * the unnamed portal is closed by the Sync. Rows past the cap are not parsed. `reparse`: parse the text
 * under a new name even if the connection has one (the retry after isStaleStatementError; the old
 * name is closed). `usedNamedStatement` tells the caller whether the read bound an existing name.
 */
export class PortalRead {
  fields: ReadField[] = [];
  rowsArray: unknown[][] = [];
  truncated = false;
  bytes = 2; // "[]"
  /** A row was dropped because its JSON would pass maxBytes. */
  overByteCap = false;
  /** The wire budget ended the read (truncatedResult). */
  private cutByWire = false;
  /** Why the connection must not be reused even though the statement succeeded (null: nothing odd). */
  unexpected: string | null = null;
  private names: string[] = [];
  /** The columns a row object keeps (the last of duplicate names) and the UTF-8 bytes of `"name":`. */
  private objectColumns: Array<{ index: number; keyBytes: number }> = [];
  /** Where the statement's RowDescription is kept once it arrives (its connection's `described`, under its name); null: not kept (the unnamed statement, or already known). */
  private describing: { st: ConnectionStatements; name: string } | null = null;
  private parsers: Decoder[] = [];
  /** Column type OIDs the source's types had no decoder for yet (decoded as text by this read; load them and read again). */
  unknownTypes: number[] = [];
  private full = false;
  private done = false;
  private markEnded: (() => void) | null = null;
  private endedPromise: Promise<void> | null = null;
  /**
   * Settles when the statement ended on the wire (ReadyForQuery, an error, or the connection's loss).
   * Made when first asked (only a read that gives up asks): no promise per read otherwise (h28s).
   */
  get ended(): Promise<void> {
    return (this.endedPromise ??= this.done ? Promise.resolve() : new Promise<void>((r) => (this.markEnded = r)));
  }
  private connection: WireConnection | null = null;
  /** The read bound a statement the connection already had (a failure may be a stale plan). */
  usedNamedStatement = false;
  /** The names this read's Parses create, in order, each entered once its ParseComplete confirms it. */
  private parsing: Array<{ st: ConnectionStatements; name: string; text: string }> = [];
  /** Commands sent before the statement that have not completed yet, in order (an error while the guard is first is the guard's: the statement did not run). */
  private pending: Prelude[] = [];
  /** The guard raised an error: the statement was not executed. */
  guardTripped = false;
  /** The function guard raised an error: the statement was not executed. */
  functionsChanged = false;
  private readonly onParameterStatus = () => {
    this.unexpected ??= 'session parameter changed';
  };
  private readonly onParseComplete = () => {
    const p = this.parsing.shift();
    if (!p) return;
    p.st.byText.set(p.text, p.name);
    p.st.chars += p.text.length;
  };

  constructor(
    private readonly text: string,
    private readonly values: unknown[],
    private readonly maxRows: number,
    private readonly maxBytes: number,
    private readonly onDone: (err: unknown) => void,
    private readonly types: SourceTypes,
    private readonly reparse = false,
    private readonly guard?: ReadGuard,
    private readonly settings?: ReadonlyArray<readonly [string, string]>,
    private readonly functionGuard?: ReadGuard,
  ) {}

  /**
   * The statement name `text` runs as on this connection: an existing name (most recently used
   * now), or a new one to Parse (`parse` true; entered on ParseComplete), or '' for a text too long
   * to keep. `reparse`: parse under a new name even when one exists (the old one is closed).
   */
  private statementFor(st: ConnectionStatements, text: string, reparse: boolean, connection: WireConnection): { name: string; parse: boolean; existing: boolean } {
    const name = st.byText.get(text);
    if (name !== undefined && !reparse) {
      st.byText.delete(text); // most recently used last
      st.byText.set(text, name);
      return { name, parse: false, existing: true };
    }
    if (name !== undefined) {
      st.byText.delete(text);
      st.chars -= text.length;
      st.toClose.push(name);
    }
    if (text.length > NAMED_STATEMENT_MAX_CHARS) return { name: '', parse: true, existing: false }; // the unnamed statement: replaced by the next Parse, never kept
    while (st.byText.size > 0 && (st.byText.size >= STATEMENTS_PER_CONNECTION || st.chars + text.length > NAMED_STATEMENT_CHARS_PER_CONNECTION)) {
      const [oldText, oldName] = st.byText.entries().next().value as [string, string];
      st.byText.delete(oldText);
      st.chars -= oldText.length;
      st.toClose.push(oldName);
    }
    const fresh = `interlock_r${st.next++}`;
    if (this.parsing.length === 0) connection.on('parseComplete', this.onParseComplete);
    this.parsing.push({ st, name: fresh, text });
    return { name: fresh, parse: true, existing: false };
  }

  submit(connection: WireConnection): void {
    this.connection = connection;
    connection.on('parameterStatus', this.onParameterStatus);
    const st = statementsOf(connection);
    // The preludes' names first: a statement's new name must not evict them within this round trip.
    const binding = this.settings && this.settings.length > 0 ? this.statementFor(st, BIND_SETTINGS_SQL, false, connection) : null;
    const fnGuard = this.functionGuard ? this.statementFor(st, this.functionGuard.text, false, connection) : null;
    const guard = this.guard ? this.statementFor(st, this.guard.text, false, connection) : null;
    const main = this.statementFor(st, this.text, this.reparse, connection);
    this.usedNamedStatement = main.existing;
    this.pending = [...(binding ? (['settings'] as const) : []), ...(fnGuard ? (['functions'] as const) : []), ...(guard ? (['guard'] as const) : [])];
    const known = main.existing ? st.described.get(main.name) : undefined;
    if (known) this.useDescription(known);
    else if (main.name !== '') this.describing = { st, name: main.name };
    const s = connection.stream;
    s.cork?.();
    try {
      for (const old of st.toClose.splice(0)) {
        connection.close({ type: 'S', name: old });
        st.described.delete(old);
      }
      if (binding && this.settings) {
        // Everything up to the Sync is one implicit transaction: the values are gone once it ends.
        if (binding.parse) connection.parse({ name: binding.name, text: BIND_SETTINGS_SQL });
        connection.bind({ portal: '', statement: binding.name, values: [prepareValue(this.settings.map((x) => x[0])), prepareValue(this.settings.map((x) => x[1]))] });
        connection.execute({ portal: '', rows: 0 });
      }
      if (fnGuard && this.functionGuard) {
        if (fnGuard.parse) connection.parse({ name: fnGuard.name, text: this.functionGuard.text });
        connection.bind({ portal: '', statement: fnGuard.name, values: this.functionGuard.values });
        connection.execute({ portal: '', rows: 0 });
      }
      if (guard && this.guard) {
        if (guard.parse) connection.parse({ name: guard.name, text: this.guard.text });
        connection.bind({ portal: '', statement: guard.name, values: this.guard.values });
        connection.execute({ portal: '', rows: 0 });
      }
      if (main.parse) connection.parse({ name: main.name, text: this.text });
      connection.bind({ portal: '', statement: main.name, values: this.values });
      if (!known) connection.describe({ type: 'P', name: '' });
      connection.execute({ portal: '', rows: this.maxRows + 1 });
      connection.sync();
    } finally {
      s.uncork?.();
    }
  }

  handleRowDescription(msg: { fields: FieldMsg[] }): void {
    const fields = Object.freeze(msg.fields.map((f) => Object.freeze({ name: f.name, dataTypeId: f.dataTypeID }))) as ReadField[];
    const names = fields.map((f) => f.name);
    const last = new Map<string, number>();
    names.forEach((n, i) => last.set(n, i));
    const d: Description = { fields, names, objectColumns: [...last.entries()].map(([name, index]) => ({ index, keyBytes: Buffer.byteLength(JSON.stringify(name), 'utf8') + 1 })) };
    if (this.describing) {
      this.describing.st.described.set(this.describing.name, d);
      this.describing = null;
    }
    this.useDescription(d);
  }

  /** Takes the statement's columns (told now, or kept from an earlier read of its name) and their decoders from the source's types. */
  private useDescription(d: Description): void {
    this.fields = d.fields;
    this.names = d.names;
    this.objectColumns = d.objectColumns;
    this.parsers = d.fields.map((f) => {
      if (this.types.needsLoad(f.dataTypeId) && !this.unknownTypes.includes(f.dataTypeId)) this.unknownTypes.push(f.dataTypeId);
      return this.types.decoder(f.dataTypeId) ?? textValue;
    });
  }

  handleDataRow(msg: { fields: Array<string | null> }): void {
    if (this.pending.length > 0) {
      // The binding's one row (its count) is expected and dropped; a guard returns none.
      if (this.pending[0] === 'guard' || this.pending[0] === 'functions') this.unexpected ??= 'guard returned rows';
      return;
    }
    if (this.full) return;
    if (this.rowsArray.length >= this.maxRows) {
      this.truncated = true;
      this.full = true;
      return;
    }
    const n = this.names.length;
    const arr = new Array<unknown>(n);
    for (let i = 0; i < n; i++) {
      const raw = msg.fields[i];
      arr[i] = raw === null || raw === undefined ? null : this.parsers[i](raw);
    }
    let size: number;
    try {
      size = this.objectJsonBytes(arr) + (this.rowsArray.length > 0 ? 1 : 0);
    } catch {
      this.unexpected ??= 'row not serialisable';
      this.full = true;
      return;
    }
    if (this.bytes + size > this.maxBytes) {
      this.truncated = true;
      this.full = true;
      this.overByteCap = true;
      return;
    }
    this.bytes += size;
    this.rowsArray.push(arr);
  }

  /** UTF-8 bytes of JSON.stringify of the row's object form, without building the object. */
  private objectJsonBytes(arr: unknown[]): number {
    let bytes = 2 + Math.max(0, this.objectColumns.length - 1);
    for (const c of this.objectColumns) bytes += c.keyBytes + jsonBytes(arr[c.index]);
    return bytes;
  }

  handlePortalSuspended(): void {
    // Row limit reached: more rows exist than maxRows (the (maxRows+1)-th already set `truncated`).
    this.truncated = true;
  }

  handleCommandComplete(): void {
    // The preludes complete first, in order; the statement's own CommandComplete comes last.
    this.pending.shift();
  }

  handleEmptyQuery(): void {}

  handleCopyInResponse(connection: WireConnection): void {
    this.unexpected ??= 'copy';
    connection.sendCopyFail('not supported');
  }

  handleCopyData(): void {
    this.unexpected ??= 'copy';
  }

  handleError(err: unknown): void {
    if (this.pending[0] === 'guard') this.guardTripped = true;
    if (this.pending[0] === 'functions') this.functionsChanged = true;
    this.finish(err);
  }

  handleReadyForQuery(): void {
    this.finish(null);
  }

  private finish(err: unknown): void {
    if (this.done) return;
    this.done = true;
    this.connection?.removeListener('parameterStatus', this.onParameterStatus);
    this.connection?.removeListener('parseComplete', this.onParseComplete);
    this.parsing = [];
    this.markEnded?.();
    this.onDone(err);
  }

  /** Rows kept so far. */
  get rowCount(): number {
    return this.rowsArray.length;
  }

  /**
   * Decodes again, with `types` now loaded, the columns whose types were unknown when the rows
   * arrived (they hold PostgreSQL's text, as the text decoder left it), then drops rows from the end
   * while the rows' JSON passes maxBytes (an array's JSON can be a little longer than its text's).
   * For a read the wire budget ended, whose connection cannot run the read again.
   */
  redecode(): void {
    const cols = this.fields.map((f, i) => (this.unknownTypes.includes(f.dataTypeId) ? i : -1)).filter((i) => i >= 0);
    if (cols.length === 0) return;
    let bytes = 2;
    const kept: unknown[][] = [];
    for (const row of this.rowsArray) {
      for (const i of cols) if (typeof row[i] === 'string') row[i] = (this.types.decoder(this.fields[i].dataTypeId) ?? textValue)(row[i] as string);
      const size = this.objectJsonBytes(row) + (kept.length > 0 ? 1 : 0);
      if (bytes + size > this.maxBytes) {
        this.truncated = true;
        this.overByteCap = true;
        break;
      }
      bytes += size;
      kept.push(row);
    }
    this.rowsArray = kept;
    this.bytes = bytes;
  }

  /** The result so far, marked truncated (the wire budget ended the read early). */
  truncatedResult(): ReadResult {
    this.truncated = true;
    this.cutByWire = true;
    return this.result();
  }

  /** The result. Its `rows` (objects) are built from `rowsArray` on first access only: the pipeline reads the arrays. */
  result(): ReadResult {
    const truncatedBy = !this.truncated ? null : this.overByteCap || this.cutByWire ? 'max_bytes' : 'max_rows';
    return new PortalResult(this.fields, this.rowsArray, this.truncated, truncatedBy, this.bytes, this.names);
  }
}

/**
 * A read's result (ReadResult) whose `rows` are built from `rowsArray` on first access, by a getter
 * of the class (issue 28, h28s: an own accessor defined per result with Object.defineProperty cost
 * ~0.6 µs per read, this ~20 ns). `rows` is therefore not an own property: it is read by name (as
 * every caller does), not listed by Object.keys, a spread or JSON.stringify.
 */
class PortalResult implements ReadResult {
  readonly #names: string[];
  #objects: Record<string, unknown>[] | null = null;

  constructor(
    public fields: ReadField[],
    public rowsArray: unknown[][],
    public truncated: boolean,
    public truncatedBy: ReadResult['truncatedBy'],
    public bytes: number,
    names: string[],
  ) {
    this.#names = names;
  }

  get rows(): Record<string, unknown>[] {
    return (this.#objects ??= this.rowsArray.map((a) => rowObject(this.#names, a)));
  }
}

/** A row as an object keyed by column name (a later duplicate name wins; `__proto__` is an own property). */
export function rowObject(names: string[], values: unknown[]): Record<string, unknown> {
  const obj: Record<string, unknown> = {};
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    if (name === '__proto__') Object.defineProperty(obj, name, { value: values[i], enumerable: true, writable: true, configurable: true });
    else obj[name] = values[i];
  }
  return obj;
}

