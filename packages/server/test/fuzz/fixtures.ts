import { randomBytes } from 'node:crypto';
import { signUserToken } from '../../src/lib/jwt.js';
import { setTier } from '../approvals.js';
import {
  ADMIN_TOKEN,
  asUser,
  bearer,
  createTenant,
  keyHeader,
  type Tenant,
  type TestApp,
} from '../helpers.js';
import type { Auth, Pools } from './hostile.js';

/** One tenant's data, created through the API before a run. */
export interface Seeded {
  tenant: Tenant;
  toolName: string;
  keyId: string;
  orgSlug: string;
  upstreamId: string;
  upstreamSlug: string;
  draftId: string;
  approvalId: string;
  decisionId: string;
}

async function ok(res: { statusCode: number; body: string }, status: number, what: string) {
  if (res.statusCode !== status) throw new Error(`${what}: ${res.statusCode} ${res.body}`);
  return JSON.parse(res.body);
}

/**
 * A team-tier tenant with one of everything: tool, policy, second key, draft, approval, upstream,
 * decision. `mark` is written into each of them, so a response that carries it has leaked them.
 */
export async function seedTenant(t: TestApp, mark: string): Promise<Seeded> {
  const tenant = await createTenant(t);
  await setTier(t, tenant, 'team');
  const user = asUser(tenant);
  const toolName = `tool_${randomBytes(4).toString('hex')}`;
  await ok(
    await t.inject({
      method: 'POST',
      url: '/v1/tools/register',
      headers: user,
      payload: {
        tools: [
          { name: toolName, description: mark, parameters: [{ name: 'note', type: 'string', enum: [mark] }] },
        ],
      },
    }),
    200,
    'register',
  );
  const key = await ok(
    await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: user,
      payload: { name: mark, projectId: tenant.projectId },
    }),
    201,
    'api key',
  );
  const draft = await ok(
    await t.inject({
      method: 'POST',
      url: '/v1/policy-drafts',
      headers: user,
      payload: {
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
      },
    }),
    201,
    'draft',
  );
  const approval = await ok(
    await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName, arguments: { note: mark } },
    }),
    201,
    'approval',
  );
  const upstreamSlug = `up-${randomBytes(4).toString('hex')}`;
  const upstream = await ok(
    await t.inject({
      method: 'POST',
      url: '/v1/mcp/upstreams',
      headers: user,
      payload: {
        name: mark,
        slug: upstreamSlug,
        url: 'http://127.0.0.1:9/mcp',
        headers: { 'x-secret': mark },
      },
    }),
    201,
    'upstream',
  );
  const decision = await ok(
    await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: toolName, arguments: { note: mark } },
    }),
    200,
    'validate',
  );
  const org = await ok(
    await t.inject({ method: 'GET', url: `/v1/organizations/${tenant.orgId}`, headers: user }),
    200,
    'org',
  );
  return {
    tenant,
    toolName,
    keyId: key.id ?? key._id ?? key.data?.id,
    orgSlug: org.slug,
    upstreamId: upstream.id,
    upstreamSlug,
    draftId: draft.data.id,
    approvalId: approval.id ?? approval.approvalId,
    decisionId: decision.metadata.decision_id,
  };
}

/**
 * Everything a tenant can read about itself, in a stable form: the state a request must not change.
 * `lastUsedAt` is left out (every use of a key moves it).
 */
export async function snapshot(t: TestApp, s: Seeded): Promise<string> {
  const user = asUser(s.tenant);
  const urls = [
    `/v1/organizations/${s.tenant.orgId}`,
    `/v1/projects?organizationId=${s.tenant.orgId}`,
    '/v1/api-keys',
    '/v1/tools',
    '/v1/policies',
    '/v1/policy-drafts',
    '/v1/approvals/pending',
    `/v1/approvals/${s.approvalId}`,
    '/v1/mcp/upstreams',
    '/v1/decisions?limit=100',
    '/v1/receipts/export',
  ];
  const parts: string[] = [];
  for (const url of urls) {
    const res = await t.inject({ method: 'GET', url, headers: user });
    if (res.statusCode !== 200) throw new Error(`snapshot ${url}: ${res.statusCode} ${res.body}`);
    parts.push(`${url} ${res.body.replace(/"lastUsedAt":(null|"[^"]*")/g, '')}`);
  }
  return parts.join('\n');
}

/** The attacker's credentials, and ones that are wrong in every way a client can get them wrong. */
export async function authsFor(t: TestApp, attacker: Seeded, victim: Seeded): Promise<Auth[]> {
  const a = attacker.tenant;
  const expired = await signUserToken(t.config.jwtSecret!, a.userId, -60, t.config);
  const foreign = await signUserToken('another-secret-0123456789abcdef0123456789', a.userId, 3600, t.config);
  return [
    { label: 'attacker key', headers: keyHeader(a.apiKey), own: true },
    { label: 'attacker key as bearer', headers: bearer(a.apiKey), own: true },
    { label: 'attacker user', headers: asUser(a), own: true },
    { label: 'attacker user, no organization', headers: bearer(a.token), own: true },
    {
      label: "attacker user naming the victim's organization",
      headers: { ...bearer(a.token), 'x-organization-id': victim.tenant.orgId },
      own: false,
    },
    { label: 'no credentials', headers: {}, own: false },
    { label: 'unknown key', headers: keyHeader(`svc_${randomBytes(32).toString('base64url')}`), own: false },
    { label: 'malformed key', headers: keyHeader('svc_'), own: false },
    { label: 'expired token', headers: bearer(expired), own: false },
    { label: 'token of another issuer', headers: bearer(foreign), own: false },
    { label: 'garbage bearer', headers: { authorization: 'Bearer \u00ff\u00fe' }, own: false },
    { label: 'basic auth', headers: { authorization: 'Basic YTpi' }, own: false },
    { label: 'wrong admin token', headers: bearer(`${ADMIN_TOKEN}x`), own: false },
  ];
}

/** Both tenants' names and ids, the attacker's own kept out of destructive routes. */
export function poolsOf(attacker: Seeded, victim: Seeded): Pools {
  const idsOf = (s: Seeded) => [
    s.tenant.orgId,
    s.tenant.projectId,
    s.keyId,
    s.upstreamId,
    s.draftId,
    s.approvalId,
    s.decisionId,
  ];
  return {
    ids: [...idsOf(attacker), ...idsOf(victim)],
    toolNames: [attacker.toolName, victim.toolName],
    orgSlugs: [attacker.orgSlug, victim.orgSlug],
    upstreamSlugs: [attacker.upstreamSlug, victim.upstreamSlug],
    keep: new Set([
      attacker.tenant.orgId,
      attacker.tenant.projectId,
      attacker.upstreamId,
      attacker.keyId,
      attacker.toolName,
      attacker.draftId,
    ]),
  };
}
