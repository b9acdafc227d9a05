/**
 * The demo handbook (issue 4, Build 7): `data/handbook/`, a few dozen documents written for the
 * demo (operations runbooks, security policies, HR and onboarding, product docs, incident tickets)
 * registered as a `documents` source, a discovery role, a grant, and the index.
 */
import { resolve } from 'node:path';
import type { SourceRole } from '../../generated/role-v1';
import type { ControlDb } from '../control/db';
import { grantRole } from '../control/grants';
import { upsertRole } from '../control/roles';
import { putSource } from '../control/sources';
import { indexSource, type IndexOptions } from './indexer';
import type { IndexResult } from './types';
import { installPath } from '../install-root';

/** The folder shipped with InterLock (absolute). */
export const HANDBOOK_PATH = installPath('data', 'handbook');

/** The demo's discovery role: discover and request everything, audience `staff`. */
export const HANDBOOK_ROLE: SourceRole = {
  name: 'handbook-reader',
  description: 'Demo: search and read the company handbook (documents addressed to staff, or to no audience).',
  audiences: ['staff'],
  statements: [
    { effect: 'allow', action: 'discover', resource: '*' },
    { effect: 'allow', action: 'request', resource: '*' },
  ],
};

/** Options of provisionHandbook. */
export interface ProvisionHandbookOptions {
  /** Source id (default "handbook"). */
  sourceId?: string;
  /** Folder of the documents (default HANDBOOK_PATH); stored absolute. */
  path?: string;
  /** Identity to grant HANDBOOK_ROLE on the source (e.g. the demo agent's id); none when omitted. */
  identityId?: string;
  /** Progress of the indexing step. */
  onProgress?: IndexOptions['onProgress'];
}

/**
 * Registers (or updates) the documents source, upserts role `handbook-reader`, grants it to
 * `identityId` on the source when given, and indexes the folder. Idempotent: a second run changes
 * nothing but re-checks the files (unchanged ones are not rewritten).
 * Resolves to {sourceId, roleName, index}. Throws NotFoundError for an unknown identity and
 * DocumentsFolderError when the folder cannot be read.
 */
export async function provisionHandbook(db: ControlDb, opts: ProvisionHandbookOptions = {}): Promise<{ sourceId: string; roleName: string; index: IndexResult }> {
  const sourceId = opts.sourceId ?? 'handbook';
  const path = resolve(opts.path ?? HANDBOOK_PATH);
  await putSource(db, {
    id: sourceId,
    type: 'documents',
    name: 'Company handbook (demo)',
    description: 'Runbooks, security policies, HR and onboarding guides, product documentation and incident tickets. Search it with interlock_discover.',
    settings: { path },
  });
  await upsertRole(db, HANDBOOK_ROLE);
  if (opts.identityId) await grantRole(db, { identityId: opts.identityId, roleName: HANDBOOK_ROLE.name, sourceId });
  const index = await indexSource(db, sourceId, { onProgress: opts.onProgress });
  return { sourceId, roleName: HANDBOOK_ROLE.name, index };
}
