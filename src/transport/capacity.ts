/**
 * Admission by capacity (issue 29, item 1): an adaptive limit on the governed tool calls a replica
 * runs at once, with a short bounded queue; beyond it a call is refused at once (the contract's
 * `rate_limited`, with `retry_after_ms` and Retry-After derived from the queue) before any identity,
 * SQL or audit work. No npm package does this for Node; the algorithm is the gradient one of
 * Netflix's concurrency-limits ("Gradient2") and Envoy's adaptive concurrency filter, written here:
 *
 * - every finished call is a latency sample (ms, from admission to its audit commit, less the time
 *   it spent in source reads: a slow source or an identity's slow statements are bounded by the
 *   source's pool and fair share, and must not lower the limit for every caller; setting
 *   `sampleSourceTime`, an experiment, keeps it in). With `samplePoolWait` the part of the source
 *   time spent waiting for a connection of a source's shared pool — after the call's identity got
 *   its own slot (fair-share.ts), so an identity flooding its own share does not count — stays in
 *   the sample: a queue for the shared pool is the replica admitting more than its sources take,
 *   and shows as latency (issue 29, h29q; release's poolWaitMs). The audit
 *   commit's wait stays in: it is where the replica's queueing for the event loop shows (a
 *   commit's answer waits for the loop like everything else); left out, the sample shrank to the
 *   synchronous work of a call (~0.1 ms) and no longer saw the CPU saturate (tried, 4 December);
 * - `longRtt` is a slow exponential average of the samples over time (time constant 10 s: the
 *   unloaded latency, drifting), the short one a fast average over the last ~10 samples (the
 *   latency now);
 * - gradient = clamp(tolerance × longRtt / shortRtt, 0.5, 1); newLimit = limit × gradient + √limit
 *   (a little headroom to probe upward); limit ← limit × (1 − smoothing) + newLimit × smoothing,
 *   clamped to [minLimit, maxLimit]. While fewer than half the limit are in flight (with
 *   `raiseOnSlotWaiters` false: working) the limit is not raised (the load, not the capacity, is
 *   what bounds it then). **Working calls** (h29f, an option, off by default): the calls in flight
 *   less the share of them waiting for their identity's own source slots (fair-share.ts), by
 *   Little's law the fast average own-slot wait ÷ the fast average latency (admission to release)
 *   of recent calls. Such a wait is left out of the sample (one flooding identity must not lower
 *   the limit for everyone), so by default one identity on 512 connections has the limit raised to
 *   ~185 calls to hold its own queue (50–150 ms per call at 3 slots) until its waiter cap (3 × 64)
 *   refuses calls late and a drop caps the limit; with working calls the limit stays at ~60–110 and
 *   nothing is refused late, but goodput was not shown to hold at 1×–4× (more calls in flight
 *   serve more there: bench/RESULTS.md, h29f). The limit is only held, never lowered, by this. Each sample may lower or raise
 *   the limit, but within one DECREASE_STEP_MS it never falls below 0.9 × its value at the step's
 *   start: at thousands of calls a second the short average spans a few milliseconds, and one
 *   garbage-collection pause or a neighbour's burst would otherwise take the limit down by half
 *   within a pause, below what the replica needs in flight; a lasting slowdown still lowers it
 *   10 % per step (to a third in about a second). (Allowing only one decrease per step, while every
 *   sample could raise it, was tried: noisy short averages then pushed the limit up, 17 → 240
 *   within half a second at 512 connections.)
 * - drops: a call the pipeline behind admission could not take — refused for lack of a source slot
 *   (`concurrency_limited`: its identity's statements on the source, and their waiters, are full;
 *   `source_busy`: no pooled connection) — is released as dropped (release(…, true)): not a latency
 *   sample (it waited on the source, which the sample leaves out), but proof that the limit
 *   admitted more than the sources take. The limit falls to 0.9 × the calls in flight (when that
 *   is lower), at most once per DECREASE_STEP_MS, and may not rise above that ceiling for
 *   LONG_WINDOW_MS (as TCP's slow-start threshold): without it the latency gradient, blind to the
 *   source's queue, raised the limit back within milliseconds, and one identity on 512 connections
 *   had most of its calls admitted, analysed and then refused late (bench/RESULTS.md issue 29);
 * - pressure from outside the call: when the event loop's delay (p99 over the last interval) passes
 *   `maxEventLoopDelayMs`, or the audit writer's pending events pass `maxAuditQueue`, a sample
 *   lowers the limit by 10 % instead (at most once per PRESSURE_STEP_MS, so a second of pressure
 *   takes the limit to about a third, not to its floor after a few hundred samples), so CPU
 *   starvation shows up as early refusals and not as late `audit_unavailable`.
 *
 * Controller `min_rtt` (setting `controller`; the above is `long_average`, the default): Envoy's
 * adaptive-concurrency gradient controller, because the long-term average above drifts up under
 * sustained load and then no longer brings the limit down (bench/RESULTS.md, h29r). Its reference
 * is measured instead of averaged:
 * - a minRTT window: the limit is held at min_limit (calls admitted before the window drain first);
 *   the `latency_percentile` of the first `minRttSamples` calls admitted and finished inside it (or
 *   of those within MIN_RTT_WINDOW_MAX_MS of the first) is minRTT: the latency at low concurrency.
 *   A window without a sample of its own MIN_RTT_WINDOW_MAX_MS after it opened (slow calls admitted
 *   before it still hold the slots) is given up, the old minRTT kept.
 *   The first window opens at start; the next `minRttIntervalMs` (+ up to 10 % jitter) after one
 *   ends, and at once when the limit has sat at min_limit for MIN_RTT_AT_FLOOR updates in a row (the
 *   replica became slower: the old minRTT would hold it at the floor for ever). Between windows the
 *   gradient's limit is kept, not changed, and applies again when the window ends;
 * - every UPDATE_INTERVAL_MS: sampled = the latency_percentile of the calls finished in it;
 *   gradient = clamp(tolerance × minRTT / sampled, 0.5, 2); limit ← limit × gradient +
 *   √(limit × gradient) (the headroom that keeps probing upward), not raised while fewer than half
 *   the limit are in flight (or working, above); under pressure (event-loop delay, audit queue) × 0.9 instead. Drops and
 *   their ceiling act as above. No smoothing: one update per interval, from a percentile.
 *
 * Defaults (DEFAULT_CAPACITY, measured, bench/RESULTS.md issue 29): a point read costs the gateway
 * about 1–1.4 ms of CPU and answers in 5–6 ms unloaded, so each core keeps about 4 calls in flight
 * while it waits on the databases; on 2 cores the peak goodput is reached near 8 connections.
 * The limit starts at 16 (2 × cores × 4 on the 2-core reference machine: room to find the peak
 * without a cold start refusing) and may fall to 4 (one core's worth: a starved replica still
 * serves), so admission acts from 8–32 connections up, where the old floor of 64 never did. Since
 * every admitted call holds its slot until its audit event commits, the audit writer's pending
 * events can never exceed the calls in flight: the audit bound (64) must stay below max_limit to
 * mean anything.
 *
 * Fair share inside it: while the limit is full, each identity may hold (and wait for) at most its
 * share of the slots (limit ÷ identities holding or waiting, at least 1); beyond it its calls are
 * refused at once, and freed slots go to the waiter whose identity holds fewest; an identity that
 * holds no slot while another holds more than its share is granted one at once, beyond the limit
 * (at most queue_size such slots at a time). So one flooding identity cannot take the replica from
 * the others, even when the event loop is too slow for a queued call to see a slot freed in time.
 * (The connector's fair share of each source pool and client_limits.streams_per_identity keep
 * working behind it.)
 *
 * Per-identity limit (setting `identityLimit`, config admission.identity_limit; issue 29, h29i,
 * h29n): the global sample leaves out a call's wait for its identity's own source slots
 * (fair-share.ts), so that a flooding identity cannot lower the limit for everyone; but then one
 * identity sending more than its slots take has its admitted calls queue there, unseen (bench 11:
 * 35–1,670 ms per call). So each identity that queues there gets a limit of its own, in calls of
 * the gateway (its calls in flight, in every phase: parse, analysis, statement, audit commit), set
 * by a gradient of its own queue, one partition per key as in Netflix's concurrency-limits:
 * - an entry is made when one of its calls waited for its own slots more than the allowance
 *   (below), or was dropped; it starts at the replica's limit (no restriction yet);
 * - its calls admitted after the entry's last change are summed (own-slot wait W, statement time S
 *   = source time less both waits, latency L from admission to release); at the first release at
 *   least IDENTITY_STEP_MS after the last change, once they are at least half its calls in flight (the first
 *   calls to finish after a change are those that waited least: with slow statements one of them
 *   alone raised the limit, traced on the integration test), the means over them decide:
 *   allowance A = max(`identitySlotWaitMs`, `identityWaitRatio` × S̄) — the queue the identity may
 *   keep: by Little's law W̄ = ratio × S̄ means about `ratio` calls waiting per busy slot, enough
 *   to keep its slots busy, so the limit costs no goodput; a threshold relative to the statement,
 *   so slow statements (or a slow event loop, which lengthens every statement as seen here) are
 *   not taken for a queue. When W̄ > A the excess share of its calls in flight is taken off —
 *   limit ← min(limit, in flight + 1) × (1 − (W̄ − A) ÷ L̄), kept ≥ 0.5 × — and only that: the
 *   calls in the gateway's other phases stay (the h29i rule scaled all of them and held the
 *   identity near its slot count, 0.81 × P at 1×). Otherwise, while it holds at least half its
 *   limit, limit ← limit + √limit (probing upward; one step per IDENTITY_STEP_MS or per latency,
 *   whichever is longer). Never below IDENTITY_MIN_LIMIT; at or above the replica's limit the
 *   entry is removed (no limit of its own);
 * - a drop (a call of it refused behind admission for lack of a source slot) lowers it at once to
 *   0.9 × min(limit, in flight + 1), at most once per IDENTITY_STEP_MS.
 * A call of an identity holding (and queued for) its own limit is refused at once like one beyond
 * the global limit (rate_limited, Retry-After, before identity work when its token is known:
 * refuseKnown), counted in `identityRefused`. Nothing else changes: other identities' calls, the
 * global limit and its sample are untouched. Cost: for an identity without an entry one
 * comparison per released call; with one, four additions, and a Map lookup per call while any
 * entry exists. Memory: at most IDENTITY_LIMITS_MAX entries (the oldest made goes first: a client
 * minting identities can only make a limited one start over, which its next waits limit again).
 * The limit is per identity across sources (admission comes before the statement names its
 * source): an identity queueing on one source is limited on all.
 *
 * Units: milliseconds, calls. In memory per replica.
 */
