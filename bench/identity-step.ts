/**
 * Step 1 of a governed tools/call for a key the resolver holds in memory (issue 28 item 3, h28j), timed
 * in one process on two compiled trees: `BEFORE_ROOT/dist` and this checkout's `dist`, loaded side by
 * side, alternating rounds. Each side runs `identityStep` (src/pipeline/01-identity.ts) against its own
 * DbIdentityResolver (src/control/keys.ts) over an in-memory control database (the pepper set, the key's
 * row answered by a stub pool), with the key already cached by a first resolve(), as the bench's calls
 * are: on a tree without `resolveNow`, an async step and an async resolve (two promises, the key's
 * salted SHA-256 per call); with it, a synchronous answer and the digest kept per socket. Every call is
 * awaited where it returns a promise, as runAdmitted does. Prints ns per call (median of BENCH_ROUNDS,
 * default 9, rounds of BENCH_OPS, default 200,000 calls, run as 8 interleaved calls at a time like c=8).
 * Run: `BEFORE_ROOT=/path/to/built/checkout npx tsx bench/identity-step.ts`.
 */
import path from 'node:path';
import { ROOT } from './lib/env';
import { envInt, machineLine, table } from './lib/stats';

type Step = (ctx: { apiKey: string; identity: unknown }, resolver: unknown, scope?: object) => unknown;

const SECRET = `ilk_${'Ab3_-'.repeat(8)}Ab3`;

/** One side: its identityStep and a resolver whose cache holds SECRET. */
async function side(root: string): Promise<(ops: number) => Promise<void>> {
  const load = (rel: string) => require(path.join(root, 'dist', 'src', rel)) as Record<string, unknown>;
  const { DbIdentityResolver, hashApiKey } = load('control/keys.js') as { DbIdentityResolver: new (db: unknown, o?: unknown) => { resolve(k: string): Promise<unknown> }; hashApiKey: (p: Buffer, s: string) => Buffer };
  const { identityStep } = load('pipeline/01-identity.js') as { identityStep: Step };
  const pepper = Buffer.alloc(32, 7);
  const hash = hashApiKey(pepper, SECRET);
  const pool = {
    query: async (sql: string) =>
      sql.includes('encode(hash')
        ? { rows: [{ h: hash.toString('base64') }] }
        : { rows: [{ key_id: 'key_1', hash, identity_id: 'id_1', identity_name: 'bench-agent', attributes: null, usable: true, last_used_fresh: true }] },
  };
  const resolver = new DbIdentityResolver({ keyPepper: pepper, pool }, { cacheTtlMs: 5000 });
  if (!(await resolver.resolve(SECRET))) throw new Error(`${root}: the stub key did not resolve`);
  const sockets = Array.from({ length: 8 }, () => ({}));
  return async (ops) => {
    for (let i = 0; i < ops; i += 8) {
      const pending: Promise<unknown>[] = [];
      for (let k = 0; k < 8; k++) {
        const ctx = { apiKey: SECRET, identity: null };
        const r = identityStep(ctx, resolver, sockets[k]);
        if (r instanceof Promise) pending.push(r);
        else if (r !== null) throw new Error('refused');
      }
      if (pending.length) await Promise.all(pending);
    }
  };
}

async function main(): Promise<void> {
  const before = process.env.BEFORE_ROOT;
  if (!before) throw new Error('BEFORE_ROOT (a checkout with dist/ built) is required');
  const ops = envInt('BENCH_OPS', 200_000);
  const rounds = envInt('BENCH_ROUNDS', 9);
  console.log(`# identity-step: before = ${before}/dist vs after = ${ROOT}/dist, ${rounds} rounds × ${ops} calls`);
  console.log(machineLine());
  const sides = { before: await side(path.resolve(before)), after: await side(ROOT) };
  for (const s of Object.values(sides)) await s(ops / 10); // warm the JIT
  const ns: Record<string, number[]> = { before: [], after: [] };
  for (let r = 0; r < rounds; r++) {
    for (const name of (r % 2 ? ['after', 'before'] : ['before', 'after']) as Array<keyof typeof sides>) {
      const c0 = process.cpuUsage();
      await sides[name](ops);
      const c = process.cpuUsage(c0);
      ns[name].push(((c.user + c.system) * 1000) / ops);
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}`;
  const ratios = ns.after.map((a, i) => a / ns.before[i]);
  console.log(table(['piece', 'before ns/call (range)', 'after ns/call (range)', 'saved µs/call', 'after/before (rounds)'], [['identity step (cached key)', `${med(ns.before).toFixed(0)} (${range(ns.before)})`, `${med(ns.after).toFixed(0)} (${range(ns.after)})`, ((med(ns.before) - med(ns.after)) / 1000).toFixed(2), `${med(ratios).toFixed(2)}× (${ratios.map((x) => x.toFixed(2)).join(' ')})`]]));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
