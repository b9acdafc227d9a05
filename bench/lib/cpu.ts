/**
 * CPU accounting for the load scenarios (Linux /proc): CPU time of given processes, and of the
 * PostgreSQL backends serving given databases (found through pg_stat_activity, so other users of
 * the same server are not counted). Used to show where each request's CPU goes — the bench
 * client, the gateway, the control database, the source database — and which one is the bound.
 */
import { execSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { ADMIN_URL } from '../../test/helpers/pg';

let ticks: number | null = null;
function clockTicks(): number {
  if (ticks === null) {
    try {
      ticks = Number(execSync('getconf CLK_TCK', { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticks = 100;
    }
  }
  return ticks;
}

/** User + system CPU time of a process in milliseconds, or NaN when it cannot be read. */
export function procCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // After "pid (comm) ": state is field 3, utime field 14, stime field 15 (1-based overall).
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks();
  } catch {
    return NaN;
  }
}

/** User and system CPU time of a process in milliseconds, apart (NaN when it cannot be read): system time is the kernel's work for it (sockets, scheduling). */
export function procCpuSplitMs(pid: number): { user: number; system: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { user: (Number(fields[11]) * 1000) / clockTicks(), system: (Number(fields[12]) * 1000) / clockTicks() };
  } catch {
    return { user: NaN, system: NaN };
  }
}

/**
 * A process and its direct children (Linux /proc/PID/task/PID/children), e.g. a node:cluster
 * primary and its workers: the pids whose CPU makes one multi-process side's figure. Just [pid]
 * when the children cannot be read.
 */
export function processTree(pid: number): number[] {
  try {
    return [pid, ...readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)];
  } catch {
    return [pid];
  }
}

/** Whole-machine CPU jiffies from /proc/stat: busy (everything but idle and iowait) and total. */
export function machineJiffies(): { busy: number; total: number } {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return { busy: NaN, total: NaN };
  }
}

/** A named group of processes: fixed pids, or the backends of some databases. */
export type CpuGroup = { pids: number[] } | { databases: string[] } | { self: true };

/** Measures CPU milliseconds per group between start() and stop(). */
export class CpuMeter {
  private admin: pg.Client | null = null;
  private startCpu = new Map<string, Map<number, number>>();
  private selfStart: NodeJS.CpuUsage | null = null;

  constructor(private readonly groups: Record<string, CpuGroup>) {}

  private async pidsOf(g: CpuGroup): Promise<number[]> {
    if ('pids' in g) return g.pids;
    if ('self' in g) return [];
    if (!this.admin) {
      this.admin = new pg.Client({ connectionString: ADMIN_URL, application_name: 'interlock-bench-cpu' });
      await this.admin.connect();
    }
    const r = await this.admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = ANY($1::text[]) AND pid <> pg_backend_pid()', [g.databases]);
    return r.rows.map((x) => x.pid);
  }

  /** Records the starting CPU of every group. */
  async start(): Promise<void> {
    this.selfStart = process.cpuUsage();
    for (const [name, g] of Object.entries(this.groups)) {
      const m = new Map<number, number>();
      for (const pid of await this.pidsOf(g)) m.set(pid, procCpuMs(pid));
      this.startCpu.set(name, m);
    }
  }

  /** CPU milliseconds used by each group since start(); a backend that appeared meanwhile counts whole. */
  async stop(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const [name, g] of Object.entries(this.groups)) {
      if ('self' in g) {
        const u = process.cpuUsage(this.selfStart ?? undefined);
        out[name] = (u.user + u.system) / 1000;
        continue;
      }
      const before = this.startCpu.get(name) ?? new Map<number, number>();
      let total = 0;
      for (const pid of await this.pidsOf(g)) {
        const now = procCpuMs(pid);
        if (!Number.isFinite(now)) continue;
        const b = before.get(pid);
        total += b !== undefined && Number.isFinite(b) ? now - b : now;
      }
      out[name] = total;
    }
    return out;
  }

  /** Closes the meter's database connection. */
  async close(): Promise<void> {
    await this.admin?.end().catch(() => undefined);
    this.admin = null;
  }
}

/**
 * Samples what the active backends of one database are waiting on (pg_stat_activity, every
 * `intervalMs`): "Lock:transactionid" is a row lock held by another transaction until it commits,
 * "IO:WALSync"/"LWLock:WALWrite" a commit waiting for the WAL flush, "CPU:running" work. Counts
 * samples per wait event and the number of active backends seen.
 */
export class WaitSampler {
  private client: pg.Client | null = null;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;
  counts = new Map<string, number>();
  samples = 0;

  constructor(private readonly database: string, private readonly intervalMs = 25) {}

  /** Starts sampling (opens its own connection on first use). */
  async start(): Promise<void> {
    if (!this.client) {
      this.client = new pg.Client({ connectionString: ADMIN_URL, application_name: 'interlock-bench-waits' });
      await this.client.connect();
    }
    this.timer = setInterval(() => {
      if (this.busy || !this.client) return;
      this.busy = true;
      this.client
        .query<{ w: string }>(
          "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, 'running') AS w FROM pg_stat_activity WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()",
          [this.database],
        )
        .then((r) => {
          this.samples++;
          for (const { w } of r.rows) this.counts.set(w, (this.counts.get(w) ?? 0) + 1);
        })
        .catch(() => undefined)
        .finally(() => {
          this.busy = false;
        });
    }, this.intervalMs);
  }

  /** Stops sampling; returns and resets the counts. */
  stop(): { samples: number; counts: Map<string, number> } {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const out = { samples: this.samples, counts: this.counts };
    this.counts = new Map();
    this.samples = 0;
    return out;
  }

  /** Closes the sampling connection. */
  async close(): Promise<void> {
    this.stop();
    await this.client?.end().catch(() => undefined);
    this.client = null;
  }
}

/** "3.1 active: Lock:transactionid 52%, IO:WALSync 21%, …" — average active backends and the top wait events. */
export function describeWaits(w: { samples: number; counts: Map<string, number> }, top = 4): string {
  const total = [...w.counts.values()].reduce((a, b) => a + b, 0);
  if (w.samples === 0) return 'no samples';
  const parts = [...w.counts].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, v]) => `${k} ${((100 * v) / Math.max(1, total)).toFixed(0)}%`);
  return `${(total / w.samples).toFixed(1)} active: ${parts.join(', ')}`;
}
