import { describe, expect, it } from 'vitest';
import { redactCredentials } from './redact.js';

describe('redactCredentials', () => {
  it('hides the apiKey, token, code and state query parameters in logged URLs, and nothing else', () => {
    expect(redactCredentials('/v1/events/stream?types=a&apiKey=svc_secret')).toBe(
      '/v1/events/stream?types=a&apiKey=[redacted]',
    );
    expect(redactCredentials('/ws?token=eyJ.x.y&x=1')).toBe('/ws?token=[redacted]&x=1');
    expect(redactCredentials('/v1/tools?tokenizer=1')).toBe('/v1/tools?tokenizer=1');
    expect(redactCredentials('/v1/auth/oidc/callback?code=abc&state=p_eM8T&iss=x')).toBe(
      '/v1/auth/oidc/callback?code=[redacted]&state=[redacted]&iss=x',
    );
  });

  it('recognises percent-encoded and differently cased names, as the query parser decodes them', () => {
    expect(redactCredentials('/v1/events/stream?api%4Bey=svc_secret&types=a')).toBe(
      '/v1/events/stream?api%4Bey=[redacted]&types=a',
    );
    expect(redactCredentials('/v1/events/stream?%61%70%69%6b%65%79=svc_secret')).toBe(
      '/v1/events/stream?%61%70%69%6b%65%79=[redacted]',
    );
    expect(redactCredentials('/ws?TOKEN=eyJ.x.y#frag')).toBe('/ws?TOKEN=[redacted]#frag');
    expect(redactCredentials('/ws?to%6Ben=a&token=b&x=%zz')).toBe(
      '/ws?to%6Ben=[redacted]&token=[redacted]&x=%zz',
    );
    expect(redactCredentials('/v1/health')).toBe('/v1/health');
    expect(redactCredentials('/v1/x?apiKey')).toBe('/v1/x?apiKey');
  });
});
