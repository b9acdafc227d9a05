/**
 * `interlock export` and GET /admin/v1/export (issue 16, Build 2): the current governed objects as
 * an interlock file (spec/interlock-file-v1.schema.json), claim mappings of token issuers included
 * (issue 26; claim-derived grants are not: they follow the identity provider). Passwords are never written: each
 * credential that has one names an environment variable instead
 * (<SOURCE>_<READER|WRITER>_PASSWORD, upper case, other characters as "_"; not INTERLOCK_*, which
 * the gateway's configuration reserves), which may
 * hold the password when the file is applied.
 */
import YAML from 'yaml';
import type { ControlDb } from '../control/db';
import type { FileCredentials, FileSource, InterlockFile } from './schema';
import type { FileIdentity } from '../../generated/interlock-file-v1';
import { readConfigState } from './state';
import type { SourceState } from './types';

/** The environment variable an exported file names for a source credential's password. */
export function passwordEnvName(sourceId: string, who: 'reader' | 'writer'): string {
  return `${sourceId.toUpperCase().replace(/[^A-Z0-9]/g, '_')}_${who.toUpperCase()}_PASSWORD`;
}

function fileSource(s: SourceState): FileSource {
  const settings = structuredClone(s.settings) as unknown as Record<string, unknown>;
  for (const who of ['reader', 'writer'] as const) {
    const c = settings[who] as { user: string; password?: string } | undefined;
    if (!c) continue;
    const ref: FileCredentials = { user: c.user };
    if (c.password) ref.password_env = passwordEnvName(s.id, who);
    settings[who] = ref;
  }
  return { id: s.id, type: s.type, name: s.name, description: s.description, enabled: s.enabled, settings: settings as FileSource['settings'] };
}

/** The current state as an interlock file (every section, objects ordered by id or name). */
export async function exportInterlockFile(db: ControlDb): Promise<InterlockFile> {
  const st = await readConfigState(db);
  const grants = [...st.grants.values()];
  return {
    version: 1,
    sources: [...st.sources.values()].map(fileSource),
    roles: [...st.roles.values()],
    identities: [...st.identities.values()].map((i) => ({ name: i.name, disabled: i.disabled, ...(i.attributes ? { attributes: i.attributes as NonNullable<FileIdentity['attributes']> } : {}), grants: grants.filter((g) => g.identity === i.name).map((g) => ({ role: g.role, source: g.source })) })),
    policies: [...st.policies.values()],
    claim_mappings: [...st.claimMappings.values()],
  };
}

/**
 * The file as YAML text, with a header naming the password variables it expects. Strings a YAML
 * 1.1 reader would take for another type (`off`, `yes`, `on`, `0777`) are quoted (the yaml
 * library's `compat: 'yaml-1.1'`; task hnu42b item 5), so PyYAML and other 1.1 tools read
 * `mode: "off"` as the string it is, not false.
 */
export function renderInterlockFile(file: InterlockFile): string {
  const vars = (file.sources ?? []).flatMap((s) => ['reader', 'writer'].map((w) => (s.settings as Record<string, FileCredentials | undefined>)[w]?.password_env).filter((v): v is string => !!v));
  const header = ['# InterLock configuration (interlock export). Apply with: interlock apply -f FILE --plan', ...(vars.length ? [`# Passwords are references (${vars.join(', ')}): an unset variable keeps the stored password; set one to change it.`] : [])];
  return `${header.join('\n')}\n${YAML.stringify(file, { compat: 'yaml-1.1' })}`;
}
