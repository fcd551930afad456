/**
 * Cross-tenant isolation, route by route. Every route the app registers is either exercised here or
 * listed in NOT_SWEPT with the reason; a route that is neither fails the first test. Two team-tier
 * organizations A and B each get one of every resource kind; then each route is called with every
 * credential kind of A that the API document says it accepts, with B's ids, names and secrets put in
 * its path, query, headers and body. Each answer must be a refusal (or, for routes that only ever act
 * on the caller's own organization, anything but a 5xx), must hold none of B's ids, names or secrets
 * that the request did not carry itself, and B's state, read back through B's own credentials, must
 * be unchanged after each route. A second pass does the same with A's first project key against the
 * project-scoped resources of A's second project (docs/api-notes.md, "Project scoping inside one
 * organization"). Live event streams (SSE and WebSocket) are checked for B's events separately.
 */
import { randomBytes } from 'node:crypto';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isDashboardRoute } from '../src/plugins/dashboard.js';
import { createKey, setTier } from './approvals.js';
import { useTestApp } from './fixture.js';
import { asUser, bearer, createTenant, keyHeader, type Tenant } from './helpers.js';
import { signIn } from './revocations.js';
import { registered } from './route-recorder.js';
import { SseClient, WsClient, waitFor } from './streams.js';

// Every route the app registers, with its schemas (./route-recorder.ts).
vi.mock('fastify', async (importOriginal) =>
  (await import('./route-recorder.js')).recordingFastify(
    importOriginal as () => Promise<typeof import('fastify')>,
  ),
);

/** The resources of one side, as a request can name them. */
interface Side {
  tenant: Tenant;
  mark: string;
  orgSlug: string;
  project2Id: string;
  keyId: string;
  key: string;
  toolName: string;
  draftId: string;
  draftRevision: string;
  approvalId: string;
  gatewayApprovalId: string;
  decisionId: string;
  loggedDecisionId: string;
  spend: string;
  decisionBody: Record<string, unknown>;
  idempotencyKey: string;
  treeSize: number;
  upstreamId: string;
  upstreamSlug: string;
  project2UpstreamId: string;
  actionId: string;
  sessionId: string;
  agentId: string;
  packId: string;
  payee: Record<string, string>;
  payeeId: string;
  capsuleId: string;
  capsule: string;
  invoice: Record<string, unknown>;
  invoiceId: string;
  invoiceHash: string;
  entityId: string;
  workflowId: string;
  providerId: string;
  conversationId: string;
  verificationId: string;
  verificationToken: string;
  /** Receipt and checkpoint hashes: a body holding one shows the chain it came from. */
  hashes: string[];
}

/** A's credentials; `userAsB` is A's own token naming B's organization. */
type Cred = 'none' | 'key' | 'approver' | 'user' | 'cookie' | 'userAsB';

/**
 * How a route may answer: `refuse` (a refusal status, listed in `statuses`), or `own` (it acts only
 * within the caller's organization, where B's names are just names: any answer but a 5xx, as long
 * as nothing of B's shows and nothing of B's changes).
 */
type Mode = 'refuse' | 'own';

interface Req {
  url: string;
  body?: unknown;
  headers?: Record<string, string>;
  /** Text the caller already holds in another form (a capsule's payload inside its JWS). */
  known?: string;
}

interface Case {
  build: (v: Side) => Req | Req[];
  mode?: Mode;
  statuses?: number[];
  /** Credentials to use instead of those the route's security allows. */
  creds?: Cred[];
  check?: (cred: Cred, res: Answer) => void;
}

const REFUSALS = [401, 403, 404, 409];
const STAMP = randomBytes(3).toString('hex');

const jsonRpc = (method: string, params: Record<string, unknown> = {}) => ({
  jsonrpc: '2.0',
  id: 1,
  method,
  params,
});
const INITIALIZE = jsonRpc('initialize', {
  protocolVersion: '2025-06-18',
  capabilities: {},
  clientInfo: { name: 'sweep', version: '1.0.0' },
});
const mintBody = (
  v: Pick<Side, 'entityId' | 'agentId' | 'packId' | 'payee'>,
  over: Record<string, unknown> = {},
) => ({
  entity_id: v.entityId,
  agent_id: v.agentId,
  pack_id: v.packId,
  rails: ['ach'],
  beneficiary: { details: v.payee },
  amount_ceiling: { currency: 'USD', amount: '50.00' },
  ttl_seconds: 600,
  ...over,
});
const draftMatch = (v: Side) => ({ 'if-match': `"${v.draftRevision}"` });

/**
 * Every route of the API, with the request that names B's resources. Method and path as Fastify
 * registers them; HEAD is sent alongside every GET.
 */
