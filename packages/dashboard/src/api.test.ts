import { describe, expect, it } from 'vitest';
import { type Session, sessionChange } from './api.js';

const session = (userId: string, csrfToken = `csrf-${userId}`): Session => ({
  userId,
  csrfToken,
  expiresAt: '2030-01-01T12:00:00.000Z',
});

describe('the session the cookie names, read again after a refusal', () => {
  it("is another person's once someone else signed in in another tab of this browser", () => {
    expect(sessionChange(session('alice'), session('bob'))).toBe('changed');
  });

  it('is a new session of the same person, the same one, or none', () => {
    expect(sessionChange(session('alice'), session('alice', 'csrf-2'))).toBe('renewed');
    expect(sessionChange(session('alice'), session('alice'))).toBe('same');
    expect(sessionChange(session('alice'), null)).toBe('ended');
  });
});
