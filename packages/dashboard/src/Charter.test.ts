import { describe, expect, it } from 'vitest';
import { nowHeading } from './Charter.js';

describe('the policy a Charter change replaces', () => {
  const definition = { rules: [] } as never;

  it('names its version, and says when it is not enforced', () => {
    expect(nowHeading({ current: null })).toBe('Now');
    expect(nowHeading({ current: { version: 3, isActive: true, definition } })).toBe('Now (version 3)');
    expect(nowHeading({ current: { version: 3, isActive: false, definition } })).toBe(
      'Now (version 3, inactive: not enforced until activated)',
    );
    // Proposed before activity was recorded: shown as the server reads it, active.
    expect(nowHeading({ current: { version: 2, definition } })).toBe('Now (version 2)');
  });
});
