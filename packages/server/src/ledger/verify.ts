import { GENESIS_HASH, isTaggedHash, tagDigest } from './canonical.js';
import { leafHash, MerkleFrontier } from './merkle.js';
import type { ChainHead } from './model.js';
import { computeReceiptHash, fieldProblems, RECEIPT_SCHEMA, receiptLeafData } from './receipt.js';

export const MAX_ERRORS = 20;

export interface VerifyError {
  /** 1-based line number in the input, blank lines included. */
  line: number;
  sequence: number | null;
  receipt_id: string | null;
  problem: string;
  /** For hash mismatches: what the verifier computed / what the receipt says. */
  expected?: string;
  actual?: string;
}

export interface VerifyReport {
  ok: boolean;
  /** Lines that held a JSON object, i.e. receipts examined. */
  count: number;
  /** receipt_hash of the last receipt read, null if none. */
  lastHash: string | null;
  /** Recomputed Merkle root after the last receipt, null when roots could not be checked. */
  merkleRoot: string | null;
  /** The first MAX_ERRORS problems, in input order; errors[0] is the first break. */
  errors: VerifyError[];
  warnings: string[];
  /** For each requested tree size the export covered: the recomputed root and the last receipt hash. */
  heads: Map<number, { root: string; lastHash: string }>;
  /** organization_id of the receipts (of the first one), null when none was read. */
  organizationId: string | null;
}

export interface VerifyOptions {
  /** Chain head just before the first receipt, for exports that start mid-chain. */
  start?: ChainHead;
  /** Tree sizes (checkpoints) whose root and last receipt hash should be recomputed from the export. */
  treeSizes?: Iterable<number>;
}

/**
 * Offline check of an NDJSON receipt export: schema and hash formats, each receipt_hash, the
 * previous_receipt_hash links, sequence continuity and every merkle_root. Throws only for an
 * invalid `opts.start`; everything wrong with the input is reported.
 */
export async function verifyReceipts(
  lines: AsyncIterable<string> | Iterable<string>,
  opts: VerifyOptions = {},
): Promise<VerifyReport> {
  const v = new ChainVerifier(opts.start, new Set(opts.treeSizes ?? []));
  let lineNo = 0;
  for await (const text of lines) {
    lineNo++;
    v.line(text, lineNo);
  }
  return v.report();
}

type Json = Record<string, unknown>;

