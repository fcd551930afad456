import { describe, expect, it } from 'vitest';
import { isUserId } from './schemas.js';

describe("a person's id (isUserId)", () => {
  it('is 1-200 characters of well-formed Unicode, not only spaces, without control characters', () => {
    for (const ok of ['alice', 'dave@example.test', 'ana-😀', '😀'.repeat(200), 'Ünïcødé name']) {
      expect(isUserId(ok), ok).toBe(true);
    }
    for (const bad of ['', '   ', 'a\u0000b', 'a\nb', 'x'.repeat(201), 42, null, undefined]) {
      expect(isUserId(bad), JSON.stringify(bad)).toBe(false);
    }
  });

  it('refuses lone surrogates: each would be stored as U+FFFD, so different ids would name one person', () => {
    for (const bad of ['\ud800', '\udfff', 'a\ud800b', '\udfff\ud800', `${'😀'.slice(0, 1)}x`]) {
      expect(isUserId(bad), JSON.stringify(bad)).toBe(false);
    }
  });
});
