import type { EventBus } from '../events/bus.js';
import type { Receipt, WriteItem } from '../ledger/model.js';
import { receiptSummary } from '../ledger/receipt.js';
import { type Clock, roundMs } from '../lib/clock.js';
import { uuidv7 } from '../lib/ids.js';
import type { PolicyCache } from '../modules/policies/cache.js';
import type {
  CallScope,
  Enforced,
  EnforceRequest,
  Execution,
  Hold,
  ReportedCall,
  SessionWrite,
  Step,
  Verdict,
} from './model.js';
import { type RecordInput, withOutcome, writeItemOf } from './record.js';
import { NOT_EVALUATED, uncheckedVerdict } from './steps/constraints.js';

/** The decision could not be recorded durably; `ran` says whether the tool had already run. */
export class UnrecordedError extends Error {
  override name = 'UnrecordedError';
  constructor(
    override readonly cause: unknown,
    readonly ran: boolean,
  ) {
    super(`decision not recorded: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

export interface EnforcementDeps {
  policies: Pick<PolicyCache, 'get'>;
  /** The checks, in order. */
  steps: readonly Step[];
  writer: {
    write(item: WriteItem): Promise<Receipt>;
    writeAll(items: readonly WriteItem[]): Promise<Receipt[]>;
  };
  events: Pick<EventBus, 'publish'>;
  clock: Clock;
}

/** context.session_id when it is a non-empty string; anything else names no session (never coerced). */
function sessionIdOf(context: Record<string, unknown>): string | null {
  const id = context.session_id;
  return typeof id === 'string' && id !== '' ? id : null;
}

/** Gives back what holds took; a failed give-back must not turn the outcome into an error. */
async function releaseAll(holds: readonly Hold[], ran: boolean): Promise<void> {
  for (const h of holds) {
    try {
      await h.release(ran);
    } catch {
      // The hold's owner logs its own failures; the decision stands.
    }
  }
}

/**
 * The one path of every enforced call (POST /v1/tools/validate, MCP tools/call, and client-reported
 * decisions, which skip the checks): policy lookup, the checks in order (each may hold something),
 * the tool itself when the caller runs it through the pipeline, the durable write (group commit;
 * resolves after COMMIT), then what the holds took is made final and the decision is announced.
 * Fail closed: a check that throws gives back what earlier checks took and rethrows; a decision
 * that cannot be recorded gives back what was not spent and throws UnrecordedError.
 */
export function createEnforcement({ policies, steps, writer, events, clock }: EnforcementDeps) {
  return {
    async enforce<T = never>(req: EnforceRequest<T>): Promise<Enforced<T>> {
      const { scope, call } = req;
      const policy = await policies.get(scope.organizationId, call.toolName);
      const active = policy?.isActive ? policy : null;
      // The policy the answer, the decision and the receipt name: the one that decided, none when
      // it is inactive; a reported decision binds the tool's current policy (docs/api-notes.md).
      const bound = req.reported ? policy : active;
      let verdict: Verdict;
      let holds: Hold[] = [];
      let session: SessionWrite | undefined;
      if (req.reported) {
        verdict = reportedVerdict(req.reported);
      } else {
        const input = { scope, call, policy: active, sessionId: sessionIdOf(call.context) };
        verdict = uncheckedVerdict(call.toolName, policy);
        try {
          for (const step of steps) {
            const r = await step.run(input, verdict);
            if (r.verdict.decision !== verdict.decision) {
              // What earlier checks took was for the verdict they saw, which no longer holds.
              await releaseAll(holds, false);
              holds = [];
              session = undefined;
            }
            verdict = r.verdict;
            if (r.hold) holds.push(r.hold);
            if (r.session) session = r.session;
          }
        } catch (err) {
          await releaseAll(holds, false);
          throw err;
        }
      }
      const latencyMs = req.elapsed ? roundMs(req.elapsed()) : (req.latencyMs ?? 0);

      let execution: Execution<T> | undefined;
      let ran = verdict.decision === 'allow' && req.execute !== undefined;
      // Each RecordInput is written out whole rather than spread from a common part: a spread
      // followed by more properties gave V8 a new hidden class on every call.
      const recordOf = (decisionId: string, now: string, resultHash: string | undefined): RecordInput => ({
        decisionId,
        now,
        scope,
        call,
        verdict,
        policy: bound,
        source: req.source,
        latencyMs,
        session,
        bindings: req.bindings,
        resultHash,
      });
      let item: WriteItem | null = null;
      let prepared: WriteItem | null = null;
      if (ran) {
        // The tool starts first; what the record needs that does not depend on its outcome (argument
        // hash, rows) is built while it runs, so it is off the path of the call's answer.
        // (The request leaves on a later tick, when its socket is assigned: the preparation waits for
        // the check phase, after that I/O.)
        let running: Promise<Execution<T>>;
        try {
          running = req.execute!();
        } catch (err) {
          running = Promise.reject(err);
        }
        // Awaited below; until then a failure must not count as unhandled.
        running.catch(() => {});
        prepared = await new Promise<WriteItem | null>((resolve) =>
          setImmediate(() => {
            try {
              resolve(writeItemOf(recordOf('', '', undefined)));
            } catch {
              // Built again below, where its error is a failed record.
              resolve(null);
            }
          }),
        );
        try {
          execution = await running;
        } catch (err) {
          await releaseAll(holds, true);
          throw err;
        }
        if (execution.note !== undefined)
          verdict = { ...verdict, reason: `${verdict.reason}; ${execution.note}` };
        if (execution.ran === false) {
          // Not run after all: the record carries no session counters, and the holds are given back.
          ran = false;
          session = undefined;
        }
      }
      // Ids and times in the order decisions are recorded, as for calls that run nothing.
      const decisionId = req.decisionId ?? uuidv7();
      if (prepared && execution?.note === undefined && execution?.ran !== false)
        item = withOutcome(prepared, decisionId, clock.now().toISOString(), execution?.resultHash);

      let receipt: Receipt;
      try {
        item ??= writeItemOf(recordOf(decisionId, clock.now().toISOString(), execution?.resultHash));
        receipt = await writer.write(item);
      } catch (err) {
        await releaseAll(holds, ran);
        throw new UnrecordedError(err, ran);
      }
      events.publish({
        organizationId: scope.organizationId,
        type: 'decision.created',
        data: {
          decisionId,
          toolName: call.toolName,
          decision: verdict.decision,
          mode: verdict.mode,
          latencyMs,
          projectId: scope.projectId,
        },
      });
      if (execution?.ran === false) {
        await releaseAll(holds, false);
      } else {
        const committed = await Promise.allSettled(holds.map(async (h) => h.commit(decisionId)));
        const failed = committed.find((c) => c.status === 'rejected');
        if (failed) throw new UnrecordedError(failed.reason, ran);
      }
      return {
        decision: verdict.decision,
        reason: verdict.reason,
        failedConstraints: verdict.failedConstraints,
        mode: verdict.mode,
        policyVersion: bound?.version ?? null,
        latencyMs,
        decisionId,
        receipt: receiptSummary(receipt),
        fullReceipt: receipt,
        approvalId: verdict.decision === 'require_approval' ? verdict.approvalId : null,
        ran,
        ...(execution ? { execution } : {}),
      };
    },

    /**
     * Records decisions an SDK took locally (POST /v1/decisions with a batch) in one transaction,
     * all or none, each bound to its tool's current policy; answers their ids in order.
     */
    async recordReported(scope: CallScope, reports: readonly ReportedCall[]): Promise<string[]> {
      const names = [...new Set(reports.map((r) => r.call.toolName))];
      const loaded = await Promise.all(names.map((n) => policies.get(scope.organizationId, n)));
      const policyOf = new Map(names.map((n, i) => [n, loaded[i] ?? null]));
      const now = clock.now().toISOString();
      // Written out whole, not `{ ...r, decisionId, verdict }` (docs/architecture.md, "Objects built per call").
      const recorded = reports.map((r) => ({
        call: r.call,
        latencyMs: r.latencyMs,
        decisionId: r.decisionId ?? uuidv7(),
        verdict: reportedVerdict(r.reported),
      }));
      // Built before anything is queued: arguments that cannot be canonicalized throw here.
      const items = recorded.map((r) =>
        writeItemOf({
          decisionId: r.decisionId,
          now,
          scope,
          call: r.call,
          verdict: r.verdict,
          policy: policyOf.get(r.call.toolName) ?? null,
          source: 'client',
          latencyMs: r.latencyMs,
          session: undefined,
          bindings: undefined,
          resultHash: undefined,
        }),
      );
      try {
        await writer.writeAll(items);
      } catch (err) {
        throw new UnrecordedError(err, false);
      }
      for (const r of recorded) {
        events.publish({
          organizationId: scope.organizationId,
          type: 'decision.created',
          data: {
            decisionId: r.decisionId,
            toolName: r.call.toolName,
            decision: r.verdict.decision,
            mode: r.verdict.mode,
            latencyMs: r.latencyMs,
            projectId: scope.projectId,
          },
        });
      }
      return recorded.map((r) => r.decisionId);
    },
  };
}

export type Enforcement = ReturnType<typeof createEnforcement>;

function reportedVerdict(reported: NonNullable<EnforceRequest['reported']>): Verdict {
  return {
    decision: reported.decision,
    reason: reported.reason,
    failedConstraints: [],
    failedArgument: null,
    mode: 'deterministic',
    evaluation: NOT_EVALUATED,
    approvalId: null,
  };
}
