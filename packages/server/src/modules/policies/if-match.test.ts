import type { LightMyRequestResponse } from 'fastify';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, expectError, gate, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { ServiceEvent } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import type { OrgScope } from '../../lib/scope.js';
import { createToolRepository } from '../tools/repository.js';
import { createPolicyRepository, type PolicyRepository } from './repository.js';
import { createPolicyService } from './service.js';

/**
 * Optimistic concurrency on one policy: GET (and every write's answer) sends the version as an ETag;
 * PUT, DELETE, activate and deactivate take it back as If-Match and do nothing but answer 409 when
 * the policy is another version by then, up to the write.
 */

// The real time, unless a test freezes it (two incarnations created in the same millisecond).
let frozen: Date | null = null;
const clock: Clock = { now: () => frozen ?? new Date() };
const t = useTestApp({}, { clock });

let tenant: Tenant;
beforeAll(async () => {
  tenant = await createTenant(t);
});

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
const call = (method: Method, url: string, payload?: object, ifMatch?: string) =>
  t.inject({
    method,
    url,
    headers: { ...keyHeader(tenant.apiKey), ...(ifMatch !== undefined ? { 'if-match': ifMatch } : {}) },
    ...(payload ? { payload } : {}),
  });
const limit = (maximum: number) => ({ constraints: [{ argumentName: 'amount', maximum }] });
const etagOf = (res: LightMyRequestResponse) => res.headers.etag as string;
const read = async (tool: string) => (await call('GET', `/v1/policies/${tool}`)).json();
const versionsOf = async (tool: string) => (await call('GET', `/v1/policies/${tool}/versions`)).json().data;

async function eventsOf(fn: () => Promise<unknown>): Promise<ServiceEvent[]> {
  const seen: ServiceEvent[] = [];
  const off = t.ctx.events.subscribe((e) => {
    if (e.organizationId === tenant.orgId) seen.push(e);
  });
  try {
    await fn();
  } finally {
    off();
  }
  return seen;
}

let seq = 0;
/** A new policy at version 1 and its ETag. */
async function fresh(maximum = 10): Promise<{ tool: string; etag: string }> {
  const tool = `pay_${++seq}`;
  const res = await call('POST', '/v1/policies', { toolName: tool, ...limit(maximum) });
  expect(res.statusCode).toBe(201);
  return { tool, etag: etagOf(res) };
}

