/**
 * Spend capsules, verified where they are used: the runtime-neutral verification of @svc/capsules
 * (WebCrypto Ed25519, no Node built-in), and a helper that reads the service's published key set.
 * Verification proves the capsule was signed by the service, is canonical and unexpired; whether it
 * may still be spent (single use, amount, payee, rail) is the service's to decide at consume.
 */
import { type CapsuleCheck, type PublicJwk, type VerifyCapsuleOptions, verifyCapsule } from '@svc/capsules';
import { serviceBase } from './http.js';

export {
  type BeneficiaryDetails,
  beneficiaryHash,
  CAPSULE_PAYLOAD_SCHEMA,
  type CapsuleCheck,
  type CapsulePayload,
  isCapsulePayload,
  normalizeBeneficiary,
  type PublicJwk,
  type VerifyCapsuleOptions,
  verifyCapsule,
} from '@svc/capsules';

/**
 * The key set a service publishes at `/.well-known/svc-keys.json` (current and previous keys) under
 * `baseUrl`, as the client addresses every route (serviceBase): a base URL with a path (a service
 * mounted under a prefix) keeps it, and one that is no http(s) URL throws SvcError.
 */
export async function fetchCapsuleKeys(
  baseUrl: string,
  fetchFn: typeof fetch = globalThis.fetch,
): Promise<PublicJwk[]> {
  const res = await fetchFn(`${serviceBase(baseUrl)}/.well-known/svc-keys.json`);
  if (!res.ok) throw new Error(`the key set at ${baseUrl} answered ${res.status}`);
  const body = (await res.json()) as { keys?: unknown };
  if (!Array.isArray(body.keys)) throw new Error(`the key set at ${baseUrl} has no keys array`);
  return body.keys as PublicJwk[];
}

/** Verifies a capsule against the key set the service at `baseUrl` publishes. */
export async function verifyCapsuleAt(
  baseUrl: string,
  capsule: string,
  opts: VerifyCapsuleOptions & { fetch?: typeof fetch } = {},
): Promise<CapsuleCheck> {
  const { fetch: fetchFn, ...verifyOpts } = opts;
  return verifyCapsule(capsule, await fetchCapsuleKeys(baseUrl, fetchFn), verifyOpts);
}
