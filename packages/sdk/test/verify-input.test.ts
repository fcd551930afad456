import { generateKeyPairSync, sign } from 'node:crypto';
import {
  type Checkpoint,
  canonicalJson,
  checkCheckpoints,
  formatCheckpointResults,
  GENESIS_HASH,
  leafHash,
  linesOf,
  MerkleFrontier,
  type PublicJwk,
  receiptHash,
  receiptLeafData,
  tag,
  verifyCheckpointConsistency,
  verifyCheckpointSignature,
  verifyExport,
  verifyReceiptChain,
  verifyReceiptInclusion,
} from '@svc/sdk/verify';
import { describe, expect, it } from 'vitest';
import { duplicateMember } from '../src/verify/json.js';

/**
 * What the verifier does with input it should not trust: lines that read two ways, entries that
 * are no checkpoint, key sets that name a key twice or publish one for another use. The chain and
 * checkpoints are built here (as docs/receipts.md defines them), so no service runs.
 */

type Receipt = Record<string, unknown>;

/** A chain of `n` receipts; `extra(i)` adds members to receipt i (the verifier takes unknown ones). */
async function chainOf(n: number, extra: (i: number) => Receipt = () => ({})): Promise<Receipt[]> {
  const tree = new MerkleFrontier();
  const receipts: Receipt[] = [];
  let previous = GENESIS_HASH;
  for (let i = 0; i < n; i++) {
    const r: Receipt = {
      schema: 'svc.receipt/1',
      receipt_id: `0199a7e0-0000-7000-8000-00000000000${i}`,
      sequence: i,
      organization_id: 'org-1',
      project_id: null,
      decision_id: `0199a7e0-0000-7000-9000-00000000000${i}`,
      decision: 'deny',
      mode: 'deterministic',
      tool_name: 'transfer',
      argument_hash: `sha256:${'a'.repeat(64)}`,
      policy_version: 1,
      policy_hash: `sha256:${'b'.repeat(64)}`,
      reason: 'amount above the limit',
      timestamp: '2026-11-27T10:00:00.000Z',
      previous_receipt_hash: previous,
      ...extra(i),
    };
    await tree.append(await leafHash(receiptLeafData(r)));
    r.merkle_root = tag(await tree.root());
    r.receipt_hash = await receiptHash(r);
    previous = r.receipt_hash as string;
    receipts.push(r);
  }
  return receipts;
}

/** An Ed25519 key published as `jwk` (members over the defaults), and a checkpoint signer for it. */
function signer(kid: string, jwk: Partial<PublicJwk> = {}) {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const { x } = publicKey.export({ format: 'jwk' }) as { x: string };
  const key: PublicJwk = { kty: 'OKP', crv: 'Ed25519', x, kid, alg: 'EdDSA', use: 'sig', ...jwk };
  const signCheckpoint = (receipts: Receipt[]): Checkpoint => {
    const last = receipts.at(-1)!;
    const unsigned = {
      schema: 'svc.checkpoint/1',
      origin: 'https://svc.example',
      organization_id: 'org-1',
      tree_size: receipts.length,
      root_hash: last.merkle_root as string,
      last_receipt_hash: last.receipt_hash as string,
      timestamp: '2026-11-27T10:00:05.000Z',
      kid,
    };
    const signature = sign(null, Buffer.from(canonicalJson(unsigned)), privateKey).toString('base64url');
    return { ...unsigned, signature };
  };
  return { key, signCheckpoint };
}

const lineOf = (r: Receipt) => JSON.stringify(r);

