import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { hashJson } from '../ledger/canonical.js';
import type { Clock } from './clock.js';
import type { IdempotencyStore } from './idempotency-store.js';
import type { ScopeResolver } from './scope.js';

/** How long an Idempotency-Key and its answer are kept. */
const IDEMPOTENCY_RETENTION_MS = 24 * 3600 * 1000;

/** How long an unanswered claim holds its key before it counts as abandoned, unless the hooks say otherwise. */
export const DEFAULT_STALE_CLAIM_MS = 60_000;

/**
 * 1-255 printable ASCII characters (space included). HTTP strips white space around a header
 * value, so a key neither starts nor ends with a space, and one of spaces only arrives empty.
 */
const IDEMPOTENCY_KEY_PATTERN = '^[\\x21-\\x7e](?:[\\x20-\\x7e]{0,253}[\\x21-\\x7e])?$';
const KEY_RE = new RegExp(IDEMPOTENCY_KEY_PATTERN);

/** The optional header as the API document shows it (never validated by the route schema). */
export const idempotencyKeyHeader = (description: string) =>
  Type.Object({
    'Idempotency-Key': Type.Optional(
      Type.String({ minLength: 1, maxLength: 255, pattern: IDEMPOTENCY_KEY_PATTERN, description }),
    ),
  });

/** Organizations remembered by the expiry sweep before the memory is started afresh. */
const MAX_SWEPT_ORGANIZATIONS = 10_000;

/**
 * The refusals, in the envelope of the routes that take the key. Each gets a message and what to do
 * next (or null); `reused` and `inProgress` are the catalog's 400 and 409 codes.
 */
export interface IdempotencyErrors {
  /** The header is not a valid key. */
  invalidKey(message: string, hint: string | null): Error;
  /** The key was taken by a different request (method, path or canonical body). */
  reused(message: string, hint: string | null): Error;
  /** The key's first request has not answered yet. */
  inProgress(message: string, hint: string | null): Error;
}

export interface IdempotencyDeps {
  store: IdempotencyStore;
  scope: ScopeResolver;
  clock: Clock;
  errors: IdempotencyErrors;
  /**
   * Prepended to every stored key, so that routes sharing the table never see each other's keys
   * (`''` for the gateway, whose keys were stored before any other surface took one).
   */
  surface: string;
  /**
   * At most this often per organization, a request taking a key also starts deleting, in the
   * background, the organization's keys of this surface past retention (a surface where every
   * request brings a fresh key would otherwise keep them all).
   */
  sweepEveryMs?: number;
  /**
   * How long an unanswered claim holds its key before another request with the key may take it over
   * (default DEFAULT_STALE_CLAIM_MS). Longer than the longest handler of the routes: a claim taken over
   * while its request still runs loses that request's answer, and the request runs twice (unless what
   * it does derives from the claim's `originAt` and its store refuses the second: the decision log).
   */
  staleClaimMs?: number;
  /**
   * Whether a claim's request did its work after all: called before a stale claim is taken over (its
   * process died, or its answer could not be stored, after the work was committed), and when the
   * request answers a server error (the work committed, its acknowledgement lost). The answer that
   * request would have sent is stored on the claim and replayed; null takes the claim over, or frees it.
   */
  recover?: (req: FastifyRequest, claim: Claim) => Promise<{ status: number; response: string } | null>;
}

/**
 * A request's hold on a key: the organization, the key as stored, its `created_at` as stored (the
 * claim's identity: answering or freeing it names that time), and when the key's current request was
 * first claimed (`originAt`: the claim's own time, or the one kept by a takeover from the claim it
 * took over). What a route derives from a claim (the decision log's ids) derives from `originAt`, so
 * that a takeover does the same work as the request it took over, which may still be running.
 */
export interface Claim {
  org: string;
  key: string;
  claimedAt: string;
  originAt: string;
}

