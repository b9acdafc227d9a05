/**
 * A tools/call of interlock_list_sources in the modern dialect (2026-07-28: version and mirror
 * headers, _meta) with an optional Bearer token, for the access-token tests of issue 26. Resolves
 * with the HTTP status, the WWW-Authenticate header and the JSON-RPC answer (read from the last
 * `data:` line of a one-event stream, or the JSON body).
 */
export async function modernListSources(url: string, token: string | null): Promise<{ status: number; challenge: string | null; body: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'interlock_list_sources' };
  if (token) headers.authorization = `Bearer ${token}`;
  const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
  const r = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {}, _meta: meta } }) });
  const text = await r.text();
  const body = text.startsWith('event:') ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6)) : JSON.parse(text);
  return { status: r.status, challenge: r.headers.get('www-authenticate'), body };
}
