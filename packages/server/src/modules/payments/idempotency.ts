import type { FastifyInstance, FastifyRequest } from 'fastify';
import { hashJson } from '../../ledger/canonical.js';
import type { Clock } from '../../lib/clock.js';
import type { ScopeResolver } from '../../lib/scope.js';
import { gatewayError } from './model.js';
import type { GatewayRepository } from './repository.js';

/** How long an Idempotency-Key and its answer are kept. */
export /** How long an unanswered claim holds its key before it counts as abandoned. */
const STALE_CLAIM_MS = 60_000;
const IDEMPOTENCY_RETENTION_MS = 24 * 3600 * 1000;
/**
 * 1-255 printable ASCII characters (space included). HTTP strips white space around a header
 * value, so a key neither starts nor ends with a space, and one of spaces only arrives empty.
 */
const KEY_RE = /^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$/;

const held = new WeakMap<FastifyRequest, { org: string; key: string }>();

/**
 * Idempotency-Key on the gateway's POSTs: the first request with a key runs and its answer is kept;
 * the same key with the same method, path and canonical body replays that answer; with anything else
 * it answers 400. A server error frees the key so that the request can be sent again. Keys are per
 * project for project keys, so two projects of one organization never see each other's answers.
 */
export function registerIdempotency(
  app: FastifyInstance,
  deps: { repo: GatewayRepository; scope: ScopeResolver; clock: Clock },
): void {
  app.addHook('preHandler', async (req, reply) => {
    if (req.method !== 'POST') return;
    const sent = req.headers['idempotency-key'];
    if (sent === undefined) return;
    if (typeof sent !== 'string' || !KEY_RE.test(sent)) {
      throw gatewayError.invalidRequest(
        'Idempotency-Key must be 1-255 printable ASCII characters, not starting or ending with a space',
        'Idempotency-Key',
      );
    }
    const scope = await deps.scope(req);
    const org = scope.organizationId;
    // Each project's keys have their own key space; user tokens and keys without a project share the
    // organization's. Stored as `<project id or ->/<key>` in the organization's table.
    const namespace = scope.principal.kind === 'apiKey' && scope.projectId ? scope.projectId : '-';
    const key = `${namespace}/${sent}`;
    const hash = hashJson({ method: req.method, path: req.url, body: req.body ?? null });
    const now = deps.clock.now();
    for (let attempt = 0; attempt < 2; attempt++) {
      if (await deps.repo.takeKey(org, key, hash, now.toISOString())) {
        held.set(req, { org, key });
        return;
      }
      const existing = await deps.repo.key(org, key);
      if (!existing) continue;
      if (Date.parse(existing.created_at) + IDEMPOTENCY_RETENTION_MS <= now.getTime()) {
        await deps.repo.dropKey(
          org,
          key,
          new Date(now.getTime() - IDEMPOTENCY_RETENTION_MS + 1).toISOString(),
        );
        continue;
      }
      if (existing.request_hash !== hash) {
        throw gatewayError.idempotencyReused(
          'this Idempotency-Key was used with a different request',
          'Idempotency-Key',
          'use a new key for a new request',
        );
      }
      if (existing.status_code === null || existing.response === null) {
        // A claim that never got its answer (the process died mid-request) frees the key after a minute.
        if (Date.parse(existing.created_at) + STALE_CLAIM_MS <= now.getTime()) {
          await deps.repo.dropKey(org, key, new Date(now.getTime() - STALE_CLAIM_MS + 1).toISOString());
          continue;
        }
        throw gatewayError.idempotencyInProgress(
          'a request with this Idempotency-Key is still running',
          'Idempotency-Key',
          'retry after it has answered',
        );
      }
      return reply
        .code(Number(existing.status_code))
        .type('application/json')
        .header('idempotent-replayed', 'true')
        .send(existing.response);
    }
    throw gatewayError.idempotencyInProgress('the Idempotency-Key could not be taken', 'Idempotency-Key');
  });

  app.addHook('onSend', async (req, reply, payload) => {
    const owner = held.get(req);
    if (!owner) return payload;
    held.delete(req);
    // An answer that says "retry later" (Retry-After: a rate-limited or in-flight payment) is not kept either.
    const retryLater = reply.getHeader('retry-after') !== undefined;
    if (reply.statusCode >= 500 || retryLater || typeof payload !== 'string') {
      await deps.repo.dropKey(owner.org, owner.key);
    } else {
      await deps.repo.completeKey(owner.org, owner.key, reply.statusCode, payload);
    }
    return payload;
  });
}
