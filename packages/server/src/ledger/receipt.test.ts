import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson, GENESIS_HASH, hashJson, sha256Tagged } from './canonical.js';
import { merkleTreeHash } from './merkle.js';
import type { ChainHead, Receipt, ReceiptInput } from './model.js';
import { appendReceipts, argumentHash, emptyChainHead, receiptSummary } from './receipt.js';

function makeItem(i: number, extra: Partial<ReceiptInput> = {}): ReceiptInput {
  return {
    receipt_id: `00000000-0000-7000-8000-${String(i).padStart(12, '0')}`,
    organization_id: 'org-1',
    project_id: i % 3 === 0 ? null : 'proj-1',
    decision_id: `dec-${i}`,
    decision: (['allow', 'deny', 'require_approval'] as const)[i % 3]!,
    mode: i % 2 === 0 ? 'deterministic' : 'llm',
    tool_name: 'fs.read',
    argument_hash: argumentHash({ path: `/tmp/${i}`, n: i }),
    policy_version: 3,
    policy_hash: hashJson({ rules: ['r1'] }),
    reason: i % 4 === 0 ? null : `reason ${i}`,
    timestamp: new Date(Date.UTC(2025, 0, 1, 0, 0, i)).toISOString(),
    ...extra,
  };
}

function withoutKeys(r: Receipt, ...keys: string[]): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...r };
  for (const k of keys) delete copy[k];
  return copy;
}

