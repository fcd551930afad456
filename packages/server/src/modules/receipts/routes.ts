import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { tagDigest } from '../../ledger/canonical.js';
import type { Checkpoint } from '../../ledger/checkpoints.js';
import { consistencyProof, inclusionProof } from '../../ledger/proofs.js';
import { ReceiptTree } from '../../ledger/tree.js';
import { AppError, notFound } from '../../lib/errors.js';
import { NoBody } from '../../lib/schemas.js';
import { SigningKeyMissingError } from '../../signing/model.js';
import { intParam } from '../decisions/query.js';
import { EXPORT_PAGE, exportChunks, planExport } from './export.js';
import { createReceiptRepository } from './repository.js';

const ExportQuery = Type.Object({
  after: Type.Optional(Type.String({ description: 'sequence number; the export starts after it' })),
  limit: Type.Optional(Type.String({ description: 'integer 1-100000; default: the whole chain' })),
});

const Hash = Type.String({ pattern: '^sha256:[0-9a-f]{64}$' });
const CheckpointSchema = Type.Object({
  schema: Type.Literal('svc.checkpoint/1'),
  origin: Type.String(),
  organization_id: Type.String(),
  tree_size: Type.Integer(),
  root_hash: Hash,
  last_receipt_hash: Hash,
  timestamp: Type.String(),
  kid: Type.String(),
  signature: Type.String(),
});

const CheckpointListQuery = Type.Object({
  limit: Type.Optional(Type.String({ description: 'integer 1-100, default 20' })),
  before: Type.Optional(Type.String({ description: 'tree size; lists checkpoints of smaller trees' })),
});
const TreeSizeParams = Type.Object({ treeSize: Type.String({ maxLength: 20 }) });
const InclusionQuery = Type.Object({
  sequence: Type.String({ description: 'the receipt sequence (its leaf index)' }),
  tree_size: Type.Optional(Type.String({ description: 'default: a checkpoint covering the receipt' })),
});
const ConsistencyQuery = Type.Object({
  first: Type.String({ description: 'tree size of the older checkpoint' }),
  second: Type.Optional(
    Type.String({ description: 'tree size of the newer one; default: the latest checkpoint' }),
  ),
});

/** Signing needs a key: without one, answer 503 signing_key_missing instead of a bare 500. */
async function signing<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof SigningKeyMissingError) {
      throw new AppError(
        'signing_key_missing',
        'No signing key is available: a new checkpoint cannot be signed',
      );
    }
    throw err;
  }
}

