import type { FastifyRequest } from 'fastify';
import type { KeyPrincipal } from '../modules/api-keys/authenticator.js';
import type { UserPrincipal } from '../plugins/auth.js';
import { AppError } from './errors.js';
import { isUuidAnyCase } from './ids.js';

/** The tenant a request acts in. Every repository call takes one; there is no unscoped read. */
export interface OrgScope {
  organizationId: string;
  /** The API key's project, or null for a user acting on the whole organization. */
  projectId: string | null;
  principal: KeyPrincipal | UserPrincipal;
}

export type RoleLookup = (userId: string, organizationId: string) => Promise<string | null>;

export type ScopeResolver = (
  request: FastifyRequest,
  explicitOrganizationId?: string | null,
) => Promise<OrgScope>;

/**
 * An API key acts in its own organization. A user names the organization (query or body field where
 * the spec has one, else the X-Organization-Id header) and must be a member of it.
 */
/** An organization id in upper case (the header, or a field no schema checks as a UUID) read as the id it is. */
const lower = (id: string | null | undefined) => (id && isUuidAnyCase(id) ? id.toLowerCase() : id);

export function createScopeResolver(roleOf: RoleLookup): ScopeResolver {
  return async (request, explicit) => {
    const principal = request.principal;
    if (!principal || principal.kind === 'admin')
      throw new AppError('unauthorized', 'Authentication required');
    if (principal.kind === 'apiKey') {
      if (explicit && lower(explicit) !== principal.organizationId) {
        throw new AppError('authorization_error', 'This API key belongs to another organization');
      }
      return { organizationId: principal.organizationId, projectId: principal.projectId, principal };
    }
    const header = request.headers['x-organization-id'];
    const organizationId = lower(explicit || (typeof header === 'string' && header !== '' ? header : null));
    if (!organizationId) {
      throw new AppError(
        'missing_organization',
        'organizationId is required: pass it in the query or body, or send X-Organization-Id',
      );
    }
    const role = await roleOf(principal.userId, organizationId);
    if (!role) throw new AppError('authorization_error', 'You are not a member of this organization');
    return { organizationId, projectId: null, principal };
  };
}