describe('the ETag of a policy', () => {
  it('is sent by GET, POST and PUT, quoted, and names the version', async () => {
    const { tool, etag } = await fresh();
    expect(etag).toMatch(/^"v1-[0-9a-f]{32}"$/);
    const got = await call('GET', `/v1/policies/${tool}`);
    expect(etagOf(got)).toBe(etag);
    // The header only: the body keeps the spec's shape.
    expect(got.json().etag).toBeUndefined();
    const put = await call('PUT', `/v1/policies/${tool}`, limit(20));
    expect(put.statusCode).toBe(200);
    expect(etagOf(put)).toMatch(/^"v2-[0-9a-f]{32}"$/);
    expect(etagOf(await call('GET', `/v1/policies/${tool}`))).toBe(etagOf(put));
    expect(put.json().etag).toBeUndefined();
  });

  it('does not change when the policy is deactivated or activated (the version does not either)', async () => {
    const { tool, etag } = await fresh();
    expect((await call('POST', `/v1/policies/${tool}/deactivate`)).statusCode).toBe(200);
    expect(etagOf(await call('GET', `/v1/policies/${tool}`))).toBe(etag);
    expect((await call('POST', `/v1/policies/${tool}/activate`)).statusCode).toBe(200);
    expect(etagOf(await call('GET', `/v1/policies/${tool}`))).toBe(etag);
  });

  it('of a policy deleted and created again at version 1 is another one', async () => {
    frozen = new Date();
    try {
      // Same instant, another definition: the policy_hash differs.
      const { tool, etag } = await fresh(10);
      expect((await call('DELETE', `/v1/policies/${tool}`)).statusCode).toBe(200);
      const again = await call('POST', '/v1/policies', { toolName: tool, ...limit(11) });
      expect(etagOf(again)).toMatch(/^"v1-/);
      expect(etagOf(again)).not.toBe(etag);
      expectError(await call('PUT', `/v1/policies/${tool}`, limit(12), etag), 409, 'conflict');

      // The same definition created later: the creation time differs.
      expect((await call('DELETE', `/v1/policies/${tool}`)).statusCode).toBe(200);
      frozen = new Date(frozen.getTime() + 1000);
      const third = await call('POST', '/v1/policies', { toolName: tool, ...limit(11) });
      expect(etagOf(third)).toMatch(/^"v1-/);
      expect(etagOf(third)).not.toBe(etagOf(again));
      for (const stale of [etag, etagOf(again)]) {
        expectError(await call('PUT', `/v1/policies/${tool}`, limit(12), stale), 409, 'conflict');
        expectError(await call('DELETE', `/v1/policies/${tool}`, undefined, stale), 409, 'conflict');
        expectError(await call('POST', `/v1/policies/${tool}/deactivate`, undefined, stale), 409, 'conflict');
      }
      expect(await read(tool)).toMatchObject({ version: 1, isActive: true, ...limit(11) });
      expect(etagOf(await call('GET', `/v1/policies/${tool}`))).toBe(etagOf(third));
    } finally {
      frozen = null;
    }
  });
});

describe('If-Match on PUT /v1/policies/:toolName', () => {
  it('writes over the version it names, quoted or bare', async () => {
    const { tool, etag } = await fresh();
    const put = await call('PUT', `/v1/policies/${tool}`, limit(20), etag);
    expect(put.statusCode).toBe(200);
    expect(put.json()).toMatchObject({ version: 2, constraints: [{ maximum: 20 }] });
    const bare = etagOf(put).slice(1, -1);
    const third = await call('PUT', `/v1/policies/${tool}`, limit(30), bare);
    expect(third.statusCode).toBe(200);
    expect(third.json().version).toBe(3);
  });

  it('answers 409 conflict over another version, and changes nothing', async () => {
    const { tool, etag } = await fresh();
    // Someone else saves version 2 (adding a deny rule)...
    const theirs = { constraints: [...limit(10).constraints, { argumentName: 'to', notEnum: ['mallory'] }] };
    expect((await call('PUT', `/v1/policies/${tool}`, theirs)).statusCode).toBe(200);
    const before = { policy: await read(tool), versions: await versionsOf(tool) };
    const cached = await t.ctx.policies.get(tenant.orgId, tool);
    // ...then a person saves over the version 1 they read.
    let res!: LightMyRequestResponse;
    const events = await eventsOf(async () => {
      res = await call('PUT', `/v1/policies/${tool}`, limit(50), etag);
    });
    expectError(res, 409, 'conflict');
    expect(res.json().error.message).toMatch(/changed since.*version 2.*nothing was changed/);
    expect(events).toEqual([]);
    expect(await read(tool)).toEqual(before.policy);
    expect(await versionsOf(tool)).toEqual(before.versions);
    expect((await t.ctx.policies.get(tenant.orgId, tool))?.hash).toBe(cached?.hash);
  });

  it('takes * or no header as no precondition', async () => {
    const { tool } = await fresh();
    expect((await call('PUT', `/v1/policies/${tool}`, limit(20))).statusCode).toBe(200);
    const star = await call('PUT', `/v1/policies/${tool}`, limit(30), '*');
    expect(star.statusCode).toBe(200);
    expect(star.json().version).toBe(3);
  });

  it('answers 400 for a list or a weak tag, and changes nothing', async () => {
    const { tool, etag } = await fresh();
    for (const header of [`${etag}, "v9-0"`, `W/${etag}`, `${etag},${etag}`]) {
      const res = await call('PUT', `/v1/policies/${tool}`, limit(20), header);
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toContain('If-Match');
    }
    expectError(
      await call('DELETE', `/v1/policies/${tool}`, undefined, `W/${etag}`),
      400,
      'validation_failed',
    );
    expectError(
      await call('POST', `/v1/policies/${tool}/deactivate`, undefined, `${etag}, ${etag}`),
      400,
      'validation_failed',
    );
    expect(await read(tool)).toMatchObject({ version: 1, isActive: true, ...limit(10) });
  });

  it('answers 404 for a policy that does not exist', async () => {
    expectError(await call('PUT', '/v1/policies/ghost', limit(1), '"v1-0"'), 404, 'not_found');
    expectError(await call('DELETE', '/v1/policies/ghost', undefined, '"v1-0"'), 404, 'not_found');
    expectError(await call('POST', '/v1/policies/ghost/activate', undefined, '"v1-0"'), 404, 'not_found');
  });

  it('lets exactly one of concurrent writers over the same version through', async () => {
    const { tool, etag } = await fresh();
    const answers = await Promise.all(
      [20, 30, 40, 50, 60].map((m) => call('PUT', `/v1/policies/${tool}`, limit(m), etag)),
    );
    expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 409, 409, 409, 409]);
    const winner = answers.find((r) => r.statusCode === 200)!.json();
    expect(await read(tool)).toMatchObject({ version: 2, constraints: winner.constraints });
    expect((await versionsOf(tool)).map((v: { version: number }) => v.version)).toEqual([2, 1]);
  });
});

