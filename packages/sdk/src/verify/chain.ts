import { canonicalJson, GENESIS_HASH, hashJson, isTaggedHash, tag, untag } from './hash.js';
import { duplicateMember } from './json.js';
import { leafHash, MerkleFrontier } from './merkle.js';
import type { ChainStart, VerifyError, VerifyOptions, VerifyReport } from './model.js';

export const RECEIPT_SCHEMA = 'svc.receipt/1';
export const MAX_ERRORS = 20;

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
];

type Json = Record<string, unknown>;

function fieldProblems(r: Json): string[] {
  const problems: string[] = [];
  for (const key of REQUIRED_KEYS) if (r[key] === undefined) problems.push(`${key} is missing`);
  if (r.argument_hash !== undefined && !isTaggedHash(r.argument_hash)) {
    problems.push('argument_hash is not sha256:<64 hex>');
  }
  if (r.policy_hash !== undefined && r.policy_hash !== null && !isTaggedHash(r.policy_hash)) {
    problems.push('policy_hash is neither null nor sha256:<64 hex>');
  }
  for (const key of ['result_hash', 'approval_hash']) {
    if (r[key] !== undefined && r[key] !== null && !isTaggedHash(r[key]))
      problems.push(`${key} is not sha256:<64 hex>`);
  }
  return problems;
}

/** `receipt_hash`: SHA-256 of the canonical receipt without receipt_hash. */
export function receiptHash(r: Json): Promise<string> {
  const { receipt_hash: _h, ...rest } = r;
  return hashJson(rest);
}

/** The Merkle leaf data of a receipt: its canonical JSON without receipt_hash and merkle_root. */
export function receiptLeafData(r: Json): string {
  const { receipt_hash: _h, merkle_root: _m, ...rest } = r;
  return canonicalJson(rest);
}

/**
 * Checks an exported receipt chain (GET /v1/receipts/export): schema and hash formats, every
 * receipt_hash, the previous_receipt_hash links, sequence continuity and every merkle_root. Input:
 * NDJSON text, or lines / receipt objects (sync or async). Everything wrong with the chain is
 * reported, not thrown: a line that is not JSON, not an object, or holds a member name twice is an
 * error at its line. Only a caller's mistake throws, a TypeError: an input that is neither text nor
 * iterable, or invalid options. `options.treeSizes` asks for the recomputed root and last receipt
 * hash at those tree sizes (`report.heads`), what a checkpoint of that size must have signed.
 */
export async function verifyReceiptChain(
  input: string | Iterable<string | Json> | AsyncIterable<string | Json>,
  options: VerifyOptions = {},
): Promise<VerifyReport> {
  if (typeof input !== 'string' && !isIterable(input)) {
    throw new TypeError(
      `verifyReceiptChain: input must be NDJSON text or an iterable (sync or async) of lines or receipt objects, not ${kindOf(input)}`,
    );
  }
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`verifyReceiptChain: options must be an object, not ${kindOf(options)}`);
  }
  if (options.treeSizes != null && !isIterable(options.treeSizes)) {
    throw new TypeError('verifyReceiptChain: options.treeSizes must be an iterable of tree sizes');
  }
  const v = new ChainVerifier(options.start, new Set(options.treeSizes ?? []));
  let line = 0;
  const items = typeof input === 'string' ? input.split('\n') : input;
  for await (const item of items as AsyncIterable<string | Json>) {
    line++;
    // A byte order mark before the first line is no part of it, as when bytes are read (linesOf).
    await v.item(line === 1 && typeof item === 'string' ? item.replace(/^\uFEFF/, '') : item, line);
  }
  return v.report();
}