describe('a line that holds a member name twice', () => {
  it('is reported at its line, as a line that is not JSON is, though the value JSON.parse keeps verifies', async () => {
    const receipts = await chainOf(5);
    const lines = receipts.map(lineOf);
    // Shows "allow" to whoever reads the first value; JSON.parse keeps the last, which verifies.
    lines[2] = lines[2]!.replace('"decision":"deny"', '"decision":"allow","decision":"deny"');
    expect(lines[2]).toContain('"decision":"allow"');
    expect(JSON.parse(lines[2]!)).toEqual(receipts[2]);

    const report = await verifyReceiptChain(lines.join('\n'));
    expect(report.ok).toBe(false);
    expect(report.errors).toEqual([
      {
        line: 3,
        sequence: null,
        receipt_id: null,
        problem:
          'duplicate member name "decision" in one object: the line can be read two ways (I-JSON, RFC 7493, forbids it)',
      },
    ]);
    // Like a line that is not JSON: not counted as a receipt, reported once, and Merkle roots are
    // not checked past it.
    const notJson = [...receipts.map(lineOf)];
    notJson[2] = '{"schema": "svc.receipt/1", truncated';
    const reference = await verifyReceiptChain(notJson);
    expect(report.count).toBe(reference.count);
    expect(report.warnings).toEqual(reference.warnings);
    expect(reference.errors).toEqual([
      expect.objectContaining({ line: 3, sequence: null, receipt_id: null }),
    ]);
  });

  it('is found at any depth and under any spelling of the name, and fails verifyExport', async () => {
    const receipts = await chainOf(3, (i) => (i === 1 ? { extra: { list: [{ a: 1 }] } } : {}));
    const { key, signCheckpoint } = signer('k1');
    const checkpoint = signCheckpoint(receipts);
    for (const [name, line] of [
      [
        'escaped',
        lineOf(receipts[1]!).replace('"decision":"deny"', '"d\\u0065cision":"allow","decision":"deny"'),
      ],
      ['nested', lineOf(receipts[1]!).replace('{"a":1}', '{"a":2,"a":1}')],
    ] as const) {
      expect(JSON.parse(line), name).toEqual(receipts[1]);
      const lines = [lineOf(receipts[0]!), line, lineOf(receipts[2]!)];
      const report = await verifyExport(lines, { checkpoints: [checkpoint], keys: [key] });
      expect(report.ok, name).toBe(false);
      expect(report.chain.errors[0], name).toMatchObject({ line: 2 });
      expect(report.chain.errors[0]!.problem, name).toMatch(/^duplicate member name "(decision|a)"/);
    }
    // The unchanged export verifies, checkpoint included.
    expect((await verifyExport(receipts.map(lineOf), { checkpoints: [checkpoint], keys: [key] })).ok).toBe(
      true,
    );
  });

  it('is told apart from names repeated in different objects', () => {
    expect(duplicateMember('{"a":{"x":1},"b":{"x":2},"c":[{"x":1},{"x":2}]}')).toBeNull();
    expect(duplicateMember('{"a":"\\"a\\":","b":"\\\\","a\\\\":1}')).toBeNull();
    expect(duplicateMember('[{"a":1,"b":[1,{"c":1}],"c":2}]')).toBeNull();
    expect(duplicateMember('{"":1,"x":{},"":2}')).toBe('');
    expect(duplicateMember('{"a":[{"b":1,"b":2}]}')).toBe('b');
    expect(duplicateMember('{"a":{"b":{}},"a":1}')).toBe('a');
    expect(duplicateMember('{"\\u00e9":1,"é":2}')).toBe('é');
  });
});

describe('a byte order mark before the first line', () => {
  it('is read as no part of it, as text, as lines of strings and as bytes alike', async () => {
    const text = `\uFEFF${(await chainOf(3)).map(lineOf).join('\n')}\n`;
    const asText = await verifyReceiptChain(text);
    expect(asText).toMatchObject({ ok: true, count: 3 });
    const strings = async function* () {
      yield text.slice(0, 5);
      yield text.slice(5);
    };
    const bytes = async function* () {
      yield new TextEncoder().encode(text);
    };
    expect(await verifyReceiptChain(linesOf(strings()))).toEqual(asText);
    expect(await verifyReceiptChain(linesOf(bytes()))).toEqual(asText);
    expect(await verifyReceiptChain(text.split('\n'))).toEqual(asText);
    // Anywhere else it is a character of the line, which then is no JSON.
    expect((await verifyReceiptChain(text.replace('\n', '\n\uFEFF'))).ok).toBe(false);
  });
});