const sha = (...parts: (Uint8Array | string)[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};

describe('appendReceipts', () => {
  it('produces the known-answer genesis receipt', () => {
    const item = makeItem(0, { client_id: 'c1' });
    const { receipts, head } = appendReceipts(emptyChainHead(), [item]);
    const r = receipts[0]!;
    // Leaf data written out in canonical key order, hashed by hand.
    const leafText =
      `{"argument_hash":"${item.argument_hash}","client_id":"c1","decision":"allow","decision_id":"dec-0",` +
      `"mode":"deterministic","organization_id":"org-1","policy_hash":"${item.policy_hash}",` +
      `"policy_version":3,"previous_receipt_hash":"${GENESIS_HASH}","project_id":null,"reason":null,` +
      `"receipt_id":"${item.receipt_id}","schema":"svc.receipt/1","sequence":0,` +
      `"timestamp":"2025-01-01T00:00:00.000Z","tool_name":"fs.read"}`;
    expect(canonicalJson(withoutKeys(r, 'receipt_hash', 'merkle_root'))).toBe(leafText);
    const root = `sha256:${sha(Buffer.from([0]), leafText).toString('hex')}`;
    expect(r.merkle_root).toBe(root);
    const hashText = `${leafText.slice(0, leafText.indexOf(',"mode"'))},"merkle_root":"${root}"${leafText.slice(leafText.indexOf(',"mode"'))}`;
    expect(r.receipt_hash).toBe(`sha256:${sha(hashText).toString('hex')}`);
    expect(head).toEqual({ sequence: 1, lastHash: r.receipt_hash, frontier: [root] });
  });

  it('links, numbers and roots every receipt', () => {
    const { receipts, head } = appendReceipts(
      emptyChainHead(),
      Array.from({ length: 20 }, (_, i) => makeItem(i)),
    );
    const leaves: Buffer[] = [];
    receipts.forEach((r, i) => {
      expect(r.schema).toBe('svc.receipt/1');
      expect(r.sequence).toBe(i);
      expect(r.previous_receipt_hash).toBe(i === 0 ? GENESIS_HASH : receipts[i - 1]!.receipt_hash);
      expect(r.receipt_hash).toBe(hashJson(withoutKeys(r, 'receipt_hash')));
      leaves.push(Buffer.from(canonicalJson(withoutKeys(r, 'receipt_hash', 'merkle_root'))));
      expect(r.merkle_root).toBe(`sha256:${merkleTreeHash(leaves).toString('hex')}`);
    });
    expect(head.sequence).toBe(20);
    expect(head.lastHash).toBe(receipts[19]!.receipt_hash);
    expect(head.frontier).toHaveLength(2); // 20 = 16 + 4
  });

  it('builds the same 100-receipt chain in batches of varying size as one at a time', () => {
    const items = Array.from({ length: 100 }, (_, i) => makeItem(i));
    let single: ChainHead = emptyChainHead();
    const one: Receipt[] = [];
    for (const item of items) {
      const out = appendReceipts(single, [item]);
      one.push(...out.receipts);
      single = out.head;
    }
    let batched: ChainHead = emptyChainHead();
    const many: Receipt[] = [];
    const sizes = [1, 2, 3, 5, 8, 13, 21, 0, 34, 7, 6];
    let at = 0;
    for (const size of sizes) {
      // Round-trip the head through JSON, as the server persists it between batches.
      const out = appendReceipts(JSON.parse(JSON.stringify(batched)), items.slice(at, at + size));
      many.push(...out.receipts);
      batched = out.head;
      at += size;
    }
    expect(at).toBe(100);
    expect(many).toEqual(one);
    expect(batched).toEqual(single);
    expect(batched.frontier).toHaveLength(3); // 100 = 64 + 32 + 4
  });

  it('does not mutate the input head or items', () => {
    const head = appendReceipts(emptyChainHead(), [makeItem(0), makeItem(1), makeItem(2)]).head;
    const frozen = Object.freeze({ ...head, frontier: Object.freeze([...head.frontier]) as string[] });
    const item = Object.freeze(makeItem(3));
    const out = appendReceipts(frozen, [item]);
    expect(frozen).toEqual(head);
    expect(out.head).not.toBe(frozen);
    expect(out.head.sequence).toBe(4);
  });

  it('returns an equal head for an empty batch', () => {
    const head = appendReceipts(emptyChainHead(), [makeItem(0)]).head;
    const out = appendReceipts(head, []);
    expect(out.receipts).toEqual([]);
    expect(out.head).toEqual(head);
  });

  it('omits absent optional bindings, keeps nulls of required fields, ignores stray properties', () => {
    const item = {
      ...makeItem(0),
      result_hash: undefined,
      approval_id: null as unknown as string,
      source: 'mcp',
      stray: 'not part of the contract',
    };
    const r = appendReceipts(emptyChainHead(), [item]).receipts[0]!;
    expect(Object.hasOwn(r, 'result_hash')).toBe(false);
    expect(Object.hasOwn(r, 'approval_id')).toBe(false);
    expect(Object.hasOwn(r, 'stray')).toBe(false);
    expect(r.source).toBe('mcp');
    expect(r.project_id).toBeNull();
    expect(r.reason).toBeNull();
    const plain = appendReceipts(emptyChainHead(), [{ ...makeItem(0), source: 'mcp' }]).receipts[0]!;
    expect(r).toEqual(plain);
  });

  it('rejects malformed items without producing a partial batch', () => {
    const head = emptyChainHead();
    expect(() => appendReceipts(head, [makeItem(0), makeItem(1, { argument_hash: 'abc' })])).toThrow(
      /argument_hash/,
    );
    expect(() => appendReceipts(head, [makeItem(0, { policy_hash: 'sha256:XYZ' })])).toThrow(/policy_hash/);
    expect(() => appendReceipts(head, [makeItem(0, { receipt_id: '' })])).toThrow(/receipt_id/);
    expect(() => appendReceipts({ ...head, frontier: [GENESIS_HASH] }, [makeItem(0)])).toThrow(/frontier/);
    expect(() => appendReceipts({ ...head, lastHash: 'x' }, [makeItem(0)])).toThrow(/lastHash/);
    expect(head).toEqual(emptyChainHead());
  });
});

describe('helpers', () => {
  it('argumentHash canonicalizes, and treats missing arguments as {}', () => {
    expect(argumentHash({ b: 1, a: 'x' })).toBe(argumentHash({ a: 'x', b: 1 }));
    expect(argumentHash({ a: 'x', b: 1 })).toBe(sha256Tagged('{"a":"x","b":1}'));
    expect(argumentHash(undefined)).toBe(argumentHash({}));
    expect(() => argumentHash({ n: 1n })).toThrow(/BigInt/);
  });

  it('receiptSummary picks the chain fields', () => {
    const r = appendReceipts(emptyChainHead(), [makeItem(0)]).receipts[0]!;
    expect(receiptSummary(r)).toEqual({
      receipt_id: r.receipt_id,
      receipt_hash: r.receipt_hash,
      previous_receipt_hash: GENESIS_HASH,
      merkle_root: r.merkle_root,
    });
  });

  it('emptyChainHead returns a fresh object each time', () => {
    const a = emptyChainHead();
    a.frontier.push('x');
    expect(emptyChainHead()).toEqual({ sequence: 0, lastHash: GENESIS_HASH, frontier: [] });
  });
});