const CASES: Record<string, Case> = {
  // Public and operator routes: nothing of a tenant's, or refused to every tenant credential.
  'GET /openapi.json': { build: () => ({ url: '/openapi.json' }), mode: 'own', creds: ['none', 'user'] },
  'GET /healthz': { build: () => ({ url: '/healthz' }), mode: 'own', creds: ['none'] },
  'GET /readyz': { build: () => ({ url: '/readyz' }), mode: 'own', creds: ['none'] },
  'GET /.well-known/svc-keys.json': { build: () => ({ url: '/.well-known/svc-keys.json' }), mode: 'own' },
  'GET /v1/gateway/schemas/capsule.json': {
    build: () => ({ url: '/v1/gateway/schemas/capsule.json' }),
    mode: 'own',
  },
  'GET /metrics': { build: () => ({ url: '/metrics' }), statuses: [401], creds: ['key', 'user', 'cookie'] },
  'PATCH /v1/admin/organizations/:id': {
    build: (v) => ({ url: `/v1/admin/organizations/${v.tenant.orgId}`, body: { tier: 'enterprise' } }),
    statuses: [401],
    creds: ['key', 'user', 'cookie'],
  },
  'GET /v1/admin/signing-keys': {
    build: () => ({ url: '/v1/admin/signing-keys' }),
    statuses: [401],
    creds: ['key', 'user', 'cookie'],
  },
  'POST /v1/admin/signing-keys/rotate': {
    build: () => ({ url: '/v1/admin/signing-keys/rotate' }),
    statuses: [401],
    creds: ['key', 'user', 'cookie'],
  },
  // Sign-in: about the caller only.
  'GET /v1/auth/methods': { build: () => ({ url: '/v1/auth/methods' }), mode: 'own' },
  'GET /v1/auth/oidc/login': { build: () => ({ url: '/v1/auth/oidc/login' }), mode: 'own' },
  'GET /v1/auth/oidc/callback': {
    build: (v) => ({ url: `/v1/auth/oidc/callback?code=x&state=${v.verificationToken}` }),
    mode: 'own',
  },
  'GET /v1/auth/login': {
    build: (v) => ({ url: `/v1/auth/login?token=${v.verificationToken}` }),
    mode: 'own',
    check: (_cred, res) => expect(res.headers['set-cookie'] ?? '').not.toMatch(/svc_session=[^;]/),
  },
  'GET /v1/auth/session': { build: () => ({ url: '/v1/auth/session' }), mode: 'own' },
  // The cookie's own session would end: A's bearer token ends nothing.
  'POST /v1/auth/logout': { build: () => ({ url: '/v1/auth/logout' }), mode: 'own', creds: ['user', 'key'] },
  'GET /charter/verify/:id': {
    build: (v) => [
      { url: `/charter/verify/${v.verificationId}` },
      { url: `/charter/verify/${v.verificationId}?token=${v.mark}` },
    ],
    statuses: [404],
    creds: ['none', 'cookie'],
  },

  // Organizations
  'GET /v1/organizations': { build: () => ({ url: '/v1/organizations' }), mode: 'own' },
  'POST /v1/organizations': {
    build: (v) => ({ url: '/v1/organizations', body: { name: 'Taken slug', slug: v.orgSlug } }),
    statuses: [403, 409],
  },
  'GET /v1/organizations/slug/:slug': {
    build: (v) => ({ url: `/v1/organizations/slug/${v.orgSlug}` }),
    statuses: [403, 404],
  },
  'GET /v1/organizations/:id': { build: (v) => ({ url: `/v1/organizations/${v.tenant.orgId}` }) },
  'PUT /v1/organizations/:id': {
    build: (v) => ({ url: `/v1/organizations/${v.tenant.orgId}`, body: { name: 'Taken over' } }),
  },
  'DELETE /v1/organizations/:id': { build: (v) => ({ url: `/v1/organizations/${v.tenant.orgId}` }) },

  // Projects
  'GET /v1/projects': {
    build: (v) => ({ url: `/v1/projects?organizationId=${v.tenant.orgId}` }),
    mode: 'own',
    check: (cred, res) => {
      if (cred !== 'key') expect(res.statusCode).toBe(403);
    },
  },
  'POST /v1/projects': {
    build: (v) => ({ url: '/v1/projects', body: { organizationId: v.tenant.orgId, name: 'Intruder' } }),
  },
  'GET /v1/projects/:id': {
    build: (v) => [{ url: `/v1/projects/${v.tenant.projectId}` }, { url: `/v1/projects/${v.project2Id}` }],
  },
  'PUT /v1/projects/:id': {
    build: (v) => ({
      url: `/v1/projects/${v.tenant.projectId}`,
      body: { organizationId: '@A', name: 'Moved' },
    }),
  },
  'DELETE /v1/projects/:id': {
    build: (v) => ({ url: `/v1/projects/${v.project2Id}?organizationId=@A` }),
  },
  'POST /v1/projects/:id/regenerate-key': {
    build: (v) => ({
      url: `/v1/projects/${v.tenant.projectId}/regenerate-key`,
      body: { organizationId: '@A' },
    }),
  },

  // API keys
  'GET /v1/api-keys': { build: () => ({ url: '/v1/api-keys' }), mode: 'own' },
  'POST /v1/api-keys': {
    build: (v) => ({ url: '/v1/api-keys', body: { name: 'minted', projectId: v.tenant.projectId } }),
  },
  'GET /v1/api-keys/:id': { build: (v) => ({ url: `/v1/api-keys/${v.keyId}` }) },
  'PATCH /v1/api-keys/:id': { build: (v) => ({ url: `/v1/api-keys/${v.keyId}`, body: { name: 'renamed' } }) },
  'DELETE /v1/api-keys/:id': { build: (v) => ({ url: `/v1/api-keys/${v.keyId}` }) },
  'POST /v1/api-keys/:id/revoke': { build: (v) => ({ url: `/v1/api-keys/${v.keyId}/revoke` }) },

  // Tools and policies: names are the caller's own namespace, so creating one of B's name is A's own.
  'POST /v1/tools/register': {
    build: (v) => ({
      url: '/v1/tools/register',
      body: { tools: [{ name: v.toolName, parameters: [{ name: 'amount', type: 'number' }] }] },
    }),
    mode: 'own',
  },
  'POST /v1/tools/sync': {
    build: (v) => ({
      url: '/v1/tools/sync',
      body: { tools: [{ name: v.toolName, arguments: [{ name: 'amount', type: 'number' }] }] },
    }),
    mode: 'own',
  },
  'GET /v1/tools': { build: () => ({ url: '/v1/tools' }), mode: 'own' },
  'GET /v1/tools/:name': { build: (v) => ({ url: `/v1/tools/${v.toolName}` }) },
  'DELETE /v1/tools/:name': { build: (v) => ({ url: `/v1/tools/${v.toolName}` }) },
  'GET /v1/policies': { build: () => ({ url: '/v1/policies' }), mode: 'own' },
  'POST /v1/policies': {
    build: (v) => ({ url: '/v1/policies', body: { toolName: v.toolName, constraints: [] } }),
    mode: 'own',
  },
  'GET /v1/policies/:toolName': { build: (v) => ({ url: `/v1/policies/${v.toolName}` }) },
  'PUT /v1/policies/:toolName': {
    build: (v) => ({ url: `/v1/policies/${v.toolName}`, body: { constraints: [] } }),
  },
  'DELETE /v1/policies/:toolName': { build: (v) => ({ url: `/v1/policies/${v.toolName}` }) },
  'GET /v1/policies/:toolName/versions': { build: (v) => ({ url: `/v1/policies/${v.toolName}/versions` }) },
  'GET /v1/policies/:toolName/versions/:version': {
    build: (v) => ({ url: `/v1/policies/${v.toolName}/versions/1` }),
  },
  'POST /v1/policies/:toolName/activate': { build: (v) => ({ url: `/v1/policies/${v.toolName}/activate` }) },
  'POST /v1/policies/:toolName/deactivate': {
    build: (v) => ({ url: `/v1/policies/${v.toolName}/deactivate` }),
  },
  // A dry run: it reads and writes nothing of anyone's.
  'POST /v1/policies/:toolName/validate': {
    build: (v) => ({ url: `/v1/policies/${v.toolName}/validate`, body: { constraints: [] } }),
    mode: 'own',
  },

  // Validation: decided and recorded in the caller's organization; B's approval is not A's to use.
  'POST /v1/tools/validate': {
    build: (v) => ({
      url: '/v1/tools/validate',
      body: { tool_name: v.toolName, arguments: { note: 'x' }, context: { approval_id: v.approvalId } },
    }),
    mode: 'own',
  },
  'POST /v1/validate': {
    build: (v) => ({
      url: '/v1/validate',
      body: { tool_name: v.toolName, arguments: { note: 'x' }, context: { approval_id: v.approvalId } },
    }),
    mode: 'own',
  },

  // Approvals
  'POST /v1/approvals': {
    build: (v) => ({ url: '/v1/approvals', body: { decisionId: v.decisionId, toolName: v.toolName } }),
  },
  'GET /v1/approvals/pending': { build: () => ({ url: '/v1/approvals/pending' }), mode: 'own' },
  'GET /v1/approvals/resolved': { build: () => ({ url: '/v1/approvals/resolved?limit=200' }), mode: 'own' },
  'GET /v1/approvals/:id': {
    build: (v) => [{ url: `/v1/approvals/${v.approvalId}` }, { url: `/v1/approvals/${v.gatewayApprovalId}` }],
  },
  'POST /v1/approvals/:id/resolve': {
    build: (v) =>
      [v.approvalId, v.gatewayApprovalId].map((id) => ({
        url: `/v1/approvals/${id}/resolve`,
        body: { action: 'approve', resolvedBy: '@WHO' },
      })),
  },
  // Answers per id (docs/api-notes.md): B's ids must each fail as unknown.
  'POST /v1/approvals/batch-resolve': {
    build: (v) => ({
      url: '/v1/approvals/batch-resolve',
      body: { ids: [v.approvalId, v.gatewayApprovalId], action: 'deny', resolvedBy: '@WHO' },
    }),
    mode: 'own',
    check: (_cred, res) => {
      if (res.statusCode !== 200) return expect(REFUSALS).toContain(res.statusCode);
      for (const r of JSON.parse(res.body).results) expect(r.error?.code).toBe('not_found');
    },
  },

  // Policy drafts
  'POST /v1/policy-drafts': {
    build: (v) => ({
      url: '/v1/policy-drafts',
      body: { name: 'planted', projectId: v.tenant.projectId, createdByAgentId: 'agent', rules: [] },
    }),
  },
  'GET /v1/policy-drafts': {
    build: (v) => ({ url: `/v1/policy-drafts?projectId=${v.tenant.projectId}` }),
    mode: 'own',
  },
  'GET /v1/policy-drafts/:id': { build: (v) => ({ url: `/v1/policy-drafts/${v.draftId}` }) },
  'PATCH /v1/policy-drafts/:id': {
    build: (v) => ({
      url: `/v1/policy-drafts/${v.draftId}`,
      body: { status: 'draft' },
      headers: draftMatch(v),
    }),
  },
  'DELETE /v1/policy-drafts/:id': {
    build: (v) => ({ url: `/v1/policy-drafts/${v.draftId}`, headers: draftMatch(v) }),
  },
  'POST /v1/policy-drafts/:id/replay': {
    build: (v) => ({ url: `/v1/policy-drafts/${v.draftId}/replay`, body: {} }),
  },
  'POST /v1/policy-drafts/:id/submit': {
    build: (v) => ({ url: `/v1/policy-drafts/${v.draftId}/submit`, headers: draftMatch(v) }),
  },
  'POST /v1/policy-drafts/:id/approve': {
    build: (v) => ({ url: `/v1/policy-drafts/${v.draftId}/approve`, headers: draftMatch(v) }),
  },
  'POST /v1/policy-drafts/:id/reject': {
    build: (v) => ({ url: `/v1/policy-drafts/${v.draftId}/reject`, headers: draftMatch(v) }),
  },

  // Decisions and receipts: every read is the caller's organization's.
  'GET /v1/decisions': {
    build: (v) => [
      { url: `/v1/decisions?projectId=${v.tenant.projectId}&limit=100` },
      { url: `/v1/decisions?toolName=${v.toolName}&limit=100` },
    ],
    mode: 'own',
  },
  // B's Idempotency-Key and body: never B's recorded answer.
  'POST /v1/decisions': {
    build: (v) => ({
      url: '/v1/decisions',
      body: v.decisionBody,
      headers: { 'idempotency-key': v.idempotencyKey },
    }),
    mode: 'own',
    // A's first use of the key is no replay (A's project's other keys then replay A's own answer).
    check: (cred, res) => {
      if (cred === 'key') expect(res.headers['idempotent-replayed']).toBeUndefined();
    },
  },
  'GET /v1/decisions/stats': {
    build: (v) => ({ url: `/v1/decisions/stats?projectId=${v.tenant.projectId}` }),
    mode: 'own',
  },
  'GET /v1/decisions/:id': { build: (v) => ({ url: `/v1/decisions/${v.decisionId}` }) },
  'GET /v1/decisions/:id/receipt': { build: (v) => ({ url: `/v1/decisions/${v.decisionId}/receipt` }) },
  'GET /v1/receipts/checkpoints': {
    build: (v) => ({ url: `/v1/receipts/checkpoints?before=${v.treeSize + 1}` }),
    mode: 'own',
  },
  'POST /v1/receipts/checkpoints': { build: () => ({ url: '/v1/receipts/checkpoints' }), mode: 'own' },
  'GET /v1/receipts/checkpoints/latest': {
    build: () => ({ url: '/v1/receipts/checkpoints/latest' }),
    mode: 'own',
  },
  'GET /v1/receipts/checkpoints/:treeSize': {
    build: (v) => ({ url: `/v1/receipts/checkpoints/${v.treeSize}` }),
    mode: 'own',
  },
  'GET /v1/receipts/proofs/inclusion': {
    build: (v) => ({ url: `/v1/receipts/proofs/inclusion?sequence=0&tree_size=${v.treeSize}` }),
    mode: 'own',
  },
  'GET /v1/receipts/proofs/consistency': {
    build: (v) => ({ url: `/v1/receipts/proofs/consistency?first=1&second=${v.treeSize}` }),
    mode: 'own',
  },
  'GET /v1/receipts/export': { build: () => ({ url: '/v1/receipts/export' }), mode: 'own' },

  // The event stream: a key's stream is its own organization's (what it carries: see the live test).
  'GET /v1/events/stream': {
    build: (v) => [
      { url: `/v1/events/stream?organizationId=${v.tenant.orgId}` },
      { url: '/v1/events/stream', headers: { 'x-organization-id': v.tenant.orgId } },
    ],
    mode: 'own',
    check: (cred, res) => {
      if (cred === 'user' || cred === 'cookie' || cred === 'userAsB')
        expect([401, 404]).toContain(res.statusCode);
    },
  },

  // MCP control plane
  'GET /v1/mcp/upstreams': {
    build: (v) => [{ url: '/v1/mcp/upstreams' }, { url: `/v1/mcp/upstreams?projectId=${v.project2Id}` }],
    mode: 'own',
    check: (_cred, res) => expect([200, 403, 404]).toContain(res.statusCode),
  },
  'POST /v1/mcp/upstreams': {
    build: (v) => ({
      url: '/v1/mcp/upstreams',
      body: {
        name: 'planted',
        slug: `planted-${STAMP}`,
        url: 'http://127.0.0.1:9/mcp',
        projectId: v.project2Id,
      },
    }),
  },
  'GET /v1/mcp/upstreams/:id': {
    build: (v) => [
      { url: `/v1/mcp/upstreams/${v.upstreamId}` },
      { url: `/v1/mcp/upstreams/${v.project2UpstreamId}` },
    ],
  },
  'PATCH /v1/mcp/upstreams/:id': {
    build: (v) => ({
      url: `/v1/mcp/upstreams/${v.upstreamId}`,
      body: { url: 'http://127.0.0.2:9/mcp', headers: {} },
    }),
  },
  'DELETE /v1/mcp/upstreams/:id': { build: (v) => ({ url: `/v1/mcp/upstreams/${v.upstreamId}` }) },
  'POST /v1/mcp/upstreams/:id/test': { build: (v) => ({ url: `/v1/mcp/upstreams/${v.upstreamId}/test` }) },
  // MCP data plane
  'POST /v1/mcp/:upstreamSlug': {
    build: (v) => [
      { url: `/v1/mcp/${v.upstreamSlug}`, body: INITIALIZE },
      {
        url: `/v1/mcp/${v.upstreamSlug}`,
        body: jsonRpc('tools/call', { name: v.toolName, arguments: {} }),
      },
    ],
  },
  'GET /v1/mcp/:upstreamSlug': { build: (v) => ({ url: `/v1/mcp/${v.upstreamSlug}` }) },
  'DELETE /v1/mcp/:upstreamSlug': {
    build: (v) => ({ url: `/v1/mcp/${v.upstreamSlug}`, headers: { 'mcp-session-id': v.conversationId } }),
  },
  'POST /v1/mcp/charter': {
    build: (v) => ({
      url: '/v1/mcp/charter',
      body: jsonRpc('tools/call', {
        name: 'svc_charter_turn',
        arguments: { message: 'which tools are there?', conversationId: v.conversationId },
      }),
    }),
    mode: 'own',
    check: (cred, res) => {
      if (cred !== 'key') return;
      expect(res.statusCode).toBe(200);
      expect(JSON.parse(res.body).result?.isError).toBe(true);
    },
  },
  'GET /v1/mcp/charter': { build: () => ({ url: '/v1/mcp/charter' }), statuses: [401, 403, 405] },
  'DELETE /v1/mcp/charter': { build: () => ({ url: '/v1/mcp/charter' }), statuses: [401, 403, 405] },

  // Economic: session, agent and action names are per organization; B's spend never shows.
  'GET /v1/economic/config': { build: () => ({ url: '/v1/economic/config' }), mode: 'own' },
  'PUT /v1/economic/config': {
    build: () => ({
      url: '/v1/economic/config',
      body: { approvedPayers: ['a-payer'], defaultPayer: 'a-payer', sessionLimitUsd: 1000 },
    }),
    mode: 'own',
  },
  'POST /v1/economic/authorize': {
    build: (v) => ({
      url: '/v1/economic/authorize',
      body: {
        actionId: v.actionId,
        sessionId: v.sessionId,
        agentId: v.agentId,
        toolName: v.toolName,
        category: 'travel',
        estimatedSpendUsd: 1,
      },
    }),
    mode: 'own',
  },
  'POST /v1/economic/commit': {
    build: (v) => ({
      url: '/v1/economic/commit',
      body: {
        actionId: v.actionId,
        sessionId: v.sessionId,
        agentId: v.agentId,
        toolName: v.toolName,
        category: 'travel',
        quotedSpendUsd: 37.13,
        actualSpendUsd: 37.13,
      },
    }),
  },
  'POST /v1/economic/status': {
    build: (v) => ({
      url: '/v1/economic/status',
      body: { sessionId: v.sessionId, agentId: v.agentId, category: 'travel' },
    }),
    mode: 'own',
  },

  // Payment gateway
  'POST /v1/gateway/invoices': {
    // The hash covers the invoice's terms (docs/api-notes.md): whoever sends them can compute it.
    build: (v) => ({ url: '/v1/gateway/invoices', body: v.invoice, known: v.invoiceHash }),
    mode: 'own',
  },
  'GET /v1/gateway/invoices/:id': {
    build: (v) => [
      { url: `/v1/gateway/invoices/${v.invoiceId}` },
      { url: `/v1/gateway/invoices/${v.invoiceHash}` },
    ],
  },
  'POST /v1/gateway/workflows': {
    build: (v) => ({
      url: '/v1/gateway/workflows',
      body: { entity_id: v.entityId, workflow_id: v.workflowId },
    }),
    mode: 'own',
  },
  'GET /v1/gateway/workflows/:entityId/:workflowId': {
    build: (v) => ({ url: `/v1/gateway/workflows/${v.entityId}/${v.workflowId}` }),
  },
  'POST /v1/gateway/workflows/:entityId/:workflowId/transition': {
    build: (v) => ({
      url: `/v1/gateway/workflows/${v.entityId}/${v.workflowId}/transition`,
      body: { to: 'cancelled' },
    }),
  },
  'POST /v1/gateway/providers': {
    build: () => ({
      url: '/v1/gateway/providers',
      body: { name: 'planted', rail: 'ach', url: 'http://127.0.0.1:9/pay' },
    }),
    mode: 'own',
  },
  'GET /v1/gateway/providers': { build: () => ({ url: '/v1/gateway/providers' }), mode: 'own' },
  'GET /v1/gateway/providers/:id': { build: (v) => ({ url: `/v1/gateway/providers/${v.providerId}` }) },
  'PATCH /v1/gateway/providers/:id': {
    build: (v) => ({ url: `/v1/gateway/providers/${v.providerId}`, body: { enabled: false } }),
  },
  'DELETE /v1/gateway/providers/:id': { build: (v) => ({ url: `/v1/gateway/providers/${v.providerId}` }) },
  'PUT /v1/gateway/packs/:packId': {
    build: (v) => ({ url: `/v1/gateway/packs/${v.packId}`, body: { allowed_rails: ['ach'] } }),
    mode: 'own',
  },
  'GET /v1/gateway/packs/:packId': { build: (v) => ({ url: `/v1/gateway/packs/${v.packId}` }) },
  'POST /v1/gateway/payees': {
    build: (v) => ({ url: '/v1/gateway/payees', body: { details: v.payee } }),
    mode: 'own',
  },
  'GET /v1/gateway/payees/:id': { build: (v) => ({ url: `/v1/gateway/payees/${v.payeeId}` }) },
  'POST /v1/gateway/payees/:id/hold': { build: (v) => ({ url: `/v1/gateway/payees/${v.payeeId}/hold` }) },
  'POST /v1/gateway/payees/:id/release': {
    build: (v) => ({ url: `/v1/gateway/payees/${v.payeeId}/release` }),
  },
  'POST /v1/gateway/payees/:id/lift-quarantine': {
    build: (v) => ({ url: `/v1/gateway/payees/${v.payeeId}/lift-quarantine` }),
  },
  // B's pack and B's approval: neither is found in A.
  'POST /v1/gateway/capsules': {
    build: (v) => [
      { url: '/v1/gateway/capsules', body: mintBody(v) },
      {
        url: '/v1/gateway/capsules',
        // Under a pack of A's own: B's approval is not found in A.
        body: mintBody(v, { pack_id: '@PACK', approval_ref: v.gatewayApprovalId }),
      },
    ],
    statuses: [403, 404, 409],
  },
  // A capsule of another organization: 400 capsule_payload_invalid (docs/api-notes.md).
  'POST /v1/gateway/capsules/consume': {
    build: (v) => ({
      url: '/v1/gateway/capsules/consume',
      body: { capsule: v.capsule, amount: '10.00', currency: 'USD', rail: 'ach', beneficiary: v.payee },
      known: capsulePayload(v.capsule),
    }),
    statuses: [400, 401, 403, 404],
  },
  'POST /v1/gateway/approvals/:id/resolve': {
    build: (v) => ({
      url: `/v1/gateway/approvals/${v.gatewayApprovalId}/resolve`,
      body: { action: 'approve', resolvedBy: '@WHO' },
    }),
  },
  'GET /v1/gateway/capsules/:id': { build: (v) => ({ url: `/v1/gateway/capsules/${v.capsuleId}` }) },
  'POST /v1/gateway/capsules/:id/revoke': {
    build: (v) => ({ url: `/v1/gateway/capsules/${v.capsuleId}/revoke` }),
  },

  // Charter
  'POST /v1/charter/turn': {
    build: (v) => ({
      url: '/v1/charter/turn',
      body: { message: 'which tools are there?', mode: 'chat', conversationId: v.conversationId },
    }),
  },
  'POST /v1/charter/stream': {
    build: (v) => ({
      url: '/v1/charter/stream',
      body: { message: 'which tools are there?', mode: 'chat', conversationId: v.conversationId },
    }),
  },
  'GET /v1/charter/verifications': { build: () => ({ url: '/v1/charter/verifications' }), mode: 'own' },
  'GET /v1/charter/verifications/:id': {
    build: (v) => ({ url: `/v1/charter/verifications/${v.verificationId}` }),
  },
  'POST /v1/charter/verifications/:id/approve': {
    build: (v) => ({ url: `/v1/charter/verifications/${v.verificationId}/approve` }),
  },
  'POST /v1/charter/verifications/:id/reject': {
    build: (v) => ({ url: `/v1/charter/verifications/${v.verificationId}/reject` }),
  },
};

