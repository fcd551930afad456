import type { ReceiptRepository } from './repository.js';

/** Rows read per query: memory stays flat however long the chain is. */
export const EXPORT_PAGE = 1000;

export interface ExportPlan {
  /** Receipts in the chain when the export started. */
  chainLength: number;
  /** First sequence exported. */
  from: number;
  /** One past the last sequence exported. */
  before: number;
  /** Last sequence sent when `limit` cut the export short, to pass as the next `after`; else null. */
  nextAfter: number | null;
}

/**
 * Fixes the range before the first byte is sent, so the headers can announce it: the export stops at
 * the chain length read now, and receipts appended meanwhile belong to the next export. Sequences
 * are dense (0..length-1), so the range follows from the cursor alone.
 */
export async function planExport(
  receipts: ReceiptRepository,
  organizationId: string,
  after: number | undefined,
  limit: number | undefined,
): Promise<ExportPlan> {
  const chainLength = await receipts.chainLength(organizationId);
  const from = after === undefined ? 0 : after + 1;
  const end = limit === undefined ? chainLength : Math.min(chainLength, from + limit);
  const before = Math.max(from, end);
  return { chainLength, from, before, nextAfter: before < chainLength ? before - 1 : null };
}

/** NDJSON chunks (one per page) of the planned range; `first` is the already-read first page. */
export async function* exportChunks(
  receipts: ReceiptRepository,
  organizationId: string,
  plan: ExportPlan,
  first: { sequence: number; payload: string }[],
): AsyncGenerator<string> {
  let page = first;
  while (page.length > 0) {
    yield `${page.map((r) => r.payload).join('\n')}\n`;
    const next = page[page.length - 1]!.sequence + 1;
    if (next >= plan.before) return;
    page = await receipts.page(organizationId, next, plan.before, EXPORT_PAGE);
  }
}
