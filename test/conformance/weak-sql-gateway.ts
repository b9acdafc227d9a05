/**
 * A deliberately weakened MCP SQL server for the sql-gateway pack's self-test: its only defence is to
 * wrap the agent's SQL in a read-only transaction (`BEGIN READ ONLY; <sql>; COMMIT`, simple query
 * protocol, one pooled connection as a role that may write), with no parser, no function policy and no
 * masking. It answers handshake-dialect tools/list and tools/call of one tool, `run_sql {query}`, with
 * the last result's rows as JSON text, or the driver's error text as a tool error — as many public
 * read-only MCP database servers did before they were escaped.
 */
import http from 'node:http';
import { listenLoopback } from './sdk-reference';
import pg from 'pg';

/** A running weak server. */
export interface WeakServer {
  url: string;
  close(): Promise<void>;
}

/**
 * Starts the weak server on 127.0.0.1 (random port) against `databaseUrl`. With `echo`, `run_sql` runs
 * no SQL at all and answers `[{"query": <the SQL>}]` as its rows (issue 30 item 3: such a tool must not
 * be judged as a gateway).
 */
export async function startWeakSqlGateway(databaseUrl: string, options: { echo?: boolean } = {}): Promise<WeakServer> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  pool.on('error', () => undefined);
  // The pack ends sessions that hold locks (restore) or run under an old default (session-settings), also
  // while a client is checked out: its error is the next query's failure, not an unhandled event.
  pool.on('connect', (c) => c.on('error', () => undefined));
  const answer = (res: http.ServerResponse, id: unknown, body: Record<string, unknown>) => {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id, ...body }));
  };
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      void (async () => {
        let m: { id?: unknown; method?: string; params?: { name?: string; arguments?: { query?: string } } };
        try {
          m = JSON.parse(text) as typeof m;
        } catch {
          res.writeHead(400).end();
          return;
        }
        if (m.method === 'tools/list') {
          answer(res, m.id, { result: { tools: [{ name: 'run_sql', description: 'Runs read-only SQL.', inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } }] } });
          return;
        }
        if (m.method !== 'tools/call' || m.params?.name !== 'run_sql') {
          answer(res, m.id, { error: { code: -32601, message: 'Method not found' } });
          return;
        }
        if (options.echo) {
          answer(res, m.id, { result: { content: [{ type: 'text', text: JSON.stringify([{ query: m.params.arguments?.query ?? '' }]) }] } });
          return;
        }
        const client = await pool.connect();
        try {
          const r = (await client.query(`BEGIN READ ONLY; ${m.params.arguments?.query ?? ''}; COMMIT`)) as unknown as pg.QueryResult | pg.QueryResult[];
          const results = Array.isArray(r) ? r : [r];
          const rows = [...results].reverse().find((x) => x.rows && x.rows.length > 0)?.rows ?? [];
          answer(res, m.id, { result: { content: [{ type: 'text', text: JSON.stringify(rows) }] } });
        } catch (e) {
          await client.query('ROLLBACK').catch(() => undefined);
          answer(res, m.id, { result: { isError: true, content: [{ type: 'text', text: (e as Error).message }] } });
        } finally {
          client.release();
        }
      })();
    });
  });
  return listenLoopback(server, () => pool.end());
}