/** Routes the sweep does not call, each with the reason. */
const NOT_SWEPT: { match: (route: string) => boolean; reason: string }[] = [
  {
    match: (r) => r === 'GET /ws' || r === 'HEAD /ws',
    reason: 'a WebSocket upgrade, which inject cannot make: checked live in "live event streams" below',
  },
  {
    match: (r) => /^(GET|HEAD) /.test(r) && isDashboardRoute(r.slice(r.indexOf(' ') + 1)),
    reason: 'dashboard files and client routes: the same static build for everyone, no tenant data',
  },
  {
    match: (r) => /^(GET|HEAD) \/docs(\/|$)/.test(r),
    reason: 'the API reference (Swagger UI and the document): public, no tenant data',
  },
];

/** The signed payload of a compact capsule (its holder can read it). */
function capsulePayload(compact: string): string {
  const part = compact.split('.')[1] ?? '';
  return Buffer.from(part, 'base64url').toString('utf8');
}

interface Answer {
  statusCode: number;
  headers: Record<string, unknown>;
  body: string;
}

// Every credential kind is refused on the admin routes from this one address: no throttle in the way.
const t = useTestApp(
  { checkpointIntervalMs: 0, providerCredentialsKey: randomBytes(32), adminRefusalsPerMinute: 1_000_000 },
  { listen: true },
);