import * as crypto from 'node:crypto';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { ScopedDigests } from '../control/scoped-digest';

/** Time constant of the long-term latency average, ms. */
const LONG_WINDOW_MS = 10_000;

/** Under outside pressure (event-loop delay, audit queue) the limit falls by 10 % at most once per this many ms. */
export const PRESSURE_STEP_MS = 100;

/**
 * The latency gradient lowers the limit by at most 10 % per this many ms (below 0.9 × the limit at
 * the step's start it is held); a drop lowers it at most once per this many ms.
 */
export const DECREASE_STEP_MS = 100;

/** controller min_rtt: the limit is updated at most once per this many ms, from the latency percentile of the calls finished in it. */
export const UPDATE_INTERVAL_MS = 100;

/** controller min_rtt: a minRTT window ends this many ms after its first sample, with what it has (a replica with little traffic). */
export const MIN_RTT_WINDOW_MAX_MS = 1000;

/** controller min_rtt: updates in a row with the limit at min_limit after which minRTT is measured again at once. */
export const MIN_RTT_AT_FLOOR = 5;

/** Settings of the capacity limit (config `admission`, spec/config-v1.schema.json). */
export interface CapacitySettings {
  /** Off: every call is admitted (the limiter is not built). */
  enabled: boolean;
  /** Starting limit (calls in flight). */
  initialLimit: number;
  minLimit: number;
  maxLimit: number;
  /** Calls that may wait for a slot; beyond them a call is refused at once. */
  queueSize: number;
  /** Longest wait of a queued call, ms; then it is refused like one that found the queue full. */
  queueTimeoutMs: number;
  /** How much slower than the long-term latency the short-term one may be before the limit falls (≥ 1). */
  tolerance: number;
  /** Event-loop delay (p99 over the last sampling interval, ms) past which the limit is lowered. */
  maxEventLoopDelayMs: number;
  /** Audit writer pending events (queued and in batches being committed) past which the limit is lowered. */
  maxAuditQueue: number;
  /**
   * After a refusal at POST /mcp, read nothing more from that connection until its Retry-After
   * (ResponseChannel.pauseReadingAfter): a closed loop of immediate retries then cannot spend the
   * replica's CPU on refusals. Off behind a proxy that carries several callers on one connection.
   */
  pauseRefusedConnections: boolean;
  /** On plain HTTP, decide refusals at capacity in front of node:http's parser while shedding (src/transport/front-door.ts; config admission.front_door). Default true. */
  frontDoor?: boolean;
  /** How the limit follows latency: `long_average` (short- against long-term average) or `min_rtt` (Envoy's gradient controller); see the module. */
  controller: 'long_average' | 'min_rtt';
  /** controller min_rtt: ms from the end of one minRTT window to the start of the next (plus up to 10 % jitter). */
  minRttIntervalMs: number;
  /** controller min_rtt: calls finished inside a minRTT window that make its measurement. */
  minRttSamples: number;
  /** controller min_rtt: percentile (nearest rank, 0 < p ≤ 100) of latencies for minRTT and for each interval's sample. */
  latencyPercentile: number;
  /** Count the call's source time (release's excludedMs) in its sample after all (experiment; default false, see the module). */
  sampleSourceTime: boolean;
  /** Count the call's wait for a shared source-pool connection (release's poolWaitMs, part of excludedMs) in its sample (see the module). */
  samplePoolWait: boolean;
  /** Count calls waiting for their identity's own source slots as in flight when deciding whether the limit is used enough to be raised (default true; false: working calls only, see the module). */
  raiseOnSlotWaiters: boolean;
  /** Per-identity limit from the identity's own-slot wait (see the module: per-identity limit). */
  identityLimit: boolean;
  /** Per-identity limit: the least own-slot wait (ms, mean over a step) allowed an identity, whatever its statements' time. */
  identitySlotWaitMs: number;
  /** Per-identity limit: the own-slot wait allowed, as a multiple of the identity's mean statement time (about this many calls waiting per busy slot). */
  identityWaitRatio: number;
}