/**
 * Idempotency-Key on a POST: the first request with a key runs and its answer is kept for 24 hours;
 * the same key with the same method, path and canonical body replays that answer (same status and
 * body, header `idempotent-replayed: true`); with anything else it answers `errors.reused`. A server
 * error, or an answer saying "retry later" (Retry-After), frees the key so that the request can be
 * sent again, unless `recover` finds the work done after all (its answer is then kept), or the route
 * said the outcome is unknown (`outcomeUnknown`: the claim then stays, and is taken over once stale,
 * after `recover` looked again). Keys are per project for project keys, so two projects of one organization never see
 * each other's answers; user tokens and keys without a project share the organization's key space.
 * A claim left unanswered for `staleClaimMs` (its process died) is taken over by the next request
 * with the key. Each request answers or frees only its own claim, known by the time it was taken. A
 * takeover replaces the claim in one write and keeps the time of the claim it took over (`originAt`):
 * with several instances, the request taken over may only be slow, and still do its work; a route
 * that derives what it records from `originAt` then records the same thing twice at most, which its
 * store can refuse (the decision log: the same decision ids, a primary key).
 *
 * Returns the two hooks to install on the routes that take the key: `preHandler` (after auth, rate
 * limit and body validation, so a request refused by those takes no key) and `onSend`.
 */
