import { canonicalJson, GENESIS_HASH, hashJson, isTaggedHash, sha256Tagged, tagDigest } from './canonical.js';
import { leafHash, MerkleFrontier } from './merkle.js';
import type { ChainHead, Receipt, ReceiptInput, ReceiptSummary } from './model.js';

export const RECEIPT_SCHEMA = 'svc.receipt/1';

const REQUIRED_KEYS = [
  'organization_id',
  'project_id',
  'decision_id',
  'decision',
  'mode',
  'tool_name',
  'argument_hash',
  'policy_version',
  'policy_hash',
  'reason',
  'timestamp',
] as const;

const OPTIONAL_KEYS = [
  'result_hash',
  'client_id',
  'connection_id',
  'upstream_id',
  'approval_id',
  'approval_hash',
  'source',
  'action_id',
  'amount_micros',
  'payer',
  'judge_provider',
  'judge_model',
  'judge_prompt_hash',
  'judge_answer_hash',
] as const;

export function emptyChainHead(): ChainHead {
  return { sequence: 0, lastHash: GENESIS_HASH, frontier: [] };
}

/**
 * sha256:<hex> of the RFC 8785 canonical JSON of a tool call's arguments. Missing arguments
 * (undefined) hash as `{}`, because MCP treats an omitted arguments object as an empty one.
 */
export function argumentHash(args: unknown): string {
  return hashJson(args === undefined ? {} : args);
}

/** Merkle leaf data of a receipt: canonical JSON without receipt_hash and merkle_root. */
export function receiptLeafData(receipt: Record<string, unknown>): string {
  const { receipt_hash: _h, merkle_root: _m, ...rest } = receipt;
  return canonicalJson(rest);
}

/** receipt_hash as it should be: hash of the canonical JSON of everything except receipt_hash. */
export function computeReceiptHash(receipt: Record<string, unknown>): string {
  const { receipt_hash: _h, ...rest } = receipt;
  return hashJson(rest);
}

/**
 * Extends the chain by a whole batch: assigns sequences, links previous hashes, computes each
 * receipt's Merkle root (over leaves 0..i) and receipt hash. Pure: `head` is not mutated and the
 * new head is returned, so the caller can write the rows and the head in one transaction. Throws
 * before returning anything if any item is malformed, so a batch is all or nothing.
 */
export function appendReceipts(
  head: ChainHead,
  items: readonly ReceiptInput[],
): { receipts: Receipt[]; head: ChainHead } {
  if (!Number.isSafeInteger(head.sequence) || head.sequence < 0) {
    throw new Error(`invalid chain head sequence ${head.sequence}`);
  }
  if (!isTaggedHash(head.lastHash)) throw new Error(`invalid chain head lastHash ${head.lastHash}`);
  const tree = MerkleFrontier.fromTagged(head.frontier, head.sequence);
  let lastHash = head.lastHash;
  const receipts: Receipt[] = [];

  for (const item of items) {
    const body = buildBody(item, tree.size, lastHash);
    // Serialize once: the leaf is the canonical body, and the canonical body with merkle_root is
    // the same members with one more spliced in at its sorted place (receipts are flat objects).
    const keys = Object.keys(body).sort();
    const members = keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(body[k])}`);
    tree.append(leafHash(`{${members.join(',')}}`));
    const merkleRoot = tagDigest(tree.root());
    const at = keys.findIndex((k) => k > 'merkle_root');
    members.splice(at === -1 ? members.length : at, 0, `"merkle_root":${JSON.stringify(merkleRoot)}`);
    const receipt = {
      ...body,
      merkle_root: merkleRoot,
      receipt_hash: sha256Tagged(`{${members.join(',')}}`),
    } as Receipt;
    receipts.push(receipt);
    lastHash = receipt.receipt_hash;
  }
  return { receipts, head: { sequence: tree.size, lastHash, frontier: tree.toTagged() } };
}

export function receiptSummary(r: Receipt): ReceiptSummary {
  return {
    receipt_id: r.receipt_id,
    receipt_hash: r.receipt_hash,
    previous_receipt_hash: r.previous_receipt_hash,
    merkle_root: r.merkle_root,
  };
}

/**
 * Copies only the contract's fields, so stray properties on the input (a DB row, a request body)
 * can never leak into what is hashed, and absent optional bindings are omitted rather than null.
 */
function buildBody(item: ReceiptInput, sequence: number, previous: string): Record<string, unknown> {
  if (typeof item.receipt_id !== 'string' || item.receipt_id === '') {
    throw new Error('receipt_id must be a non-empty string');
  }
  const problems = fieldProblems(item as unknown as Record<string, unknown>);
  if (problems.length > 0) throw new Error(`receipt ${item.receipt_id}: ${problems.join('; ')}`);
  const body: Record<string, unknown> = { schema: RECEIPT_SCHEMA, receipt_id: item.receipt_id, sequence };
  for (const key of REQUIRED_KEYS) body[key] = item[key];
  for (const key of OPTIONAL_KEYS) {
    const v = item[key];
    if (v !== undefined && v !== null) body[key] = v;
  }
  body['previous_receipt_hash'] = previous;
  return body;
}

/** Field-level checks shared with the verifier: presence of required fields and hash formats. */
export function fieldProblems(r: Record<string, unknown>): string[] {
  const problems: string[] = [];
  for (const key of REQUIRED_KEYS) {
    if (r[key] === undefined) problems.push(`${key} is missing`);
  }
  if (r['argument_hash'] !== undefined && !isTaggedHash(r['argument_hash'])) {
    problems.push('argument_hash is not sha256:<64 hex>');
  }
  if (r['policy_hash'] !== undefined && r['policy_hash'] !== null && !isTaggedHash(r['policy_hash'])) {
    problems.push('policy_hash is neither null nor sha256:<64 hex>');
  }
  for (const key of ['result_hash', 'approval_hash', 'judge_prompt_hash', 'judge_answer_hash']) {
    if (r[key] !== undefined && r[key] !== null && !isTaggedHash(r[key])) {
      problems.push(`${key} is not sha256:<64 hex>`);
    }
  }
  return problems;
}