/** Defaults of CapacitySettings (spec/config-v1.schema.json `admission`). */
export const DEFAULT_CAPACITY: CapacitySettings = {
  enabled: true,
  initialLimit: 16,
  minLimit: 4,
  maxLimit: 512,
  queueSize: 32,
  queueTimeoutMs: 250,
  tolerance: 2,
  maxEventLoopDelayMs: 100,
  maxAuditQueue: 64,
  pauseRefusedConnections: true,
  controller: 'long_average',
  minRttIntervalMs: 10_000,
  minRttSamples: 25,
  latencyPercentile: 90,
  sampleSourceTime: false,
  samplePoolWait: false,
  raiseOnSlotWaiters: true,
  identityLimit: false,
  identitySlotWaitMs: 1,
  identityWaitRatio: 2,
};

/** Per-identity limit: its update comes at the first release of a call admitted after the last change, at least this many ms after it. */
export const IDENTITY_STEP_MS = 100;

/** Per-identity limit: the lowest an identity's own limit goes (calls in flight). */
export const IDENTITY_MIN_LIMIT = 1;

/** Per-identity limit: identities with a limit of their own kept at most; past it the oldest entry goes. */
export const IDENTITY_LIMITS_MAX = 10_000;

/** CapacityLimiter.shedding(): a refusal within this many ms means the limiter is shedding. */
export const SHEDDING_WINDOW_MS = 1000;

/** Tokens remembered by CapacityLimiter.noteToken; past it the memory starts again empty. */
const KNOWN_TOKENS_MAX = 10_000;

/** Who a remembered bearer token resolved to: the identity id and the key (or token) id, as in the audit. */
export interface KnownCaller {
  id: string;
  keyId: string;
}

/**
 * An admitted call's slot: call `release()` once, when the call (and its audit) is done.
 * `excludedMs`: time the call spent in source reads (ToolCallContext.sourceWait.ms), left out of
 * the latency sample; `poolWaitMs`: the part of it spent waiting for a shared source-pool
 * connection (sourceWait.poolMs), kept in the sample with `samplePoolWait`; `slotWaitMs`: the part
 * spent waiting for the identity's own source slots (sourceWait.slotMs), the per-identity limit's
 * signal (never in the global sample).
 */
export interface CapacityPermit {
  /** `dropped`: the call was refused behind admission for lack of a source slot (see the module: drops). */
  release(excludedMs?: number, dropped?: boolean, poolWaitMs?: number, slotWaitMs?: number): void;
}

/** A refusal: the retry hint in ms (≥ 1000, whole seconds for Retry-After). */
export interface CapacityRefusal {
  retryAfterMs: number;
}

/** What the limiter reads besides its own samples; both optional. */
export interface CapacitySignals {
  /** Events pending in the audit writer (GroupCommitAuditSink.pendingEvents: queued and being committed). */
  auditQueueDepth?: () => number;
  /** Event-loop delay p99 in ms; default: node:perf_hooks monitorEventLoopDelay, read every second. */
  eventLoopDelayMs?: () => number;
  /** Clock in ms for the latency samples (tests); default performance.now. */
  now?: () => number;
  /** Uniform in [0, 1) for the minRTT window's jitter (tests); default Math.random. */
  random?: () => number;
}

/** CapacityLimiter.snapshot(): the limiter's state for the debug trace (units as in the module). */
export interface CapacitySnapshot {
  limit: number;
  inflight: number;
  queued: number;
  borrowed: number;
  shortRtt: number;
  longRtt: number;
  loopDelayMs: number;
  auditQueue: number;
  pressured: boolean;
  ceiling: number | null;
  refused: number;
  dropped: number;
  /** Latency samples (calls released, not dropped) since start. */
  samples: number;
  /** controller min_rtt: the last measured minRTT (ms), null before the first window ends or with long_average. */
  minRtt: number | null;
  /** controller min_rtt: a minRTT window is open (the limit is held at min_limit). */
  measuring: boolean;
  /** Fast averages (as shortRtt) over the released calls of their source time (release's excludedMs) and of its shared-pool wait (poolWaitMs), ms: where a queue stands (h29q). */
  shortSource: number;
  shortPoolWait: number;
  /** Fast averages (as shortRtt) over the released calls of their wait for their identity's own source slots (release's slotWaitMs) and of their statements' time (excludedMs less both waits), ms. */
  shortSlotWait: number;
  shortStatement: number;
  /** The calls in flight that are working (not waiting for their identity's own source slots; see the module: working calls), 1 decimal. */
  working: number;
  /** Per-identity limit: identities with a limit of their own now, the lowest of those limits (calls, or null), and calls refused by one since start. */
  identityLimited: number;
  identityLowest: number | null;
  identityRefused: number;
}

