import { describe, expect, it } from 'vitest';
import { latestOnly, readAgainIfRefused } from './reads.js';

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

describe('an action on a row of a list', () => {
  const refusal = (status: number) => Object.assign(new Error(`HTTP ${status}`), { status });

  it('reads the list again when the service refuses it with 404 (deleted elsewhere), and passes the refusal on', async () => {
    let reads = 0;
    const load = async () => {
      reads++;
    };
    await expect(
      readAgainIfRefused(async () => {
        throw refusal(404);
      }, load),
    ).rejects.toThrow('HTTP 404');
    expect(reads).toBe(1);
    await expect(
      readAgainIfRefused(async () => {
        throw refusal(409);
      }, load),
    ).rejects.toThrow('HTTP 409');
    expect(reads).toBe(2);
  });

  it('does not read again when it worked, the session ended (401), or the service did not answer', async () => {
    let reads = 0;
    const load = async () => {
      reads++;
    };
    expect(await readAgainIfRefused(async () => 'done', load)).toBe('done');
    for (const status of [401, 500, 0]) {
      await expect(
        readAgainIfRefused(async () => {
          throw refusal(status);
        }, load),
      ).rejects.toThrow();
    }
    expect(reads).toBe(0);
  });

  it('passes the refusal on even when the read again fails', async () => {
    await expect(
      readAgainIfRefused(
        async () => {
          throw refusal(404);
        },
        async () => {
          throw new Error('read failed');
        },
      ),
    ).rejects.toThrow('HTTP 404');
  });
});
