import { kindOf, MAX_ERRORS, verifyReceiptChain } from './chain.js';
import { type KeySet, verifyCheckpointSignature } from './checkpoint.js';
import type {
  ChainStart,
  Checkpoint,
  CheckpointResult,
  ExportReport,
  VerifyError,
  VerifyReport,
} from './model.js';

/**
 * Checks signed checkpoints against a key set and against a verified chain (a report of
 * verifyReceiptChain run with `treeSizes` of these checkpoints): each signature, its organization,
 * then that the root over the chain's first tree_size receipts and its receipt tree_size - 1 are what
 * the checkpoint signed. A checkpoint signed before a rewrite fails here, however consistent the
 * rewritten chain is in itself. Checkpoints that all match one chain are consistent with each other
 * (each is a prefix of the same tree); two validly signed checkpoints of one size with different
 * trees are a fork and both fail, whether the chain covers them or not.
 */
export async function checkCheckpoints(
  checkpoints: readonly Checkpoint[],
  keys: KeySet,
  report: Pick<VerifyReport, 'heads' | 'organizationId'>,
): Promise<CheckpointResult[]> {
  if (!Array.isArray(checkpoints)) {
    throw new TypeError(`checkCheckpoints: checkpoints must be an array, not ${kindOf(checkpoints)}`);
  }
  if (report === null || typeof report !== 'object' || typeof report.heads?.get !== 'function') {
    throw new TypeError('checkCheckpoints: report must be a report of verifyReceiptChain (with heads)');
  }
  // Entries that are no checkpoint (null, a number…) sort last and fail one by one, like any
  // malformed checkpoint: what the caller holds is data to report on, not a reason to crash.
  const sorted = [...checkpoints].sort((a, b) => sizeOf(a) - sizeOf(b));
  const results: CheckpointResult[] = [];
  const signedAt = new Map<number, Checkpoint>();
  const forks = new Set<number>();
  for (const c of sorted) {
    const base = { tree_size: c?.tree_size, kid: c?.kid, timestamp: c?.timestamp };
    const sig = await verifyCheckpointSignature(c, keys);
    if (!sig.ok) {
      results.push({ ...base, status: 'failed', code: sig.code, problem: sig.reason });
      continue;
    }
    if (report.organizationId !== null && c.organization_id !== report.organizationId) {
      results.push({
        ...base,
        status: 'failed',
        code: 'organization_mismatch',
        problem: `checkpoint of organization ${c.organization_id}, not of this chain`,
      });
      continue;
    }
    const same = signedAt.get(c.tree_size);
    if (same && (same.root_hash !== c.root_hash || same.last_receipt_hash !== c.last_receipt_hash)) {
      forks.add(c.tree_size);
    }
    signedAt.set(c.tree_size, c);
    const head = report.heads.get(c.tree_size);
    if (!head) {
      results.push({
        ...base,
        status: 'unchecked',
        code: 'not_covered',
        problem: 'the export does not cover this tree size from sequence 0',
      });
    } else if (head.root !== c.root_hash) {
      results.push({
        ...base,
        status: 'failed',
        code: 'root_mismatch',
        problem: `root over receipts 0..${c.tree_size - 1} is ${head.root}, the checkpoint signed ${c.root_hash}: the history was changed after it was signed`,
      });
    } else if (head.lastHash !== c.last_receipt_hash) {
      results.push({
        ...base,
        status: 'failed',
        code: 'last_receipt_mismatch',
        problem: `receipt ${c.tree_size - 1} has hash ${head.lastHash}, the checkpoint signed ${c.last_receipt_hash}`,
      });
    } else {
      results.push({ ...base, status: 'ok' });
    }
  }
  // A key the set does not publish (withdrawn after a rotation's overlap) leaves a checkpoint
  // unchecked, not failed, when a checkpoint that verifies covers as much of the chain or more: that
  // one vouches for the same receipts. With none (the newest checkpoints signed by a key the set does
  // not know, as a rewritten history would be), it fails.
  const covered = results.reduce(
    (most, r) => (r.status === 'ok' ? Math.max(most, r.tree_size as number) : most),
    -1,
  );
  for (const [i, r] of results.entries()) {
    if (r.code === 'unknown_key' && typeof r.tree_size === 'number' && r.tree_size <= covered) {
      results[i] = {
        ...r,
        status: 'unchecked',
        problem: `${r.problem}; a checkpoint that verifies covers these receipts (size ${covered})`,
      };
    }
  }
  if (forks.size === 0) return results;
  // Only checkpoints whose signature and organization verified can be part of a fork.
  const signedWell = (r: CheckpointResult) =>
    r.code === undefined ||
    r.code === 'not_covered' ||
    r.code === 'root_mismatch' ||
    r.code === 'last_receipt_mismatch';
  return results.map((r) =>
    forks.has(r.tree_size) && signedWell(r)
      ? {
          ...r,
          status: 'failed',
          code: 'fork',
          problem: `two different trees were signed at size ${r.tree_size}`,
        }
      : r,
  );
}