/**
 * Per-identity limit: one identity's own limit (calls, unrounded); when it last changed (clock ms);
 * over its calls admitted since then and released: how many, and the sums of their own-slot wait,
 * statement time and latency (ms).
 */
interface IdentityLimit {
  limit: number;
  changedAt: number;
  n: number;
  wait: number;
  statement: number;
  latency: number;
}

/** State of controller min_rtt (see the module). */
interface MinRttState {
  /** The last measured minRTT (ms), or null before the first window ends. */
  value: number | null;
  /** The open window: its id (permits granted in it carry it), its samples, and when its first sample came (clock ms), or null. */
  window: { id: number; samples: number[]; firstAt: number | null; openedAt: number } | null;
  /** Clock ms at which the next window opens (checked when a call finishes). */
  nextAt: number;
  /** Latencies of calls finished in the current update interval, and when it began (clock ms). */
  batch: number[];
  batchAt: number | null;
  /** Updates in a row that left the limit at min_limit. */
  atFloor: number;
  /** Id of the next window. */
  nextId: number;
}

/** Nearest-rank percentile `p` (0 < p ≤ 100) of `xs` (not empty); sorts `xs` in place. */
export function nearestRank(xs: number[], p: number): number {
  xs.sort((a, b) => a - b);
  return xs[Math.min(xs.length, Math.max(1, Math.ceil((p / 100) * xs.length))) - 1];
}

interface Waiter {
  resolve(p: CapacityPermit | CapacityRefusal): void;
  timer: NodeJS.Timeout;
  key: string;
}

/** crypto.hash (Node ≥ 20.12): one call, no Hash object. */
const oneShotHash = (crypto as unknown as { hash?: (algorithm: string, data: string, encoding: 'base64') => string }).hash;

/** The memory key of a bearer token (its sha256, base64): tokens themselves are not kept. */
function tokenKey(token: string): string {
  return oneShotHash ? oneShotHash('sha256', token, 'base64') : crypto.createHash('sha256').update(token, 'utf8').digest('base64');
}

/** Is `x` a refusal (not a permit)? */
export function isCapacityRefusal(x: CapacityPermit | CapacityRefusal): x is CapacityRefusal {
  return (x as CapacityRefusal).retryAfterMs !== undefined;
}

/**
 * The adaptive concurrency limit with its queue (see the module). `acquire()` resolves a permit at
 * once when a slot is free, after a wait of at most queueTimeoutMs when the queue has room, and a
 * refusal otherwise (synchronously decided: a full queue costs no timer).
 */
export class CapacityLimiter {
  private limitValue: number;
  private inflightCount = 0;
  private readonly queue: Waiter[] = [];
  private longRtt = 0;
  private shortRtt = 0;
  private shortSource = 0;
  private shortPoolWait = 0;
  private shortSlotWait = 0;
  private shortStatement = 0;
  /** Fast average (as shortRtt) of released calls' whole latency, admission to release (ms): with shortSlotWait, the share of the calls in flight that wait for their own slots (working()). */
  private shortLatency = 0;
  private samples = 0;
  /** Slots held per identity key. */
  private readonly heldBy = new Map<string, number>();
  private lastSampleAt: number | null = null;
  /** sha256(bearer token) → the caller it resolved to (noteToken), for refusals before identity resolution. */
  private readonly knownTokens = new Map<string, KnownCaller>();
  /** Per scope (socket) the last token refuseKnown hashed and its key: held only as long as the scope lives. */
  private readonly scopeKeys = new ScopedDigests(tokenKey);
  /** When pressure last lowered the limit (clock ms), or null. */
  private lastPressureAt: number | null = null;
  /** The gradient's current decrease step: when it began (clock ms) and the floor under the limit until it ends. */
  private decreaseStep: { at: number; floor: number } | null = null;
  /** When a drop last lowered the limit (clock ms), or null. */
  private lastDecreaseAt: number | null = null;
  /** After a drop: the limit may not rise above `ceiling` before `until` (clock ms). */
  private dropCeiling: { ceiling: number; until: number } | null = null;
  private droppedCount = 0;
  private refusedCount = 0;
  /** Clock (ms) of the last refusal (refuse()), for shedding(); -Infinity before the first. */
  private lastRefusedAt = Number.NEGATIVE_INFINITY;
  /** Slots granted beyond the limit to identities holding none (mayBorrow). */
  private borrowedCount = 0;
  private readonly histogram: IntervalHistogram | null;
  private loopDelayMs = 0;
  private readonly sampler: NodeJS.Timeout | null;
  /** controller min_rtt's state; null with long_average. */
  private readonly minRtt: MinRttState | null;
  /** Per-identity limit: identity key → its own limit; only identities that queued on their own slots (see the module). */
  private readonly identityLimits = new Map<string, IdentityLimit>();
  private identityRefusedCount = 0;

  constructor(
    readonly settings: CapacitySettings,
    private readonly signals: CapacitySignals = {},
  ) {
    this.limitValue = Math.min(settings.maxLimit, Math.max(settings.minLimit, settings.initialLimit));
    this.minRtt =
      settings.controller === 'min_rtt' ? { value: null, window: { id: 1, samples: [], firstAt: null, openedAt: this.clock() }, nextAt: 0, batch: [], batchAt: null, atFloor: 0, nextId: 2 } : null;
    if (signals.eventLoopDelayMs) {
      this.histogram = null;
      this.sampler = null;
    } else {
      this.histogram = monitorEventLoopDelay({ resolution: 10 });
      this.histogram.enable();
      this.sampler = setInterval(() => {
        this.loopDelayMs = this.histogram!.percentile(99) / 1e6;
        this.histogram!.reset();
      }, 1000);
      this.sampler.unref();
    }
  }

