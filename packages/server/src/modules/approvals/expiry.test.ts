import { beforeAll, describe, expect, it, vi } from 'vitest';
import {
  asUserScope,
  collectEvents,
  ManualClock,
  openApproval,
  receiptsOf,
  resolveApproval,
  setTier,
} from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { LocalEventBus, type ServiceEvent } from '../../events/bus.js';
import { createApprovalRepository } from './repository.js';
import { createApprovalService } from './service.js';

const clock = new ManualClock();
const t = useTestApp({}, { clock });
beforeAll(async () => {
  // Sweeps happen when a test says so; the timer itself is tested on a service of its own.
  await t.ctx.approvals.stopSweeper();
});

async function teamTenant(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await setTier(t, tenant, 'team');
  return tenant;
}

async function open(tenant: Tenant, ttl = 60): Promise<string> {
  const res = await openApproval(t, tenant, { toolName: 'wire', arguments: { a: 1 }, expiresInSeconds: ttl });
  return res.json().id;
}

const statusInStore = async (id: string) =>
  (await t.store.db.selectFrom('approvals').select('status').where('id', '=', id).executeTakeFirstOrThrow())
    .status;

describe('approval expiry', () => {
  it('reads as expired once expiresAt passes, before any sweep', async () => {
    const tenant = await teamTenant();
    const id = await open(tenant);
    const get = () =>
      t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: keyHeader(tenant.apiKey) });
    clock.advance(59);
    expect((await get()).json().status).toBe('pending');
    clock.advance(1);
    const expired = (await get()).json();
    expect(expired).toEqual({
      id,
      status: 'expired',
      toolName: 'wire',
      decisionId: null,
      createdAt: expect.any(String),
      expiresAt: expect.any(String),
      requiredApprovals: 1,
      approvers: [],
    });
    expect(await statusInStore(id)).toBe('pending');
    const list = await t.inject({
      method: 'GET',
      url: '/v1/approvals/pending',
      headers: keyHeader(tenant.apiKey),
    });
    expect(list.json().data).toEqual([]);
    const before = (await receiptsOf(t, tenant.orgId)).length;
    const res = await resolveApproval(t, tenant, id, 'approve');
    expectError(res, 410, 'expired');
    expect((await receiptsOf(t, tenant.orgId)).length).toBe(before);
  });

  it('the sweeper marks due approvals expired in the store and announces each once', async () => {
    const tenant = await teamTenant();
    const due = await open(tenant, 60);
    const later = await open(tenant, 600);
    clock.advance(61);
    const seen = collectEvents(t, tenant.orgId);
    await t.ctx.approvals.sweep();
    await t.ctx.approvals.sweep();
    seen.stop();
    expect(await statusInStore(due)).toBe('expired');
    expect(await statusInStore(later)).toBe('pending');
    expect(seen.events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'approval.expired',
        data: { approvalId: due, toolName: 'wire', decisionId: null, expiresAt: expect.any(String) },
      },
    ]);
    expectError(await resolveApproval(t, tenant, due, 'deny'), 410, 'expired');
    const batch = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: asUser(tenant),
      payload: { ids: [due, later], action: 'approve' },
    });
    expect(batch.json().results).toEqual([
      { id: due, status: 'expired', error: { code: 'expired', message: expect.any(String) } },
      expect.objectContaining({ id: later, status: 'approved' }),
    ]);
  });

  it('runs on its own timer and stops cleanly', async () => {
    const tenant = await teamTenant();
    const id = await open(tenant, 60);
    clock.advance(61);
    const events = new LocalEventBus();
    const got: ServiceEvent[] = [];
    events.subscribe((e) => got.push(e));
    const service = createApprovalService({
      approvals: createApprovalRepository(t.store.db),
      writer: t.ctx.writer,
      events,
      clock,
      log: { error: () => {} },
      tierOf: async () => 'team',
      sweepIntervalMs: 10,
    });
    service.startSweeper();
    await vi.waitFor(() => expect(got.map((e) => e.data.approvalId)).toContain(id), { timeout: 2000 });
    await service.stopSweeper();
    expect(await statusInStore(id)).toBe('expired');
  });

  it('still answers a resolve when its receipt cannot be written, and logs it', async () => {
    const tenant = await teamTenant();
    const id = await open(tenant, 600);
    const errors: unknown[] = [];
    const service = createApprovalService({
      approvals: createApprovalRepository(t.store.db),
      writer: { write: () => Promise.reject(new Error('disk full')) },
      events: new LocalEventBus(),
      clock,
      log: { error: (obj) => errors.push(obj) },
      tierOf: async () => 'team',
    });
    const resolved = await service.resolve(asUserScope(tenant), id, 'approve');
    expect(resolved.status).toBe('approved');
    expect(errors).toEqual([expect.objectContaining({ approvalId: id })]);
  });
  it('batch-resolve reports an unexpected error for its id only; the others still resolve and announce', async () => {
    const tenant = await teamTenant();
    const [a, broken, b] = [await open(tenant, 600), await open(tenant, 600), await open(tenant, 600)];
    const repo = createApprovalRepository(t.store.db);
    const events = new LocalEventBus();
    const got: ServiceEvent[] = [];
    events.subscribe((e) => got.push(e));
    const written: unknown[] = [];
    const service = createApprovalService({
      approvals: {
        ...repo,
        advance: (org, id, seen, set, now) =>
          id === broken
            ? Promise.reject(new Error('connection reset'))
            : repo.advance(org, id, seen, set, now),
      },
      writer: {
        write: async (item) => {
          written.push(item);
          return item.receipt as never;
        },
      },
      events,
      clock,
      log: { error: () => {} },
      tierOf: async () => 'team',
    });
    const results = await service.batchResolve(asUserScope(tenant), [a, broken, b], 'approve');
    expect(results).toEqual([
      expect.objectContaining({ id: a, status: 'approved' }),
      { id: broken, status: 'unknown', error: { code: 'internal_error', message: expect.any(String) } },
      expect.objectContaining({ id: b, status: 'approved' }),
    ]);
    expect(written).toHaveLength(2);
    expect(got.filter((e) => e.type === 'approval.resolved').map((e) => e.data.approvalId)).toEqual([a, b]);
  });
});
