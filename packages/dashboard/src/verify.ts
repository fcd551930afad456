/**
 * The receipt chain verified in the browser with the SDK's runtime-neutral verifier (WebCrypto), the
 * same checks as `svc receipts verify <export> --checkpoints ... --keys ...`: every receipt, its hash,
 * its link to the previous one and every Merkle root; the export's completeness against the length
 * the server announced; then every signed checkpoint against the published key set and against the
 * roots recomputed here (the SDK's verifyExport, which the command line runs too). Nothing the server
 * says about the chain is taken on trust but the key set.
 */
import {
  type Checkpoint,
  type CheckpointResult,
  type InclusionProof,
  linesOf,
  type PublicJwk,
  type VerifyReport,
  verifyExport,
  verifyReceiptInclusion,
} from '@svc/sdk/verify';
import { api, request } from './api.js';

export interface ChainVerification {
  ok: boolean;
  chain: VerifyReport;
  /** Receipts the server announced (X-Chain-Length), null if it did not say. */
  announced: number | null;
  /** Set when the export ended before the announced length. */
  truncated: string | null;
  checkpoints: CheckpointResult[];
  /** The first thing that is wrong, in words; null when everything verified. */
  firstBreak: string | null;
}

const CHECKPOINT_PAGE = 100;

async function publishedKeys(): Promise<PublicJwk[]> {
  const res = await request('/.well-known/svc-keys.json', { headers: { accept: 'application/json' } });
  if (!res.ok) throw new Error(`the key set answered HTTP ${res.status}`);
  const doc = (await res.json()) as { keys?: unknown };
  if (!Array.isArray(doc.keys)) throw new Error('the key set is not {"keys": [...]}');
  return doc.keys as PublicJwk[];
}

/** Every signed checkpoint of the organization, newest first, page by page. */
async function allCheckpoints(organizationId: string): Promise<Checkpoint[]> {
  const all: Checkpoint[] = [];
  let before: number | undefined;
  for (;;) {
    const q = `limit=${CHECKPOINT_PAGE}${before === undefined ? '' : `&before=${before}`}`;
    const { data } = await api<{ data: Checkpoint[] }>(`/v1/receipts/checkpoints?${q}`, { organizationId });
    all.push(...data);
    const last = data.at(-1);
    if (data.length < CHECKPOINT_PAGE || !last || last.tree_size <= 1) return all;
    before = last.tree_size;
  }
}

/** Passes the lines through, reporting every 500 receipts read (and the total at the end). */
async function* counted(lines: AsyncIterable<string>, onCount: (n: number) => void): AsyncGenerator<string> {
  let n = 0;
  for await (const line of lines) {
    if (line.trim() !== '' && ++n % 500 === 0) onCount(n);
    yield line;
  }
  onCount(n);
}

/** Downloads the organization's whole chain and its checkpoints and verifies them here. */
export async function verifyChain(
  organizationId: string,
  onProgress: (receipts: number) => void = () => {},
): Promise<ChainVerification> {
  // The key set and the checkpoints first: the export is then read up to at least every checkpoint.
  const [keys, checkpoints] = await Promise.all([publishedKeys(), allCheckpoints(organizationId)]);
  const res = await request('/v1/receipts/export', {
    headers: { accept: 'application/x-ndjson', 'x-organization-id': organizationId },
  });
  if (!res.ok || !res.body) {
    const err = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
    throw new Error(`the export answered HTTP ${res.status}: ${err?.error?.message ?? res.statusText}`);
  }
  const length = Number(res.headers.get('x-chain-length') ?? Number.NaN);
  const announced = Number.isSafeInteger(length) ? length : null;

  // The same checks as `svc receipts verify --checkpoints --keys`: the chain, then every checkpoint.
  const report = await verifyExport(counted(linesOf(res.body), onProgress), { checkpoints, keys });
  const chain = report.chain;
  const results = report.checkpoints;
  const truncated =
    announced !== null && chain.count < announced
      ? `the export ended after ${chain.count} receipt(s) but the server announced ${announced}: receipts are missing at the end`
      : null;
  const failedCheckpoint = results.find((r) => r.status === 'failed');
  const firstError = chain.errors[0];
  const firstBreak = firstError
    ? `${firstError.sequence === null ? `line ${firstError.line}` : `receipt ${firstError.sequence}`}: ${firstError.problem}`
    : truncated
      ? truncated
      : failedCheckpoint
        ? `checkpoint ${failedCheckpoint.tree_size}: ${failedCheckpoint.problem}`
        : null;
  return { ok: firstBreak === null, chain, announced, truncated, checkpoints: results, firstBreak };
}

/**
 * One receipt without the whole chain: its own hash, then its inclusion proof against a checkpoint
 * whose signature verifies with the published key set.
 */
export async function verifyOneReceipt(
  organizationId: string,
  receipt: Record<string, unknown>,
): Promise<{ ok: true; treeSize: number } | { ok: false; reason: string }> {
  if (typeof receipt.sequence !== 'number') return { ok: false, reason: 'the receipt has no sequence' };
  const [keys, proof] = await Promise.all([
    publishedKeys(),
    api<InclusionProof & { checkpoint: Checkpoint | null }>(
      `/v1/receipts/proofs/inclusion?sequence=${receipt.sequence}`,
      { organizationId },
    ),
  ]);
  if (!proof.checkpoint) return { ok: false, reason: 'no signed checkpoint covers this receipt' };
  const result = await verifyReceiptInclusion(receipt, proof, proof.checkpoint, keys);
  return result.ok ? { ok: true, treeSize: proof.tree_size } : { ok: false, reason: result.reason };
}
