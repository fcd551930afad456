import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { compileSchema, HEADER_NAME, PatternRecord } from '../../lib/schemas.js';
import type { DocumentedOnly } from '../../plugins/openapi.js';
import { flowError } from './flow-model.js';
import type { InvoiceService } from './invoices.js';
import { gatewayError } from './model.js';
import type { ProviderService } from './providers.js';
import {
  BeneficiaryDetails,
  EntityId,
  IdParams,
  InvoiceAnswerSchema,
  ProviderAnswerSchema,
  ProviderListSchema,
  WorkflowAnswerSchema,
} from './schemas.js';
import type { WorkflowService } from './workflows.js';

/** Invoice ingest takes documents up to 1 MB (SPEC §8); every other gateway body 512 KB. */
export const INVOICE_BODY_LIMIT = 1024 * 1024;

const Id = Type.String({ minLength: 1, maxLength: 200, pattern: '^[^\\x00-\\x1f\\x7f]+$' });
const Rail = Type.String({ pattern: '^[a-z0-9_-]{1,32}$' });

const JsonInvoiceBody = Type.Object(
  {
    invoice_number: Type.String({ minLength: 1, maxLength: 200, pattern: '\\S' }),
    issue_date: Type.Optional(Type.String({ maxLength: 10 })),
    due_date: Type.Optional(Type.String({ maxLength: 10 })),
    payee: BeneficiaryDetails,
    amount: Type.Object(
      { currency: Type.String({ maxLength: 5 }), amount: Type.String({ minLength: 1, maxLength: 32 }) },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);
const checkJsonInvoice = compileSchema(JsonInvoiceBody);

const UblInvoice = Type.String({ description: 'A UBL 2.1 Invoice document (up to 1 MB), kept as received' });

/**
 * POST /invoices in the API document only: its body is XML or JSON, so Fastify validates neither
 * (the handler checks the JSON one itself and parses the XML one).
 */
const InvoicePost: DocumentedOnly = {
  body: {
    content: {
      'application/xml': { schema: UblInvoice },
      'text/xml': { schema: UblInvoice },
      'application/json': { schema: JsonInvoiceBody },
    },
  },
  // A UBL document that cannot be read is kept as parse_failed (adds invoice_id, invoice_hash).
  envelopeB: [gatewayError.precision, flowError.invoiceParseFailed],
};
const InvoiceAnswers = {
  200: { ...InvoiceAnswerSchema, description: 'The invoice kept earlier for the same terms' },
  201: { ...InvoiceAnswerSchema, description: 'The invoice is kept' },
};

const WorkflowBody = Type.Object(
  {
    entity_id: EntityId,
    workflow_id: Id,
    pack_id: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9._-]{1,100}$' })),
  },
  { additionalProperties: false },
);
const WorkflowParams = Type.Object({ entityId: Id, workflowId: Id });
const TransitionBody = Type.Object(
  {
    to: Type.String({ pattern: '^[a-z][a-z0-9_]{0,31}$' }),
    reason: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);

/** The longest a provider may take to answer a payment (`timeout_ms`). */
export const MAX_PROVIDER_TIMEOUT_MS = 120_000;

const Credentials = Type.Union([
  PatternRecord(HEADER_NAME, Type.String({ minLength: 1, maxLength: 4096, pattern: '^[\\x20-\\x7e]*$' }), {
    maxProperties: 16,
  }),
  Type.Null(),
]);
const ProviderFields = {
  name: Type.String({ minLength: 1, maxLength: 100 }),
  rail: Rail,
  url: Type.String({ minLength: 1, maxLength: 2048 }),
  credentials: Type.Optional(Credentials),
  timeout_ms: Type.Optional(Type.Integer({ minimum: 100, maximum: MAX_PROVIDER_TIMEOUT_MS })),
  enabled: Type.Optional(Type.Boolean()),
};
const ProviderBody = Type.Object(ProviderFields, { additionalProperties: false });
const ProviderPatch = Type.Partial(Type.Object(ProviderFields), {
  additionalProperties: false,
  minProperties: 1,
});

/** Names of headers a provider connection may not set: the request's own. */
const RESERVED = new Set([
  'content-type',
  'content-length',
  'host',
  'idempotency-key',
  'accept',
  'transfer-encoding',
  'connection',
]);

function checkCredentialNames(credentials: Record<string, string> | null | undefined) {
  for (const name of Object.keys(credentials ?? {})) {
    if (RESERVED.has(name.toLowerCase())) {
      throw gatewayError.invalidRequest(`credentials may not set the ${name} header`, `credentials.${name}`);
    }
  }
}

export interface FlowServices {
  invoices: InvoiceService;
  workflows: WorkflowService;
  providers: ProviderService;
}

/** Invoices, workflows and payment providers under /v1/gateway (registered by the gateway plugin). */
export const flowRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext; services: FlowServices }> = async (
  app,
  { ctx, services },
) => {
  // A UBL invoice arrives as XML; it is kept as received, so it is read as a string.
  app.addContentTypeParser(
    ['application/xml', 'text/xml'],
    { parseAs: 'string', bodyLimit: INVOICE_BODY_LIMIT },
    (_req, body, done) => done(null, body),
  );

  app.post(
    '/invoices',
    { bodyLimit: INVOICE_BODY_LIMIT, schema: { documented: InvoicePost, response: InvoiceAnswers } },
    async (req, reply) => {
      const scope = await ctx.scope(req);
      const type = String(req.headers['content-type'] ?? '')
        .split(';')[0]!
        .trim()
        .toLowerCase();
      let result: Awaited<ReturnType<InvoiceService['ingestJson']>>;
      if (type === 'application/xml' || type === 'text/xml') {
        const document = req.body as string;
        // As in JSON bodies: U+0000 is no XML character, and PostgreSQL text cannot hold it, so such
        // a document cannot be kept (not even as parse_failed) on every store alike.
        if (document.includes('\u0000')) {
          throw gatewayError.invalidRequest(
            'the document contains U+0000 (NUL), which no stored value may hold (nor any XML document)',
            'body',
          );
        }
        result = await services.invoices.ingestUbl(scope, document);
      } else {
        if (!checkJsonInvoice.Check(req.body)) {
          const first = checkJsonInvoice.Errors(req.body).First();
          const param = first?.path.split('/').filter(Boolean).join('.') || 'body';
          throw gatewayError.invalidRequest(`${param} ${first?.message ?? 'is invalid'}`, param);
        }
        result = await services.invoices.ingestJson(scope, req.body);
      }
      reply.code(result.created ? 201 : 200);
      return result.invoice;
    },
  );

  app.get(
    '/invoices/:id',
    {
      schema: {
        params: IdParams,
        response: { 200: InvoiceAnswerSchema },
        documented: { envelopeB: [flowError.invoiceNotFound] },
      },
    },
    async (req) => services.invoices.get(await ctx.scope(req), req.params.id),
  );

  app.post(
    '/workflows',
    {
      schema: {
        body: WorkflowBody,
        response: { 201: WorkflowAnswerSchema },
        documented: { envelopeB: [gatewayError.packNotFound, flowError.workflowAlreadyExists] },
      },
    },
    async (req, reply) => {
      reply.code(201);
      return services.workflows.create(await ctx.scope(req), req.body);
    },
  );

  app.get(
    '/workflows/:entityId/:workflowId',
    {
      schema: {
        params: WorkflowParams,
        response: { 200: WorkflowAnswerSchema },
        documented: { envelopeB: [flowError.workflowNotFound] },
      },
    },
    async (req) => services.workflows.get(await ctx.scope(req), req.params.entityId, req.params.workflowId),
  );

  app.post(
    '/workflows/:entityId/:workflowId/transition',
    {
      schema: {
        params: WorkflowParams,
        body: TransitionBody,
        response: { 200: WorkflowAnswerSchema },
        // Into a state of person_states with an API key: 403 authorization_error.
        documented: { envelopeB: [flowError.workflowNotFound, flowError.workflowInvalidTransition] },
      },
    },
    async (req) =>
      services.workflows.transition(
        await ctx.scope(req),
        req.params.entityId,
        req.params.workflowId,
        req.body,
      ),
  );

  app.post(
    '/providers',
    {
      schema: {
        body: ProviderBody,
        response: { 201: ProviderAnswerSchema },
        documented: { envelopeB: [flowError.credentialsKeyMissing, flowError.providerRailTaken] },
      },
    },
    async (req, reply) => {
      checkCredentialNames(req.body.credentials);
      reply.code(201);
      return services.providers.create(await ctx.scope(req), req.body);
    },
  );

  app.get('/providers', { schema: { response: { 200: ProviderListSchema } } }, async (req) => ({
    data: await services.providers.list(await ctx.scope(req)),
  }));

  app.get(
    '/providers/:id',
    {
      schema: {
        params: IdParams,
        response: { 200: ProviderAnswerSchema },
        documented: { envelopeB: [flowError.providerNotFound] },
      },
    },
    async (req) => services.providers.get(await ctx.scope(req), req.params.id),
  );

  app.patch(
    '/providers/:id',
    {
      schema: {
        params: IdParams,
        body: ProviderPatch,
        response: { 200: ProviderAnswerSchema },
        documented: {
          envelopeB: [
            flowError.providerNotFound,
            flowError.credentialsKeyMissing,
            flowError.providerRailTaken,
            // A change of url or credential header names while a payment handed to it is unresolved.
            flowError.paymentUnresolved,
          ],
        },
      },
    },
    async (req) => {
      checkCredentialNames(req.body.credentials);
      return services.providers.update(await ctx.scope(req), req.params.id, req.body);
    },
  );

  app.delete(
    '/providers/:id',
    {
      schema: {
        params: IdParams,
        response: { 204: Type.Null({ description: 'The provider is removed' }) },
        documented: { envelopeB: [flowError.providerNotFound, flowError.paymentUnresolved] },
      },
    },
    async (req, reply) => {
      await services.providers.remove(await ctx.scope(req), req.params.id);
      reply.code(204);
    },
  );
};