describe('If-Match on DELETE, activate and deactivate', () => {
  it('deletes the version it names; over another version answers 409 and keeps the policy', async () => {
    const { tool, etag } = await fresh();
    const put = await call('PUT', `/v1/policies/${tool}`, limit(20));
    let res!: LightMyRequestResponse;
    const events = await eventsOf(async () => {
      res = await call('DELETE', `/v1/policies/${tool}`, undefined, etag);
    });
    expectError(res, 409, 'conflict');
    expect(res.json().error.message).toContain('it was not deleted');
    expect(events).toEqual([]);
    expect(await read(tool)).toMatchObject({ version: 2 });
    expect((await call('DELETE', `/v1/policies/${tool}`, undefined, etagOf(put))).statusCode).toBe(200);
    expectError(await call('GET', `/v1/policies/${tool}`), 404, 'not_found');
  });

  it('(de)activates the version it names; over another version answers 409 and keeps the state', async () => {
    const { tool, etag } = await fresh();
    const put = await call('PUT', `/v1/policies/${tool}`, limit(20));
    for (const action of ['deactivate', 'activate']) {
      const res = await call('POST', `/v1/policies/${tool}/${action}`, undefined, etag);
      expectError(res, 409, 'conflict');
      expect(res.json().error.message).toContain(`it was not ${action}d`);
    }
    expect(await read(tool)).toMatchObject({ version: 2, isActive: true });
    const off = await call('POST', `/v1/policies/${tool}/deactivate`, undefined, etagOf(put));
    expect(off.statusCode).toBe(200);
    expect(await read(tool)).toMatchObject({ version: 2, isActive: false });
    const on = await call('POST', `/v1/policies/${tool}/activate`, undefined, etagOf(put));
    expect(on.statusCode).toBe(200);
    expect(await read(tool)).toMatchObject({ version: 2, isActive: true });
  });
});