let A: Tenant;
let a2Key: string;
let approverKey: string;
let cookie: { cookie: string; csrf: string };
let B: Side;
/** A's second project's project-scoped resources, for the pass with A's first project key. */
let A2: Side;

const ok = async (res: Promise<Answer>, status: number | number[], what: string) => {
  const r = await res;
  if (!(Array.isArray(status) ? status : [status]).includes(r.statusCode))
    throw new Error(`${what}: ${r.statusCode} ${r.body}`);
  return JSON.parse(r.body || 'null');
};

async function send(method: string, url: string, headers: Record<string, string>, body?: unknown) {
  const res = await t.app.inject({
    method: method as InjectOptions['method'],
    url,
    headers,
    ...(body === undefined ? {} : { payload: body as object }),
    payloadAsStream: true,
  });
  const stream = res.stream();
  if (String(res.headers['content-type'] ?? '').includes('text/event-stream')) {
    stream.destroy();
    return { statusCode: res.statusCode, headers: res.headers, body: '' };
  }
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return { statusCode: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') };
}

/**
 * One side with one of every resource kind, `mark` written into each: B, or (with `project2` set)
 * the project-scoped resources of A's second project, made with that project's key.
 */
async function seed(
  tenant: Tenant,
  mark: string,
  spend: number,
  project2?: { id: string; key: string },
): Promise<Side> {
  const user = asUser(tenant);
  const key = keyHeader(project2?.key ?? tenant.apiKey);
  const hex = randomBytes(4).toString('hex');
  const toolName = `tool_${hex}`;
  const project2Id =
    project2?.id ??
    (
      await ok(
        send('POST', '/v1/projects', bearer(tenant.token), {
          organizationId: tenant.orgId,
          name: `P2 ${mark}`,
        }),
        201,
        'project 2',
      )
    )._id;
  const scopedProject = project2?.id ?? tenant.projectId;
  await ok(
    send('POST', '/v1/tools/register', user, {
      tools: [
        {
          name: toolName,
          description: mark,
          parameters: [
            { name: 'note', type: 'string', enum: [mark] },
            { name: 'amount', type: 'number' },
          ],
        },
      ],
    }),
    200,
    'register',
  );
  const apiKey = await ok(
    send('POST', '/v1/api-keys', user, { name: mark, projectId: scopedProject }),
    201,
    'api key',
  );
  const draft = (
    await ok(
      send('POST', '/v1/policy-drafts', user, {
        name: mark,
        projectId: tenant.projectId,
        createdByAgentId: 'agent',
        rules: [
          {
            id: 'r1',
            action: 'block',
            tools: [toolName],
            conditions: [{ field: 'note', operator: 'equals', value: mark }],
            severity: 'high',
          },
        ],
      }),
      201,
      'draft',
    )
  ).data;
  const submitted = (await ok(send('POST', `/v1/policy-drafts/${draft.id}/submit`, user), 200, 'submit'))
    .data;
  const decision = await ok(
    send('POST', '/v1/tools/validate', key, { tool_name: toolName, arguments: { note: mark, amount: 5 } }),
    200,
    'validate',
  );
  const approval = await ok(
    send('POST', '/v1/approvals', key, { toolName, arguments: { note: mark } }),
    201,
    'approval',
  );
  const idempotencyKey = `idem-${mark}`;
  const decisionBody = {
    tool_name: toolName,
    arguments: { note: mark },
    decision: 'allow',
    mode: 'deterministic',
    latency_ms: 1,
    source: 'client',
  };
  const logged = await ok(
    send('POST', '/v1/decisions', { ...key, 'idempotency-key': idempotencyKey }, decisionBody),
    201,
    'logged decision',
  );
  const checkpoint = await ok(send('POST', '/v1/receipts/checkpoints', user), [200, 201], 'checkpoint');
  const upstreamSlug = `up-${hex}`;
  const upstream = await ok(
    send('POST', '/v1/mcp/upstreams', project2 ? key : user, {
      name: mark,
      slug: upstreamSlug,
      url: 'http://127.0.0.1:9/mcp',
      headers: { 'x-secret': mark },
      ...(project2 ? { projectId: project2.id } : {}),
    }),
    201,
    'upstream',
  );
  const project2Upstream = project2
    ? upstream
    : await ok(
        send('POST', '/v1/mcp/upstreams', user, {
          name: `${mark} p2`,
          slug: `up2-${hex}`,
          url: 'http://127.0.0.1:9/mcp',
          projectId: project2Id,
        }),
        201,
        'project 2 upstream',
      );
  // Economic: a configuration, and a live action with a spend figure of its own.
  if (!project2)
    await ok(
      send('PUT', '/v1/economic/config', user, {
        approvedPayers: [`payer-${mark}`],
        defaultPayer: `payer-${mark}`,
        sessionLimitUsd: 5000,
        perActionApprovalThresholdUsd: 4000,
      }),
      200,
      'economic config',
    );
  const actionId = `action-${hex}`;
  const sessionId = `session-${hex}`;
  const agentId = `agent-${hex}`;
  await ok(
    send('POST', '/v1/economic/authorize', key, {
      actionId,
      sessionId,
      agentId,
      toolName,
      category: 'travel',
      estimatedSpendUsd: spend,
      metadata: { note: mark },
    }),
    200,
    'authorize',
  );
  // Payments: a pack that asks a person above $100, a payee, a capsule, an invoice, a workflow, a provider.
  const packId = project2 ? `pack-a-${hex}` : `pack-${hex}`;
  await ok(
    send('PUT', `/v1/gateway/packs/${packId}`, user, {
      allowed_rails: ['ach'],
      approval_threshold_usd: '100.00',
      quarantine_seconds: 0,
    }),
    201,
    'pack',
  );
  const payee = { name: `Payee ${hex}`, account_number: `DE89370400440532${hex.slice(0, 4)}`, country: 'DE' };
  const payeeRow = await ok(send('POST', '/v1/gateway/payees', key, { details: payee }), [200, 201], 'payee');
  const entityId = `entity-${hex}`;
  const side = { entityId, agentId, packId, payee };
  const minted = await ok(send('POST', '/v1/gateway/capsules', key, mintBody(side)), 201, 'mint');
  const asked = await ok(
    send(
      'POST',
      '/v1/gateway/capsules',
      key,
      mintBody(side, { amount_ceiling: { currency: 'USD', amount: '500.00' } }),
    ),
    409,
    'mint approval',
  );
  const invoice = {
    invoice_number: `INV-${hex}`,
    due_date: '2030-12-01',
    payee,
    amount: { currency: 'USD', amount: '250.00' },
  };
  const invoiceRow = await ok(send('POST', '/v1/gateway/invoices', key, invoice), 201, 'invoice');
  const workflowId = `wf-${hex}`;
  await ok(
    send('POST', '/v1/gateway/workflows', key, { entity_id: entityId, workflow_id: workflowId }),
    201,
    'workflow',
  );
  const provider = project2
    ? null
    : await ok(
        send('POST', '/v1/gateway/providers', user, {
          name: `psp ${mark}`,
          rail: 'ach',
          url: 'http://127.0.0.1:9/pay',
          credentials: { authorization: `Bearer ${mark}` },
        }),
        201,
        'provider',
      );
  // Charter: a conversation, and a change waiting for review.
  const turn = await ok(
    send('POST', '/v1/charter/turn', key, {
      message: `Block ${toolName} over $1,000`,
      mode: 'compile',
      surface: 'api',
    }),
    200,
    'charter turn',
  );
  if (!turn.verification?.id) throw new Error(`charter turn opened no verification: ${JSON.stringify(turn)}`);
  const link = new URL(turn.verification.linkUrl);
  const org = await ok(send('GET', `/v1/organizations/${tenant.orgId}`, user), 200, 'org');
  const exported = await send('GET', '/v1/receipts/export', user);
  const hashes = exported.body
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line).receipt_hash as string);
  if (checkpoint?.root_hash) hashes.push(checkpoint.root_hash);
  return {
    tenant,
    mark,
    orgSlug: org.slug,
    project2Id,
    keyId: apiKey.id,
    key: apiKey.key,
    toolName,
    draftId: draft.id,
    draftRevision: submitted.revision,
    approvalId: approval.id,
    gatewayApprovalId: asked.error.approval_id,
    decisionId: decision.metadata.decision_id,
    loggedDecisionId: logged.id,
    spend: String(spend),
    decisionBody,
    idempotencyKey,
    treeSize: checkpoint.tree_size,
    upstreamId: upstream.id,
    upstreamSlug,
    project2UpstreamId: project2Upstream.id,
    actionId,
    sessionId,
    agentId,
    packId,
    payee,
    payeeId: payeeRow.id,
    capsuleId: minted.capsule_id ?? minted.id,
    capsule: minted.capsule,
    invoice,
    invoiceId: invoiceRow.id,
    invoiceHash: invoiceRow.invoice_hash,
    entityId,
    workflowId,
    providerId: provider?.id ?? '',
    conversationId: turn.conversationId,
    verificationId: turn.verification.id,
    verificationToken: link.searchParams.get('token') ?? '',
    hashes,
  };
}

