import type { EventBus } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import type { ApprovalRepository } from './repository.js';

export const DEFAULT_SWEEP_INTERVAL_MS = 5_000;
const SWEEP_BATCH = 500;

export interface SweeperDeps {
  approvals: Pick<ApprovalRepository, 'expireDue'>;
  events: EventBus;
  clock: Clock;
  log: { error(obj: object, msg: string): void };
  intervalMs?: number;
}

/**
 * Marks pending approvals past their expiry as `expired` in the store and announces each one with
 * `approval.expired` {approvalId, toolName, decisionId, expiresAt} (catalog A has no expiry event;
 * `approval.resolved` stays reserved for human approve/deny). Reads never wait for it: expiry is
 * computed on read. Each row is flipped by one conditional UPDATE, so with several instances on
 * one database every approval is announced once.
 */
export function createApprovalSweeper({ approvals, events, clock, log, intervalMs }: SweeperDeps) {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<number> | null = null;

  async function sweep(): Promise<number> {
    let total = 0;
    for (;;) {
      const rows = await approvals.expireDue(clock.now().toISOString(), SWEEP_BATCH);
      for (const row of rows) {
        events.publish({
          organizationId: row.organization_id,
          type: 'approval.expired',
          data: {
            approvalId: row.id,
            toolName: row.tool_name,
            decisionId: row.decision_id,
            expiresAt: row.expires_at,
          },
        });
      }
      total += rows.length;
      if (rows.length < SWEEP_BATCH) return total;
    }
  }

  /** One sweep at a time: a tick that finds the previous sweep still running is skipped. */
  function tick(): Promise<number> {
    running ??= sweep()
      .catch((err) => {
        log.error({ err }, 'approval sweep failed');
        return 0;
      })
      .finally(() => {
        running = null;
      });
    return running;
  }

  return {
    sweep: tick,
    start(): void {
      if (timer) return;
      timer = setInterval(() => void tick(), intervalMs ?? DEFAULT_SWEEP_INTERVAL_MS);
      timer.unref();
    },
    /** Stops the timer and waits for a sweep in flight, so the store can close after it. */
    async stop(): Promise<void> {
      if (timer) clearInterval(timer);
      timer = null;
      await running;
    },
  };
}

export type ApprovalSweeper = ReturnType<typeof createApprovalSweeper>;
