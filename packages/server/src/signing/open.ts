import type { Config } from '../config.js';
import type { Clock } from '../lib/clock.js';
import type { Store } from '../storage/db.js';
import { type KeySetOptions, SigningKeySet } from './keyset.js';
import { keySetStorageFor } from './storage.js';

/**
 * The key set of this deployment: SVC_SIGNING_KEY_FILE when the operator supplies one, else a key
 * generated on first start beside the embedded store (or in the database on PostgreSQL). A key file
 * that others may read, or that holds no Ed25519 key, stops the start; a key file that is missing
 * leaves the service running with signing unavailable (503 `signing_key_missing`) until it appears.
 */
export async function openSigningKeys(
  config: Pick<Config, 'signingKeyFile' | 'signingKeyOverlapSeconds'>,
  store: Store,
  clock: Clock,
  log?: KeySetOptions['log'],
): Promise<SigningKeySet> {
  const keys = signingKeysOf(config, store, clock, log);
  await keys.open();
  return keys;
}

/**
 * The key set of this deployment, not yet read: nothing is generated until it is used. Rotating
 * through it on a store without a key creates that store's first key, and only that one.
 */
export function signingKeysOf(
  config: Pick<Config, 'signingKeyFile' | 'signingKeyOverlapSeconds'>,
  store: Store,
  clock: Clock,
  log?: KeySetOptions['log'],
): SigningKeySet {
  return new SigningKeySet({
    storage: keySetStorageFor(store),
    clock,
    overlapSeconds: config.signingKeyOverlapSeconds,
    operatorKeyFile: config.signingKeyFile,
    ...(log ? { log } : {}),
  });
}
