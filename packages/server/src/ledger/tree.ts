import type { Kysely } from 'kysely';
import type { Database } from '../storage/schema.js';
import { leafHash, nodeHash } from './merkle.js';
import { type RangeHasher, splitRange, subtreeHash } from './proofs.js';
import { receiptLeafData } from './receipt.js';

/** Ranges up to this many leaves are hashed from the stored receipts directly. */
const LEAF_PAGE = 256;

/**
 * Serves Merkle subtree hashes of an organization's receipt tree from the stored receipts. Receipts
 * never change once written, so the hash of every perfect, aligned subtree of LEAF_PAGE leaves or
 * more is kept (bounded, least recently used first out): after the first proof over a large chain,
 * the next ones read only the receipts of the newest, partial subtrees.
 */
export class ReceiptTree {
  private readonly cache = new Map<string, Buffer>();

  constructor(
    private readonly db: Kysely<Database>,
    private readonly maxCached = 100_000,
  ) {}

  /** Leaf hashes of receipts [from, to), recomputed from each stored receipt (never taken on trust). */
  async leafHashes(organizationId: string, from: number, to: number): Promise<Buffer[]> {
    const rows = await this.db
      .selectFrom('receipts')
      .select(['sequence', 'payload'])
      .where('organization_id', '=', organizationId)
      .where('sequence', '>=', from)
      .where('sequence', '<', to)
      .orderBy('sequence')
      .execute();
    if (rows.length !== to - from || rows.some((r, i) => Number(r.sequence) !== from + i)) {
      throw new Error(`receipts ${from}..${to - 1} of the chain are not all stored`);
    }
    return rows.map((r) => leafHash(receiptLeafData(JSON.parse(r.payload) as Record<string, unknown>)));
  }

  hasher(organizationId: string): RangeHasher {
    const hash: RangeHasher = async (from, to) => {
      const size = to - from;
      const perfect = size >= LEAF_PAGE && Number.isInteger(Math.log2(size)) && from % size === 0;
      const key = `${organizationId}:${from}:${size}`;
      if (perfect) {
        const hit = this.cache.get(key);
        if (hit) {
          this.cache.delete(key);
          this.cache.set(key, hit);
          return hit;
        }
      }
      let result: Buffer;
      if (size <= LEAF_PAGE) {
        result = subtreeHash(await this.leafHashes(organizationId, from, to));
      } else {
        const mid = splitRange(from, to);
        result = nodeHash(await hash(from, mid), await hash(mid, to));
      }
      if (perfect) {
        this.cache.set(key, result);
        if (this.cache.size > this.maxCached) this.cache.delete(this.cache.keys().next().value!);
      }
      return result;
    };
    return hash;
  }
}