describe('input that is not what the verifier takes', () => {
  it('reports entries of the checkpoint list that are no checkpoint, and checks the others', async () => {
    const receipts = await chainOf(4);
    const { key, signCheckpoint } = signer('k1');
    const checkpoint = signCheckpoint(receipts);
    const lines = receipts.map(lineOf);
    for (const entries of [
      [null, checkpoint],
      [checkpoint, null, 7, 'checkpoint'],
    ]) {
      const report = await verifyExport(lines, {
        checkpoints: entries as unknown as Checkpoint[],
        keys: [key],
      });
      expect(report.ok).toBe(false);
      expect(report.chain.ok).toBe(true);
      // In tree-size order, what is no checkpoint last, each refused as malformed.
      expect(report.checkpoints[0]).toEqual({
        tree_size: 4,
        kid: 'k1',
        timestamp: checkpoint.timestamp,
        status: 'ok',
      });
      expect(report.checkpoints.slice(1)).toEqual(
        Array(entries.length - 1).fill(
          expect.objectContaining({
            status: 'failed',
            code: 'malformed_checkpoint',
            problem: 'not a checkpoint object',
          }),
        ),
      );
      expect(formatCheckpointResults(report.checkpoints)).toContain(
        'checkpoint ? (?, key ?): failed: not a checkpoint object',
      );
    }
    const alone = await checkCheckpoints([checkpoint, null] as unknown as Checkpoint[], [key], {
      heads: new Map(),
      organizationId: null,
    });
    expect(alone.map((r) => r.code)).toEqual(['not_covered', 'malformed_checkpoint']);
  });

  it('throws a TypeError that says what it wanted for arguments of the wrong kind', async () => {
    const lines = (await chainOf(2)).map(lineOf);
    const cases: [() => Promise<unknown>, RegExp][] = [
      [
        () => verifyReceiptChain(null as never),
        /^verifyReceiptChain: input must be NDJSON text or an iterable/,
      ],
      [() => verifyReceiptChain(undefined as never), /not undefined$/],
      [() => verifyReceiptChain(42 as never), /not number$/],
      [() => verifyReceiptChain(lines, null as never), /^verifyReceiptChain: options must be an object/],
      [() => verifyReceiptChain(lines, { treeSizes: 3 as never }), /options\.treeSizes must be an iterable/],
      [
        () => verifyReceiptChain(lines, { start: { sequence: 2, lastHash: GENESIS_HASH } as never }),
        /^verifyReceiptChain: invalid start frontier/,
      ],
      [
        () => verifyReceiptChain(lines, { start: { sequence: 2, lastHash: GENESIS_HASH, frontier: [] } }),
        /^verifyReceiptChain: invalid start frontier: a Merkle frontier of 2 leaves needs 1 nodes/,
      ],
      [() => verifyExport(lines, null as never), /^verifyExport: options must be/],
      [
        () => verifyExport(lines, { checkpoints: null as never, keys: [] }),
        /^verifyExport: options\.checkpoints must be an array of checkpoints, not null$/,
      ],
      [
        () => checkCheckpoints(null as never, [], { heads: new Map(), organizationId: null }),
        /^checkCheckpoints/,
      ],
      [() => checkCheckpoints([], [], null as never), /^checkCheckpoints: report must be/],
    ];
    for (const [call, message] of cases) {
      const error = await call().then(
        () => null,
        (err: unknown) => err,
      );
      expect(error, String(message)).toBeInstanceOf(TypeError);
      expect((error as Error).message).toMatch(message);
      expect((error as Error).message).not.toMatch(/Cannot read properties/);
    }
  });
});

describe('which key of the key set verifies a checkpoint (the rule of @svc/capsules signingKey)', () => {
  it('refuses a key published for another use, as capsule verification does', async () => {
    const receipts = await chainOf(3);
    const good = signer('k1');
    expect(await verifyCheckpointSignature(good.signCheckpoint(receipts), [good.key])).toEqual({ ok: true });
    const noUse = signer('k1', { use: undefined });
    expect(await verifyCheckpointSignature(noUse.signCheckpoint(receipts), [noUse.key])).toEqual({
      ok: true,
    });
    const enc = signer('k2', { use: 'enc' });
    const checkpoint = enc.signCheckpoint(receipts);
    expect(await verifyCheckpointSignature(checkpoint, [enc.key])).toEqual({
      ok: false,
      code: 'unusable_key',
      reason: 'key k2 is not an Ed25519 signing key',
    });
    expect(
      await verifyExport(receipts.map(lineOf), { checkpoints: [checkpoint], keys: [enc.key] }),
    ).toMatchObject({
      ok: false,
      checkpoints: [{ status: 'failed', code: 'unusable_key' }],
    });
  });

  it('refuses a kid the key set publishes twice, whichever entry is the signer, through every verifier', async () => {
    const receipts = await chainOf(3);
    const real = signer('k1');
    const other = signer('k1');
    const checkpoint = real.signCheckpoint(receipts);
    const refused = {
      ok: false,
      code: 'unusable_key',
      reason: 'key k1 appears 2 times in the key set: ambiguous, so it is not used',
    };
    for (const keys of [
      [real.key, other.key],
      [other.key, real.key],
      { keys: [real.key, { ...real.key }] },
    ]) {
      expect(await verifyCheckpointSignature(checkpoint, keys)).toEqual(refused);
      const exported = await verifyExport(receipts.map(lineOf), { checkpoints: [checkpoint], keys });
      expect(exported.checkpoints).toMatchObject([{ status: 'failed', code: 'unusable_key' }]);
      expect(await verifyCheckpointConsistency(checkpoint, checkpoint, [], keys)).toMatchObject({
        ok: false,
        code: 'unusable_key',
      });
      expect(
        await verifyReceiptInclusion(
          receipts[2]!,
          { sequence: 2, tree_size: 3, audit_path: [] },
          checkpoint,
          keys,
        ),
      ).toMatchObject({ ok: false, code: 'unusable_key' });
    }
    // Another kid published twice does not make this one ambiguous; entries that are no key match none.
    const unrelated = signer('k9');
    const keys = [null, unrelated.key, real.key, unrelated.key] as unknown as PublicJwk[];
    expect(await verifyCheckpointSignature(checkpoint, keys)).toEqual({ ok: true });
  });
});
