/**
 * `interlock identity …`: agent identities (create, list, show, enable, disable, attributes, and the
 * token subjects linked to them: link, unlink), registered by main.ts.
 * Both modes (direct and --server) go through the operator backend (src/admin/backend.ts).
 */
import type { Command } from 'commander';
import { shortTime, table } from './output';
import type { CommandContext } from './context';
import { ValidationError } from '../control/errors';
import { attributeNumberUsable } from '../sql/row-rules/predicate';
import { showInvisible } from '../approvals/statement';

/**
 * Text from an identity provider (a token's subject, issuer, claim values) for one line or table
 * cell: control, bidirectional and zero-width characters, line feeds and tabs as ⟨U+XXXX⟩
 * (showInvisible), as the approvals surfaces show an agent's text (red team rt48a L3: an ESC
 * sequence in a subject drove the operator's terminal). `--json` keeps the exact values.
 */
const shown = (text: string): string => showInvisible(text, { oneLine: true }).text;

/**
 * A CLI attribute value: empty → null (remove); a number, true/false or a JSON list as JSON; anything
 * else as text, and so are digits beyond ±(2^53 − 1), which a number would round (red team rt48b B1). A value that starts like a list (`[`) must be a valid JSON list: a broken one (a
 * shell-quoting slip such as `regions=["eu",`) throws ValidationError (exit 2) instead of being
 * stored as text that no `= ANY(identity.<name>)` rule could use.
 */
export function attributeValue(text: string): unknown {
  if (text === '') return null;
  if (text.startsWith('[')) {
    try {
      return JSON.parse(text);
    } catch {
      throw new ValidationError(`${JSON.stringify(text)} starts like a list but is not a JSON list: write it as '["a","b"]' (quoted for the shell)`);
    }
  }
  if (/^(?:-?[0-9]+(?:\.[0-9]+)?|true|false)$/.test(text)) {
    const v: unknown = JSON.parse(text);
    // Digits a number cannot hold exactly (beyond ±(2^53 − 1), e.g. a 64-bit id) stay text: exact (rt48b B1).
    return typeof v === 'number' && !attributeNumberUsable(v) ? text : v;
  }
  return text;
}

