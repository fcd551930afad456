import { type Checkpoint, type PublicJwk, verifyCheckpointSignature } from './checkpoints.js';
import type { VerifyReport } from './verify.js';

export interface CheckpointResult {
  tree_size: number;
  kid: string;
  timestamp: string;
  /** `ok`: signed by the key set and matches the export; `unchecked`: the export does not cover it. */
  status: 'ok' | 'failed' | 'unchecked';
  problem?: string;
}

/**
 * Checks signed checkpoints against a key set and against a verified export: each signature, then
 * that the root over the export's first tree_size receipts and its receipt tree_size - 1 are what the
 * checkpoint signed. A checkpoint signed before a rewrite fails here, however consistent the rewritten
 * export is in itself. Checkpoints that all match one export are consistent with each other.
 */
export function checkCheckpoints(
  checkpoints: readonly Checkpoint[],
  keys: readonly PublicJwk[],
  report: Pick<VerifyReport, 'heads' | 'organizationId'>,
): CheckpointResult[] {
  return [...checkpoints]
    .sort((a, b) => a.tree_size - b.tree_size)
    .map((c) => {
      const base = { tree_size: c.tree_size, kid: c.kid, timestamp: c.timestamp };
      const sig = verifyCheckpointSignature(c, keys);
      if (!sig.ok) return { ...base, status: 'failed', problem: sig.reason };
      if (report.organizationId !== null && c.organization_id !== report.organizationId) {
        return {
          ...base,
          status: 'failed',
          problem: `checkpoint of organization ${c.organization_id}, not of this chain`,
        };
      }
      const head = report.heads.get(c.tree_size);
      if (!head) {
        return {
          ...base,
          status: 'unchecked',
          problem: 'the export does not cover this tree size from sequence 0',
        };
      }
      if (head.root !== c.root_hash) {
        return {
          ...base,
          status: 'failed',
          problem: `root over receipts 0..${c.tree_size - 1} is ${head.root}, the checkpoint signed ${c.root_hash}: the history was changed after it was signed`,
        };
      }
      if (head.lastHash !== c.last_receipt_hash) {
        return {
          ...base,
          status: 'failed',
          problem: `receipt ${c.tree_size - 1} has hash ${head.lastHash}, the checkpoint signed ${c.last_receipt_hash}`,
        };
      }
      return { ...base, status: 'ok' };
    });
}

export function formatCheckpointResults(results: readonly CheckpointResult[]): string {
  const ok = results.filter((r) => r.status === 'ok').length;
  const failed = results.filter((r) => r.status === 'failed');
  const out = [
    failed.length === 0
      ? `OK: ${ok} checkpoint(s) verified (signature, root and last receipt), consistent with each other and with the export`
      : `FAILED: ${failed.length} of ${results.length} checkpoint(s) do not verify`,
  ];
  for (const r of results) {
    if (r.status !== 'ok')
      out.push(`  checkpoint ${r.tree_size} (${r.timestamp}, key ${r.kid}): ${r.status}: ${r.problem}`);
  }
  return out.join('\n');
}