  /** The current limit (calls in flight), rounded down; min_limit while a minRTT window is open (controller min_rtt). */
  get limit(): number {
    const l = Math.floor(this.limitValue);
    return this.minRtt?.window ? Math.min(l, this.settings.minLimit) : l;
  }
  /** Calls holding a slot now. */
  get inflight(): number {
    return this.inflightCount;
  }
  /** Calls waiting for a slot now. */
  get queued(): number {
    return this.queue.length;
  }
  /** Slots held now beyond the limit by identities that held none while another held more than its share. */
  get borrowed(): number {
    return this.borrowedCount;
  }
  /** Calls refused since start. */
  get refused(): number {
    return this.refusedCount;
  }
  /** Admitted calls released as dropped since start (refused behind admission for lack of a source slot). */
  get dropped(): number {
    return this.droppedCount;
  }
  /** The ceiling a recent drop put on the limit (calls), or null when none holds now. */
  get ceiling(): number | null {
    const c = this.dropCeiling;
    return c && this.clock() < c.until ? Math.floor(c.ceiling) : null;
  }

  /**
   * The limiter's state now, for the debug trace (gateway.ts logs it every 100 ms at level debug;
   * bench/admission-trace.ts reads it): limit (calls, unrounded), in flight, queued, borrowed,
   * shortRtt / longRtt (ms), the event-loop delay it reads (ms, p99 of the last sampling interval),
   * the audit writer's pending events, whether that is pressure now, the drop ceiling (calls, or
   * null), refused, dropped and sampled (finished) calls since start. Not part of any public API.
   */
  snapshot(): CapacitySnapshot {
    const lag = this.signals.eventLoopDelayMs ? this.signals.eventLoopDelayMs() : this.loopDelayMs;
    const audit = this.signals.auditQueueDepth?.() ?? 0;
    return {
      limit: Math.round(this.limitValue * 100) / 100,
      inflight: this.inflightCount,
      queued: this.queue.length,
      borrowed: this.borrowedCount,
      shortRtt: Math.round(this.shortRtt * 100) / 100,
      shortSource: Math.round(this.shortSource * 100) / 100,
      shortPoolWait: Math.round(this.shortPoolWait * 100) / 100,
      shortSlotWait: Math.round(this.shortSlotWait * 100) / 100,
      shortStatement: Math.round(this.shortStatement * 100) / 100,
      working: Math.round(this.working() * 10) / 10,
      longRtt: Math.round(this.longRtt * 100) / 100,
      loopDelayMs: Math.round(lag * 10) / 10,
      auditQueue: audit,
      pressured: this.pressured(),
      ceiling: this.ceiling,
      refused: this.refusedCount,
      dropped: this.droppedCount,
      samples: this.samples,
      minRtt: this.minRtt?.value == null ? null : Math.round(this.minRtt.value * 100) / 100,
      measuring: !!this.minRtt?.window,
      identityLimited: this.identityLimits.size,
      identityLowest: this.identityLowest(),
      identityRefused: this.identityRefusedCount,
    };
  }

  /**
   * A slot now, a slot after a short wait, or a refusal (see the class). `key` is the caller's
   * identity id: per-identity fair share inside the limit. While the limit is full and other
   * identities hold or wait for slots, an identity that holds its share (limit ÷ identities holding
   * or waiting, at least 1) is refused at once, a queued call of an identity over its share gives its place to one under it, and a freed
   * slot goes to the waiter whose identity holds fewest. `signal` aborting withdraws a queued call
   * (refused).
   */
  acquire(signal?: AbortSignal, key = ''): CapacityPermit | CapacityRefusal | Promise<CapacityPermit | CapacityRefusal> {
    if (this.minRtt?.window) this.expireWindow(this.minRtt);
    if (this.identityLimits.size && this.atIdentityLimit(key)) return this.refuseIdentity();
    if (this.inflightCount < this.limit && this.queue.length === 0) return this.grant(key);
    if (this.mayBorrow(key)) return this.grant(key, true);
    if (signal?.aborted || this.refusesAtOnce(key)) return this.refuse();
    const share = this.shareOf(key);
    if (this.queue.length >= this.settings.queueSize) {
      // Full: the newest waiter of another identity furthest over its share gives way, if any is over it.
      const victim = this.overShare(share, key);
      if (!victim) return this.refuse();
      this.withdraw(victim);
      clearTimeout(victim.timer);
      victim.resolve(this.refuse());
    }
    return new Promise((resolve) => {
      const w: Waiter = {
        key,
        resolve,
        timer: setTimeout(() => {
          this.withdraw(w);
          resolve(this.refuse());
        }, this.settings.queueTimeoutMs),
      };
      signal?.addEventListener(
        'abort',
        () => {
          if (this.withdraw(w)) {
            clearTimeout(w.timer);
            resolve(this.refuse());
          }
        },
        { once: true },
      );
      this.queue.push(w);
    });
  }

  /**
   * Remembers that `token` (a bearer token) resolved to `caller`, so that its next calls can be
   * refused by refuseKnown before identity resolution. Kept as sha256 of the token, at most
   * KNOWN_TOKENS_MAX entries (then emptied). A stale entry (revoked key) can only turn what would
   * be a 401 into this capacity refusal while the replica is full: it never admits anything.
   * `scope` (the request's socket), as for refuseKnown: the hash is reused while the same token comes
   * on it, so a keep-alive connection's calls hash the token once (issue 28 item 3).
   */
  noteToken(token: string, caller: KnownCaller, scope?: object): void {
    const h = this.scopedKey(token, scope);
    if (this.knownTokens.get(h)?.id === caller.id) return;
    if (this.knownTokens.size >= KNOWN_TOKENS_MAX) this.knownTokens.clear();
    this.knownTokens.set(h, { id: caller.id, keyId: caller.keyId });
  }

  /**
   * The refusal that acquire() would give at once to the caller `token` resolved to before
   * (noteToken), decided before any identity, SQL or control-database work; null when the replica
   * has room, the token is not remembered, or the call might wait in the queue (then the caller
   * goes the normal way: identity, then acquire). While some identity has a limit of its own
   * (identityLimit), a remembered caller at its own limit is refused even when the replica has
   * room (the token is then looked up on every call, its hash reused per scope). Counts the refusal. `scope` (e.g. the request's
   * socket): the token's hash is kept with it and reused while the same token comes on it, so a
   * keep-alive connection's refusals hash the token once.
   */
  refuseKnown(token: string, scope?: object): { refusal: CapacityRefusal; caller: KnownCaller } | null {
    if (this.minRtt?.window) this.expireWindow(this.minRtt);
    const room = this.inflightCount < this.limit && this.queue.length === 0;
    if (room && this.identityLimits.size === 0) return null;
    const caller = this.knownTokens.size ? this.knownTokens.get(this.scopedKey(token, scope)) : undefined;
    if (!caller) return null;
    if (this.identityLimits.size && this.atIdentityLimit(caller.id)) return { refusal: this.refuseIdentity(), caller };
    if (room || this.mayBorrow(caller.id) || !this.refusesAtOnce(caller.id)) return null;
    return { refusal: this.refuse(), caller };
  }

