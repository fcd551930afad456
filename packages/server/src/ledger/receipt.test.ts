import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson, GENESIS_HASH, hashJson, sha256Tagged, tagDigest } from './canonical.js';
import { leafHash, merkleTreeHash } from './merkle.js';
import type { ChainHead, Receipt, ReceiptInput } from './model.js';
import {
  appendReceipts,
  argumentHash,
  computeReceiptHash,
  emptyChainHead,
  receiptCanonicalJson,
  receiptLeafData,
  receiptPayload,
  receiptSummary,
} from './receipt.js';

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

// Strings with what JSON escapes differently: controls, quotes, backslashes, non-ASCII, astral
// characters and lone surrogates (JSON.stringify writes those as \udXXX escapes).
const awkwardChar = fc.oneof(
  fc.constantFrom('"', '\\', '/', '\u0000', '\n', '\u001f', '\u007f', '\u2028', 'é', '€', '😀'),
  fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);
const text = fc.string({ unit: awkwardChar, maxLength: 12 });
const hashText = fc.uint8Array({ minLength: 32, maxLength: 32 }).map(tagDigest);
const number = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -0, 1e21, 1e-7, 2 ** 53, Number.MAX_VALUE, Number.MIN_VALUE),
);

const receiptInput: fc.Arbitrary<ReceiptInput> = fc
  .record(
    {
      receipt_id: text.filter((s) => s !== ''),
      organization_id: text,
      project_id: fc.option(text),
      decision_id: fc.option(text),
      decision: fc.constantFrom('allow', 'deny', 'require_approval', 'approval_approved') as fc.Arbitrary<
        ReceiptInput['decision']
      >,
      mode: fc.option(fc.constantFrom('deterministic', 'llm')) as fc.Arbitrary<ReceiptInput['mode']>,
      tool_name: text,
      argument_hash: hashText,
      policy_version: fc.option(fc.integer()),
      policy_hash: fc.option(hashText),
      reason: fc.option(text),
      timestamp: text,
      result_hash: fc.option(hashText, { nil: undefined }),
      client_id: fc.option(text, { nil: undefined }),
      connection_id: fc.option(text, { nil: undefined }),
      upstream_id: fc.option(text, { nil: undefined }),
      approval_id: fc.option(text, { nil: undefined }),
      approval_hash: fc.option(hashText, { nil: undefined }),
      source: fc.option(text, { nil: undefined }),
      action_id: fc.option(text, { nil: undefined }),
      amount_micros: fc.option(number, { nil: undefined }),
      payer: fc.option(text, { nil: undefined }),
      judge_provider: fc.option(text, { nil: undefined }),
      judge_model: fc.option(text, { nil: undefined }),
      judge_prompt_hash: fc.option(hashText, { nil: undefined }),
      judge_answer_hash: fc.option(hashText, { nil: undefined }),
    },
    { requiredKeys: [] },
  )
  .filter(
    (r) =>
      r.receipt_id !== undefined &&
      r.argument_hash !== undefined &&
      [
        'organization_id',
        'project_id',
        'decision_id',
        'decision',
        'mode',
        'tool_name',
        'policy_version',
        'policy_hash',
        'reason',
        'timestamp',
      ].every((k) => (r as Record<string, unknown>)[k] !== undefined),
  ) as fc.Arbitrary<ReceiptInput>;

describe('the fixed-shape receipt serializer', () => {
  it('writes byte for byte the RFC 8785 canonical JSON of every receipt shape', () => {
    fc.assert(
      fc.property(receiptInput, fc.nat(), hashText, hashText, (item, sequence, previous, root) => {
        const body: Record<string, unknown> = { schema: 'svc.receipt/1', sequence, ...item };
        body['previous_receipt_hash'] = previous;
        for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
        expect(receiptCanonicalJson(body)).toBe(canonicalJson(body));
        expect(receiptCanonicalJson(body, root)).toBe(canonicalJson({ ...body, merkle_root: root }));
      }),
      { numRuns: 1000 },
    );
  });

  it('gives chains whose hashes and roots the generic canonical implementation reproduces', () => {
    fc.assert(
      fc.property(
        fc.array(receiptInput, { minLength: 1, maxLength: 12 }),
        fc.nat({ max: 5 }),
        (items, cut) => {
          // Two batches, to cover a chain head carried from one batch to the next.
          const first = appendReceipts(emptyChainHead(), items.slice(0, cut));
          const second = appendReceipts(first.head, items.slice(cut));
          const receipts = [...first.receipts, ...second.receipts];
          const payloads = [...first.payloads, ...second.payloads];
          const leaves: Buffer[] = [];
          let previous = GENESIS_HASH;
          for (const [i, r] of receipts.entries()) {
            expect(r.sequence).toBe(i);
            expect(r.previous_receipt_hash).toBe(previous);
            expect(r.receipt_hash).toBe(computeReceiptHash(r as unknown as Record<string, unknown>));
            const leaf = receiptLeafData(r as unknown as Record<string, unknown>);
            leaves.push(Buffer.from(leaf, 'utf8'));
            expect(leafHash(leaf)).toEqual(leafHash(Buffer.from(leaf, 'utf8')));
            expect(r.merkle_root).toBe(tagDigest(merkleTreeHash(leaves)));
            // The stored payload is the canonical JSON of the whole receipt.
            expect(payloads[i]).toBe(canonicalJson(r));
            expect(receiptPayload(r)).toBe(payloads[i]);
            previous = r.receipt_hash;
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