/** What must never appear in an answer to A, unless the request carried it: B's ids, names and secrets. */
function secretsOf(v: Side, scopedOnly: boolean): [string, string][] {
  const scoped: [string, string][] = [
    ['mark', v.mark],
    ['key id', v.keyId],
    ['key', v.key],
    ['upstream id', v.upstreamId],
    ['upstream slug', v.upstreamSlug],
    ['capsule id', v.capsuleId],
    ['workflow id', v.workflowId],
    ['action id', v.actionId],
  ];
  if (scopedOnly) return scoped;
  return [
    ...scoped,
    ['organization id', v.tenant.orgId],
    ['organization slug', v.orgSlug],
    ['project id', v.tenant.projectId],
    ['project 2 id', v.project2Id],
    ['project key', v.tenant.apiKey],
    ['user id', v.tenant.userId],
    ['tool name', v.toolName],
    ['draft id', v.draftId],
    ['draft revision', v.draftRevision],
    ['approval id', v.approvalId],
    ['gateway approval id', v.gatewayApprovalId],
    ['decision id', v.decisionId],
    ['project 2 upstream id', v.project2UpstreamId],
    ['session id', v.sessionId],
    ['agent id', v.agentId],
    ['pack id', v.packId],
    ['payee id', v.payeeId],
    ['payee name', v.payee.name!],
    ['invoice id', v.invoiceId],
    ['invoice hash', v.invoiceHash],
    ['entity id', v.entityId],
    ['provider id', v.providerId],
    ['conversation id', v.conversationId],
    ['verification id', v.verificationId],
    ['verification token', v.verificationToken],
    ['spend', v.spend],
    ['logged decision id', v.loggedDecisionId],
    ...v.hashes.map((h): [string, string] => ['receipt or checkpoint hash', h]),
  ];
}