const isIterable = (x: unknown): boolean =>
  x != null &&
  (typeof (x as Iterable<unknown>)[Symbol.iterator] === 'function' ||
    typeof (x as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function');

/** What a wrong argument was, for a TypeError's message. */
export const kindOf = (x: unknown): string =>
  x === null ? 'null' : Array.isArray(x) ? 'an array' : typeof x;

class ChainVerifier {
  private started = false;
  private expectedSeq: number | null = null;
  private expectedPrev: string | null = null;
  private tree: MerkleFrontier | null = null;
  private merkleDivergedAt: number | null = null;
  private laterMerkleMismatches = 0;
  private count = 0;
  private lastHash: string | null = null;
  private readonly errors: VerifyError[] = [];
  private omitted = 0;
  private readonly warnings: string[] = [];
  private readonly heads = new Map<number, { root: string; lastHash: string }>();
  private organizationId: string | null = null;

  constructor(
    start?: ChainStart,
    private readonly wantedSizes: ReadonlySet<number> = new Set(),
  ) {
    if (!start) return;
    if (typeof start !== 'object') {
      throw new TypeError('verifyReceiptChain: invalid start: it must be {sequence, lastHash, frontier}');
    }
    if (!Number.isSafeInteger(start.sequence) || start.sequence < 0) {
      throw new TypeError(`verifyReceiptChain: invalid start sequence ${start.sequence}`);
    }
    if (!isTaggedHash(start.lastHash))
      throw new TypeError(`verifyReceiptChain: invalid start lastHash ${start.lastHash}`);
    if (!Array.isArray(start.frontier) || !start.frontier.every(isTaggedHash)) {
      throw new TypeError('verifyReceiptChain: invalid start frontier: it must be a list of sha256:<64 hex>');
    }
    let frontier: MerkleFrontier;
    try {
      frontier = new MerkleFrontier(start.frontier.map(untag), start.sequence);
    } catch (err) {
      throw new TypeError(`verifyReceiptChain: invalid start frontier: ${(err as Error).message}`);
    }
    this.started = true;
    this.expectedSeq = start.sequence;
    this.expectedPrev = start.lastHash;
    this.tree = frontier;
  }

  async item(item: string | Json, line: number): Promise<void> {
    let parsed: unknown = item;
    if (typeof item === 'string') {
      if (item.trim() === '') return;
      let problem: string | null = null;
      try {
        parsed = JSON.parse(item);
        const twice = duplicateMember(item);
        if (twice !== null) {
          problem = `duplicate member name ${JSON.stringify(twice)} in one object: the line can be read two ways (I-JSON, RFC 7493, forbids it)`;
        }
      } catch (err) {
        problem = `not valid JSON: ${(err as Error).message}`;
      }
      if (problem !== null) {
        this.error({ line, sequence: null, receipt_id: null, problem });
        this.lost(line);
        return;
      }
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      this.error({ line, sequence: null, receipt_id: null, problem: 'not a JSON object' });
      this.lost(line);
      return;
    }
    this.count++;
    await this.receipt(parsed as Json, line);
  }

  private async receipt(r: Json, line: number): Promise<void> {
    const seq =
      Number.isSafeInteger(r.sequence) && (r.sequence as number) >= 0 ? (r.sequence as number) : null;
    const id = typeof r.receipt_id === 'string' ? r.receipt_id : null;
    const fail = (problem: string, expected?: string, actual?: unknown) => {
      const e: VerifyError = { line, sequence: seq, receipt_id: id, problem };
      if (expected !== undefined) {
        e.expected = expected;
        e.actual = String(actual);
        e.problem += `: expected ${expected}, got ${String(actual)}`;
      }
      this.error(e);
    };
    if (!this.started) this.begin(seq, line);

    if (r.schema !== RECEIPT_SCHEMA) fail(`schema is ${JSON.stringify(r.schema)}, not ${RECEIPT_SCHEMA}`);
    if (id === null) fail('receipt_id is missing or not a string');
    if (seq === null) fail('sequence is not a non-negative integer');
    for (const key of ['receipt_hash', 'previous_receipt_hash', 'merkle_root']) {
      if (!isTaggedHash(r[key])) fail(`${key} is not sha256:<64 hex>`);
    }
    for (const p of fieldProblems(r)) fail(p);

    let recomputed: string | null = null;
    let leaf: string | null = null;
    try {
      recomputed = await receiptHash(r);
      leaf = receiptLeafData(r);
    } catch (err) {
      fail(`receipt cannot be canonicalized: ${(err as Error).message}`);
    }
    if (recomputed !== null && recomputed !== r.receipt_hash) {
      fail('receipt_hash does not match the receipt content', recomputed, r.receipt_hash);
    }
    if (this.expectedSeq !== null && seq !== null && seq !== this.expectedSeq) {
      const why = seq > this.expectedSeq ? 'receipts missing or reordered' : 'repeated or reordered';
      fail(`sequence ${seq} where ${this.expectedSeq} was expected (${why})`);
    }
    if (this.expectedPrev !== null && r.previous_receipt_hash !== this.expectedPrev) {
      fail(
        'previous_receipt_hash does not link to the previous receipt',
        this.expectedPrev,
        r.previous_receipt_hash,
      );
    }
    // A chain is one organization's: a receipt of another one spliced in is a break.
    if (this.organizationId !== null && r.organization_id !== this.organizationId) {
      fail(
        `receipt of organization ${JSON.stringify(r.organization_id)} in the chain of ${this.organizationId}`,
        this.organizationId,
        r.organization_id,
      );
    }
    await this.checkMerkle(r, seq, leaf, line, fail);
    // Resynchronise on this receipt's own claims so one break is reported once, not at every later receipt.
    this.expectedSeq = seq === null ? null : seq + 1;
    this.lastHash = typeof r.receipt_hash === 'string' ? r.receipt_hash : recomputed;
    this.expectedPrev = this.lastHash;
    if (this.organizationId === null && typeof r.organization_id === 'string') {
      this.organizationId = r.organization_id;
    }
    if (this.tree && this.lastHash && this.wantedSizes.has(this.tree.size)) {
      this.heads.set(this.tree.size, { root: tag(await this.tree.root()), lastHash: this.lastHash });
    }
  }

  private async checkMerkle(
    r: Json,
    seq: number | null,
    leaf: string | null,
    line: number,
    fail: (problem: string, expected?: string, actual?: unknown) => void,
  ): Promise<void> {
    if (!this.tree) return;
    if (seq !== this.tree.size || leaf === null) {
      this.stopMerkle(line, `the receipt on line ${line} is not leaf ${this.tree.size} of the tree`);
      return;
    }
    await this.tree.append(await leafHash(leaf));
    const root = tag(await this.tree.root());
    if (root === r.merkle_root) return;
    if (this.merkleDivergedAt === null) {
      this.merkleDivergedAt = line;
      fail(`merkle_root does not match the tree of receipts 0..${seq}`, root, r.merkle_root);
    } else {
      this.laterMerkleMismatches++;
    }
  }

  private begin(seq: number | null, line: number): void {
    this.started = true;
    if (seq === 0) {
      this.expectedSeq = 0;
      this.expectedPrev = GENESIS_HASH;
      this.tree = new MerkleFrontier();
      return;
    }
    this.warnings.push(
      `chain starts at sequence ${seq ?? '?'} (line ${line}), not 0, and no start head was given: ` +
        'the first previous_receipt_hash and the Merkle roots were not checked',
    );
  }

  private lost(line: number): void {
    this.started = true;
    this.expectedPrev = null;
    if (this.expectedSeq !== null) this.expectedSeq++;
    this.stopMerkle(line, `line ${line} could not be read as a receipt`);
  }

  private stopMerkle(line: number, why: string): void {
    if (!this.tree) return;
    this.tree = null;
    this.warnings.push(`Merkle roots not checked from line ${line} on: ${why}`);
  }

  private error(e: VerifyError): void {
    if (this.errors.length < MAX_ERRORS) this.errors.push(e);
    else this.omitted++;
  }

  async report(): Promise<VerifyReport> {
    const warnings = [...this.warnings];
    if (this.laterMerkleMismatches > 0) {
      warnings.push(
        `merkle_root also differs on ${this.laterMerkleMismatches} later receipt(s), as it must once a leaf ` +
          `differs (first at line ${this.merkleDivergedAt})`,
      );
    }
    if (this.omitted > 0) warnings.push(`${this.omitted} further error(s) not listed`);
    if (this.count === 0 && this.errors.length === 0) warnings.push('no receipts found');
    return {
      ok: this.errors.length === 0,
      count: this.count,
      lastHash: this.lastHash,
      merkleRoot: this.tree ? tag(await this.tree.root()) : null,
      errors: this.errors,
      warnings,
      heads: this.heads,
      organizationId: this.organizationId,
    };
  }
}
