import { describe, expect, it } from 'vitest';
import { SigningKeySet } from './keyset.js';
import type { KeySetDocument } from './model.js';
import { type KeySetStorage, memoryKeySetStorage } from './storage.js';

/** Storage whose next read takes the stored document at once but hands it over only when released. */
function holdableStorage() {
  const inner = memoryKeySetStorage();
  let hold: Promise<void> | null = null;
  let release = () => {};
  const storage: KeySetStorage = {
    async read() {
      const doc = await inner.read();
      const held = hold;
      hold = null;
      if (held) await held;
      return doc;
    },
    swap: (previous: KeySetDocument | null, next: KeySetDocument) => inner.swap(previous, next),
  };
  return {
    storage,
    inner,
    holdNextRead: () => {
      hold = new Promise((r) => {
        release = r;
      });
    },
    release: () => release(),
  };
}

const clock = { now: () => new Date('2026-01-01T00:00:00Z') };
const data = new TextEncoder().encode('tree head');

describe('a rotation while the key set is being read again', () => {
  it('keeps the rotated key signing: the read that began before it does not bring back the retired key', async () => {
    const held = holdableStorage();
    const set = new SigningKeySet({ storage: held.storage, clock, overlapSeconds: 3600 });
    await set.open();
    const before = await set.activeKid();

    // A read of the key set (here the admin listing) takes the document, then the rotation lands.
    held.holdNextRead();
    const listing = set.list();
    const rotated = await set.rotate();
    expect(rotated.previousKid).toBe(before);
    held.release();
    const listed = await listing;

    expect(await set.activeKid()).toBe(rotated.kid);
    expect((await set.sign(data)).kid).toBe(rotated.kid);
    expect(await set.isRetired(before!)).toBe(true);
    expect(listed.find((k) => k.status === 'active')?.kid).toBe(rotated.kid);
  });

  it("verifies a signature of another process's new key when the read it joined began before the rotation", async () => {
    const held = holdableStorage();
    const here = new SigningKeySet({ storage: held.storage, clock, overlapSeconds: 3600 });
    const there = new SigningKeySet({ storage: held.inner, clock, overlapSeconds: 3600 });
    await here.open();
    await there.open();

    // This process begins a read (the admin listing), then the other one rotates and signs.
    held.holdNextRead();
    const listing = here.list();
    const rotated = await there.rotate();
    const sig = await there.sign(data);
    expect(sig.kid).toBe(rotated.kid);

    const verified = here.verify(data, sig);
    held.release();
    await listing;
    expect(await verified).toBe(true);
  });
});