/** A checkpoint's tree size for ordering; anything without a numeric one sorts last. */
function sizeOf(c: unknown): number {
  const size = c !== null && typeof c === 'object' ? (c as Checkpoint).tree_size : undefined;
  return typeof size === 'number' && !Number.isNaN(size) ? size : Number.POSITIVE_INFINITY;
}

/**
 * The whole export at once: the chain (verifyReceiptChain) and every checkpoint against it
 * (checkCheckpoints). `ok` only when the chain verifies and no checkpoint fails; a checkpoint the
 * export does not cover is reported `unchecked` (verify it with a consistency proof:
 * verifyCheckpointConsistency). What is wrong with the chain or a checkpoint is reported; options
 * that are no object, or `checkpoints` that is no array, throw a TypeError.
 */
export async function verifyExport(
  input:
    | string
    | Iterable<string | Record<string, unknown>>
    | AsyncIterable<string | Record<string, unknown>>,
  options: { checkpoints: readonly Checkpoint[]; keys: KeySet; start?: ChainStart },
): Promise<ExportReport> {
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`verifyExport: options must be {checkpoints, keys, start?}, not ${kindOf(options)}`);
  }
  if (!Array.isArray(options.checkpoints)) {
    throw new TypeError(
      `verifyExport: options.checkpoints must be an array of checkpoints, not ${kindOf(options.checkpoints)}`,
    );
  }
  const chain = await verifyReceiptChain(input, {
    start: options.start,
    treeSizes: options.checkpoints.map((c) => c?.tree_size),
  });
  const checkpoints = await checkCheckpoints(options.checkpoints, options.keys, chain);
  return { ok: chain.ok && checkpoints.every((c) => c.status !== 'failed'), chain, checkpoints };
}

/** Human-readable summary of a chain report (what `svc receipts verify` prints). */
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

/** Human-readable summary of checkCheckpoints results. */
export function formatCheckpointResults(results: readonly CheckpointResult[]): string {
  const ok = results.filter((r) => r.status === 'ok').length;
  const failed = results.filter((r) => r.status === 'failed');
  const unchecked = results.length - ok - failed.length;
  const out = [
    failed.length === 0
      ? `OK: ${ok} checkpoint(s) verified (signature, root and last receipt), consistent with each other and with the export` +
        (unchecked === 0 ? '' : `; ${unchecked} unchecked (listed below), neither verified nor refuted`)
      : `FAILED: ${failed.length} of ${results.length} checkpoint(s) do not verify`,
  ];
  for (const r of results) {
    if (r.status !== 'ok')
      out.push(
        `  checkpoint ${r.tree_size ?? '?'} (${r.timestamp ?? '?'}, key ${r.kid ?? '?'}): ${r.status}: ${r.problem}`,
      );
  }
  return out.join('\n');
}