export function idempotencyHooks(deps: IdempotencyDeps) {
  const staleClaimMs = deps.staleClaimMs ?? DEFAULT_STALE_CLAIM_MS;
  /** The claim each request holds, known by the time it was taken (its `created_at` as stored). */
  const held = new WeakMap<FastifyRequest, Claim>();
  /** Claims whose request still runs in this process: never stale, however long it takes. */
  const running = new Set<string>();
  /** Requests whose work may or may not have been committed (the store stopped answering). */
  const unknown = new WeakSet<FastifyRequest>();
  const runningId = (c: Claim) => `${c.org}\n${c.key}\n${c.claimedAt}`;
  const swept = new Map<string, number>();

  /** Deletes the organization's expired keys of this surface, at most once per `sweepEveryMs`. */
  function sweep(req: FastifyRequest, org: string, nowMs: number): void {
    const every = deps.sweepEveryMs;
    if (every === undefined) return;
    const last = swept.get(org);
    if (last !== undefined && nowMs - last < every) return;
    if (swept.size >= MAX_SWEPT_ORGANIZATIONS) swept.clear();
    swept.set(org, nowMs);
    const before = new Date(nowMs - IDEMPOTENCY_RETENTION_MS).toISOString();
    // Housekeeping, not awaited: the request neither waits for it nor fails with it.
    void deps.store.dropExpired(org, deps.surface, before).catch((err: unknown) => {
      req.log.warn({ err }, 'expired Idempotency-Keys could not be deleted');
    });
  }

  /** The request holds the claim: it answers or frees it (onSend), and no one here takes it over. */
  function hold(req: FastifyRequest, claim: Claim): void {
    held.set(req, claim);
    running.add(runningId(claim));
  }

  async function preHandler(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const sent = req.headers['idempotency-key'];
    if (sent === undefined) return undefined;
    if (typeof sent !== 'string' || !KEY_RE.test(sent)) {
      throw deps.errors.invalidKey(
        'Idempotency-Key must be 1-255 printable ASCII characters, not starting or ending with a space',
        null,
      );
    }
    const scope = await deps.scope(req);
    const org = scope.organizationId;
    // Each project's keys have their own key space; user tokens and keys without a project share the
    // organization's. Stored as `<surface><project id or ->/<key>` in the organization's table.
    const namespace = scope.principal.kind === 'apiKey' && scope.projectId ? scope.projectId : '-';
    const key = `${deps.surface}${namespace}/${sent}`;
    const hash = hashJson({ method: req.method, path: req.url, body: req.body ?? null });
    const now = deps.clock.now();
    sweep(req, org, now.getTime());
    const claimedAt = now.toISOString();
    for (let attempt = 0; attempt < 2; attempt++) {
      if (await deps.store.takeKey(org, key, hash, claimedAt)) {
        hold(req, { org, key, claimedAt, originAt: claimedAt });
        return undefined;
      }
      const existing = await deps.store.key(org, key);
      if (!existing) continue;
      if (Date.parse(existing.created_at) + IDEMPOTENCY_RETENTION_MS <= now.getTime()) {
        // Past retention: only the row read is deleted, never a claim taken since.
        await deps.store.dropKey(org, key, existing.created_at);
        continue;
      }
      if (existing.request_hash !== hash) {
        throw deps.errors.reused(
          'this Idempotency-Key was used with a different request',
          'use a new key for a new request',
        );
      }
      if (existing.status_code === null || existing.response === null) {
        // A claim that never got its answer (the process died mid-request, or, on another instance,
        // it still waits for the store) is taken over after staleClaimMs, unless its request still
        // runs in this process. If that request did its work, its answer is stored and replayed;
        // otherwise the claim read is replaced by this request's, in one write and only while still
        // unanswered (if its request answered meanwhile, the next turn replays it), keeping the time
        // its request was first claimed: this request does the same work under the same identity.
        const stale: Claim = {
          org,
          key,
          claimedAt: existing.created_at,
          originAt: existing.origin_at ?? existing.created_at,
        };
        if (
          Date.parse(existing.created_at) + staleClaimMs <= now.getTime() &&
          !running.has(runningId(stale))
        ) {
          const done = deps.recover ? await deps.recover(req, stale) : null;
          if (done) await deps.store.completeKey(org, key, stale.claimedAt, done.status, done.response);
          else if (await deps.store.takeOver(org, key, stale.claimedAt, claimedAt)) {
            hold(req, { org, key, claimedAt, originAt: stale.originAt });
            return undefined;
          }
          continue;
        }
        throw deps.errors.inProgress(
          'a request with this Idempotency-Key is still running',
          'retry after it has answered',
        );
      }
      return reply
        .code(Number(existing.status_code))
        .type('application/json')
        .header('idempotent-replayed', 'true')
        .send(existing.response);
    }
    throw deps.errors.inProgress('the Idempotency-Key could not be taken', null);
  }

  async function onSend(req: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
    const owner = held.get(req);
    if (!owner) return payload;
    held.delete(req);
    running.delete(runningId(owner));
    // An answer that says "retry later" (Retry-After: a rate-limited or in-flight payment) is not kept either.
    const retryLater = reply.getHeader('retry-after') !== undefined;
    const keep = !(reply.statusCode >= 500 || retryLater || typeof payload !== 'string');
    try {
      // Only this request's own claim is answered or freed: if it was taken over (it ran past
      // staleClaimMs), the key belongs to the request that took it.
      if (!keep && unknown.has(req) && deps.recover) {
        // The store stopped answering: the work may still commit. The claim stays unanswered (the
        // same request meanwhile answers 409) and, once stale, is looked up again and taken over.
      } else if (!keep) {
        // A server error after the work was done (a commit whose acknowledgement failed): the answer
        // that request would have sent is kept instead, so that sending it again does not do it twice.
        // When that cannot be read, the claim stays unanswered, as when the outcome is unknown: freed,
        // the request sent again would do the work anew; once stale, it is looked up again.
        let done: { status: number; response: string } | null = null;
        let known = true;
        if (reply.statusCode >= 500 && deps.recover) {
          try {
            done = await deps.recover(req, owner);
          } catch (err) {
            req.log.warn({ err }, 'whether the failed request was done could not be read; its key is kept');
            known = false;
          }
        }
        // A claim taken over from a request that may still be waiting for the store (on another
        // instance) is not freed either: freed, the request sent again would claim the key anew and
        // do the work under another identity, and the first request's commit could still land. Kept
        // unanswered, it is taken over again once stale, with the identity of its first claim.
        const tookOver = owner.originAt !== owner.claimedAt && deps.recover !== undefined;
        if (done)
          await deps.store.completeKey(owner.org, owner.key, owner.claimedAt, done.status, done.response);
        else if (known && !tookOver) await deps.store.dropClaim(owner.org, owner.key, owner.claimedAt);
      } else if (
        !(await deps.store.completeKey(
          owner.org,
          owner.key,
          owner.claimedAt,
          reply.statusCode,
          payload as string,
        ))
      ) {
        req.log.warn(
          'the claim of this Idempotency-Key was taken over while its request ran; its answer is not kept',
        );
      }
    } catch (err) {
      // What was done stays done and is answered: failing the answer now would make the client send
      // the request again. The claim, left unanswered, frees the key after staleClaimMs.
      req.log.error({ err }, 'the answer to an Idempotency-Key could not be stored');
    }
    return payload;
  }

  /** The claim the request holds, if it took a key (the route may derive what it records from it). */
  const claimOf = (req: FastifyRequest): Claim | undefined => held.get(req);

  /** The route failed without knowing whether its work was committed (the store stopped answering). */
  const outcomeUnknown = (req: FastifyRequest): void => {
    unknown.add(req);
  };

  return { preHandler, onSend, claimOf, outcomeUnknown };
}