  /** tokenKey(token), reused from `scope`'s last token when it is the same (refuseKnown). */
  private scopedKey(token: string, scope: object | undefined): string {
    return this.scopeKeys.of(token, scope);
  }

  /**
   * True while the limiter is shedding: it refused a call (by the replica's limit or an identity's
   * own) within the last SHEDDING_WINDOW_MS. One clock read and a comparison: the signal the front
   * door (src/transport/front-door.ts) checks for every new connection, so a replica that refuses
   * nothing hands its connections to node:http with no other work.
   */
  shedding(): boolean {
    return this.clock() - this.lastRefusedAt < SHEDDING_WINDOW_MS;
  }

  /** Stops the event-loop sampler and refuses whatever waits. */
  close(): void {
    if (this.sampler) clearInterval(this.sampler);
    this.histogram?.disable();
    for (const w of this.queue.splice(0)) {
      clearTimeout(w.timer);
      w.resolve(this.refuse());
    }
  }

  /** Milliseconds until a slot is likely free for one more caller: the queue ahead, drained at limit / shortRtt calls per ms; at least 1 s. */
  retryAfterMs(): number {
    const rtt = this.shortRtt || this.longRtt || 50;
    const drain = ((this.queue.length + 1) * rtt) / Math.max(1, this.limit);
    return Math.max(1000, Math.ceil(drain / 1000) * 1000);
  }

  /**
   * Fair share when the limit is full: an identity holding no slot while another holds more than
   * its share gets one at once, beyond the limit (so a flood can never make it wait behind the
   * flooder's queue, whatever the event loop's delay), at most queue_size such slots at a time.
   */
  private mayBorrow(key: string): boolean {
    if (this.borrowedCount >= this.settings.queueSize || this.heldBy.has(key) || this.heldBy.size === 0) return false;
    const share = this.shareOf(key);
    for (const n of this.heldBy.values()) if (n > share) return true;
    return false;
  }

  /** The slots an identity may hold and wait for while the limit is full: limit ÷ identities holding or waiting (itself included), at least 1. */
  private shareOf(key: string): number {
    const active = new Set([...this.heldBy.keys(), ...this.queue.map((w) => w.key), key]).size;
    return Math.max(1, Math.floor(this.limit / active));
  }

  /**
   * With the limit full: is a call of `key` refused without waiting? When there is no queue; when
   * beside other identities it already holds and waits for its share; or when the queue is full and
   * no waiter of another identity is over its share to give way.
   */
  private refusesAtOnce(key: string): boolean {
    if (this.settings.queueSize === 0) return true;
    const share = this.shareOf(key);
    const others = this.heldBy.size > (this.heldBy.has(key) ? 1 : 0) || this.queue.some((w) => w.key !== key);
    // Alone, an identity may use the whole queue; beside others, only up to its share.
    if (others && (this.heldBy.get(key) ?? 0) + this.queuedOf(key) >= share) return true;
    return this.queue.length >= this.settings.queueSize && !this.overShare(share, key);
  }

  private queuedOf(key: string): number {
    let n = 0;
    for (const w of this.queue) if (w.key === key) n++;
    return n;
  }

  /** The newest waiter, not of `caller`, of the identity holding and waiting for the most slots, when that is more than `share`. */
  private overShare(share: number, caller: string): Waiter | null {
    let worst: Waiter | null = null;
    let most = share;
    for (let i = this.queue.length - 1; i >= 0; i--) {
      const w = this.queue[i];
      if (w.key === caller) continue;
      const n = (this.heldBy.get(w.key) ?? 0) + this.queuedOf(w.key);
      if (n > most) {
        most = n;
        worst = w;
      }
    }
    return worst;
  }

  private withdraw(w: Waiter): boolean {
    const i = this.queue.indexOf(w);
    if (i < 0) return false;
    this.queue.splice(i, 1);
    return true;
  }

  private refuse(): CapacityRefusal {
    this.refusedCount++;
    this.lastRefusedAt = this.clock();
    return { retryAfterMs: this.retryAfterMs() };
  }

  /** A refusal by the caller's own limit (counted in refused and identityRefused). */
  private refuseIdentity(): CapacityRefusal {
    this.identityRefusedCount++;
    return this.refuse();
  }

  /** Per-identity limit: does `key` hold (and wait for) as many slots as its own limit allows? */
  private atIdentityLimit(key: string): boolean {
    const e = this.identityLimits.get(key);
    // An entry at (or, after the replica's limit fell, above) the replica's limit restricts nothing.
    if (!e || e.limit >= this.limitValue) return false;
    const n = (this.heldBy.get(key) ?? 0) + (this.queue.length ? this.queuedOf(key) : 0);
    return n >= Math.floor(e.limit);
  }

  /** The lowest per-identity limit now (calls, 2 decimals), or null when none. */
  private identityLowest(): number | null {
    let low: number | null = null;
    for (const e of this.identityLimits.values()) if (low === null || e.limit < low) low = e.limit;
    return low === null ? null : Math.round(low * 100) / 100;
  }