/** Everything B's user reads about B, in a stable form (times that move on their own left out). */
async function snapshotOf(v: Side): Promise<string> {
  const user = asUser(v.tenant);
  const reads: [string, string, unknown?][] = [
    ['GET', `/v1/organizations/${v.tenant.orgId}`],
    ['GET', `/v1/projects?organizationId=${v.tenant.orgId}`],
    ['GET', '/v1/api-keys'],
    ['GET', '/v1/tools'],
    ['GET', '/v1/policies'],
    ['GET', `/v1/policies/${v.toolName}/versions`],
    ['GET', '/v1/policy-drafts'],
    ['GET', '/v1/approvals/pending'],
    ['GET', '/v1/approvals/resolved?limit=200'],
    ['GET', '/v1/mcp/upstreams'],
    ['GET', '/v1/decisions?limit=100'],
    ['GET', '/v1/receipts/export'],
    ['GET', '/v1/receipts/checkpoints'],
    ['GET', '/v1/economic/config'],
    ['POST', '/v1/economic/status', { sessionId: v.sessionId, agentId: v.agentId, category: 'travel' }],
    ['GET', `/v1/gateway/packs/${v.packId}`],
    ['GET', `/v1/gateway/payees/${v.payeeId}`],
    ['GET', `/v1/gateway/capsules/${v.capsuleId}`],
    ['GET', `/v1/gateway/invoices/${v.invoiceId}`],
    ['GET', `/v1/gateway/workflows/${v.entityId}/${v.workflowId}`],
    ['GET', '/v1/gateway/providers'],
  ];
  const parts: string[] = [];
  for (const [method, url, body] of reads) {
    const res = await send(method, url, user, body);
    if (res.statusCode !== 200) throw new Error(`snapshot ${method} ${url}: ${res.statusCode} ${res.body}`);
    parts.push(`${method} ${url} ${res.body.replace(/"(lastUsedAt|asOf)":(null|"[^"]*")/g, '')}`);
  }
  // Charter's routes have a budget of 60 requests a minute per person: its rows are read from the store.
  for (const table of ['charter_conversations', 'charter_verifications'] as const) {
    const rows = await t.store.db
      .selectFrom(table)
      .selectAll()
      .where('organization_id', '=', v.tenant.orgId)
      .orderBy('id')
      .execute();
    parts.push(`${table} ${JSON.stringify(rows)}`);
  }
  // Every key of B still works.
  for (const k of [v.tenant.apiKey, v.key]) {
    parts.push(`key works: ${(await send('GET', '/v1/tools', keyHeader(k))).statusCode}`);
  }
  return parts.join('\n');
}

/** The snapshot of A's second project's resources, read by A's user. */
async function snapshotOfProject2(v: Side): Promise<string> {
  const user = asUser(v.tenant);
  const parts: string[] = [];
  for (const url of [
    `/v1/api-keys/${v.keyId}`,
    `/v1/mcp/upstreams/${v.upstreamId}`,
    `/v1/gateway/capsules/${v.capsuleId}`,
    `/v1/gateway/workflows/${v.entityId}/${v.workflowId}`,
    `/v1/approvals/${v.gatewayApprovalId}`,
  ]) {
    const res = await send('GET', url, user);
    if (res.statusCode !== 200) throw new Error(`snapshot ${url}: ${res.statusCode} ${res.body}`);
    parts.push(`${url} ${res.body.replace(/"lastUsedAt":(null|"[^"]*")/g, '')}`);
  }
  parts.push(`key works: ${(await send('GET', '/v1/tools', keyHeader(v.key))).statusCode}`);
  return parts.join('\n');
}

function headersFor(cred: Cred, victim: Side): Record<string, string> {
  switch (cred) {
    case 'none':
      return {};
    case 'key':
      return keyHeader(A.apiKey);
    case 'approver':
      return keyHeader(approverKey);
    case 'user':
      return asUser(A);
    case 'cookie':
      return { cookie: cookie.cookie, 'x-csrf-token': cookie.csrf, 'x-organization-id': A.orgId };
    case 'userAsB':
      return { ...bearer(A.token), 'x-organization-id': victim.tenant.orgId };
  }
}

/** The credential kinds a route accepts, from the API document's security of its operation. */
function credsFor(security: Record<string, string[]>[] | undefined): Cred[] {
  const kinds = new Set((security ?? []).flatMap((s) => Object.keys(s)));
  const creds: Cred[] = [];
  if (kinds.has('apiKey')) creds.push('key', 'approver');
  if (kinds.has('userToken')) creds.push('user', 'cookie', 'userAsB');
  if (kinds.has('adminToken')) creds.push('key', 'user');
  if (creds.length === 0) creds.push('none', 'cookie');
  return creds;
}

