import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { AppError } from '../lib/errors.js';
import type { JwtVerifier } from '../lib/jwt.js';
import { looksLikeApiKey } from '../modules/api-keys/keys.js';
import { createOrganizationRepository } from '../modules/organizations/repository.js';
import { sessionKey } from '../modules/sessions/service.js';
import { bearerToken } from '../plugins/auth.js';
import type { StreamHolder } from './hub.js';

/**
 * Long-lived connections re-check their credentials at every heartbeat: an expired token or a lost
 * membership ends the delivery within one heartbeat instead of never. A revoked key or a signed-out
 * session ends it at once (through its holder); the re-check is the backstop for those.
 */
export type Recheck = () => Promise<boolean>;

export interface StreamAccess {
  organizationId: string;
  recheck: Recheck;
  /** The API key or dashboard session the stream was opened with; none for a bearer token. */
  holder?: StreamHolder;
}

/** The raw API key the auth plugin accepted (header, bearer or `apiKey` query), to re-check it later. */
export function presentedKey(request: FastifyRequest): string | null {
  const header = request.headers['x-service-api-key'];
  if (typeof header === 'string' && header !== '') return header;
  const token = bearerToken(request);
  if (token && looksLikeApiKey(token)) return token;
  const q = (request.query as Record<string, unknown> | undefined)?.apiKey;
  return typeof q === 'string' && q !== '' ? q : null;
}

/**
 * Scope of an SSE stream: the key's organization, or for a user the organization named by
 * `organizationId` (query) or X-Organization-Id, of which the user must be a member. Every refusal is
 * 401 `unauthorized`, except a user who names no organization (400 `missing_organization`).
 */
export async function streamAccess(
  ctx: AppContext,
  jwt: JwtVerifier,
  request: FastifyRequest,
  organizationId: string | undefined,
): Promise<StreamAccess> {
  let scope: Awaited<ReturnType<AppContext['scope']>>;
  try {
    scope = await ctx.scope(request, organizationId ?? null);
  } catch (err) {
    if (err instanceof AppError && err.code === 'authorization_error') {
      throw new AppError('unauthorized', err.message);
    }
    throw err;
  }
  const principal = scope.principal;
  const org = scope.organizationId;
  if (principal.kind === 'apiKey') {
    const key = presentedKey(request);
    return {
      organizationId: org,
      recheck: async () => (key ? (await ctx.keys.authenticate(key))?.organizationId === org : false),
      holder: { keyId: principal.keyId },
    };
  }
  const token = bearerToken(request);
  const session = principal.session;
  const organizations = createOrganizationRepository(ctx.store.db);
  return {
    organizationId: org,
    ...(session ? { holder: { session: sessionKey(session.id) } } : {}),
    recheck: async () => {
      // A dashboard stream ends with its session (signed out or expired).
      if (session) {
        if ((await ctx.sessions.lookup(session.id))?.userId !== principal.userId) return false;
      } else if (!token || !(await tokenStillValid(jwt, token, principal.userId))) return false;
      return (await organizations.roleOf(principal.userId, org)) !== null;
    },
  };
}

export async function tokenStillValid(jwt: JwtVerifier, token: string, userId: string): Promise<boolean> {
  try {
    return (await jwt.verify(token)).sub === userId;
  } catch {
    return false;
  }
}

/** Ids of every organization the user belongs to. */
export async function userOrganizations(ctx: AppContext, userId: string): Promise<string[]> {
  const rows = await createOrganizationRepository(ctx.store.db).listForUser(userId);
  return rows.map((r) => r.id);
}
