import { describe, expect, it } from 'vitest';
import { nestedDeeperThan } from '../../lib/json.js';
import { messageNestedDeeperThan, parseMessages, textNestedDeeperThan, topLevelOf } from './raw-json.js';

/** Random JSON with brackets, quotes and backslashes inside strings and keys, nested up to `depth`. */
function randomJson(depth: number, rnd: () => number): unknown {
  const str = () =>
    ['', '[', ']', '{', '}', '"', '\\', '\\"', '"]', 'a\\\\', '}\\"{'][Math.floor(rnd() * 11)]!;
  if (depth === 0 || rnd() < 0.2) return rnd() < 0.5 ? str() + str() : Math.floor(rnd() * 100);
  const n = Math.floor(rnd() * 4);
  if (rnd() < 0.5) return Array.from({ length: n }, () => randomJson(depth - 1, rnd));
  return Object.fromEntries(
    Array.from({ length: n }, (_, i) => [`${str()}${i}`, randomJson(depth - 1, rnd)]),
  );
}

function seeded(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
}

describe('nesting depth counted on JSON text', () => {
  it('agrees with the depth of the parsed value, strings with brackets, quotes and backslashes included', () => {
    const rnd = seeded(7);
    for (let i = 0; i < 2000; i++) {
      const value = randomJson(8, rnd);
      const text = JSON.stringify(value, null, i % 3 === 0 ? 1 : undefined);
      for (const max of [1, 2, 3, 5])
        expect(textNestedDeeperThan(text, max), text).toBe(nestedDeeperThan(value, max));
    }
  });

  it('counts a batch per message', () => {
    expect(messageNestedDeeperThan('[{"a":[1]}]', 2)).toBe(false);
    expect(messageNestedDeeperThan('[{"a":[[1]]}]', 2)).toBe(true);
    expect(messageNestedDeeperThan(' {"a":[1]}', 2)).toBe(false);
    expect(messageNestedDeeperThan('{"a":[[1]]}', 2)).toBe(true);
  });

  it('gives the top level of a message too deep to parse', () => {
    const deep = `{"jsonrpc":"2.0","id":"x\\"}]","method":"a/b","params":{"p":${'['.repeat(1000)}${']'.repeat(1000)},"s":"]}"},"n":1}`;
    expect(topLevelOf(deep)).toEqual({ jsonrpc: '2.0', id: 'x"}]', method: 'a/b', params: null, n: 1 });
    expect(topLevelOf('{"id":1,"result":[[[')).toBeNull();
    expect(topLevelOf('[1,2]')).toBeNull();
    expect(topLevelOf('not json')).toBeNull();
  });

  it('parses the messages within the bound and gives the top level of the others', () => {
    const deep = (id: number) =>
      `{"jsonrpc":"2.0","id":${id},"result":{"x":${'['.repeat(200)}${']'.repeat(200)}}}`;
    expect(parseMessages('{"jsonrpc":"2.0","id":1,"result":{}}', 128)).toEqual([
      { tooDeep: false, message: { jsonrpc: '2.0', id: 1, result: {} } },
    ]);
    expect(parseMessages(deep(2), 128)).toEqual([
      { tooDeep: true, top: { jsonrpc: '2.0', id: 2, result: null } },
    ]);
    expect(parseMessages(`[${deep(3)}, {"jsonrpc":"2.0","method":"m"}]`, 128)).toEqual([
      { tooDeep: true, top: { jsonrpc: '2.0', id: 3, result: null } },
      { tooDeep: false, message: { jsonrpc: '2.0', method: 'm' } },
    ]);
    expect(() => parseMessages('{"a":', 128)).toThrow(SyntaxError);
    expect(() => parseMessages(`[${deep(4)}] x`, 128)).toThrow(SyntaxError);
  });

  it('refuses a batch too deep to parse that is not JSON all the same', () => {
    const deep = `{"jsonrpc":"2.0","id":1,"result":{"x":${'['.repeat(200)}${']'.repeat(200)}}}`;
    for (const text of [
      `[${deep},]`,
      `[${deep} , ]`,
      `[${deep},\n]`,
      `[,${deep}]`,
      `[${deep},,{}]`,
      `[${deep}`,
    ])
      expect(() => parseMessages(text, 128), text).toThrow(SyntaxError);
    // As JSON.parse does within the bound.
    expect(() => parseMessages('[{"a":1},]', 128)).toThrow(SyntaxError);
    expect(parseMessages(` [ ${deep} ] `, 128)).toEqual([
      { tooDeep: true, top: { jsonrpc: '2.0', id: 1, result: null } },
    ]);
  });

  it('scans 8 MB of nesting in a small fraction of what parsing it takes', () => {
    const text = `{"jsonrpc":"2.0","id":1,"result":{"a":${'['.repeat(4_000_000)}${']'.repeat(4_000_000)}}}`;
    const started = performance.now();
    expect(parseMessages(text, 128)).toEqual([
      { tooDeep: true, top: { jsonrpc: '2.0', id: 1, result: null } },
    ]);
    // About 10 ms here; parsing it would take seconds. Wide for a loaded machine.
    expect(performance.now() - started).toBeLessThan(2000);
  });
});