describe('the precondition holds up to the write', () => {
  /**
   * The service over a repository whose first `readers` reads wait for each other: every request
   * has checked its If-Match against the same version before any of them writes, and those reads
   * return only once `readsAfter` settled. Deletes and (de)activations write only once `writesAfter`
   * settled.
   */
  function racingService(
    readers: number,
    { readsAfter, writesAfter }: { readsAfter?: Promise<unknown>; writesAfter?: Promise<unknown> } = {},
  ) {
    const repo = createPolicyRepository(t.store.db);
    let waiting = readers;
    const { opened: allRead, open: release } = gate();
    const policies: PolicyRepository = {
      ...repo,
      async get(...args: Parameters<PolicyRepository['get']>) {
        const row = await repo.get(...args);
        if (waiting > 0) {
          waiting -= 1;
          if (waiting === 0) release();
          await allRead;
          await readsAfter;
        }
        return row;
      },
      async delete(...args: Parameters<PolicyRepository['delete']>) {
        await writesAfter;
        return repo.delete(...args);
      },
      async setActive(...args: Parameters<PolicyRepository['setActive']>) {
        await writesAfter;
        return repo.setActive(...args);
      },
    };
    const service = createPolicyService({
      db: t.store.db,
      policies,
      tools: createToolRepository(t.store.db),
      cache: t.ctx.policies,
      events: t.ctx.events,
      clock,
      judge: t.ctx.judge,
    });
    return Object.assign(service, { allRead });
  }
  const scope = (): OrgScope => ({
    organizationId: tenant.orgId,
    projectId: null,
    principal: { kind: 'user', userId: tenant.userId },
  });
  const outcome = (p: Promise<unknown>) =>
    p.then(
      () => 'done',
      (err: { code?: string }) => err.code ?? String(err),
    );
  it('two updates that both checked the same version: one is written, the other is a conflict', async () => {
    const { tool, etag } = await fresh();
    const service = racingService(2);
    const results = await Promise.all([
      outcome(service.update(scope(), tool, limit(20), etag.slice(1, -1))),
      outcome(service.update(scope(), tool, limit(30), etag.slice(1, -1))),
    ]);
    expect(results.sort()).toEqual(['conflict', 'done']);
    expect(await read(tool)).toMatchObject({ version: 2 });
    expect(await versionsOf(tool)).toHaveLength(2);
  });

  it('a delete that checked the version an update then replaced is a conflict; the policy stays', async () => {
    const { tool, etag } = await fresh();
    const updated = gate();
    const service = racingService(2, { writesAfter: updated.opened });
    const deleting = outcome(service.delete(scope(), tool, etag.slice(1, -1)));
    const updating = outcome(service.update(scope(), tool, limit(20), etag.slice(1, -1)));
    expect(await updating).toBe('done');
    updated.open();
    expect(await deleting).toBe('conflict');
    expect(await read(tool)).toMatchObject({ version: 2, constraints: [{ maximum: 20 }] });
  });

  it('a deactivation that checked the version an update then replaced is a conflict; the policy stays active', async () => {
    const { tool, etag } = await fresh();
    const updated = gate();
    const service = racingService(2, { writesAfter: updated.opened });
    const deactivating = outcome(service.setActive(scope(), tool, false, etag.slice(1, -1)));
    const updating = outcome(service.update(scope(), tool, limit(20), etag.slice(1, -1)));
    expect(await updating).toBe('done');
    updated.open();
    expect(await deactivating).toBe('conflict');
    expect(await read(tool)).toMatchObject({ version: 2, isActive: true });
  });

  it('an update over a policy deleted after its check answers 404 and creates nothing', async () => {
    const { tool, etag } = await fresh();
    const deletion = gate();
    const service = racingService(1, { readsAfter: deletion.opened });
    const updating = outcome(service.update(scope(), tool, limit(20), etag.slice(1, -1)));
    await service.allRead;
    expect(await outcome(service.delete(scope(), tool))).toBe('done');
    deletion.open();
    expect(await updating).toBe('not_found');
    expectError(await call('GET', `/v1/policies/${tool}`), 404, 'not_found');
  });
});

describe('the API document', () => {
  it('shows If-Match on the writes of one policy and the ETag header of GET, POST and PUT', async () => {
    const doc = (await t.inject({ method: 'GET', url: '/openapi.json' })).json();
    const op = (path: string, method: string) => doc.paths[path][method];
    for (const [path, method] of [
      ['/v1/policies/{toolName}', 'put'],
      ['/v1/policies/{toolName}', 'delete'],
      ['/v1/policies/{toolName}/activate', 'post'],
      ['/v1/policies/{toolName}/deactivate', 'post'],
    ] as const) {
      const header = op(path, method).parameters.find(
        (p: { in: string; name: string }) => p.in === 'header' && p.name.toLowerCase() === 'if-match',
      );
      expect(header, `${method} ${path}`).toMatchObject({ required: false, schema: { type: 'string' } });
      expect(header.description).toContain('409');
    }
    for (const [path, method, status] of [
      ['/v1/policies/{toolName}', 'get', '200'],
      ['/v1/policies/{toolName}', 'put', '200'],
      ['/v1/policies', 'post', '201'],
    ] as const) {
      const answer = op(path, method).responses[status];
      expect(answer.headers?.ETag, `${method} ${path}`).toMatchObject({ schema: { type: 'string' } });
      // Still the policy's own schema.
      expect(answer.content['application/json'].schema.properties).toHaveProperty('version');
    }
  });
});