/** Registers `identity create|list|show|disable|enable|attributes|link|unlink`. */
export function registerIdentityCommands(program: Command, ctx: CommandContext): void {
  // ---- identity ------------------------------------------------------------------------------
  const idn = program.command('identity').description('agent identities');
  idn
    .command('create')
    .description('create an agent identity')
    .argument('<name>', 'lower-case name, e.g. etl-agent')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).createIdentity(name);
      s.print(`created identity ${r.name} (${r.id}); next: interlock key create ${r.name}`, r);
    });
  idn.command('list').description('list identities').action(async (_o: unknown, cmd: Command) => {
    const s = ctx.session(cmd);
    const rows = await (await s.backend()).listIdentities();
    // Token-backed identities (issue 26) show their issuer's host and the subject's last use.
    const tokens = (r: (typeof rows)[number]) => (r.subjects ?? []).map((x) => `${new URL(x.issuer).host} ${x.lastUsedAt ? shortTime(x.lastUsedAt) : 'never'}`).join(', ') || '-';
    s.print(table(['name', 'id', 'status', 'created', 'token (last use)'], rows.map((r) => [r.name, r.id, r.disabled ? 'disabled' : 'enabled', shortTime(r.createdAt), tokens(r)])), rows);
  });
  idn
    .command('show')
    .description('show an identity: its token subjects (issuer, subject, last use), grants and keys')
    .argument('<name>', 'identity name or idn_ id')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const d = await (await s.backend()).showIdentity(name);
      const lines = [
        `identity ${d.name} (${d.id}): ${d.disabled ? `disabled since ${shortTime(d.disabledAt!)}` : 'enabled'}; last use ${d.lastUsedAt ? shortTime(d.lastUsedAt) : 'never'}`,
        `keys: ${d.keys.active} active of ${d.keys.total}`,
        ...(d.attributes && Object.keys(d.attributes).length ? [`attributes (row rules read them as identity.<name>): ${Object.entries(d.attributes).map(([k, v]) => shown(`${k}=${JSON.stringify(v)}`)).join(' ')}`] : []),
        d.subjects.length ? table(['issuer', 'subject', 'linked', 'last use'], d.subjects.map((x) => [shown(x.issuer), shown(x.subject), shortTime(x.createdAt), x.lastUsedAt ? shortTime(x.lastUsedAt) : 'never'])) : 'token subjects: none',
        d.grants.length ? table(['source', 'role', 'granted by'], d.grants.map((g) => [g.source, g.role, g.grantedBy === 'claims' ? 'token claims' : 'operator'])) : 'grants: none',
      ];
      s.print(lines.join('\n'), d);
    });
  idn
    .command('disable')
    .description('disable an identity: its keys stop working')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).setIdentityEnabled(name, false);
      s.print(`disabled identity ${r.name}: its keys and access tokens stop working (within 2 s on running gateways)`, r);
    });
  idn
    .command('attributes')
    .description('set or remove identity attributes that row rules read as identity.<name>, e.g. employee_id=3 regions=\'["eu","us"]\' old=')
    .argument('<name>')
    .argument('<assignments...>', 'NAME=VALUE (VALUE read as JSON when it is a number, true/false or a [list], else as text); NAME= removes it')
    .action(async (name: string, assignments: string[], _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const changes: Record<string, unknown> = {};
      for (const a of assignments) {
        const at = a.indexOf('=');
        if (at <= 0) throw new ValidationError(`expected NAME=VALUE, got ${JSON.stringify(a)}: NAME=VALUE sets an attribute (e.g. employee_id=3), NAME= removes it`);
        changes[a.slice(0, at)] = attributeValue(a.slice(at + 1));
      }
      const r = await (await s.backend()).setIdentityAttributes(name, changes);
      s.print(`identity ${r.name} attributes: ${JSON.stringify(r.attributes ?? {})}`, r);
    });
  // Token subjects (task hnu3 item 2): under `unknown_subjects: refuse` (the default) a token signs in only as the identity its (iss, sub) is linked to.
  const subjectCommands = [
    ['link', "link an access token's subject to an identity: a token whose iss and sub match exactly signs in as it (the way to admit a subject under unknown_subjects: refuse)"],
    ['unlink', "unlink an access token's subject from an identity: its tokens stop signing in as it (within 2 s on running gateways) and the identity's claim grants are taken back (operator grants are kept)"],
  ] as const;
  for (const [verb, description] of subjectCommands) {
    idn
      .command(verb)
      .description(description)
      .argument('<name>', 'identity name or idn_ id')
      .requiredOption('--issuer <url>', "the tokens' iss, exactly (e.g. https://login.example.com/, trailing slash included)")
      .requiredOption('--subject <sub>', "the tokens' sub (the identity provider's user id, at most 1024 characters)")
      .action(async (name: string, o: { issuer: string; subject: string }, cmd: Command) => {
        const s = ctx.session(cmd);
        const b = await s.backend();
        const r = verb === 'link' ? await b.linkSubject(name, o) : await b.unlinkSubject(name, o);
        const [subject, issuer] = [shown(r.subject), shown(r.issuer)];
        const line = verb === 'unlink' ? `unlinked token subject ${subject} of ${issuer} from identity ${r.identity}` : r.changed ? `linked token subject ${subject} of ${issuer} to identity ${r.identity}` : `token subject ${subject} of ${issuer} is already linked to identity ${r.identity}`;
        s.print(line, r);
      });
  }
  idn
    .command('enable')
    .description('enable an identity')
    .argument('<name>')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const s = ctx.session(cmd);
      const r = await (await s.backend()).setIdentityEnabled(name, true);
      s.print(`enabled identity ${r.name}`, r);
    });
}
