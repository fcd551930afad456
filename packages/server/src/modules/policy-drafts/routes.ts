import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { DraftRule } from '@svc/policy-engine';
import type { AppContext } from '../../context.js';
import { ifMatchOf } from '../../lib/if-match.js';
import { IdParams, NoBody } from '../../lib/schemas.js';
import type { KeyScope } from '../api-keys/model.js';
import { createPolicyRepository } from '../policies/repository.js';
import { createProjectRepository } from '../projects/repository.js';
import { DEFAULT_REPLAY_LIMIT, replayDraft } from './replay.js';
import { createDraftRepository } from './repository.js';
import {
  ApprovedDraft,
  CreateDraftBody,
  DraftEnvelope,
  DraftSchema,
  ListDraftsQuery,
  PatchDraftBody,
  ReplayBody,
  ReplaySchema,
} from './schemas.js';
import { createDraftService } from './service.js';

/** A reviewer key reads drafts and approves or rejects them; it writes nothing else. */
const REVIEW: readonly KeyScope[] = ['api', 'policy-drafts:approve'];
const APPROVE: readonly KeyScope[] = ['policy-drafts:approve'];

const ApproveHeaders = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      description:
        'The revision (ETag) of the draft as read: approval fails with 409 conflict if the draft was edited since',
    }),
  ),
});

/** Every other write to a draft takes the same optional precondition. */
const IfMatchHeaders = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      description:
        'The revision (ETag) of the draft as read: if the draft was edited since, nothing is done and the answer is 409 conflict',
    }),
  ),
});

export const policyDraftRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const projects = createProjectRepository(ctx.store.db);
  const policies = createPolicyRepository(ctx.store.db);
  const service = createDraftService({
    db: ctx.store.db,
    drafts: createDraftRepository(ctx.store.db),
    policies,
    cache: ctx.policies,
    events: ctx.events,
    clock: ctx.clock,
    projectExists: projects.exists,
  });

  app.post(
    '/v1/policy-drafts',
    { schema: { body: CreateDraftBody, response: { 201: DraftEnvelope } } },
    async (req, reply) =>
      reply.code(201).send({ data: await service.create(await ctx.scope(req), req.body) }),
  );

  app.get(
    '/v1/policy-drafts',
    {
      config: { scopes: REVIEW },
      schema: {
        querystring: ListDraftsQuery,
        response: { 200: Type.Object({ data: Type.Array(DraftSchema) }) },
      },
    },
    async (req) => ({ data: await service.list(await ctx.scope(req), req.query) }),
  );

  app.get(
    '/v1/policy-drafts/:id',
    { config: { scopes: REVIEW }, schema: { params: IdParams, response: { 200: DraftEnvelope } } },
    async (req, reply) => {
      const data = await service.get(await ctx.scope(req), req.params.id);
      reply.header('etag', `"${data.revision}"`);
      return { data };
    },
  );

  // What approving would have changed: the draft replayed against recent recorded decisions.
  app.post(
    '/v1/policy-drafts/:id/replay',
    {
      config: { scopes: REVIEW },
      schema: { params: IdParams, body: ReplayBody, response: { 200: ReplaySchema } },
    },
    async (req) => {
      const scope = await ctx.scope(req);
      const draft = await service.get(scope, req.params.id);
      const replayed = await replayDraft(
        ctx.store.db,
        policies,
        scope.organizationId,
        // Stored rules passed the schema on write; the compiler screens each one again.
        { id: draft.id, rules: draft.rules as DraftRule[] },
        req.body?.limit ?? DEFAULT_REPLAY_LIMIT,
      );
      // The revision replayed: a reader holding another one knows these results are not of its rules.
      return { data: { ...replayed, revision: draft.revision } };
    },
  );

  app.patch(
    '/v1/policy-drafts/:id',
    {
      schema: {
        params: IdParams,
        headers: IfMatchHeaders,
        body: PatchDraftBody,
        response: { 200: DraftEnvelope },
      },
    },
    async (req) => {
      const scope = await ctx.scope(req);
      return {
        data: await service.update(
          scope,
          req.params.id,
          req.body,
          ifMatchOf(req.headers['if-match'], 'the draft'),
        ),
      };
    },
  );

  app.delete(
    '/v1/policy-drafts/:id',
    {
      schema: {
        params: IdParams,
        headers: IfMatchHeaders,
        response: { 204: Type.Null({ description: 'The draft is deleted' }) },
      },
    },
    async (req, reply) => {
      await service.delete(
        await ctx.scope(req),
        req.params.id,
        ifMatchOf(req.headers['if-match'], 'the draft'),
      );
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/v1/policy-drafts/:id/submit',
    {
      schema: {
        params: IdParams,
        headers: IfMatchHeaders,
        documented: { body: NoBody },
        response: { 200: DraftEnvelope },
      },
    },
    async (req) => ({
      data: await service.submit(
        await ctx.scope(req),
        req.params.id,
        ifMatchOf(req.headers['if-match'], 'the draft'),
      ),
    }),
  );

  // SPEC §5.3: approving needs a person: a user token, or a key made to relay one (never the key
  // that created the draft; see the service).
  app.post(
    '/v1/policy-drafts/:id/approve',
    {
      config: { scopes: APPROVE },
      schema: {
        params: IdParams,
        headers: ApproveHeaders,
        documented: { body: NoBody },
        response: { 200: ApprovedDraft },
      },
    },
    async (req) =>
      service.approve(await ctx.scope(req), req.params.id, ifMatchOf(req.headers['if-match'], 'the draft')),
  );

  app.post(
    '/v1/policy-drafts/:id/reject',
    {
      config: { scopes: REVIEW },
      schema: {
        params: IdParams,
        headers: IfMatchHeaders,
        documented: { body: NoBody },
        response: { 200: DraftEnvelope },
      },
    },
    async (req) => ({
      data: await service.reject(
        await ctx.scope(req),
        req.params.id,
        ifMatchOf(req.headers['if-match'], 'the draft'),
      ),
    }),
  );
};
