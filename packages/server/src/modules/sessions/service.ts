import { createHash, randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Clock } from '../../lib/clock.js';
import { isUserId } from '../../lib/schemas.js';
import { Watchers } from '../../lib/watchers.js';
import type { Database } from '../../storage/schema.js';
import {
  LOGIN_LINK_MAX_TTL_SECONDS,
  type LoginLink,
  OIDC_SIGN_IN_TTL_SECONDS,
  OIDC_SIGN_INS_MAX,
  type OpenedSession,
  type PendingSignIn,
  SESSION_TTL_SECONDS,
  type SessionInfo,
} from './model.js';

const hash = (secret: string) => createHash('sha256').update(secret).digest('hex');
/**
 * How a session is named outside its cookie: the SHA-256 of its id, as stored. Open streams are
 * indexed by it, and it is what goes to other instances when the session ends (never the secret).
 */
export const sessionKey = (sessionId: string): string => hash(sessionId);
/** 256 random bits as 43 base64url characters: session ids, link tokens, CSRF tokens, OIDC states. */
export const secret = () => randomBytes(32).toString('base64url');
/** Cookie and link secrets are 43 base64url characters; anything else is not worth a lookup. */
const SECRET_RE = /^[A-Za-z0-9_-]{43}$/;

export type SessionService = ReturnType<typeof createSessionService>;

