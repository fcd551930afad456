import type { Client, ClientOptions } from '@svc/sdk';
import { createClient } from '@svc/sdk';
import { createTenant, createTestApp, type Tenant, type TestApp } from '../../server/test/helpers.js';

/** The service listening on a real port, so the SDK talks HTTP to it exactly as in production. */
export async function startServer(): Promise<{ t: TestApp; baseUrl: string }> {
  const t = await createTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { t, baseUrl: `http://127.0.0.1:${address.port}` };
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
