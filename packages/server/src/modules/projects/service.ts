import type { Clock } from '../../lib/clock.js';
import { AppError, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Principal } from '../../plugins/auth.js';
import type { ApiKeyAuthenticator } from '../api-keys/authenticator.js';
import type { ApiKeyRepository } from '../api-keys/repository.js';
import type { ApiKeyService } from '../api-keys/service.js';
import type { ProjectRepository, ProjectRow } from './repository.js';

export interface Project {
  _id: string;
  organizationId: string;
  name: string;
  isDefault: boolean;
  createdAt: string;
  updatedAt: string | null;
}

export const PROJECT_KEY_NAME = 'Project key';

export interface ProjectServiceDeps {
  projects: ProjectRepository;
  apiKeys: ApiKeyRepository;
  apiKeyService: ApiKeyService;
  authenticator: ApiKeyAuthenticator;
  clock: Clock;
  roleOf: (userId: string, organizationId: string) => Promise<string | null>;
}

export const toProject = (row: ProjectRow): Project => ({
  _id: row.id,
  organizationId: row.organization_id,
  name: row.name,
  isDefault: row.is_default === 1,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export function createProjectService(deps: ProjectServiceDeps) {
  const { projects, apiKeys, apiKeyService, authenticator, clock, roleOf } = deps;

  async function load(scope: OrgScope, id: string): Promise<ProjectRow> {
    const row = await projects.get(scope.organizationId, id);
    if (!row) throw notFound('Project');
    return row;
  }

  return {
    async list(scope: OrgScope): Promise<Project[]> {
      return (await projects.list(scope.organizationId)).map(toProject);
    },

    /** Creates a project and its first key in one transaction; the first project is the default. */
    async create(scope: OrgScope, name: string): Promise<Project & { apiKey: string }> {
      const now = clock.now().toISOString();
      return projects.withOrganizationLocked(scope.organizationId, async (trx) => {
        const existing = await projects.count(scope.organizationId, trx);
        const row: ProjectRow = {
          id: uuidv7(),
          organization_id: scope.organizationId,
          name,
          is_default: existing === 0 ? 1 : 0,
          created_at: now,
          updated_at: null,
        };
        await projects.insert(row, trx);
        const key = await apiKeyService.mint(scope.organizationId, row.id, PROJECT_KEY_NAME, trx);
        return { ...toProject(row), apiKey: key.key };
      });
    },

    /** GET by id: 404 when it does not exist, 403 when it belongs to an organization the caller cannot see. */
    async getById(principal: Principal, id: string): Promise<Project> {
      const owner = await projects.ownerOf(id);
      if (!owner) throw notFound('Project');
      const allowed =
        principal.kind === 'apiKey'
          ? principal.organizationId === owner
          : principal.kind === 'user' && (await roleOf(principal.userId, owner)) !== null;
      if (!allowed)
        throw new AppError('authorization_error', 'You are not a member of the organization of this project');
      const row = await projects.get(owner, id);
      if (!row) throw notFound('Project');
      return toProject(row);
    },

    async rename(scope: OrgScope, id: string, name: string): Promise<Project> {
      await load(scope, id);
      const row = await projects.rename(scope.organizationId, id, name, clock.now().toISOString());
      if (!row) throw notFound('Project');
      return toProject(row);
    },

    async delete(scope: OrgScope, id: string): Promise<void> {
      // Keys are created under the same lock: none of the project's keys is missing from the list.
      const keyIds = await projects.withOrganizationLocked(scope.organizationId, async (trx) => {
        const ids = await apiKeys.projectKeyIds(scope.organizationId, id, trx);
        if (!(await projects.delete(scope.organizationId, id, trx))) throw notFound('Project');
        return ids;
      });
      authenticator.forgetKeys(keyIds);
    },

    /** Revokes every key of the project and returns one new key, atomically. */
    async regenerateKey(scope: OrgScope, id: string): Promise<{ apiKey: string }> {
      const { revoked, key } = await projects.withOrganizationLocked(scope.organizationId, async (trx) => {
        if (!(await projects.exists(scope.organizationId, id, trx))) throw notFound('Project');
        const revoked = await apiKeys.revokeProjectKeys(
          scope.organizationId,
          id,
          clock.now().toISOString(),
          trx,
        );
        const key = await apiKeyService.mint(scope.organizationId, id, PROJECT_KEY_NAME, trx);
        return { revoked, key };
      });
      authenticator.forgetKeys(revoked);
      return { apiKey: key.key };
    },
  };
}
