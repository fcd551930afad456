import { describe, expect, it, vi } from 'vitest';
import { LocalEventBus } from '../events/bus.js';
import type { WriteItem } from '../ledger/model.js';
import type { ApprovalUse } from '../modules/approvals/service.js';
import { type LoadedPolicy, loadPolicy } from '../modules/policies/cache.js';
import type { Enforced, ToolCall } from './model.js';
import { createEnforcement } from './pipeline.js';
import type { Reservation, SessionCounters } from './session-counters.js';
import { enforcementSteps } from './steps/index.js';

const scope = { organizationId: 'org', projectId: null, tier: 'team', keyId: 'key-1' };
const policyRow = {
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
};
const policy = loadPolicy(policyRow);

function setup(
  opts: {
    reserve?: SessionCounters['reserve'];
    release?: () => Promise<void>;
    write?: () => Promise<never>;
    policy?: LoadedPolicy;
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
    write: vi.fn(
      opts.write ??
        (async (item: WriteItem) => ({
          ...item.receipt,
          schema: 'svc.receipt/1',
          receipt_id: 'r',
          sequence: 0,
          previous_receipt_hash: 'p',
          merkle_root: 'm',
          receipt_hash: 'h',
        })),
    ),
  };
  const pipeline = createEnforcement({
    policies: { get: async () => opts.policy ?? policy },
    steps: enforcementSteps({
      approvals: { use, open } as never,
      sessions: { reserve, check: async () => [] },
      // Deterministic policies never reach the judge.
      judge: { judge: async () => expect.unreachable('the judge is not asked for deterministic policies') },
    }),
    writer: { ...writer, writeAll: async () => [] },
    events: new LocalEventBus(),
    clock: { now: () => new Date('2026-01-01T00:00:00.000Z') },
  });
  const enforce = (c: ToolCall, execute?: () => Promise<{ value: never }>): Promise<Enforced> =>
    pipeline.enforce({ scope, call: c, source: 'server', latencyMs: 1, ...(execute ? { execute } : {}) });
  return { enforce, pipeline, release, use, reservation, reserve, open, writer };
}

const call = (args: Record<string, unknown>, context: Record<string, unknown> = {}): ToolCall => ({
  toolName: 'wire',
  arguments: args,
  context: { session_id: 's', ...context },
});

