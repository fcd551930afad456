import { hashJson } from '../../ledger/canonical.js';
import type { ReceiptDecision } from '../../ledger/model.js';
import type { DecisionWriter } from '../../ledger/writer.js';

/** What a spend receipt binds: the action, its amount, who pays and the decision. */
export interface SpendReceipt {
  organizationId: string;
  projectId: string | null;
  /** The ledger entry the receipt records (authorization or commit). */
  entryId: string;
  decision: Extract<ReceiptDecision, 'allow' | 'deny' | 'require_approval' | 'economic_committed'>;
  actionId: string;
  toolName: string;
  amountMicros: number;
  payer: string | null;
  approvalId: string | null;
  reason: string;
  timestamp: string;
  /** The whole request; its canonical hash becomes the receipt's argument_hash. */
  request: Record<string, unknown>;
  /** The configuration decided under; its canonical hash becomes policy_hash. */
  config: unknown;
}

export interface SpendReceipts {
  /** Chains the receipt into the organization's log; resolves with its id once durable. */
  write(r: SpendReceipt): Promise<string>;
}

/** The one place this module touches the decision log's writer. */
export function createSpendReceipts(writer: Pick<DecisionWriter, 'write'>): SpendReceipts {
  return {
    async write(r) {
      const receipt = await writer.write({
        receipt: {
          organization_id: r.organizationId,
          project_id: r.projectId,
          decision_id: r.entryId,
          decision: r.decision,
          mode: null,
          tool_name: r.toolName,
          argument_hash: hashJson(r.request),
          policy_version: null,
          policy_hash: r.config === null ? null : hashJson(r.config),
          reason: r.reason,
          timestamp: r.timestamp,
          source: 'economic',
          action_id: r.actionId,
          amount_micros: r.amountMicros,
          ...(r.payer !== null ? { payer: r.payer } : {}),
          ...(r.approvalId !== null ? { approval_id: r.approvalId } : {}),
        },
      });
      return receipt.receipt_id;
    },
  };
}