export const receiptRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const receipts = createReceiptRepository(ctx.store.db);
  const tree = new ReceiptTree(ctx.store.db);
  const checkpoints = ctx.checkpoints;

  app.get(
    '/v1/receipts/checkpoints',
    {
      schema: {
        querystring: CheckpointListQuery,
        response: { 200: Type.Object({ data: Type.Array(CheckpointSchema) }) },
      },
    },
    async (req) => {
      const scope = await ctx.scope(req);
      const limit = intParam('limit', req.query.limit, 1, 100, 20);
      const before = intParam('before', req.query.before, 1, Number.MAX_SAFE_INTEGER);
      return { data: await checkpoints.list(scope.organizationId, limit, before) };
    },
  );

  app.get(
    '/v1/receipts/checkpoints/latest',
    { schema: { response: { 200: CheckpointSchema } } },
    async (req) => {
      const scope = await ctx.scope(req);
      const [latest] = await checkpoints.list(scope.organizationId, 1);
      if (!latest) throw notFound('Checkpoint (the chain has none yet)');
      return latest;
    },
  );

  app.get(
    '/v1/receipts/checkpoints/:treeSize',
    { schema: { params: TreeSizeParams, response: { 200: CheckpointSchema } } },
    async (req) => {
      const scope = await ctx.scope(req);
      const size = intParam('params/treeSize', req.params.treeSize, 1, Number.MAX_SAFE_INTEGER);
      const found = await checkpoints.at(scope.organizationId, size!);
      if (!found) throw notFound(`Checkpoint of tree size ${size}`);
      return found;
    },
  );

  // Signs a checkpoint of the chain as it is now (or returns the one that already covers it).
  app.post(
    '/v1/receipts/checkpoints',
    { schema: { documented: { body: NoBody }, response: { 200: CheckpointSchema, 201: CheckpointSchema } } },
    async (req, reply) => {
      const scope = await ctx.scope(req);
      const now = await signing(() => checkpoints.now(scope.organizationId));
      if (!now)
        throw new AppError('conflict', 'The receipt chain is empty: there is nothing to checkpoint yet');
      // 201 only when this request's checkpoint is the one stored. 200: the chain has not grown since
      // its latest checkpoint, or a concurrent signer stored one of this size first; it is returned as it is.
      return reply.code(now.created ? 201 : 200).send(now.checkpoint);
    },
  );

  app.get(
    '/v1/receipts/proofs/inclusion',
    {
      schema: {
        querystring: InclusionQuery,
        response: {
          200: Type.Object({
            sequence: Type.Integer(),
            tree_size: Type.Integer(),
            leaf_hash: Hash,
            audit_path: Type.Array(Hash),
            checkpoint: Type.Union([CheckpointSchema, Type.Null()]),
          }),
        },
      },
    },
    async (req) => {
      const org = (await ctx.scope(req)).organizationId;
      const sequence = intParam('sequence', req.query.sequence, 0, Number.MAX_SAFE_INTEGER - 1);
      const length = await receipts.chainLength(org);
      if (sequence! >= length) throw notFound(`Receipt ${sequence}`);
      let size = intParam('tree_size', req.query.tree_size, 1, Number.MAX_SAFE_INTEGER);
      let checkpoint: Checkpoint | null;
      if (size === undefined) {
        const [latest] = await checkpoints.list(org, 1);
        // One signed by a retired key is signed again with the current key (Checkpointer.now).
        checkpoint =
          latest && latest.tree_size > sequence! && !(await checkpoints.superseded(latest))
            ? latest
            : ((await signing(() => checkpoints.now(org)))?.checkpoint ?? null);
        size = checkpoint!.tree_size;
      } else {
        if (size <= sequence! || size > length) {
          throw new AppError(
            'validation_failed',
            `querystring/tree_size must be from ${sequence! + 1} to ${length}`,
          );
        }
        checkpoint = await checkpoints.at(org, size);
      }
      const [leaf] = await tree.leafHashes(org, sequence!, sequence! + 1);
      const path = await inclusionProof(tree.hasher(org), sequence!, size);
      return {
        sequence: sequence!,
        tree_size: size,
        leaf_hash: tagDigest(leaf!),
        audit_path: path.map(tagDigest),
        checkpoint,
      };
    },
  );

  app.get(
    '/v1/receipts/proofs/consistency',
    {
      schema: {
        querystring: ConsistencyQuery,
        response: {
          200: Type.Object({ first: Type.Integer(), second: Type.Integer(), proof: Type.Array(Hash) }),
        },
      },
    },
    async (req) => {
      const org = (await ctx.scope(req)).organizationId;
      const first = intParam('first', req.query.first, 1, Number.MAX_SAFE_INTEGER)!;
      let second = intParam('second', req.query.second, 1, Number.MAX_SAFE_INTEGER);
      if (second === undefined) {
        const [latest] = await checkpoints.list(org, 1);
        if (!latest) throw notFound('Checkpoint (the chain has none yet)');
        second = latest.tree_size;
      }
      // Read after the newest checkpoint: one signed meanwhile covers receipts a length read before
      // it would not count, and the default `second` would be refused as beyond the chain.
      const length = await receipts.chainLength(org);
      if (first > second || second > length) {
        throw new AppError(
          'validation_failed',
          `querystring/first and second must satisfy 1 <= first <= second <= ${length} (the chain length)`,
        );
      }
      const proof = await consistencyProof(tree.hasher(org), first, second);
      return { first, second, proof: proof.map(tagDigest) };
    },
  );

  const ExportSchema = {
    querystring: ExportQuery,
    response: {
      200: {
        description: 'One receipt per line (NDJSON), in chain order; headers X-Chain-Length and X-Next-After',
        content: { 'application/x-ndjson': { schema: { type: 'string' } } },
      },
    },
  };
  app.get('/v1/receipts/export', { schema: ExportSchema }, async (req, reply) => {
    const scope = await ctx.scope(req);
    const after = intParam('after', req.query.after, 0, Number.MAX_SAFE_INTEGER - 1);
    const limit = intParam('limit', req.query.limit, 1, 100_000);
    const org = scope.organizationId;
    const plan = await planExport(receipts, org, after, limit);
    // The first page is read before answering, so a store failure is still a clean error response.
    const first =
      plan.from < plan.before
        ? await receipts.page(org, plan.from, plan.before, Math.min(EXPORT_PAGE, plan.before - plan.from))
        : [];
    reply.header('x-chain-length', String(plan.chainLength));
    if (plan.nextAfter !== null) reply.header('x-next-after', String(plan.nextAfter));
    const body = Readable.from(exportChunks(receipts, org, plan, first), { objectMode: false });
    body.on('error', (err) => req.log.error({ err }, 'receipt export failed mid-stream'));
    return reply.type('application/x-ndjson').send(body);
  });
};