  /**
   * Per-identity limit (see the module): one released call of `key`, admitted at clock `started`
   * and released at `at`, which waited `slotWaitMs` for its identity's own source slots and spent
   * `statementMs` in statements, or was `dropped`; `held` is the identity's calls still in flight.
   * Makes, lowers, raises or removes the identity's entry.
   */
  private sampleIdentity(key: string, slotWaitMs: number, statementMs: number, dropped: boolean, held: number, started: number, at: number): void {
    const s = this.settings;
    let e = this.identityLimits.get(key);
    if (!e) {
      if (!dropped && !(slotWaitMs > Math.max(s.identitySlotWaitMs, s.identityWaitRatio * statementMs))) return;
      if (this.identityLimits.size >= IDENTITY_LIMITS_MAX) this.identityLimits.delete(this.identityLimits.keys().next().value!);
      // Made at the replica's limit, and counting this call (it saw the queue), which was admitted before.
      e = { limit: this.limitValue, changedAt: started, n: 0, wait: 0, statement: 0, latency: 0 };
      this.identityLimits.set(key, e);
    }
    if (dropped) {
      if (at - e.changedAt < IDENTITY_STEP_MS && e.limit < this.limitValue) return;
      this.changeIdentity(key, e, Math.min(e.limit, held + 1) * 0.9, at);
      return;
    }
    // A call admitted before the last change ran under the old limit: it says nothing of the new one.
    if (started < e.changedAt) return;
    e.n++;
    e.wait += slotWaitMs;
    e.statement += statementMs;
    e.latency += at - started;
    // A step needs IDENTITY_STEP_MS and, counted, half its calls in flight: the first calls to finish
    // after a change are those that waited least, and slow statements would be judged by one of them.
    if (at - e.changedAt < IDENTITY_STEP_MS || e.n < (Math.min(e.limit, held + 1)) / 2) return;
    const wait = e.wait / e.n;
    const allowed = Math.max(s.identitySlotWaitMs, s.identityWaitRatio * (e.statement / e.n));
    if (wait > allowed) {
      // By Little's law the share of its calls in flight queued beyond the allowance is the excess wait ÷ latency: only that share goes.
      const keep = Math.max(0.5, 1 - (wait - allowed) / Math.max(e.latency / e.n, wait));
      this.changeIdentity(key, e, Math.min(e.limit, held + 1) * keep, at);
    } else if (held + 1 >= e.limit / 2) this.changeIdentity(key, e, e.limit + Math.sqrt(e.limit), at);
    else this.changeIdentity(key, e, e.limit, at);
  }

  /** Per-identity limit: `key`'s limit becomes `limit` (at least IDENTITY_MIN_LIMIT) at clock `at`, a new step begins; at or above the replica's limit the entry goes. */
  private changeIdentity(key: string, e: IdentityLimit, limit: number, at: number): void {
    if (limit >= this.limitValue) {
      this.identityLimits.delete(key);
      return;
    }
    e.limit = Math.max(IDENTITY_MIN_LIMIT, limit);
    e.changedAt = at;
    e.n = e.wait = e.statement = e.latency = 0;
  }

  private grant(key: string, borrowed = false): CapacityPermit {
    this.inflightCount++;
    if (borrowed) this.borrowedCount++;
    this.heldBy.set(key, (this.heldBy.get(key) ?? 0) + 1);
    const started = this.clock();
    // A call granted (within the limit) while a minRTT window is open is one of its samples.
    const windowId = !borrowed && this.minRtt?.window ? this.minRtt.window.id : 0;
    let done = false;
    return {
      release: (excludedMs = 0, dropped = false, poolWaitMs = 0, slotWaitMs = 0) => {
        if (done) return;
        done = true;
        this.inflightCount--;
        if (borrowed) this.borrowedCount--;
        const n = (this.heldBy.get(key) ?? 1) - 1;
        if (n > 0) this.heldBy.set(key, n);
        else this.heldBy.delete(key);
        if (this.settings.identityLimit) this.sampleIdentity(key, slotWaitMs, Math.max(0, excludedMs - poolWaitMs - slotWaitMs), dropped, n, started, this.clock());
        this.shortSource += (excludedMs - this.shortSource) * 0.1;
        this.shortPoolWait += (poolWaitMs - this.shortPoolWait) * 0.1;
        this.shortSlotWait += (slotWaitMs - this.shortSlotWait) * 0.1;
        this.shortStatement += (Math.max(0, excludedMs - poolWaitMs - slotWaitMs) - this.shortStatement) * 0.1;
        this.shortLatency += (this.clock() - started - this.shortLatency) * 0.1;
        if (dropped) this.drop();
        else this.sample(Math.max(0, this.clock() - started - this.leftOut(excludedMs, poolWaitMs)), windowId);
        this.next();
      },
    };
  }

  /** The ms of a call's source time left out of its sample: all of it, less the shared pool's wait with samplePoolWait; none with sampleSourceTime. */
  private leftOut(excludedMs: number, poolWaitMs: number): number {
    if (this.settings.sampleSourceTime) return 0;
    return Math.max(0, excludedMs - (this.settings.samplePoolWait ? Math.max(0, poolWaitMs) : 0));
  }

  private next(): void {
    while (this.queue.length && this.inflightCount < this.limit) {
      // The waiter whose identity holds fewest slots (first come among equals).
      let best = 0;
      for (let i = 1; i < this.queue.length; i++) if ((this.heldBy.get(this.queue[i].key) ?? 0) < (this.heldBy.get(this.queue[best].key) ?? 0)) best = i;
      const w = this.queue.splice(best, 1)[0];
      clearTimeout(w.timer);
      w.resolve(this.grant(w.key));
    }
  }

  /** The clock of the samples (CapacitySignals.now, default performance.now), ms. */
  private clock(): number {
    return this.signals.now ? this.signals.now() : performance.now();
  }

  /** A call released as dropped (see the module): the limit falls to 0.9 × the calls in flight and stays under that for LONG_WINDOW_MS. */
  private drop(): void {
    this.droppedCount++;
    const at = this.clock();
    if (this.lastDecreaseAt !== null && at - this.lastDecreaseAt < DECREASE_STEP_MS) return;
    this.lastDecreaseAt = at;
    // The call just released counts among those that were in flight when it was refused.
    const ceiling = Math.max(this.settings.minLimit, Math.min(this.limitValue, this.inflightCount + 1) * 0.9);
    this.dropCeiling = { ceiling, until: at + LONG_WINDOW_MS };
    this.limitValue = Math.min(this.limitValue, ceiling);
  }