/** One-time login links and the server-side sessions they open. Secrets are stored hashed. */
export function createSessionService(deps: { db: Kysely<Database>; clock: Clock; baseUrl: string }) {
  const { db, clock } = deps;
  const now = () => clock.now();
  const later = (seconds: number) => new Date(now().getTime() + seconds * 1000).toISOString();
  const endWatchers = new Watchers<string>();

  const service = {
    /** Set by scale-out: tells the other instances that a session ended (they call ended(key, false)). */
    onEnd: null as ((key: string) => void) | null,

    /**
     * Calls `watcher` with the sessionKey of every session signed out, here or (with scale-out) on
     * another instance, so what the session holds open ends at once. Returns the function that stops
     * watching.
     */
    watchEnds(watcher: (key: string) => void): () => void {
      return endWatchers.watch(watcher);
    },

    /** The session named by `key` ended: tell this instance's watchers and, unless told by one, the others. */
    ended(key: string, broadcast = true): void {
      if (broadcast) service.onEnd?.(key);
      endWatchers.tell(key);
    },

    async createLoginLink(userId: string, ttlSeconds: number): Promise<LoginLink> {
      if (!isUserId(userId))
        throw new Error('the user id must be 1 to 200 characters without control characters');
      if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > LOGIN_LINK_MAX_TTL_SECONDS) {
        throw new Error(`the link TTL must be between 1s and ${LOGIN_LINK_MAX_TTL_SECONDS / 3600}h`);
      }
      const token = secret();
      const expiresAt = later(ttlSeconds);
      await db
        .insertInto('login_links')
        .values({
          token_hash: hash(token),
          user_id: userId,
          created_at: now().toISOString(),
          expires_at: expiresAt,
          used_at: null,
        })
        .execute();
      return { url: `${deps.baseUrl}/v1/auth/login?token=${token}`, expiresAt };
    },

    /** Spends a link (once, before it expires) and opens a session; null for an unknown, used or expired link. */
    async redeem(token: string): Promise<OpenedSession | null> {
      if (!SECRET_RE.test(token)) return null;
      const at = now().toISOString();
      const tokenHash = hash(token);
      // The conditional update is the single-use guarantee: of two concurrent redeems one updates a row.
      const spent = await db
        .updateTable('login_links')
        .set({ used_at: at })
        .where('token_hash', '=', tokenHash)
        .where('used_at', 'is', null)
        .where('expires_at', '>', at)
        .executeTakeFirst();
      if (Number(spent.numUpdatedRows) !== 1) return null;
      const link = await db
        .selectFrom('login_links')
        .select('user_id')
        .where('token_hash', '=', tokenHash)
        .executeTakeFirstOrThrow();
      return service.open(link.user_id);
    },

    /** Opens a session for a person whose identity was proven (a login link or the identity provider). */
    async open(userId: string): Promise<OpenedSession> {
      const at = now().toISOString();
      const sessionId = secret();
      const opened: OpenedSession = {
        sessionId,
        userId,
        csrfToken: secret(),
        expiresAt: later(SESSION_TTL_SECONDS),
      };
      await db
        .insertInto('user_sessions')
        .values({
          id_hash: hash(sessionId),
          user_id: opened.userId,
          csrf_token: opened.csrfToken,
          created_at: at,
          expires_at: opened.expiresAt,
        })
        .execute();
      // Housekeeping on a rare path: expired links, sign-ins and sessions are useless, drop them.
      await db.deleteFrom('login_links').where('expires_at', '<=', at).execute();
      await db.deleteFrom('oidc_sign_ins').where('expires_at', '<=', at).execute();
      await db.deleteFrom('user_sessions').where('expires_at', '<=', at).execute();
      return opened;
    },

    /**
     * Keeps what the identity provider's answer to `state` will be checked with (ten minutes, once).
     * Anyone may begin a sign-in, so the live ones are capped (OIDC_SIGN_INS_MAX) by dropping the
     * oldest: refusing new ones instead would let one client lock everyone out for ten minutes with
     * that many requests, while this way it must keep beginning sign-ins faster than people finish
     * theirs (a dropped one answers `invalid`, and the person starts again).
     */
    async beginSignIn(state: string, pending: PendingSignIn): Promise<void> {
      const at = now().toISOString();
      await db.deleteFrom('oidc_sign_ins').where('expires_at', '<=', at).execute();
      const live = await db
        .selectFrom('oidc_sign_ins')
        .select((eb) => eb.fn.countAll<number | string>().as('n'))
        .executeTakeFirstOrThrow();
      const over = Number(live.n) - OIDC_SIGN_INS_MAX + 1;
      if (over > 0) {
        await db
          .deleteFrom('oidc_sign_ins')
          .where(
            'state_hash',
            'in',
            db.selectFrom('oidc_sign_ins').select('state_hash').orderBy('created_at').limit(over),
          )
          .execute();
      }
      await db
        .insertInto('oidc_sign_ins')
        .values({
          state_hash: hash(state),
          code_verifier: pending.codeVerifier,
          nonce: pending.nonce,
          created_at: now().toISOString(),
          expires_at: later(OIDC_SIGN_IN_TTL_SECONDS),
        })
        .execute();
    },

    /** Takes (and spends) the sign-in begun with `state`; null if unknown, already used or expired. */
    async takeSignIn(state: string): Promise<PendingSignIn | null> {
      if (!SECRET_RE.test(state)) return null;
      const stateHash = hash(state);
      const row = await db
        .selectFrom('oidc_sign_ins')
        .select(['code_verifier', 'nonce', 'expires_at'])
        .where('state_hash', '=', stateHash)
        .executeTakeFirst();
      if (!row) return null;
      // The delete is the single-use guarantee: of two concurrent callbacks one deletes the row.
      const taken = await db
        .deleteFrom('oidc_sign_ins')
        .where('state_hash', '=', stateHash)
        .executeTakeFirst();
      if (Number(taken.numDeletedRows) !== 1 || row.expires_at <= now().toISOString()) return null;
      return { codeVerifier: row.code_verifier, nonce: row.nonce };
    },

    /** The live session behind a cookie value, or null (unknown, signed out or expired). */
    async lookup(sessionId: string): Promise<SessionInfo | null> {
      if (!SECRET_RE.test(sessionId)) return null;
      const row = await db
        .selectFrom('user_sessions')
        .select(['user_id', 'csrf_token', 'expires_at'])
        .where('id_hash', '=', hash(sessionId))
        .where('expires_at', '>', now().toISOString())
        .executeTakeFirst();
      return row ? { userId: row.user_id, csrfToken: row.csrf_token, expiresAt: row.expires_at } : null;
    },

    async end(sessionId: string): Promise<void> {
      if (!SECRET_RE.test(sessionId)) return;
      const key = hash(sessionId);
      await db.deleteFrom('user_sessions').where('id_hash', '=', key).execute();
      service.ended(key);
    },
  };
  return service;
}
