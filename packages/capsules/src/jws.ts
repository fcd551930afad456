import { base64url, canonicalJson, fromBase64url } from './canonical.js';
import { signingKey } from './keys.js';
import {
  CAPSULE_TYP,
  type CapsuleCheck,
  type CapsulePayload,
  DEFAULT_SKEW_SECONDS,
  type KeySet,
} from './model.js';
import { payloadProblems } from './schema.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * Whether `signature` is the Ed25519 signature of `data` under the public key `x` (a JWK's base64url
 * `x`), through WebCrypto in any runtime. Throws when the key or signature cannot be used at all.
 */
export async function verifyEd25519(x: string, signature: Uint8Array, data: Uint8Array): Promise<boolean> {
  const key = await crypto.subtle.importKey(
    'jwk',
    { kty: 'OKP', crv: 'Ed25519', x },
    { name: 'Ed25519' },
    false,
    ['verify'],
  );
  return crypto.subtle.verify(
    { name: 'Ed25519' },
    key,
    signature as Uint8Array<ArrayBuffer>,
    data as Uint8Array<ArrayBuffer>,
  );
}

/**
 * The JWS signing input of a capsule (RFC 7515: BASE64URL(header) '.' BASE64URL(payload)), with the
 * header `{alg: EdDSA, kid, typ: svc.capsule+jws}` and the payload as RFC 8785 canonical JSON.
 */
export function capsuleSigningInput(payload: CapsulePayload, kid: string): string {
  const header = canonicalJson({ alg: 'EdDSA', kid, typ: CAPSULE_TYP });
  return `${base64url(encoder.encode(header))}.${base64url(encoder.encode(canonicalJson(payload)))}`;
}

/** The compact serialization: signing input, '.', base64url Ed25519 signature. */
export function compactCapsule(signingInput: string, signature: Uint8Array | string): string {
  return `${signingInput}.${typeof signature === 'string' ? signature : base64url(signature)}`;
}

export interface VerifyCapsuleOptions {
  /** Now, for the expiry check (default: the current time). */
  now?: Date;
  skewSeconds?: number;
}

const fail = (
  code: Extract<CapsuleCheck, { ok: false }>['code'],
  message: string,
  param: string | null = null,
) => ({ ok: false, code, message, param }) as const;

/**
 * Verifies a capsule against a published key set (the service's /.well-known/svc-keys.json), in any
 * runtime with WebCrypto Ed25519. Checks, in order: the compact form and header, the key (`kid`
 * names exactly one Ed25519 signing key of the set, see signingKey), the signature, that the
 * payload is canonical JSON with exactly the schema's members, and that it has not expired (with
 * `skewSeconds` of tolerance). Consumption (single use, amounts, payee, rail) is the service's to
 * check at the moment of paying.
 */
export async function verifyCapsule(
  jws: string,
  /** The keys, or the key set as published (`{keys: [...]}`, GET /.well-known/svc-keys.json). */
  keys: KeySet,
  opts: VerifyCapsuleOptions = {},
): Promise<CapsuleCheck> {
  const skewSeconds: unknown = opts.skewSeconds ?? DEFAULT_SKEW_SECONDS;
  // Date.prototype.getTime throws a TypeError for what is not a Date (of any realm).
  const now = opts.now === undefined ? Date.now() : Date.prototype.getTime.call(opts.now);
  // A NaN here would make every capsule unexpired, and so would a string ('1e9' multiplies to a
  // finite skew of 31 years): a caller's mistake must not accept one.
  if (!Number.isFinite(now) || typeof skewSeconds !== 'number' || !Number.isFinite(skewSeconds)) {
    throw new TypeError('verifyCapsule: opts.now must be a valid Date and opts.skewSeconds a finite number');
  }
  const skew = skewSeconds * 1000;
  const parts = typeof jws === 'string' ? jws.split('.') : [];
  if (parts.length !== 3)
    return fail('capsule_payload_invalid', 'a capsule is a compact JWS of three parts', 'capsule');
  const [h, p, s] = parts as [string, string, string];
  let header: Record<string, unknown>;
  let payloadText: string;
  let signature: Uint8Array<ArrayBuffer>;
  try {
    header = JSON.parse(decoder.decode(fromBase64url(h)));
    payloadText = decoder.decode(fromBase64url(p));
    signature = fromBase64url(s);
  } catch {
    return fail('capsule_payload_invalid', 'the capsule is not valid base64url JSON', 'capsule');
  }
  if (header?.['alg'] !== 'EdDSA' || header['typ'] !== CAPSULE_TYP || typeof header['kid'] !== 'string') {
    return fail(
      'capsule_payload_invalid',
      `the header must be {alg: EdDSA, kid, typ: ${CAPSULE_TYP}}`,
      'header',
    );
  }
  if (Object.keys(header).length !== 3 || decoder.decode(fromBase64url(h)) !== canonicalJson(header)) {
    return fail('capsule_payload_invalid', 'the header is not canonical or has unknown members', 'header');
  }
  const kid = header['kid'];
  // Unknown, published twice, or not an Ed25519 signing key: the catalog has one code for a kid
  // that names no key to verify with.
  const key = signingKey(keys, kid);
  if (!key.ok) return fail('capsule_kid_unknown', key.message, 'header.kid');
  let valid = false;
  try {
    valid = await verifyEd25519(key.jwk.x, signature, encoder.encode(`${h}.${p}`));
  } catch {
    valid = false;
  }
  if (!valid) return fail('capsule_signature_invalid', 'the signature does not verify with the key set');
  let payload: unknown;
  try {
    payload = JSON.parse(payloadText);
  } catch {
    return fail('capsule_payload_invalid', 'the payload is not JSON', 'payload');
  }
  const problems = payloadProblems(payload);
  if (problems.length > 0) return fail('capsule_payload_invalid', problems[0]!.message, problems[0]!.param);
  // Signed but not canonical: two spellings of one capsule must never both verify.
  if (canonicalJson(payload) !== payloadText) {
    return fail('capsule_payload_invalid', 'the signed payload is not RFC 8785 canonical JSON', 'payload');
  }
  const capsule = payload as CapsulePayload;
  if (now >= Date.parse(capsule.expires_at) + skew) {
    return fail('capsule_expired', `the capsule expired at ${capsule.expires_at}`, 'expires_at');
  }
  return { ok: true, payload: capsule, kid };
}
