import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { spreadOut } from '../lib/spread.js';
import { SseWriter } from './sse.js';

/** A writer over a response with no client behind it. */
function writer(): { writer: SseWriter; ended: () => boolean } {
  const res = new ServerResponse(new IncomingMessage(new Socket()));
  const w = new SseWriter(res, 1 << 20);
  let ended = false;
  w.onEnd(() => {
    ended = true;
  });
  return { writer: w, ended: () => ended };
}

describe('re-checking a stream’s credentials', () => {
  it('makes a check asked for while one runs once that one ends: it may have read before a revocation', async () => {
    const { writer: w, ended } = writer();
    let release!: (ok: boolean) => void;
    const running = new Promise<boolean>((r) => {
      release = r;
    });
    let asked = 0;
    w.recheck(() => running);
    // Revoked meanwhile: the check asked for now would see it.
    w.recheck(async () => {
      asked++;
      return false;
    });
    expect(asked).toBe(0);
    release(true);
    await running;
    await new Promise((r) => setImmediate(r));
    expect([asked, ended()]).toEqual([1, true]);
  });

  it('spreads checks out over 2 ms per stream, every one made', async () => {
    const made: number[] = [];
    const all = Array.from({ length: 50 }, (_, i) => i);
    spreadOut(all, (i) => {
      made.push(i);
      if (i === 7) throw new Error('gone meanwhile');
    });
    expect(made).toEqual([]);
    await new Promise((r) => setTimeout(r, 150));
    expect([...made].sort((a, b) => a - b)).toEqual(all);
  });
});
