import type { MessagePort } from 'node:worker_threads';
import type { Insertable } from 'kysely';
import type { Database, DecisionsTable, SessionCountersTable } from '../storage/schema.js';
import type { WireBatch, WireReceipt } from './wire.js';

export type ReceiptDecision =
  | 'allow'
  | 'deny'
  | 'require_approval'
  | 'approval_approved'
  | 'approval_denied'
  | 'economic_committed';
export type ReceiptMode = 'deterministic' | 'llm';

/** What the caller supplies for one receipt; the chain fields are filled in by appendReceipts. */
export interface ReceiptFields {
  organization_id: string;
  project_id: string | null;
  decision_id: string | null;
  decision: ReceiptDecision;
  mode: ReceiptMode | null;
  tool_name: string;
  /** sha256:<hex> of the canonical JSON of the arguments; see argumentHash(). */
  argument_hash: string;
  policy_version: number | null;
  /** sha256:<hex> of the canonical JSON of the policy definition used. */
  policy_hash: string | null;
  reason: string | null;
  /** ISO 8601. */
  timestamp: string;
  // Optional bindings: written only when present (undefined or null means absent).
  result_hash?: string;
  client_id?: string;
  connection_id?: string;
  upstream_id?: string;
  approval_id?: string;
  approval_hash?: string;
  source?: string;
  // Spend receipts (economic authorize and commit): the action, its amount and who pays.
  action_id?: string;
  amount_micros?: number;
  payer?: string;
  /** llm mode: the provider and model that judged, and hashes of the prompt sent and answer received. */
  judge_provider?: string;
  judge_model?: string;
  judge_prompt_hash?: string;
  judge_answer_hash?: string;
}

export type ReceiptInput = ReceiptFields & { receipt_id: string };

export interface Receipt extends ReceiptFields {
  /** svc.receipt/1 (see RECEIPT_SCHEMA in receipt.ts). */
  schema: string;
  receipt_id: string;
  sequence: number;
  previous_receipt_hash: string;
  merkle_root: string;
  receipt_hash: string;
}

/** Per-organization chain state, persisted by the server as JSON; O(log n) in size. */
export interface ChainHead {
  /** Next sequence to assign (= number of receipts so far = Merkle tree size). */
  sequence: number;
  /** previous_receipt_hash for the next receipt. */
  lastHash: string;
  /** Roots of the perfect subtrees of the Merkle tree, sha256:<hex>, largest first. */
  frontier: string[];
}

export interface ReceiptSummary {
  receipt_id: string;
  receipt_hash: string;
  previous_receipt_hash: string;
  merkle_root: string;
}

/** One durable write: a receipt, optionally with the decision it records and a session counter update. */
export interface WriteItem {
  receipt: ReceiptFields;
  /** The decision row without its receipt columns (filled in from the receipt). */
  decision?: Omit<
    Insertable<DecisionsTable>,
    'receipt_id' | 'receipt_hash' | 'previous_receipt_hash' | 'merkle_root'
  >;
  /** Absolute counter values after this call. */
  session?: Insertable<SessionCountersTable>;
}

export interface BatchRows {
  decisions: Insertable<DecisionsTable>[];
  receipts: Insertable<Database['receipts']>[];
  sessions: Insertable<SessionCountersTable>[];
}

/** A chain segment to commit: one organization's items, in order, with their receipt ids. */
export interface OrgBatch {
  organizationId: string;
  items: { item: WriteItem; receiptId: string }[];
}

/** Commits whole batches (every organization's segment in one transaction) and returns the receipts. */
export interface BatchStore {
  commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>>;
  /** Starts what the first commit would start (a thread), so that commit does not wait for it. */
  warm?(): void;
  /**
   * Moves the WAL's committed frames into the database file without waiting for other connections
   * (PASSIVE), off the event loop, for commits made on a connection that does not do it itself.
   */
  checkpoint?(): Promise<void>;
  /**
   * Settles the commits that have finished but whose answers the event loop has not delivered yet;
   * returns how many. For a store that commits elsewhere (a thread).
   */
  poll?(): number;
  /** Releases what the store holds (a thread, a connection); called once nothing is in flight. */
  close?(): Promise<void>;
}

/** What the writer thread starts with: the database, and where and how it answers. */
export interface ThreadData {
  path: string;
  /** The port it posts its answers on. */
  replies: MessagePort;
  /** One Int32 it sets to 1 after each answer it posts (ThreadBatchStore.poll). */
  answered: SharedArrayBuffer;
}

/** A batch sent to the writer thread, or a request to checkpoint the WAL (answered with no receipts). */
export type ThreadRequest = { id: number; batches: readonly WireBatch[] } | { id: number; checkpoint: true };

/**
 * The writer thread's answer: what the chain gave each committed receipt, in the order of the
 * batch's items, or why the batch failed (nothing committed).
 */
export type ThreadReply =
  | { id: number; receipts: WireReceipt[]; error?: undefined }
  | { id: number; error: { name: string; message: string; code?: string } };
