import { expect } from 'vitest';
import { asUser, keyHeader, type Tenant, type TestApp } from './helpers.js';

type Res = { statusCode: number; json(): unknown; body: string; headers: Record<string, unknown> };

/** Requests and checks shared by the gateway's invoice, workflow and provider tests. */
export function gatewayKit(t: TestApp) {
  const key = (x: Tenant) => keyHeader(x.apiKey);
  const inject = (
    method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
    url: string,
    headers: Record<string, string>,
    payload?: unknown,
  ) =>
    t.inject({
      method,
      url,
      headers,
      ...(payload !== undefined ? { payload: payload as object } : {}),
    }) as unknown as Promise<Res>;

  /** The envelope-B error of an answer, checked for its status and code. */
  function expectB(res: Res, status: number, code: string) {
    const err = (res.json() as { error?: Record<string, unknown> }).error;
    if (res.statusCode !== status || err?.['code'] !== code) {
      throw new Error(`expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
    }
    expect(err['doc_url']).toBe(`${t.config.docsUrl}/errors/${code}`);
    expect(typeof err['request_id']).toBe('string');
    return err;
  }

  function ok(res: Res, status = 200) {
    if (res.statusCode !== status) throw new Error(`expected ${status}, got ${res.statusCode} ${res.body}`);
    // biome-ignore lint/suspicious/noExplicitAny: answers are read member by member in assertions
    return res.json() as Record<string, any>;
  }

  let seq = 0;
  return {
    key,
    inject,
    expectB,
    ok,
    async pack(x: Tenant, body: object) {
      const id = `flow-pack-${++seq}`;
      ok(await inject('PUT', `/v1/gateway/packs/${id}`, asUser(x), body), 201);
      return id;
    },
    async payee(x: Tenant, details: object) {
      const p = (await inject('POST', '/v1/gateway/payees', key(x), { details })).json() as { id: string };
      ok(await inject('POST', `/v1/gateway/payees/${p.id}/lift-quarantine`, asUser(x)));
      return p;
    },
    ingestXml(x: Tenant, xml: string) {
      return t.inject({
        method: 'POST',
        url: '/v1/gateway/invoices',
        headers: { ...key(x), 'content-type': 'application/xml' },
        payload: xml,
      }) as unknown as Promise<Res>;
    },
    mint(x: Tenant, body: Record<string, unknown>) {
      return inject('POST', '/v1/gateway/capsules', key(x), {
        agent_id: 'agent-1',
        ttl_seconds: 300,
        ...body,
      });
    },
    consume(x: Tenant, body: Record<string, unknown>) {
      return inject('POST', '/v1/gateway/capsules/consume', key(x), body);
    },
    next: () => ++seq,
  };
}
