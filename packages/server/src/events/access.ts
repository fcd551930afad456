import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { AppError } from '../lib/errors.js';
import type { JwtVerifier } from '../lib/jwt.js';
import { looksLikeApiKey } from '../modules/api-keys/keys.js';
import { createOrganizationRepository } from '../modules/organizations/repository.js';
import { sessionKey } from '../modules/sessions/service.js';
import { bearerToken } from '../plugins/auth.js';
import { type CheckRound, sharedRead } from './checks.js';
import type { StreamHolder } from './hub.js';

/**
 * Long-lived connections re-check their credentials at every heartbeat: an expired token or a lost
 * membership ends the delivery within one heartbeat interval (and the spread of its checks, see
 * EventHub.heartbeat) instead of never. A revoked key or a signed-out session ends it at once (through
 * its holder); the re-check is the backstop for those. Within a round of checks (`round`) the store
 * reads are shared by the connections of one identity; without one, every read is the check's own.
 */
export type Recheck = (round?: CheckRound) => Promise<boolean>;

/**
 * The store reads of the re-checks, in one place: what a round shares, and what tests count and
 * fail on purpose.
 */
export const recheckReads = {
  roleOf: (ctx: AppContext, userId: string, organizationId: string): Promise<string | null> =>
    createOrganizationRepository(ctx.store.db).roleOf(userId, organizationId),
  organizationsOf: async (ctx: AppContext, userId: string): Promise<string[]> =>
    (await createOrganizationRepository(ctx.store.db).listForUser(userId)).map((r) => r.id),
  session: (ctx: AppContext, sessionId: string) => ctx.sessions.lookup(sessionId),
};

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
  const held = session ? { id: session.id, key: sessionKey(session.id) } : null;
  const userId = principal.userId;
  return {
    organizationId: org,
    ...(held ? { holder: { session: held.key } } : {}),
    recheck: async (round) => {
      // A dashboard stream ends with its session (signed out or expired).
      if (held) {
        const found = await sharedRead(round, ['session', held.key], () =>
          recheckReads.session(ctx, held.id),
        );
        if (found?.userId !== userId) return false;
      } else if (!token || !(await tokenStillValid(jwt, token, userId))) return false;
      // The token is each stream's own (its expiry); the membership is the person's, read once a round.
      const role = await sharedRead(round, ['role', userId, org], () =>
        recheckReads.roleOf(ctx, userId, org),
      );
      return role !== null;
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

/** Ids of every organization the user belongs to; read once per round of checks (`round`). */
export function userOrganizations(ctx: AppContext, userId: string, round?: CheckRound): Promise<string[]> {
  return sharedRead(round, ['organizations', userId], () => recheckReads.organizationsOf(ctx, userId));
}
