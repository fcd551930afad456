import { formatReport, verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { describe, expect, it } from 'vitest';
import { GENESIS_HASH, hashJson } from './canonical.js';
import type { Receipt, ReceiptInput } from './model.js';
import { appendReceipts, argumentHash, emptyChainHead } from './receipt.js';

function item(i: number): ReceiptInput {
  return {
    receipt_id: `00000000-0000-7000-8000-${String(i).padStart(12, '0')}`,
    organization_id: 'org-1',
    project_id: null,
    decision_id: `dec-${i}`,
    decision: i % 2 === 0 ? 'allow' : 'deny',
    mode: 'deterministic',
    tool_name: 'http.get',
    argument_hash: argumentHash({ url: `https://example.test/${i}` }),
    policy_version: 1,
    policy_hash: hashJson({ v: 1 }),
    reason: null,
    timestamp: new Date(Date.UTC(2025, 0, 1, 0, 0, i)).toISOString(),
  };
}

function chain(n: number) {
  const { receipts, head } = appendReceipts(
    emptyChainHead(),
    Array.from({ length: n }, (_, i) => item(i)),
  );
  return { receipts, head, lines: receipts.map((r) => JSON.stringify(r)) };
}

/** Re-serializes receipt i after `edit`, optionally re-sealing its receipt_hash like a forger would. */
function tamper(receipts: Receipt[], i: number, edit: (r: Record<string, unknown>) => void, reseal = false) {
  const r: Record<string, unknown> = { ...receipts[i]! };
  edit(r);
  if (reseal) {
    delete r['receipt_hash'];
    r['receipt_hash'] = hashJson(r);
  }
  return receipts.map((x, j) => JSON.stringify(j === i ? r : x));
}

describe('verifyReceipts', () => {
  it('accepts a good chain', async () => {
    const { receipts, head, lines } = chain(100);
    const report = await verifyReceipts(lines);
    expect(report).toEqual({
      ok: true,
      count: 100,
      lastHash: head.lastHash,
      merkleRoot: receipts[99]!.merkle_root,
      errors: [],
      warnings: [],
      heads: new Map(),
      organizationId: receipts[0]!.organization_id,
    });
    expect(formatReport(report)).toBe(
      `OK: 100 receipts verified, chain head ${head.lastHash}, merkle root ${receipts[99]!.merkle_root}`,
    );
  });

  it('reads async iterables, skips blank lines and tolerates CRLF', async () => {
    const { lines, head } = chain(5);
    async function* gen() {
      yield '';
      for (const l of lines) {
        yield `${l}\r`;
        yield '   ';
      }
    }
    const report = await verifyReceipts(gen());
    expect(report.ok).toBe(true);
    expect(report.count).toBe(5);
    expect(report.lastHash).toBe(head.lastHash);
  });

  it('pinpoints a tampered argument_hash', async () => {
    const { receipts } = chain(100);
    const lines = tamper(receipts, 37, (r) => {
      r['argument_hash'] = argumentHash({ url: 'https://evil.test/' });
    });
    const report = await verifyReceipts(lines);
    expect(report.ok).toBe(false);
    const first = report.errors[0]!;
    expect(first).toMatchObject({ line: 38, sequence: 37, receipt_id: receipts[37]!.receipt_id });
    expect(first.problem).toMatch(/^receipt_hash does not match the receipt content: expected sha256:/);
    expect(first.actual).toBe(receipts[37]!.receipt_hash);
    expect(first.expected).not.toBe(first.actual);
    // The altered leaf also changes this root; later roots are summarised, not listed.
    expect(report.errors.map((e) => e.line)).toEqual([38, 38]);
    expect(report.errors[1]!.problem).toMatch(/^merkle_root does not match/);
    expect(report.warnings).toEqual([expect.stringMatching(/also differs on 62 later receipt/)]);
    expect(formatReport(report).split('\n')[0]).toBe(
      `FAILED: 2 problem(s) in 100 receipts; first break at line 38 (sequence 37, receipt ${receipts[37]!.receipt_id}): ${first.problem}`,
    );
  });

  it('catches a tampered receipt whose receipt_hash was recomputed by the forger', async () => {
    const { receipts } = chain(50);
    const lines = tamper(
      receipts,
      10,
      (r) => {
        r['reason'] = 'forged';
      },
      true,
    );
    const report = await verifyReceipts(lines);
    expect(report.errors[0]).toMatchObject({
      line: 11,
      sequence: 10,
      problem: expect.stringMatching(/^merkle_root/),
    });
    expect(report.errors[1]).toMatchObject({
      line: 12,
      sequence: 11,
      expected: JSON.parse(lines[10]!).receipt_hash,
      actual: receipts[10]!.receipt_hash,
    });
    expect(report.errors[1]!.problem).toMatch(/^previous_receipt_hash does not link/);
  });

  it('pinpoints a deleted receipt', async () => {
    const { receipts, lines } = chain(100);
    lines.splice(50, 1);
    const report = await verifyReceipts(lines);
    expect(report.ok).toBe(false);
    expect(report.count).toBe(99);
    expect(report.errors[0]).toMatchObject({ line: 51, sequence: 51, receipt_id: receipts[51]!.receipt_id });
    expect(report.errors[0]!.problem).toMatch(/sequence 51 where 50 was expected \(receipts missing/);
    expect(report.errors[1]).toMatchObject({
      line: 51,
      expected: receipts[49]!.receipt_hash,
      actual: receipts[50]!.receipt_hash,
    });
    expect(report.errors).toHaveLength(2);
    expect(report.warnings).toEqual([expect.stringMatching(/^Merkle roots not checked from line 51/)]);
    expect(report.merkleRoot).toBeNull();
  });

  it('pinpoints a reordered pair', async () => {
    const { receipts, lines } = chain(30);
    [lines[20], lines[21]] = [lines[21]!, lines[20]!];
    const report = await verifyReceipts(lines);
    expect(report.ok).toBe(false);
    expect(report.errors[0]).toMatchObject({ line: 21, sequence: 21, receipt_id: receipts[21]!.receipt_id });
    expect(report.errors[0]!.problem).toMatch(/sequence 21 where 20 was expected/);
    expect(report.errors.every((e) => e.line >= 21 && e.line <= 23)).toBe(true);
  });

  it('pinpoints a wrong merkle_root', async () => {
    const { receipts } = chain(40);
    const bogus = hashJson('bogus');
    // Re-sealed, so the only thing wrong is the root itself; later roots still check.
    const lines = tamper(
      receipts,
      25,
      (r) => {
        r['merkle_root'] = bogus;
      },
      true,
    );
    const report = await verifyReceipts(lines);
    expect(report.errors[0]).toMatchObject({
      line: 26,
      sequence: 25,
      expected: receipts[25]!.merkle_root,
      actual: bogus,
    });
    expect(report.errors[0]!.problem).toMatch(/^merkle_root does not match the tree of receipts 0\.\.25/);
    // Not re-sealed: the receipt hash breaks too.
    const plain = await verifyReceipts(
      tamper(receipts, 25, (r) => {
        r['merkle_root'] = bogus;
      }),
    );
    expect(plain.errors.map((e) => e.problem.split(':')[0])).toEqual([
      'receipt_hash does not match the receipt content',
      'merkle_root does not match the tree of receipts 0..25',
    ]);
  });

  it('reports a line that is not JSON with its line number, once', async () => {
    const { lines } = chain(20);
    lines[9] = '{"schema": "svc.receipt/1", truncated';
    const report = await verifyReceipts(lines);
    expect(report.ok).toBe(false);
    expect(report.count).toBe(19);
    expect(report.errors).toHaveLength(1);
    expect(report.errors[0]).toMatchObject({ line: 10, sequence: null, receipt_id: null });
    expect(report.errors[0]!.problem).toMatch(/^not valid JSON/);
    const notObject = await verifyReceipts(['[1,2]']);
    expect(notObject.errors[0]!.problem).toBe('not a JSON object');
  });

  it('accepts a mid-chain export without a start head, with a warning only', async () => {
    const { receipts, lines, head } = chain(60);
    const report = await verifyReceipts(lines.slice(40));
    expect(report.ok).toBe(true);
    expect(report.count).toBe(20);
    expect(report.lastHash).toBe(head.lastHash);
    expect(report.merkleRoot).toBeNull();
    expect(report.warnings).toEqual([expect.stringMatching(/starts at sequence 40 .*no start head/)]);
    expect(formatReport(report)).toMatch(
      /^OK: 20 receipts verified, chain head sha256:[0-9a-f]{64}, merkle root \(not checked\)\n {2}warning: chain starts/,
    );
    // Links between the receipts present are still checked.
    const broken = lines.slice(40);
    broken.splice(5, 1);
    const bad = await verifyReceipts(broken);
    expect(bad.errors[0]).toMatchObject({ line: 6, sequence: 46, receipt_id: receipts[46]!.receipt_id });
  });

  it('fully checks a mid-chain export given the right start head', async () => {
    const { receipts, lines } = chain(60);
    const start = appendReceipts(
      emptyChainHead(),
      Array.from({ length: 40 }, (_, i) => item(i)),
    ).head;
    const report = await verifyReceipts(lines.slice(40), { start });
    expect(report).toMatchObject({
      ok: true,
      count: 20,
      warnings: [],
      merkleRoot: receipts[59]!.merkle_root,
    });
    // A wrong start head (one receipt off) is caught on the first line.
    const wrong = appendReceipts(
      emptyChainHead(),
      Array.from({ length: 39 }, (_, i) => item(i)),
    ).head;
    const bad = await verifyReceipts(lines.slice(40), { start: wrong });
    expect(bad.ok).toBe(false);
    expect(bad.errors[0]).toMatchObject({ line: 1, sequence: 40 });
    await expect(verifyReceipts(lines, { start: { ...start, frontier: [] } })).rejects.toThrow(/frontier/);
  });

  it('checks the schema id and hash formats', async () => {
    const { receipts } = chain(3);
    const report = await verifyReceipts(
      tamper(receipts, 1, (r) => {
        r['schema'] = 'svc.receipt/2';
        r['argument_hash'] = 'sha256:ABC';
        r['previous_receipt_hash'] = receipts[0]!.receipt_hash.toUpperCase();
      }),
    );
    const problems = report.errors.map((e) => e.problem);
    expect(problems).toContain('schema is "svc.receipt/2", not svc.receipt/1');
    expect(problems).toContain('argument_hash is not sha256:<64 hex>');
    expect(problems).toContain('previous_receipt_hash is not sha256:<64 hex>');
  });

  it('keeps at most 20 errors', async () => {
    const { receipts } = chain(30);
    const lines = receipts.map((r) => JSON.stringify({ ...r, reason: 'x' }));
    const report = await verifyReceipts(lines);
    expect(report.errors).toHaveLength(20);
    expect(report.errors[0]!.line).toBe(1);
    expect(report.warnings).toContainEqual(expect.stringMatching(/further error\(s\) not listed/));
    expect(formatReport(report)).toMatch(/^FAILED: 20\+ problem\(s\) in 30 receipts/);
  });

  it('accepts an empty input, noting that nothing was verified', async () => {
    const report = await verifyReceipts([]);
    expect(report).toMatchObject({ ok: true, count: 0, lastHash: null, merkleRoot: null });
    expect(report.warnings).toEqual(['no receipts found']);
    expect(GENESIS_HASH).toMatch(/^sha256:0{64}$/);
  });
});