/** Placeholders for A's own values in a request that otherwise names B's. */
const ofA = (text: string) => text.replaceAll('@PACK', A2.packId).replaceAll('@A', A.orgId);
const routeKey = (r: { method: string; url: string }) => `${r.method} ${r.url}`;
const openApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');

let routes: string[];
let security: Map<string, Record<string, string[]>[] | undefined>;

beforeAll(async () => {
  routes = [
    ...new Set(
      registered.flatMap((r) =>
        (Array.isArray(r.method) ? r.method : [r.method]).map((m) => routeKey({ method: m, url: r.url })),
      ),
    ),
  ].sort();
  const doc = (await send('GET', '/openapi.json', {})).body;
  const paths = JSON.parse(doc).paths as Record<
    string,
    Record<string, { security?: Record<string, string[]>[] }>
  >;
  security = new Map();
  for (const [path, ops] of Object.entries(paths))
    for (const [method, op] of Object.entries(ops))
      security.set(`${method.toUpperCase()} ${path}`, op.security);

  A = await createTenant(t);
  const b = await createTenant(t);
  await setTier(t, A, 'team');
  await setTier(t, b, 'team');
  approverKey = await createKey(t, A, ['api', 'approvals:resolve', 'policy-drafts:approve'], 'approver');
  cookie = await signIn(t, A.userId);
  B = await seed(b, `b-secret-${STAMP}`, 37.13);
  // A's second project, and its project-scoped resources made with its own key.
  const p2 = await ok(
    send('POST', '/v1/projects', bearer(A.token), { organizationId: A.orgId, name: 'Second' }),
    201,
    'A project 2',
  );
  a2Key = p2.apiKey;
  await ok(
    send('PUT', '/v1/economic/config', asUser(A), {
      approvedPayers: ['a-payer'],
      defaultPayer: 'a-payer',
      sessionLimitUsd: 5000,
    }),
    200,
    'A economic config',
  );
  A2 = await seed(A, `a2-secret-${STAMP}`, 41.17, { id: p2._id, key: a2Key });
}, 120_000);

describe('cross-tenant sweep of every route', () => {
  it('exercises or lists every route the app registers', () => {
    expect(routes.length).toBeGreaterThan(100);
    // HEAD is sent with the GET of the same path, where the app registers it.
    const unknown = routes.filter(
      (r) =>
        !(r in CASES) &&
        !NOT_SWEPT.some((n) => n.match(r)) &&
        !(r.startsWith('HEAD ') && `GET ${r.slice(5)}` in CASES),
    );
    expect(unknown, 'routes neither swept nor listed in NOT_SWEPT').toEqual([]);
    const stale = Object.keys(CASES).filter((k) => !routes.includes(k));
    expect(stale, 'cases for routes the app does not have').toEqual([]);
    const get = routes.filter((r) => !r.startsWith('HEAD '));
    expect(get.filter((r) => r in CASES).length).toBeGreaterThan(100);
  });

  it("refuses A every one of B's resources, shows A nothing of B, and changes nothing of B", async () => {
    const secrets = secretsOf(B, false);
    let before = await snapshotOf(B);
    // Refusals first, then reads of A's own, then writes to A's own: what A writes under B's names
    // (a tool, a decision naming B's approval) is A's from then on, and must not answer the others.
    const rank = (k: string) => (CASES[k]!.mode !== 'own' ? 0 : k.startsWith('GET ') ? 1 : 2);
    const order = Object.keys(CASES).sort((x, y) => rank(x) - rank(y));
    /** B's values A has written into its own organization by a request that succeeded. */
    const storedByA = new Set<string>();
    const failures: string[] = [];
    let sent = 0;
    for (const key of order) {
      const c = CASES[key]!;
      const [method, path] = key.split(' ') as [string, string];
      const creds = c.creds ?? credsFor(security.get(`${method} ${openApiPath(path)}`));
      const reqs = [c.build(B)].flat();
      for (const cred of creds) {
        for (const req of reqs) {
          const url = ofA(req.url);
          // A person resolves as themself; an approver key relays a person's name.
          const who = cred === 'key' || cred === 'approver' ? 'alice' : A.userId;
          const body =
            req.body === undefined
              ? undefined
              : JSON.parse(ofA(JSON.stringify(req.body)).replaceAll('@WHO', who));
          const headers = { ...headersFor(cred, B), ...req.headers };
          for (const m of method === 'GET' && routes.includes(`HEAD ${path}`) ? ['GET', 'HEAD'] : [method]) {
            const res = await send(m, url, headers, body);
            sent++;
            const where = `${m} ${url} as ${cred} answered ${res.statusCode} ${res.body.slice(0, 300)}`;
            const known = `${req.known ?? ''}\n${[...storedByA].join('\n')}`;
            failures.push(...judge(c, cred, res, { url, body, headers, known }, secrets, where));
            if (m !== 'GET' && m !== 'HEAD' && res.statusCode < 300) {
              const carried = `${url}\n${JSON.stringify(body ?? null)}\n${JSON.stringify(req.headers ?? {})}`;
              for (const [, value] of secrets) if (value && carried.includes(value)) storedByA.add(value);
            }
          }
        }
      }
      const after = await snapshotOf(B);
      if (after !== before) {
        failures.push(`${key} changed B:\n${diff(before, after)}`);
        before = after;
      }
    }
    expect(sent).toBeGreaterThan(500);
    expect(failures).toEqual([]);
  }, 120_000);

  it("keeps A's first project key out of its second project's resources", async () => {
    const secrets = secretsOf(A2, true);
    let before = await snapshotOfProject2(A2);
    const own = keyHeader(A.apiKey);
    const scoped: [string, Req[], number[]][] = [
      ['GET /v1/api-keys/:id', [{ url: `/v1/api-keys/${A2.keyId}` }], [404]],
      ['PATCH /v1/api-keys/:id', [{ url: `/v1/api-keys/${A2.keyId}`, body: { name: 'renamed' } }], [404]],
      ['POST /v1/api-keys/:id/revoke', [{ url: `/v1/api-keys/${A2.keyId}/revoke` }], [404]],
      ['DELETE /v1/api-keys/:id', [{ url: `/v1/api-keys/${A2.keyId}` }], [404]],
      [
        'POST /v1/api-keys',
        [{ url: '/v1/api-keys', body: { name: 'minted', projectId: A2.project2Id } }],
        [404],
      ],
      ['GET /v1/mcp/upstreams/:id', [{ url: `/v1/mcp/upstreams/${A2.upstreamId}` }], [404]],
      [
        'PATCH /v1/mcp/upstreams/:id',
        [{ url: `/v1/mcp/upstreams/${A2.upstreamId}`, body: { url: 'http://127.0.0.2:9/mcp', headers: {} } }],
        [404],
      ],
      ['DELETE /v1/mcp/upstreams/:id', [{ url: `/v1/mcp/upstreams/${A2.upstreamId}` }], [404]],
      ['POST /v1/mcp/upstreams/:id/test', [{ url: `/v1/mcp/upstreams/${A2.upstreamId}/test` }], [404]],
      [
        'POST /v1/mcp/upstreams',
        [
          {
            url: '/v1/mcp/upstreams',
            body: { name: 'x', slug: `p2-${STAMP}`, url: 'http://127.0.0.1:9/mcp', projectId: A2.project2Id },
          },
        ],
        [404],
      ],
      ['POST /v1/mcp/:upstreamSlug', [{ url: `/v1/mcp/${A2.upstreamSlug}`, body: INITIALIZE }], [404]],
      ['GET /v1/mcp/:upstreamSlug', [{ url: `/v1/mcp/${A2.upstreamSlug}` }], [404]],
      ['GET /v1/gateway/capsules/:id', [{ url: `/v1/gateway/capsules/${A2.capsuleId}` }], [404]],
      [
        'POST /v1/gateway/capsules/:id/revoke',
        [{ url: `/v1/gateway/capsules/${A2.capsuleId}/revoke` }],
        [404],
      ],
      [
        'POST /v1/gateway/capsules/consume',
        [
          {
            url: '/v1/gateway/capsules/consume',
            body: {
              capsule: A2.capsule,
              amount: '10.00',
              currency: 'USD',
              rail: 'ach',
              beneficiary: A2.payee,
            },
            known: capsulePayload(A2.capsule),
          },
        ],
        [404],
      ],
      // A mint under the approval A's second project's key opened: not found for the first project's key.
      [
        'POST /v1/gateway/capsules',
        [
          {
            url: '/v1/gateway/capsules',
            body: mintBody(A2, {
              amount_ceiling: { currency: 'USD', amount: '500.00' },
              approval_ref: A2.gatewayApprovalId,
            }),
          },
        ],
        [404],
      ],
      [
        'GET /v1/gateway/workflows/:entityId/:workflowId',
        [{ url: `/v1/gateway/workflows/${A2.entityId}/${A2.workflowId}` }],
        [404],
      ],
      [
        'POST /v1/gateway/workflows/:entityId/:workflowId/transition',
        [
          {
            url: `/v1/gateway/workflows/${A2.entityId}/${A2.workflowId}/transition`,
            body: { to: 'cancelled' },
          },
        ],
        [404],
      ],
      [
        'POST /v1/gateway/workflows',
        [{ url: '/v1/gateway/workflows', body: { entity_id: A2.entityId, workflow_id: A2.workflowId } }],
        [409],
      ],
      [
        'POST /v1/economic/authorize',
        [
          {
            url: '/v1/economic/authorize',
            body: {
              actionId: A2.actionId,
              sessionId: A2.sessionId,
              agentId: A2.agentId,
              toolName: A2.toolName,
              category: 'travel',
              estimatedSpendUsd: 41.17,
              metadata: { note: A2.mark },
            },
          },
        ],
        [409],
      ],
      [
        'POST /v1/economic/commit',
        [
          {
            url: '/v1/economic/commit',
            body: {
              actionId: A2.actionId,
              sessionId: A2.sessionId,
              agentId: A2.agentId,
              toolName: A2.toolName,
              category: 'travel',
              quotedSpendUsd: 41.17,
              actualSpendUsd: 41.17,
            },
          },
        ],
        [409],
      ],
    ];
    // Lists: the first project's key sees none of the second project's keys, upstreams or capsules.
    const lists: Req[] = [
      { url: '/v1/api-keys' },
      { url: '/v1/mcp/upstreams' },
      { url: `/v1/mcp/upstreams?projectId=${A2.project2Id}` },
    ];
    const failures: string[] = [];
    for (const [key, reqs, statuses] of scoped) {
      expect(routes, key).toContain(key);
      for (const req of reqs) {
        const res = await send(key.split(' ')[0]!, req.url, own, req.body);
        const where = `${key} ${req.url} answered ${res.statusCode} ${res.body.slice(0, 300)}`;
        failures.push(
          ...judge({ build: () => req, statuses }, 'key', res, { ...req, headers: own }, secrets, where),
        );
      }
      const after = await snapshotOfProject2(A2);
      if (after !== before) {
        failures.push(`${key} changed project 2:\n${diff(before, after)}`);
        before = after;
      }
    }
    for (const req of lists) {
      const res = await send('GET', req.url, own);
      const where = `GET ${req.url} answered ${res.statusCode} ${res.body.slice(0, 300)}`;
      failures.push(
        ...judge({ build: () => req, mode: 'own' }, 'key', res, { ...req, headers: own }, secrets, where),
      );
    }
    // Idempotency-Keys are per project: the second project's key and body replay nothing for the first.
    const replay = await send(
      'POST',
      '/v1/decisions',
      { ...own, 'idempotency-key': A2.idempotencyKey },
      A2.decisionBody,
    );
    expect(replay.statusCode, replay.body).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBeUndefined();
    expect(failures).toEqual([]);
  }, 60_000);
});

