import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  CanonicalJsonError,
  canonicalJson,
  GENESIS_HASH,
  hashJson,
  isTaggedHash,
  sha256Tagged,
} from './canonical.js';

describe('canonicalJson', () => {
  it('matches the RFC 8785 section 3.2.2 example', () => {
    const input = JSON.parse(
      '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],' +
        '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",' +
        '"literals": [null, true, false]}',
    );
    expect(canonicalJson(input)).toBe(
      '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
  });

  it('sorts keys recursively, independent of insertion order', () => {
    const a = { b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } };
    const b = { a: { c: null, d: [3, { y: 2, z: 1 }] }, b: 1 };
    expect(canonicalJson(a)).toBe('{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}');
    expect(canonicalJson(b)).toBe(canonicalJson(a));
    expect(hashJson(b)).toBe(hashJson(a));
  });

  it('sorts keys by UTF-16 code units (RFC 8785 section 3.2.3 example)', () => {
    const keys = ['\u20ac', '\r', '\ufb33', '1', '\ud83d\ude00', '\u0080', '\u00f6'];
    const obj = Object.fromEntries(keys.map((k, i) => [k, i]));
    // Compare the text: JSON.parse would hoist the integer-like key "1" again.
    expect(canonicalJson(obj)).toBe(
      '{"\\r":1,"1":3,"\u0080":5,"\u00f6":6,"\u20ac":0,"\ud83d\ude00":4,"\ufb33":2}',
    );
  });

  it('formats numbers the ECMAScript way', () => {
    expect(canonicalJson([1.0, -0, 1e21, 1e-7, 0.1 + 0.2, 100, 5e-324, -1.5e300])).toBe(
      '[1,0,1e+21,1e-7,0.30000000000000004,100,5e-324,-1.5e+300]',
    );
  });

  it('keeps non-ASCII text as UTF-8 and escapes only what JSON requires', () => {
    expect(canonicalJson({ s: 'é€😀\u0001\t"\\' })).toBe('{"s":"é€😀\\u0001\\t\\"\\\\"}');
    // NFC and NFD forms are different strings; canonicalization must not normalize them.
    expect(hashJson('\u00e9')).not.toBe(hashJson('e\u0301'));
  });

  it('omits undefined properties and applies toJSON, as JSON.stringify does', () => {
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
    expect(canonicalJson({ t: new Date('2024-01-02T03:04:05.678Z') })).toBe(
      '{"t":"2024-01-02T03:04:05.678Z"}',
    );
  });

  it.each([
    ['undefined', undefined],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['nested -Infinity', { a: [1, Number.NEGATIVE_INFINITY] }],
    ['BigInt', 1n],
    ['nested BigInt', { a: { b: 2n } }],
    ['function property', { f: () => 1 }],
    ['symbol', Symbol('x')],
    ['Map', new Map([['a', 1]])],
  ])('rejects %s with a clear error', (_name, value) => {
    expect(() => canonicalJson(value)).toThrow(CanonicalJsonError);
  });

  it('names the path of the offending value', () => {
    expect(() => canonicalJson({ a: { b: [0, 2n] } })).toThrow(/\$\.a\.b\[1\].*BigInt/);
  });

  it('rejects cycles but accepts shared references', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    expect(() => canonicalJson(cyclic)).toThrow(/circular/);
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: shared })).toBe('{"a":{"x":1},"b":{"x":1}}');
  });
});

describe('hashes', () => {
  it('sha256Tagged hashes strings as UTF-8 and bytes as given', () => {
    expect(sha256Tagged('')).toBe('sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(sha256Tagged('abc')).toBe(
      'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
    expect(sha256Tagged(Buffer.from('€', 'utf8'))).toBe(sha256Tagged('€'));
  });

  it('hashJson = sha256 of the canonical text', () => {
    const expected = createHash('sha256').update('{"a":1,"b":[true]}').digest('hex');
    expect(hashJson({ b: [true], a: 1 })).toBe(`sha256:${expected}`);
  });

  it('isTaggedHash accepts only sha256:<64 lowercase hex>', () => {
    expect(isTaggedHash(GENESIS_HASH)).toBe(true);
    expect(GENESIS_HASH).toBe(`sha256:${'0'.repeat(64)}`);
    expect(isTaggedHash(sha256Tagged('x'))).toBe(true);
    expect(isTaggedHash(`sha256:${'A'.repeat(64)}`)).toBe(false);
    expect(isTaggedHash(`sha256:${'0'.repeat(63)}`)).toBe(false);
    expect(isTaggedHash(`sha512:${'0'.repeat(64)}`)).toBe(false);
    expect(isTaggedHash('0'.repeat(64))).toBe(false);
    expect(isTaggedHash(null)).toBe(false);
  });
});

describe('canonicalJson fast path', () => {
  it('agrees with the canonicalize package on plain data', async () => {
    const { default: canonicalize } = (await import('canonicalize')) as unknown as {
      default: (v: unknown) => string;
    };
    const samples: unknown[] = [
      { b: 1, a: [1, 'x', null, true, { z: -0, y: 1e21, x: 1.5e-7 }], é: 'é', '\u0001': '\n\t"\\' },
      [undefined, 3, { u: undefined, v: 0.1 + 0.2 }],
      { '': '', '\ud83d\ude00': ['\u2028', '\u007f'], A: { B: { C: [] } } },
      Object.assign(Object.create(null), { k: 'null-prototype' }),
      'plain string',
      2 ** 70,
    ];
    for (const s of samples) expect(canonicalJson(s)).toBe(canonicalize(s));
  });
});