  /** One finished call's latency (ms) updates the limit (see the module); `windowId`: the minRTT window it was granted in, or 0. */
  private sample(rttMs: number, windowId = 0): void {
    const s = this.settings;
    this.samples++;
    const at = this.clock();
    const dt = this.lastSampleAt === null ? 0 : Math.max(0, at - this.lastSampleAt);
    this.lastSampleAt = at;
    if (this.samples === 1) this.longRtt = this.shortRtt = rttMs;
    else {
      this.shortRtt += (rttMs - this.shortRtt) * 0.1;
      // The long average is over time, not samples: at thousands of calls a second a window of
      // samples would be milliseconds long and follow the queueing it should stand against.
      // A gap without samples (an idle replica) counts as one step at most: else the first call of a
      // flood after a quiet minute set the long average to its own latency (traced: 8 → 70 ms at
      // 512 connections), and the limit rose past what the replica can serve.
      this.longRtt += (rttMs - this.longRtt) * (this.samples <= 20 ? 1 / this.samples : Math.min(dt, DECREASE_STEP_MS) / LONG_WINDOW_MS);
      // The long average follows a lasting fall quickly (a faster machine, a warm cache).
      if (this.longRtt > 2 * this.shortRtt) this.longRtt *= 0.95;
    }
    if (this.minRtt) return this.sampleMinRtt(this.minRtt, rttMs, windowId, at);
    let next: number;
    if (this.pressured()) {
      // Lowered at most once per PRESSURE_STEP_MS; in between, the limit is held (not raised).
      if (this.lastPressureAt !== null && at - this.lastPressureAt < PRESSURE_STEP_MS) return;
      this.lastPressureAt = at;
      next = this.limitValue * 0.9;
    } else {
      const gradient = Math.max(0.5, Math.min(1, (s.tolerance * this.longRtt) / Math.max(1e-3, this.shortRtt)));
      next = this.limitValue * gradient + Math.sqrt(this.limitValue);
      if (next > this.limitValue && this.working() + 1 < this.limitValue / 2) next = this.limitValue;
      next = this.limitValue * 0.8 + next * 0.2;
      if (next < this.limitValue) {
        // Lowered by at most 10 % per DECREASE_STEP_MS: the step's floor is 0.9 × the limit when it began.
        if (this.decreaseStep === null || at - this.decreaseStep.at >= DECREASE_STEP_MS) this.decreaseStep = { at, floor: this.limitValue * 0.9 };
        next = Math.max(next, Math.min(this.limitValue, this.decreaseStep.floor));
      }
    }
    this.setLimit(next, at);
  }

  /**
   * The calls in flight that are working (see the module: working calls): all of them with
   * raiseOnSlotWaiters; else less the share waiting for their identity's own source slots, by
   * Little's law the fast average own-slot wait ÷ the fast average latency (both over released calls).
   */
  private working(): number {
    if (this.settings.raiseOnSlotWaiters || !(this.shortLatency > 0)) return this.inflightCount;
    return this.inflightCount * (1 - Math.min(1, this.shortSlotWait / this.shortLatency));
  }

  /** The limit becomes `next`, under a drop's ceiling while it holds, within [minLimit, maxLimit]. */
  private setLimit(next: number, at: number): void {
    const c = this.dropCeiling;
    if (c && at < c.until) next = Math.min(next, c.ceiling);
    else if (c) this.dropCeiling = null;
    this.limitValue = Math.min(this.settings.maxLimit, Math.max(this.settings.minLimit, next));
  }

  /** controller min_rtt: one finished call's latency (ms) at clock `at` (see the module). */
  private sampleMinRtt(m: MinRttState, rttMs: number, windowId: number, at: number): void {
    const s = this.settings;
    const w = m.window;
    if (w) {
      // Calls admitted before the window ran at the old concurrency: they do not measure minRTT.
      if (windowId !== w.id) return;
      w.samples.push(rttMs);
      if (w.firstAt === null) w.firstAt = at;
      if (w.samples.length < s.minRttSamples && at - w.firstAt < MIN_RTT_WINDOW_MAX_MS) return;
      m.value = nearestRank(w.samples, s.latencyPercentile);
      this.closeWindow(m, at);
      return;
    }
    if (at >= m.nextAt) {
      m.window = { id: m.nextId++, samples: [], firstAt: null, openedAt: at };
      return;
    }
    m.batch.push(rttMs);
    if (m.batchAt === null) m.batchAt = at;
    if (at - m.batchAt < UPDATE_INTERVAL_MS) return;
    const sampled = nearestRank(m.batch, s.latencyPercentile);
    m.batch = [];
    m.batchAt = at;
    const limit = this.limitValue;
    let next: number;
    if (this.pressured()) next = limit * 0.9;
    else {
      const gradient = Math.max(0.5, Math.min(2, (s.tolerance * m.value!) / Math.max(1e-3, sampled)));
      const scaled = limit * gradient;
      next = scaled + Math.sqrt(scaled);
      if (next > limit && this.working() + 1 < limit / 2) next = limit;
    }
    this.setLimit(next, at);
    m.atFloor = this.limitValue <= s.minLimit ? m.atFloor + 1 : 0;
    if (m.atFloor >= MIN_RTT_AT_FLOOR) m.window = { id: m.nextId++, samples: [], firstAt: null, openedAt: at };
  }

  /**
   * controller min_rtt: a window that has had no sample of its own MIN_RTT_WINDOW_MAX_MS after it
   * opened (calls admitted before it, e.g. slow statements, still hold the slots) is given up: the
   * old minRTT stays, the next window comes an interval later, and the gradient's limit applies
   * again (else long calls would pin the replica at min_limit for as long as they run). Before the
   * first measurement the window waits on.
   */
  private expireWindow(m: MinRttState): void {
    const w = m.window!;
    const at = this.clock();
    if (w.firstAt !== null || at - w.openedAt < MIN_RTT_WINDOW_MAX_MS) return;
    if (m.value === null) {
      w.openedAt = at;
      return;
    }
    this.closeWindow(m, at);
    this.next();
  }

  /** controller min_rtt: the window ends at clock `at`; the next opens an interval (+ up to 10 % jitter) later. */
  private closeWindow(m: MinRttState, at: number): void {
    m.window = null;
    m.nextAt = at + this.settings.minRttIntervalMs * (1 + 0.1 * (this.signals.random ?? Math.random)());
    m.batch = [];
    m.batchAt = at;
    m.atFloor = 0;
  }

  private pressured(): boolean {
    const lag = this.signals.eventLoopDelayMs ? this.signals.eventLoopDelayMs() : this.loopDelayMs;
    if (lag > this.settings.maxEventLoopDelayMs) return true;
    return (this.signals.auditQueueDepth?.() ?? 0) > this.settings.maxAuditQueue;
  }
}
