import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyError, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { sendEnvelopeB } from '../../lib/envelope-b.js';
import { AppError } from '../../lib/errors.js';
import { NoBody } from '../../lib/schemas.js';
import { errorHandlerA, sendError } from '../../plugins/errors.js';
import { HANDLER_B } from '../../plugins/openapi.js';
import { SigningKeyMissingError } from '../../signing/model.js';
import { envelopeBErrorHandler, routeNotFoundB } from '../payments/errors.js';

const PublishedKeySchema = Type.Object({
  kty: Type.Literal('OKP'),
  crv: Type.Literal('Ed25519'),
  x: Type.String(),
  kid: Type.String(),
  alg: Type.Literal('EdDSA'),
  use: Type.Literal('sig'),
});

const KeyInfoSchema = Type.Object({
  kid: Type.String(),
  source: Type.Union([Type.Literal('generated'), Type.Literal('file')]),
  status: Type.Union([Type.Literal('active'), Type.Literal('retired')]),
  createdAt: Type.String(),
  retiredAt: Type.Union([Type.String(), Type.Null()]),
  publishedUntil: Type.Union([Type.String(), Type.Null()]),
  published: Type.Boolean(),
});

const KEY_SET_PATH = '/.well-known/svc-keys.json';

/**
 * The published key set, in a context of its own under its path: every answer of that path other
 * than 2xx is envelope B, as on the payment gateway; another method (POST, DELETE…) answers 404
 * route_not_found.
 */
const keySetRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const errorB = envelopeBErrorHandler(ctx.config.docsUrl);
  const notFoundB = routeNotFoundB(ctx.config.docsUrl);
  // The context also takes the paths below it (its 404, and errors of hooks that run before the
  // router's verdict, such as a %00 in the URL): those are unknown routes in envelope A as anywhere else.
  const isKeySet = (req: FastifyRequest) => req.url.split('?')[0] === KEY_SET_PATH;
  app.setErrorHandler((err: FastifyError, req, reply) =>
    isKeySet(req) ? errorB(err, req, reply) : errorHandlerA(err, req, reply),
  );
  app.setNotFoundHandler((req, reply) =>
    isKeySet(req)
      ? notFoundB(req, reply)
      : sendError(reply, 'not_found', `Route ${req.method} ${req.url.split('?')[0]} not found`),
  );
  app.get(
    '',
    {
      config: { auth: 'none' },
      schema: {
        response: { 200: Type.Object({ keys: Type.Array(PublishedKeySchema) }) },
        // Every error in envelope B: no loadable key, a malformed query (`%00`), an internal error.
        documented: { envelopeB: [HANDLER_B.invalidRequest, HANDLER_B.signingKeyMissing] },
      },
    },
    async (req, reply) => {
      try {
        const keys = await ctx.signing.published();
        // Verifiers may cache it; a rotation keeps the previous key published far longer than this.
        reply.header('cache-control', 'public, max-age=300');
        return { keys };
      } catch (err) {
        if (!(err instanceof SigningKeyMissingError)) throw err;
        return sendEnvelopeB(req, reply, ctx.config.docsUrl, 503, {
          type: 'api_error',
          code: 'signing_key_missing',
          message: 'No Ed25519 signing key is configured or loadable',
          hint: 'check SVC_SIGNING_KEY_FILE (readable by the service, mode 0600) or the service logs',
        });
      }
    },
  );
};

/** The published signing key set, and its operator API (list, rotate). */
export const signingKeyRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  await app.register(keySetRoutes, { ctx, prefix: KEY_SET_PATH });

  app.get(
    '/v1/admin/signing-keys',
    {
      config: { auth: 'admin' },
      schema: { response: { 200: Type.Object({ data: Type.Array(KeyInfoSchema) }) } },
    },
    async () => ({ data: await ctx.signing.list() }),
  );

  app.post(
    '/v1/admin/signing-keys/rotate',
    {
      config: { auth: 'admin' },
      schema: {
        documented: { body: NoBody },
        response: {
          200: Type.Object({
            kid: Type.String(),
            previousKid: Type.Union([Type.String(), Type.Null()]),
            previousPublishedUntil: Type.Union([Type.String(), Type.Null()]),
          }),
        },
      },
    },
    async () => {
      if (ctx.config.signingKeyFile) {
        throw new AppError(
          'conflict',
          'The signing key comes from SVC_SIGNING_KEY_FILE: replace that file to rotate',
        );
      }
      return ctx.signing.rotate();
    },
  );
};