class ChainVerifier {
  private started = false;
  /** Sequence the next receipt must have; null when unknown. */
  private expectedSeq: number | null = null;
  /** previous_receipt_hash the next receipt must have; null when unknown (first link not checkable). */
  private expectedPrev: string | null = null;
  /** null once Merkle roots can no longer be checked. */
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
    start?: ChainHead,
    private readonly wantedSizes: ReadonlySet<number> = new Set(),
  ) {
    if (!start) return;
    if (!Number.isSafeInteger(start.sequence) || start.sequence < 0) {
      throw new Error(`invalid start head sequence ${start.sequence}`);
    }
    if (!isTaggedHash(start.lastHash)) throw new Error(`invalid start head lastHash ${start.lastHash}`);
    this.started = true;
    this.expectedSeq = start.sequence;
    this.expectedPrev = start.lastHash;
    this.tree = MerkleFrontier.fromTagged(start.frontier, start.sequence);
  }

  line(text: string, line: number): void {
    if (text.trim() === '') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      this.error({
        line,
        sequence: null,
        receipt_id: null,
        problem: `not valid JSON: ${(err as Error).message}`,
      });
      this.lost(line);
      return;
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      this.error({ line, sequence: null, receipt_id: null, problem: 'not a JSON object' });
      this.lost(line);
      return;
    }
    this.count++;
    this.receipt(parsed as Json, line);
  }

  private receipt(r: Json, line: number): void {
    const seq =
      Number.isSafeInteger(r['sequence']) && (r['sequence'] as number) >= 0
        ? (r['sequence'] as number)
        : null;
    const id = typeof r['receipt_id'] === 'string' ? r['receipt_id'] : null;
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

    if (r['schema'] !== RECEIPT_SCHEMA)
      fail(`schema is ${JSON.stringify(r['schema'])}, not ${RECEIPT_SCHEMA}`);
    if (id === null) fail('receipt_id is missing or not a string');
    if (seq === null) fail('sequence is not a non-negative integer');
    for (const key of ['receipt_hash', 'previous_receipt_hash', 'merkle_root']) {
      if (!isTaggedHash(r[key])) fail(`${key} is not sha256:<64 hex>`);
    }
    for (const p of fieldProblems(r)) fail(p);

    let recomputed: string | null = null;
    let leaf: string | null = null;
    try {
      recomputed = computeReceiptHash(r);
      leaf = receiptLeafData(r);
    } catch (err) {
      fail(`receipt cannot be canonicalized: ${(err as Error).message}`);
    }
    if (recomputed !== null && recomputed !== r['receipt_hash']) {
      fail('receipt_hash does not match the receipt content', recomputed, r['receipt_hash']);
    }

    if (this.expectedSeq !== null && seq !== null && seq !== this.expectedSeq) {
      const why = seq > this.expectedSeq ? 'receipts missing or reordered' : 'repeated or reordered';
      fail(`sequence ${seq} where ${this.expectedSeq} was expected (${why})`);
    }
    if (this.expectedPrev !== null && r['previous_receipt_hash'] !== this.expectedPrev) {
      fail(
        'previous_receipt_hash does not link to the previous receipt',
        this.expectedPrev,
        r['previous_receipt_hash'],
      );
    }
    this.checkMerkle(r, seq, leaf, line, fail);

    // Resynchronise on this receipt's own claims so that one break is reported once rather than
    // at every later receipt. The stored hash is what the next receipt links to.
    this.expectedSeq = seq === null ? null : seq + 1;
    this.lastHash = typeof r['receipt_hash'] === 'string' ? r['receipt_hash'] : recomputed;
    this.expectedPrev = this.lastHash;
    if (this.organizationId === null && typeof r['organization_id'] === 'string') {
      this.organizationId = r['organization_id'];
    }
    if (this.tree && this.lastHash && this.wantedSizes.has(this.tree.size)) {
      this.heads.set(this.tree.size, { root: tagDigest(this.tree.root()), lastHash: this.lastHash });
    }
  }

  private checkMerkle(
    r: Json,
    seq: number | null,
    leaf: string | null,
    line: number,
    fail: (problem: string, expected?: string, actual?: unknown) => void,
  ): void {
    if (!this.tree) return;
    if (seq !== this.tree.size || leaf === null) {
      this.stopMerkle(line, `the receipt on line ${line} is not leaf ${this.tree.size} of the tree`);
      return;
    }
    this.tree.append(leafHash(leaf));
    const root = tagDigest(this.tree.root());
    if (root === r['merkle_root']) return;
    // Once one leaf differs every later root differs too; count those instead of listing them.
    if (this.merkleDivergedAt === null) {
      this.merkleDivergedAt = line;
      fail(`merkle_root does not match the tree of receipts 0..${seq}`, root, r['merkle_root']);
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
    // Mid-chain export without a start head: links between the receipts present are still
    // checkable, the earlier leaves of the Merkle tree are not. Not a failure in itself.
    this.warnings.push(
      `chain starts at sequence ${seq ?? '?'} (line ${line}), not 0, and no start head was given: ` +
        `the first previous_receipt_hash and the Merkle roots were not checked`,
    );
  }

  /** A line that should have been a receipt could not be read: its hash and leaf are unknown. */
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

  report(): VerifyReport {
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
      merkleRoot: this.tree ? tagDigest(this.tree.root()) : null,
      errors: this.errors,
      warnings,
      heads: this.heads,
      organizationId: this.organizationId,
    };
  }
}

/** Human-readable summary for the `svc receipts verify` command. */
export function formatReport(report: VerifyReport): string {
  const n = `${report.count} receipt${report.count === 1 ? '' : 's'}`;
  const out: string[] = [];
  const first = report.errors[0];
  if (report.ok || !first) {
    out.push(
      `OK: ${n} verified, chain head ${report.lastHash ?? '(none)'}, ` +
        `merkle root ${report.merkleRoot ?? '(not checked)'}`,
    );
  } else {
    const problems = report.errors.length + (report.errors.length >= MAX_ERRORS ? '+' : '');
    out.push(`FAILED: ${problems} problem(s) in ${n}; first break at ${where(first)}: ${first.problem}`);
    for (const e of report.errors) out.push(`  ${where(e)}: ${e.problem}`);
  }
  for (const w of report.warnings) out.push(`  warning: ${w}`);
  return out.join('\n');
}

function where(e: VerifyError): string {
  return `line ${e.line} (sequence ${e.sequence ?? '?'}, receipt ${e.receipt_id ?? '?'})`;
}