describe('enforcement pipeline', () => {
  it('gives a claimed approval back when reserving the session throws, and rethrows', async () => {
    const { enforce, release, writer } = setup({
      reserve: async () => {
        throw new Error('redis down');
      },
    });
    await expect(enforce(call({ amount: 50 }, { approval_id: 'ap-1' }))).rejects.toThrow('redis down');
    expect(writer.write).not.toHaveBeenCalled();
    expect(release).toHaveBeenCalledTimes(1);
  });

  it('still denies when giving the approval back fails on a session refusal', async () => {
    const { enforce } = setup({
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
    const done = await enforce(call({ amount: 50 }, { approval_id: 'ap-1' }));
    expect(done.decision).toBe('deny');
  });

  it('gives a used approval back when session limits then refuse the call', async () => {
    const { enforce, release, writer } = setup({
      reserve: async () =>
        ({
          failures: [
            { parameter: 'session', constraint_type: 'maxCalls', expected: 5, actual: 6, message: 'x' },
          ],
          after: null,
          release() {},
          settle() {},
        }) as Reservation,
    });
    const done = await enforce(call({ amount: 50 }, { approval_id: 'ap-1' }));
    expect(done.decision).toBe('deny');
    expect(release).toHaveBeenCalledTimes(1);
    expect(writer.write.mock.calls[0]![0].receipt.approval_id).toBeUndefined();
  });

  it('does not use an approval for a call allowed anyway', async () => {
    const { enforce, use, writer } = setup();
    const done = await enforce(call({ amount: 5 }, { approval_id: 'ap-1' }));
    expect(done).toMatchObject({ decision: 'allow', approvalId: null });
    expect(writer.write.mock.calls[0]![0].receipt.approval_id).toBeUndefined();
    expect(use).not.toHaveBeenCalled();
  });

  it('keeps the reservation and the approval when recording fails after the tool ran', async () => {
    for (const ran of [true, false]) {
      const { enforce, release, reservation } = setup({
        write: async () => {
          throw new Error('disk full');
        },
      });
      const c = call({ amount: 50 }, { approval_id: 'ap-1' });
      const execute = ran ? async () => ({ value: undefined as never }) : undefined;
      await expect(enforce(c, execute)).rejects.toMatchObject({ name: 'UnrecordedError', ran });
      expect(reservation.settle).toHaveBeenCalledTimes(ran ? 1 : 0);
      expect(reservation.release).toHaveBeenCalledTimes(ran ? 0 : 1);
      expect(release).toHaveBeenCalledTimes(ran ? 0 : 1);
    }
  });

  it('gives back what the checks held when the tool was not run after all, and writes no session counters', async () => {
    const { enforce, release, reservation, writer } = setup();
    const done = await enforce(call({ amount: 50 }, { approval_id: 'ap-1' }), async () => ({
      value: undefined as never,
      note: 'not forwarded: cancelled',
      ran: false,
    }));
    expect(done).toMatchObject({ decision: 'allow', ran: false });
    expect(done.reason).toMatch(/; not forwarded: cancelled$/);
    expect(writer.write.mock.calls[0]![0].session).toBeUndefined();
    expect(reservation.settle).not.toHaveBeenCalled();
    expect(reservation.release).toHaveBeenCalledTimes(1);
    expect(release).toHaveBeenCalledTimes(1);
    // Without a note too: the record prepared while the tool was expected to run is not used.
    const quiet = setup();
    const unnoted = await quiet.enforce(call({ amount: 5 }), async () => ({
      value: undefined as never,
      ran: false,
    }));
    expect(unnoted).toMatchObject({ decision: 'allow', ran: false });
    expect(quiet.writer.write.mock.calls[0]![0].session).toBeUndefined();
    expect(quiet.reservation.release).toHaveBeenCalledTimes(1);
  });

  it('drops a caller-sent context.source "client" from server decisions; opens approvals with the key', async () => {
    const { enforce, writer, open } = setup();
    const c = call({ amount: 50 }, { source: 'client' });
    const done = await enforce(c);
    expect(done.decision).toBe('require_approval');
    const item = writer.write.mock.calls[0]![0];
    expect(JSON.parse(item.decision!.context)).toEqual({ session_id: 's' });
    expect(item.receipt.source).toBeUndefined();
    expect(open).toHaveBeenCalledWith(scope, expect.objectContaining({ requestedByKeyId: 'key-1' }));
    const mcp = call({ amount: 1 }, { source: 'mcp' });
    await enforce(mcp);
    expect(JSON.parse(writer.write.mock.calls[1]![0].decision!.context).source).toBe('mcp');
  });

  it('names no policy version or hash for a call under an inactive policy; a reported one binds it', async () => {
    const inactive = loadPolicy({ ...policyRow, version: 2, is_active: 0 });
    const { enforce, pipeline, writer, reserve } = setup({ policy: inactive });
    const done = await enforce(call({ amount: 50 }));
    expect(done).toMatchObject({
      decision: 'allow',
      reason: 'Policy for tool "wire" is inactive; allowed without checks',
      policyVersion: null,
    });
    expect(reserve).not.toHaveBeenCalled();
    const item = writer.write.mock.calls[0]![0];
    expect(item.receipt).toMatchObject({ policy_version: null, policy_hash: null });
    expect(item.decision!.policy_version).toBeNull();
    expect(done.fullReceipt).toMatchObject({ policy_version: null, policy_hash: null });

    // POST /v1/decisions: the receipt binds the tool's current policy, active or not.
    const reported = await pipeline.enforce({
      scope,
      call: call({ amount: 50 }),
      source: 'client',
      reported: { decision: 'allow', reason: 'Allowed by the client' },
      latencyMs: 1,
    });
    expect(reported.policyVersion).toBe(2);
    const logged = writer.write.mock.calls[1]![0];
    expect(logged.receipt).toMatchObject({ policy_version: 2, policy_hash: inactive.hash });
    expect(logged.decision!.policy_version).toBe(2);
  });
});

describe('an llm policy whose session refuses the call', () => {
  it('still binds the judgement that was made in the decision it records', async () => {
    const llmPolicy = loadPolicy({
      ...policyRow,
      mode: 'llm',
      constraints: '[]',
      session_constraints: JSON.stringify({ maxCalls: 1 }),
      llm_config: JSON.stringify({ description: 'Wires only to known payees.' }),
    });
    const binding = {
      provider: 'anthropic' as const,
      model: 'claude-test',
      promptHash: `sha256:${'1'.repeat(64)}`,
      answerHash: `sha256:${'2'.repeat(64)}`,
    };
    const writes: WriteItem[] = [];
    const pipeline = createEnforcement({
      policies: { get: async () => llmPolicy },
      steps: enforcementSteps({
        approvals: { use: async () => expect.unreachable(), open: async () => expect.unreachable() } as never,
        sessions: {
          reserve: async () =>
            ({
              failures: [
                {
                  parameter: '',
                  constraint_type: 'max_calls',
                  expected: { maxCalls: 1 },
                  actual: 2,
                  message: 'session call limit reached',
                },
              ],
              after: null,
              release: () => {},
              settle: () => {},
            }) as Reservation,
          check: async () => [],
        },
        judge: {
          judge: async () => ({
            ok: true,
            cached: false,
            binding,
            answer: {
              decision: 'allow',
              reason: 'known payee',
              failedArgument: null,
              matchedException: null,
            },
          }),
        },
      }),
      writer: {
        write: async (item: WriteItem) => {
          writes.push(item);
          return {
            ...item.receipt,
            schema: 'svc.receipt/1',
            receipt_id: 'r',
            sequence: 0,
            previous_receipt_hash: 'p',
            merkle_root: 'm',
            receipt_hash: 'h',
          };
        },
        writeAll: async () => [],
      },
      events: new LocalEventBus(),
      clock: { now: () => new Date('2026-01-01T00:00:00.000Z') },
    });
    const done = await pipeline.enforce({ scope, call: call({ to: 'bob' }), source: 'server', latencyMs: 1 });
    expect(done).toMatchObject({ decision: 'deny', mode: 'llm' });
    expect(done.failedConstraints.map((f) => f.constraint_type)).toEqual(['max_calls']);
    expect(writes).toHaveLength(1);
    expect(writes[0]!.receipt).toMatchObject({
      decision: 'deny',
      mode: 'llm',
      judge_provider: 'anthropic',
      judge_model: 'claude-test',
      judge_prompt_hash: binding.promptHash,
      judge_answer_hash: binding.answerHash,
    });
  });
});
