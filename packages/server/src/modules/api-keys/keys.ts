import { hash, randomBytes } from 'node:crypto';

export const KEY_PREFIX = 'svc_';

/** 32 random bytes (256 bits) in base64url after the service prefix. */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** Keys carry 256 bits of entropy, so a fast unsalted hash is enough to make a stolen table useless. */
export function hashApiKey(key: string): string {
  // One-shot hash(): runs on every authenticated request, and costs a fraction of a Hash object.
  return hash('sha256', key, 'hex');
}

export function displayPrefix(key: string): string {
  return `${key.slice(0, 12)}...`;
}

export function looksLikeApiKey(value: string): boolean {
  return value.startsWith(KEY_PREFIX);
}
