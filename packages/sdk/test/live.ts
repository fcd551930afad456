import type { Client, ClientOptions } from '@svc/sdk';
import { createClient } from '@svc/sdk';
import { afterAll, beforeAll } from 'vitest';
import { resolveApproval, setTier } from '../../server/test/approvals.js';
import { useTestApp } from '../../server/test/fixture.js';
import { asUser, createTenant, createTestApp, type Tenant, type TestApp } from '../../server/test/helpers.js';

/**
 * The service listening on a real port, so the SDK talks HTTP to it exactly as in production. Tests
 * use `useTestApp({}, { listen: true })`, which also closes it; this one is closed by its caller.
 */
export async function startServer(): Promise<{ t: TestApp; baseUrl: string }> {
  const t = await createTestApp({}, { listen: true });
  return { t, baseUrl: t.url };
}

/** A client whose event stream is connected before it is returned. */
export async function connectedClient(
  baseUrl: string,
  tenant: Tenant,
  options: Partial<ClientOptions> = {},
): Promise<Client> {
  let connected!: () => void;
  const up = new Promise<void>((resolve) => {
    connected = resolve;
  });
  const client = createClient({
    apiKey: tenant.apiKey,
    baseUrl,
    ...options,
    onStreamChange: (isUp) => {
      if (isUp) connected();
      options.onStreamChange?.(isUp);
    },
  });
  await up;
  return client;
}

export async function putPolicy(t: TestApp, tenant: Tenant, toolName: string, body: Record<string, unknown>) {
  const headers = { 'x-service-api-key': tenant.apiKey };
  const existing = await t.inject({ method: 'GET', url: `/v1/policies/${toolName}`, headers });
  const res =
    existing.statusCode === 404
      ? await t.inject({ method: 'POST', url: '/v1/policies', headers, payload: { toolName, ...body } })
      : await t.inject({ method: 'PUT', url: `/v1/policies/${toolName}`, headers, payload: body });
  if (res.statusCode >= 300) throw new Error(`policy write failed: ${res.body}`);
  return res.json();
}

export { createTenant };

/**
 * What the adapter tests share: a listening service, a Team-plan tenant whose `pay` policy denies
 * over 100 and asks a person over 50, and a connected client (read them once the file's hooks ran).
 */
export function usePayTenant() {
  const t = useTestApp({}, { listen: true });
  const state = {} as { tenant: Tenant; client: Client };
  beforeAll(async () => {
    state.tenant = await createTenant(t);
    await setTier(t, state.tenant, 'team');
    await putPolicy(t, state.tenant, 'pay', {
      mode: 'deterministic',
      constraints: [
        { argumentName: 'amount', maximum: 100 },
        { argumentName: 'amount', maximum: 50, action: 'require_approval' },
      ],
    });
    state.client = await connectedClient(t.url, state.tenant, { approvals: { pollIntervalMs: 50 } });
  });
  afterAll(async () => {
    await state.client?.close();
  });
  return {
    t,
    get tenant() {
      return state.tenant;
    },
    get client() {
      return state.client;
    },
    /** Approves the first pending approval of the tenant as soon as it appears. */
    async approveWhenAsked(): Promise<void> {
      for (let i = 0; i < 200; i++) {
        const list = await t.inject({
          method: 'GET',
          url: '/v1/approvals/pending',
          headers: asUser(state.tenant),
        });
        const id = list.json().data[0]?.id;
        if (id) {
          await resolveApproval(t, state.tenant, id, 'approve');
          return;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error('no approval was requested');
    },
  };
}
