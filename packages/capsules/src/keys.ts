import type { KeySet, PublicJwk } from './model.js';

/**
 * The keys of a key set, as a list whichever form it came in (`[...]` or `{keys: [...]}`); entries
 * that are no object are left out, and anything that is no key set has no keys.
 */
export function keyList(keys: KeySet): readonly PublicJwk[] {
  const list: unknown = Array.isArray(keys) ? keys : (keys as { keys?: unknown } | null)?.keys;
  return Array.isArray(list)
    ? list.filter((k): k is PublicJwk => k !== null && typeof k === 'object' && !Array.isArray(k))
    : [];
}

/** The key a signature names, or why there is none to verify it with. */
export type SigningKeyLookup =
  | { ok: true; jwk: PublicJwk & { x: string } }
  | { ok: false; problem: 'unknown' | 'ambiguous' | 'unusable'; message: string };

/**
 * The Ed25519 signing key of `kid` in a key set, by the one rule every verifier here applies
 * (capsules, checkpoints). Exactly one entry may carry the kid: with two, which one the signer meant
 * cannot be known, and taking either would let a set verify with a key its publisher did not mean,
 * so the kid is not usable at all. That entry must be an Ed25519 key for signatures: `kty` OKP,
 * `crv` Ed25519, an `x`, and `alg` EdDSA and `use` sig when they are given.
 */
export function signingKey(keys: KeySet, kid: string): SigningKeyLookup {
  const matches = keyList(keys).filter((k) => k.kid === kid);
  if (matches.length === 0)
    return { ok: false, problem: 'unknown', message: `key ${kid} is not in the key set` };
  if (matches.length > 1) {
    return {
      ok: false,
      problem: 'ambiguous',
      message: `key ${kid} appears ${matches.length} times in the key set: ambiguous, so it is not used`,
    };
  }
  const jwk = matches[0]!;
  if (
    jwk.kty !== 'OKP' ||
    jwk.crv !== 'Ed25519' ||
    typeof jwk.x !== 'string' ||
    (jwk.alg !== undefined && jwk.alg !== 'EdDSA') ||
    (jwk.use !== undefined && jwk.use !== 'sig')
  ) {
    return { ok: false, problem: 'unusable', message: `key ${kid} is not an Ed25519 signing key` };
  }
  return { ok: true, jwk: jwk as PublicJwk & { x: string } };
}
