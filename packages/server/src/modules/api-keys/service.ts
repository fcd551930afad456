import type { Clock } from '../../lib/clock.js';
import { AppError, forbidden, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Db } from '../../storage/db.js';
import type { ProjectRepository } from '../projects/repository.js';
import type { ApiKeyAuthenticator } from './authenticator.js';
import { displayPrefix, generateApiKey, hashApiKey } from './keys.js';
import {
  type ApiKey,
  type CreatedApiKey,
  DEFAULT_KEY_SCOPES,
  KEY_WARNING,
  type KeyScope,
  normalizeScopes,
  parseScopes,
} from './model.js';
import type { ApiKeyRepository, ApiKeyRow } from './repository.js';

export interface ApiKeyServiceDeps {
  keys: ApiKeyRepository;
  authenticator: ApiKeyAuthenticator;
  clock: Clock;
  /** A key is created under the lock its project's deletion takes, so it never outlives the project. */
  projects: Pick<ProjectRepository, 'exists' | 'withOrganizationLocked'>;
}

/** The later of two ISO times (either may be absent): a use not yet written may be older than one stored. */
const later = (a: string | null | undefined, b: string | null): string | null =>
  a == null ? b : b === null || a > b ? a : b;

export function createApiKeyService({ keys, authenticator, clock, projects }: ApiKeyServiceDeps) {
  const view = (row: ApiKeyRow): ApiKey => ({
    id: row.id,
    name: row.name,
    keyPrefix: row.key_prefix,
    projectId: row.project_id,
    scopes: parseScopes(row.scopes),
    isRevoked: row.is_revoked === 1,
    lastUsedAt: later(authenticator.pendingLastUsed(row.id), row.last_used_at),
    createdAt: row.created_at,
  });

  /**
   * The project a caller's keys are confined to: an API key of a project sees, mints and manages
   * only that project's keys (what an agent's key does stays in its project); a user or a key
   * without a project, the whole organization's.
   */
  const confinedTo = (scope: OrgScope): string | null =>
    scope.principal.kind === 'apiKey' ? scope.principal.projectId : null;

  /** The key, if the caller may see it: another organization's or (for a project's key) project's is 404. */
  async function load(scope: OrgScope, id: string): Promise<ApiKeyRow> {
    const row = await keys.get(scope.organizationId, id);
    const project = confinedTo(scope);
    if (!row || (project !== null && row.project_id !== project)) throw notFound('API key');
    return row;
  }

  return {
    /**
     * Mints a key for a project; the full key exists only in the returned value. A key minted by a
     * key joins that key's lineage (`lineageId`); otherwise it starts its own. `createdBy` is the
     * person answerable for it (who created it, or the minting key's creator); null when none is
     * known, as for a project's automatic key: such a key never gives a dual-control approval.
     */
    async mint(
      organizationId: string,
      projectId: string,
      name: string,
      trx?: Db,
      scopes: readonly KeyScope[] = DEFAULT_KEY_SCOPES,
      lineageId?: string,
      createdBy: string | null = null,
    ): Promise<CreatedApiKey> {
      const key = generateApiKey();
      const granted = normalizeScopes(scopes);
      const id = uuidv7();
      const row: ApiKeyRow = {
        id,
        organization_id: organizationId,
        project_id: projectId,
        name,
        key_hash: hashApiKey(key),
        key_prefix: displayPrefix(key),
        is_revoked: 0,
        last_used_at: null,
        created_at: clock.now().toISOString(),
        updated_at: null,
        scopes: JSON.stringify(granted),
        lineage_id: lineageId ?? id,
        created_by: createdBy,
      };
      await keys.insert(row, trx);
      return {
        id: row.id,
        name,
        key,
        keyPrefix: row.key_prefix,
        projectId,
        scopes: granted,
        createdAt: row.created_at,
        warning: KEY_WARNING,
      };
    },

    /**
     * A user of the organization may grant any scope; an API key only scopes it has itself, and what
     * it mints joins its lineage: no key of a lineage approves what a key of it asked for, so an
     * agent's key cannot mint the approver key (nor the requester) that would approve its own calls.
     */
    async create(
      scope: OrgScope,
      input: { name: string; projectId: string; scopes?: KeyScope[] },
    ): Promise<CreatedApiKey> {
      const scopes = input.scopes ?? DEFAULT_KEY_SCOPES;
      const principal = scope.principal;
      if (principal.kind === 'apiKey') {
        const missing = scopes.filter((s) => !principal.scopes.includes(s));
        if (missing.length > 0) {
          throw forbidden(
            `An API key can grant only scopes it has itself; this key lacks ${missing.join(', ')} (a user token can grant any scope)`,
          );
        }
      }
      const project = confinedTo(scope);
      if (project !== null && input.projectId !== project) throw notFound('Project');
      return projects.withOrganizationLocked(scope.organizationId, async (trx) => {
        // A key minting a key must still be valid when the new one is written: revoked, deleted or
        // regenerated away since its request was authenticated, it would leave a live heir behind.
        if (
          principal.kind === 'apiKey' &&
          !(await keys.holdActive(scope.organizationId, principal.keyId, trx))
        )
          throw new AppError('invalid_api_key', 'Invalid or revoked API key');
        if (!(await projects.exists(scope.organizationId, input.projectId, trx))) throw notFound('Project');
        const lineage = principal.kind === 'apiKey' ? principal.lineageId : undefined;
        // Who answers for the key: the person whose token creates it, or the creator of the minting
        // key (a lineage is one person's), so that under dual control a person's keys count as them.
        const creator = principal.kind === 'apiKey' ? (principal.createdBy ?? null) : principal.userId;
        return this.mint(scope.organizationId, input.projectId, input.name, trx, scopes, lineage, creator);
      });
    },

    async list(scope: OrgScope): Promise<ApiKey[]> {
      const project = confinedTo(scope);
      const rows = await keys.list(scope.organizationId);
      return (project === null ? rows : rows.filter((r) => r.project_id === project)).map(view);
    },

    async get(scope: OrgScope, id: string): Promise<ApiKey> {
      return view(await load(scope, id));
    },

    async rename(scope: OrgScope, id: string, name: string): Promise<ApiKey> {
      // A key's project never changes: checked once, before the write.
      await load(scope, id);
      if (!(await keys.rename(scope.organizationId, id, name, clock.now().toISOString())))
        throw notFound('API key');
      return view(await load(scope, id));
    },

    async revoke(scope: OrgScope, id: string): Promise<void> {
      await load(scope, id);
      if (!(await keys.revoke(scope.organizationId, id, clock.now().toISOString())))
        throw notFound('API key');
      authenticator.forgetKeys([id]);
    },

    async delete(scope: OrgScope, id: string): Promise<void> {
      await load(scope, id);
      if (!(await keys.delete(scope.organizationId, id))) throw notFound('API key');
      authenticator.forgetKeys([id]);
    },
  };
}

export type ApiKeyService = ReturnType<typeof createApiKeyService>;
