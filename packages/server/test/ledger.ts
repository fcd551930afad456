import type { Receipt, WriteItem } from '../src/ledger/model.js';
import { appendReceipts, argumentHash, emptyChainHead } from '../src/ledger/receipt.js';
import { uuidv7 } from '../src/lib/ids.js';
import type { TestApp } from './helpers.js';

/** The receipt with this id as the decision log stored it (its payload, parsed). */
export async function storedReceipt(t: TestApp, receiptId: string): Promise<Record<string, unknown>> {
  const r = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('receipt_id', '=', receiptId)
    .executeTakeFirstOrThrow();
  return JSON.parse(r.payload) as Record<string, unknown>;
}

/**
 * Decision number `n` as a client reports it to POST /v1/decisions (the SDK's log): one of three
 * tool names, `n` as its arguments, decided on the client in session `s1`.
 */
export const reportedDecision = (n: number, decision: 'allow' | 'deny' = 'allow') => ({
  tool_name: `tool-${n % 3}`,
  arguments: { n },
  decision,
  mode: 'deterministic',
  latency_ms: 0.01,
  source: 'client',
  context: { session_id: 's1' },
});

/**
 * A decision as the pipeline hands it to the writer (receipt fields and decision row), of a call
 * with empty arguments under no policy, for tests that write decisions without a request.
 */
export function decisionItem(d: {
  organizationId: string;
  projectId?: string | null;
  toolName: string;
  decision: 'allow' | 'deny' | 'require_approval';
  reason: string;
  at: string;
}): WriteItem {
  const id = uuidv7();
  const common = {
    organization_id: d.organizationId,
    project_id: d.projectId ?? null,
    tool_name: d.toolName,
  };
  return {
    receipt: {
      ...common,
      decision_id: id,
      decision: d.decision,
      mode: 'deterministic',
      argument_hash: argumentHash({}),
      policy_version: null,
      policy_hash: null,
      reason: d.reason,
      timestamp: d.at,
    },
    decision: {
      ...common,
      id,
      arguments: '{}',
      context: '{}',
      decision: d.decision,
      mode: 'deterministic',
      reason: d.reason,
      failed_argument: null,
      matched_exception: null,
      validations: null,
      latency_ms: 1,
      source: 'server',
      policy_version: null,
      created_at: d.at,
    },
  };
}

/**
 * What whoever controls the database could do: change one receipt and recompute the whole chain
 * (every receipt hash, link and Merkle root, and the chain head) so that it is consistent in itself.
 */
export async function rewriteChain(
  t: Pick<TestApp, 'store'>,
  organizationId: string,
  sequence: number,
  reason: string,
) {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', organizationId)
    .orderBy('sequence')
    .execute();
  const inputs = rows.map((row) => {
    const r = JSON.parse(row.payload) as Receipt;
    const {
      schema: _s,
      sequence: q,
      previous_receipt_hash: _p,
      merkle_root: _m,
      receipt_hash: _h,
      ...fields
    } = r;
    return q === sequence ? { ...fields, reason } : fields;
  });
  const { receipts, head } = appendReceipts(emptyChainHead(), inputs);
  for (const f of receipts) {
    await t.store.db
      .updateTable('receipts')
      .set({ payload: JSON.stringify(f), receipt_hash: f.receipt_hash })
      .where('organization_id', '=', organizationId)
      .where('sequence', '=', f.sequence)
      .execute();
  }
  await t.store.db
    .updateTable('chain_heads')
    .set({ last_hash: head.lastHash, frontier: JSON.stringify(head.frontier) })
    .where('organization_id', '=', organizationId)
    .execute();
}
