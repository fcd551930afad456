import { describe, expect, it } from 'vitest';
import { redactCredentials } from './redact.js';

describe('redactCredentials', () => {
  it('hides the apiKey and token query parameters in logged URLs, and nothing else', () => {
    expect(redactCredentials('/v1/events/stream?types=a&apiKey=svc_secret')).toBe(
      '/v1/events/stream?types=a&apiKey=[redacted]',
    );
    expect(redactCredentials('/ws?token=eyJ.x.y&x=1')).toBe('/ws?token=[redacted]&x=1');
    expect(redactCredentials('/v1/tools?tokenizer=1')).toBe('/v1/tools?tokenizer=1');
  });
});