/** The failures of one answer: its status for the case's mode, and any secret it holds. */
function judge(
  c: Case,
  cred: Cred,
  res: Answer,
  req: { url: string; body?: unknown; headers: Record<string, string>; known?: string | undefined },
  secrets: [string, string][],
  where: string,
): string[] {
  const failures: string[] = [];
  if (res.statusCode >= 500) failures.push(`5xx: ${where}`);
  else if ((c.mode ?? 'refuse') === 'refuse') {
    const allowed = c.statuses ?? REFUSALS;
    if (!allowed.includes(res.statusCode))
      failures.push(`not refused (expected ${allowed.join('/')}): ${where}`);
  }
  const sent = `${req.url}\n${JSON.stringify(req.body ?? null)}\n${JSON.stringify(req.headers)}\n${req.known ?? ''}`;
  const seen = `${res.body}\n${JSON.stringify(res.headers)}`;
  for (const [label, value] of secrets) {
    if (value && !sent.includes(value) && seen.includes(value)) failures.push(`leaks B's ${label}: ${where}`);
  }
  try {
    c.check?.(cred, res);
  } catch (err) {
    failures.push(`${(err as Error).message}: ${where}`);
  }
  return failures;
}

function diff(before: string, after: string): string {
  const a = before.split('\n');
  const b = after.split('\n');
  return b
    .filter((line, i) => line !== a[i])
    .map((line) => line.slice(0, 500))
    .join('\n');
}

describe('live event streams', () => {
  let sse: SseClient[] = [];
  let ws: WsClient | undefined;
  afterAll(() => {
    for (const s of sse) s.close();
    ws?.close();
  });

  it("carry none of B's events to A's key, user token, session cookie or WebSocket", async () => {
    sse = await Promise.all([
      SseClient.open(`${t.url}/v1/events/stream`, keyHeader(A.apiKey)),
      SseClient.open(`${t.url}/v1/events/stream`, asUser(A)),
      SseClient.open(`${t.url}/v1/events/stream?organizationId=${A.orgId}`, { cookie: cookie.cookie }),
    ]);
    for (const s of sse) expect(s.status).toBe(200);
    ws = await WsClient.open(`${t.url.replace('http', 'ws')}/ws?token=${A.token}`);
    // B's events first, then one of A's: once A's has arrived, B's would have too.
    await send('POST', '/v1/tools/validate', keyHeader(B.tenant.apiKey), {
      tool_name: B.toolName,
      arguments: { note: B.mark },
    });
    await send('POST', '/v1/approvals', keyHeader(B.tenant.apiKey), { toolName: B.toolName, arguments: {} });
    await send('POST', `/v1/policies/${B.toolName}/deactivate`, asUser(B.tenant));
    const marker = `a_tool_${STAMP}`;
    await send('POST', '/v1/tools/validate', keyHeader(A.apiKey), { tool_name: marker, arguments: {} });
    for (const s of sse) {
      await s.waitForEvent((e) => JSON.stringify(e.data).includes(marker), 'A decision on the stream');
      for (const [label, value] of secretsOf(B, false))
        expect(s.body.includes(value), `stream leaks B's ${label}`).toBe(false);
    }
    const client = ws;
    await waitFor(() => client.frames.some((f) => JSON.stringify(f).includes(marker)), 'A decision on /ws');
    for (const [label, value] of secretsOf(B, false))
      expect(JSON.stringify(client.frames).includes(value), `WebSocket leaks B's ${label}`).toBe(false);
  });
});
