import { describe, expect, it } from 'vitest';
import { latestOnly } from './reads.js';

/** A read that answers when told to. */
function held<T>() {
  let answer: (value: T) => void = () => {};
  const promise = new Promise<T>((resolve) => {
    answer = resolve;
  });
  return { read: () => promise, answer };
}

describe('reads where the latest wins', () => {
  it('shows only the latest answer, whatever order the answers come in', async () => {
    const run = latestOnly();
    const shown: string[] = [];
    const first = held<string>();
    const second = held<string>();
    const a = run(
      first.read,
      (v) => shown.push(v),
      () => {},
    );
    const b = run(
      second.read,
      (v) => shown.push(v),
      () => {},
    );
    second.answer('second');
    await b;
    first.answer('first');
    await a;
    expect(shown).toEqual(['second']);
  });

  it('settles a superseded run only once the latest one has', async () => {
    const run = latestOnly();
    const shown: string[] = [];
    const first = held<string>();
    const second = held<string>();
    let firstSettled = false;
    const a = run(
      first.read,
      (v) => shown.push(v),
      () => {},
    ).then(() => {
      firstSettled = true;
    });
    const b = run(
      second.read,
      (v) => shown.push(v),
      () => {},
    );
    first.answer('first');
    // Answered, and dropped: its caller still waits for the read that will be shown.
    for (let i = 0; i < 10; i++) await Promise.resolve();
    expect(firstSettled).toBe(false);
    second.answer('second');
    await b;
    await a;
    expect(firstSettled).toBe(true);
    expect(shown).toEqual(['second']);
  });

  it("reports only the latest run's failure", async () => {
    const run = latestOnly();
    const errors: unknown[] = [];
    await Promise.all([
      run(
        () => Promise.reject(new Error('old')),
        () => {},
        (e) => errors.push(e),
      ),
      run(
        () => Promise.reject(new Error('new')),
        () => {},
        (e) => errors.push(e),
      ),
    ]);
    expect(errors.map((e) => (e as Error).message)).toEqual(['new']);
  });
});
