import { describe, expect, it } from 'vitest';
import { bodyJsonProblem, jsonDataSize, MAX_BODY_DEPTH, MAX_JSON_DEPTH, utf8Length } from './json-limits.js';

const MiB = 1024 * 1024;
const deep = (levels: number): unknown => {
  let v: unknown = {};
  for (let i = 1; i < levels; i++) v = { d: v };
  return v;
};

describe('jsonDataSize: the service’s limits for a value held as JavaScript', () => {
  it('bounds the UTF-8 size of the JSON text of plain JSON data from above', () => {
    const values: unknown[] = [
      { a: 'x', b: 1.5, c: true, d: null, e: [1, 'two', { f: [] }] },
      { emoji: '😀'.repeat(10), ctl: '\n\u0001', quote: '"\\' },
      [-1.7976931348623157e308, 5e-324, -0.000001],
      'text',
      0,
      Object.assign(Object.create(null), { a: 1 }),
    ];
    for (const v of values) {
      const size = jsonDataSize(v, MAX_JSON_DEPTH, MiB);
      expect(size, JSON.stringify(v)).toBeGreaterThanOrEqual(utf8Length(JSON.stringify(v)));
    }
    // An undefined member is left out of JSON, and read as absent by the engine.
    expect(jsonDataSize({ a: 1, b: undefined }, MAX_JSON_DEPTH, MiB)).toBeGreaterThan(0);
  });

  it('refuses what the server refuses', () => {
    const refused: unknown[] = [
      { s: 'a\u0000b' },
      { s: '\ud800' },
      { '\udc00': 1 },
      { 'a\u0000': 1 },
      deep(MAX_JSON_DEPTH + 1),
      JSON.parse('{"x":[{"__proto__":{}}]}'),
      JSON.parse('{"constructor":{"prototype":1}}'),
      { n: Number.POSITIVE_INFINITY },
    ];
    for (const v of refused) expect(jsonDataSize(v, MAX_JSON_DEPTH, MiB)).toBe(-1);
    expect(jsonDataSize(deep(MAX_JSON_DEPTH), MAX_JSON_DEPTH, MiB)).toBeGreaterThan(0);
    // A constructor key is fine unless it holds a prototype key, as for the body parser.
    expect(jsonDataSize({ constructor: { name: 'x' } }, MAX_JSON_DEPTH, MiB)).toBeGreaterThan(0);
  });

  it('refuses a bound over maxBytes', () => {
    expect(jsonDataSize({ s: 'x'.repeat(1000) }, MAX_JSON_DEPTH, 1000)).toBe(-1);
    expect(jsonDataSize({ s: 'x'.repeat(100) }, MAX_JSON_DEPTH, 1000)).toBeGreaterThan(0);
  });

  it('refuses what is not its own JSON projection, whatever the limits', () => {
    class Point {
      x = 1;
    }
    const hidden = Object.defineProperty({ a: 1 }, 'b', { value: 2, enumerable: false });
    const named = Object.assign([1, 2], { extra: true });
    const notPlain: unknown[] = [
      { n: Number.NaN },
      { n: -0 },
      { f: () => 1 },
      { s: Symbol('s') },
      { big: 1n },
      { d: new Date(0) },
      { m: new Map() },
      { p: new Point() },
      { t: { toJSON: () => 1 } },
      hidden,
      { a: [1, undefined] },
      // biome-ignore lint/suspicious/noSparseArray: a hole is the point
      { a: [1, , 3] },
      named,
      undefined,
    ];
    for (const v of notPlain) expect(jsonDataSize(v, MAX_JSON_DEPTH, MiB)).toBe(-1);
  });

  it('refuses everything while a prototype has a toJSON, which JSON.stringify would call', () => {
    const proto = Object.prototype as { toJSON?: unknown };
    proto.toJSON = () => 'x';
    try {
      expect(jsonDataSize({ a: 1 }, MAX_JSON_DEPTH, MiB)).toBe(-1);
    } finally {
      delete proto.toJSON;
    }
    expect(jsonDataSize({ a: 1 }, MAX_JSON_DEPTH, MiB)).toBeGreaterThan(0);
  });

  it('agrees with bodyJsonProblem on parsed JSON', () => {
    const bodies = [
      '{"a":1}',
      '{"a":"\\u0000"}',
      '{"a":"\\ud800"}',
      '{"\\udfff":1}',
      '[1,2,{"b":[1e308]}]',
      JSON.stringify(deep(MAX_BODY_DEPTH)),
      JSON.stringify(deep(MAX_BODY_DEPTH + 1)),
    ];
    for (const text of bodies) {
      const v = JSON.parse(text);
      expect(jsonDataSize(v, MAX_BODY_DEPTH, Number.POSITIVE_INFINITY) >= 0, text).toBe(
        bodyJsonProblem(v) === null,
      );
    }
  });
});

describe('utf8Length', () => {
  it('counts the bytes TextEncoder writes', () => {
    const encoder = new TextEncoder();
    for (const s of [
      '',
      'abc',
      'é',
      '€',
      '😀',
      'a😀b',
      '\ud800',
      'x\udc00',
      '\ud800\ud800\udc00',
      'ü'.repeat(9),
    ]) {
      expect(utf8Length(s), JSON.stringify(s)).toBe(encoder.encode(s).length);
    }
  });
});
