import { canonicalJson, GENESIS_HASH, hashJson, isTaggedHash, sha256Tagged } from './canonical.js';
import { MerkleFrontier } from './merkle.js';
import type { ChainHead, Receipt, ReceiptFields, ReceiptInput, ReceiptSummary } from './model.js';

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

/** The fields of a receipt's input (ReceiptFields), required ones first. */
export const RECEIPT_INPUT_KEYS: readonly (keyof ReceiptFields)[] = [...REQUIRED_KEYS, ...OPTIONAL_KEYS];

/** Every member of a receipt except merkle_root and receipt_hash, in canonical (UTF-16) key order. */
const LEAF_KEYS = [
  'schema',
  'receipt_id',
  'sequence',
  ...REQUIRED_KEYS,
  ...OPTIONAL_KEYS,
  'previous_receipt_hash',
]
  .sort()
  .map((key) => ({ key, prefix: `${JSON.stringify(key)}:` }));
type LeafKey = (typeof LEAF_KEYS)[number];
const KEYS_BEFORE_ROOT: readonly LeafKey[] = LEAF_KEYS.filter((k) => k.key < 'merkle_root');
const KEYS_AFTER_ROOT: readonly LeafKey[] = LEAF_KEYS.filter((k) => k.key > 'merkle_root');
// The stored payload also carries receipt_hash, which sorts between reason and receipt_id.
const KEYS_ROOT_TO_HASH: readonly LeafKey[] = KEYS_AFTER_ROOT.filter((k) => k.key < 'receipt_hash');
const KEYS_AFTER_HASH: readonly LeafKey[] = KEYS_AFTER_ROOT.filter((k) => k.key > 'receipt_hash');

/**
 * RFC 8785 members (`"key":value`, comma-separated, no braces) of the given receipt keys that are
 * present (not undefined) in `body`. Strings are written as JSON.stringify writes them, which is
 * what RFC 8785 prescribes; any other value goes through canonicalJson. Byte for byte what
 * canonicalJson writes for the same members (the property test in receipt.test.ts checks it).
 */
function canonicalMembers(body: Record<string, unknown>, keys: readonly LeafKey[]): string {
  let out = '';
  for (const { key, prefix } of keys) {
    const v = body[key];
    if (v === undefined) continue;
    const value = typeof v === 'string' ? JSON.stringify(v) : canonicalJson(v);
    out = out === '' ? prefix + value : `${out},${prefix}${value}`;
  }
  return out;
}

/**
 * Canonical JSON of a receipt's own fields, written by the fixed-shape serializer that
 * appendReceipts uses: without receipt_hash, and with merkle_root only when `merkleRoot` is given
 * (a receipt's merkle_root member is ignored). Members outside the receipt schema are not written.
 */
export function receiptCanonicalJson(body: Record<string, unknown>, merkleRoot?: string): string {
  const parts = [canonicalMembers(body, KEYS_BEFORE_ROOT)];
  if (merkleRoot !== undefined) parts.push(`"merkle_root":${JSON.stringify(merkleRoot)}`);
  parts.push(canonicalMembers(body, KEYS_AFTER_ROOT));
  return `{${parts.filter((p) => p !== '').join(',')}}`;
}

/**
 * The stored form of a receipt: the canonical JSON (RFC 8785) of the whole receipt, receipt_hash
 * and merkle_root included. appendReceipts returns it for each receipt it builds; this computes the
 * same bytes for a receipt built elsewhere.
 */
export function receiptPayload(r: Receipt): string {
  const body = r as unknown as Record<string, unknown>;
  return joinPayload(
    canonicalMembers(body, KEYS_BEFORE_ROOT),
    r.merkle_root,
    canonicalMembers(body, KEYS_ROOT_TO_HASH),
    r.receipt_hash,
    canonicalMembers(body, KEYS_AFTER_HASH),
  );
}

function joinPayload(before: string, root: string, middle: string, hash: string, after: string): string {
  const parts = [before, `"merkle_root":${JSON.stringify(root)}`, middle];
  parts.push(`"receipt_hash":${JSON.stringify(hash)}`, after);
  return `{${parts.filter((p) => p !== '').join(',')}}`;
}

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
): { receipts: Receipt[]; head: ChainHead; payloads: string[] } {
  if (!Number.isSafeInteger(head.sequence) || head.sequence < 0) {
    throw new Error(`invalid chain head sequence ${head.sequence}`);
  }
  if (!isTaggedHash(head.lastHash)) throw new Error(`invalid chain head lastHash ${head.lastHash}`);
  const tree = MerkleFrontier.fromTagged(head.frontier, head.sequence);
  let lastHash = head.lastHash;
  const receipts: Receipt[] = [];
  const payloads: string[] = [];

  for (const item of items) {
    const body = buildBody(item, tree.size, lastHash);
    // The receipt's fields have a fixed shape, so its canonical JSON is written member by member in
    // a precomputed key order (no sort, no generic walk), in three runs split where merkle_root and
    // receipt_hash go. The leaf is the body; the hashed form adds merkle_root at its sorted place;
    // the stored payload adds receipt_hash too. Each run is non-empty: each holds required members
    // that buildBody checked (argument_hash; mode; receipt_id).
    const before = canonicalMembers(body, KEYS_BEFORE_ROOT);
    const middle = canonicalMembers(body, KEYS_ROOT_TO_HASH);
    const after = canonicalMembers(body, KEYS_AFTER_HASH);
    tree.appendData(`{${before},${middle},${after}}`);
    const merkleRoot = tree.rootTagged();
    const root = `"merkle_root":${JSON.stringify(merkleRoot)}`;
    const receiptHash = sha256Tagged(`{${before},${root},${middle},${after}}`);
    const receipt = body as unknown as Receipt;
    receipt.merkle_root = merkleRoot;
    receipt.receipt_hash = receiptHash;
    receipts.push(receipt);
    payloads.push(`{${before},${root},${middle},"receipt_hash":${JSON.stringify(receiptHash)},${after}}`);
    lastHash = receiptHash;
  }
  return { receipts, head: { sequence: tree.size, lastHash, frontier: tree.toTagged() }, payloads };
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
  return bodyOf(item, item.receipt_id, sequence, previous);
}

function bodyOf(
  item: ReceiptFields,
  receiptId: string,
  sequence: number,
  previous: string,
): Record<string, unknown> {
  const body: Record<string, unknown> = { schema: RECEIPT_SCHEMA, receipt_id: receiptId, sequence };
  for (const key of REQUIRED_KEYS) body[key] = item[key];
  for (const key of OPTIONAL_KEYS) {
    const v = item[key];
    if (v !== undefined && v !== null) body[key] = v;
  }
  body['previous_receipt_hash'] = previous;
  return body;
}

/**
 * The receipt appendReceipts built from `item` (with `receiptId`) at `sequence`, given what the
 * chain gave it: the same object, member for member, without computing a hash. For a process that
 * sent the item to be committed elsewhere (the writer thread) and got back only these four values.
 */
export function receiptOf(
  item: ReceiptFields,
  receiptId: string,
  sequence: number,
  previous: string,
  merkleRoot: string,
  receiptHash: string,
): Receipt {
  const receipt = bodyOf(item, receiptId, sequence, previous) as unknown as Receipt;
  receipt.merkle_root = merkleRoot;
  receipt.receipt_hash = receiptHash;
  return receipt;
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
