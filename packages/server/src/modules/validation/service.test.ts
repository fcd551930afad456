import { describe, expect, it, vi } from 'vitest';
import { LocalEventBus } from '../../events/bus.js';
import type { ApprovalUse } from '../approvals/service.js';
import type { DecisionWriter } from '../decisions/writer.js';
import { loadPolicy, type PolicyCache } from '../policies/cache.js';
import { createValidationService, type ToolCall } from './service.js';
import type { Reservation, SessionCounters } from './sessions.js';

const scope = { organizationId: 'org', projectId: null, tier: 'team', keyId: 'key-1' };
const policy = loadPolicy({
  organization_id: 'org',
  tool_name: 'wire',
  project_id: null,
  version: 1,
  is_active: 1,
  mode: 'deterministic',
  constraints: JSON.stringify([
    { argumentName: 'amount', enabled: true, maximum: 10, action: 'require_approval' },
  ]),
  session_constraints: JSON.stringify({ maxCalls: 5 }),
  llm_config: null,
  created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z',
});

function setup(
  opts: {
    reserve?: SessionCounters['reserve'];
    release?: () => Promise<void>;
    write?: () => Promise<never>;
  } = {},
) {
  const release = vi.fn(opts.release ?? (async () => {}));
  const use = vi.fn(
    async (): Promise<ApprovalUse> => ({ ok: true, approvalId: 'ap-1', resolvedBy: 'alice', release }),
  );
  const reservation = {
    failures: [],
    after: { calls: 1, cumulative: {} },
    release: vi.fn(),
    settle: vi.fn(),
  };
  const reserve = vi.fn(opts.reserve ?? (async () => reservation as unknown as Reservation));
  const open = vi.fn(async () => ({}) as never);
  const writer = {
    write: vi.fn(opts.write ?? (async (item: { receipt: object }) => ({ ...item.receipt, receipt_id: 'r' }))),
  } as unknown as DecisionWriter;
  const service = createValidationService({
    policies: { get: async () => policy } as unknown as PolicyCache,
    sessions: { reserve },
    writer,
    events: new LocalEventBus(),
    clock: { now: () => new Date('2026-01-01T00:00:00.000Z') },
    approvals: { use, open } as never,
  });
  return { service, release, use, reservation, reserve, open, writer };
}

const call = (args: Record<string, unknown>, context: Record<string, unknown> = {}): ToolCall => ({
  toolName: 'wire',
  arguments: args,
  context: { session_id: 's', ...context },
});

describe('validation service', () => {
  it('gives a claimed approval back when reserving the session throws, and rethrows', async () => {
    const { service, release } = setup({
      reserve: async () => {
        throw new Error('redis down');
      },
    });
    await expect(service.decide(scope, call({ amount: 50 }, { approval_id: 'ap-1' }))).rejects.toThrow(
      'redis down',
    );
    expect(release).toHaveBeenCalledTimes(1);
  });

  it('still denies when giving the approval back fails on a session refusal', async () => {
    const { service } = setup({
      reserve: async () =>
        ({
          failures: [
            {
              parameter: 'session',
              constraint_type: 'maxCalls',
              expected: 5,
              actual: 6,
              message: 'too many',
            },
          ],
          after: null,
          release() {},
          settle() {},
        }) as Reservation,
      release: async () => {
        throw new Error('db down');
      },
    });
    const decided = await service.decide(scope, call({ amount: 50 }, { approval_id: 'ap-1' }));
    expect(decided.decision).toBe('deny');
  });

  it('does not use an approval for a call allowed anyway', async () => {
    const { service, use } = setup();
    const decided = await service.decide(scope, call({ amount: 5 }, { approval_id: 'ap-1' }));
    expect(decided).toMatchObject({ decision: 'allow', approval: null });
    expect(use).not.toHaveBeenCalled();
  });

  it('keeps the reservation and the approval when recording fails after the tool ran', async () => {
    for (const ran of [true, false]) {
      const { service, release, reservation } = setup({
        write: async () => {
          throw new Error('disk full');
        },
      });
      const c = call({ amount: 50 }, { approval_id: 'ap-1' });
      const decided = await service.decide(scope, c);
      expect(decided.decision).toBe('allow');
      await expect(
        service.record(scope, c, decided, { source: 'server', latencyMs: 1, ran }),
      ).rejects.toThrow();
      expect(reservation.settle).toHaveBeenCalledTimes(ran ? 1 : 0);
      expect(reservation.release).toHaveBeenCalledTimes(ran ? 0 : 1);
      expect(release).toHaveBeenCalledTimes(ran ? 0 : 1);
    }
  });

  it('drops a caller-sent context.source "client" from server decisions; opens approvals with the key', async () => {
    const { service, writer, open } = setup();
    const c = call({ amount: 50 }, { source: 'client' });
    const decided = await service.decide(scope, c);
    expect(decided.decision).toBe('require_approval');
    await service.record(scope, c, decided, { source: 'server', latencyMs: 1 });
    const item = vi.mocked(writer.write).mock.calls[0]![0];
    expect(JSON.parse(item.decision!.context)).toEqual({ session_id: 's' });
    expect(item.receipt.source).toBeUndefined();
    expect(open).toHaveBeenCalledWith(scope, expect.objectContaining({ requestedByKeyId: 'key-1' }));
    const mcp = call({ amount: 1 }, { source: 'mcp' });
    await service.record(scope, mcp, await service.decide(scope, mcp), { source: 'server', latencyMs: 1 });
    expect(JSON.parse(vi.mocked(writer.write).mock.calls[1]![0].decision!.context).source).toBe('mcp');
  });
});
