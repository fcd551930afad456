/**
 * Spend capsules, verified where they are used: the runtime-neutral verification of @svc/capsules
 * (WebCrypto Ed25519, no Node built-in), and a helper that reads the service's published key set.
 * Verification proves the capsule was signed by the service, is canonical and unexpired; whether it
 * may still be spent (single use, amount, payee, rail) is the service's to decide at consume.
 */
import { type CapsuleCheck, type PublicJwk, type VerifyCapsuleOptions, verifyCapsule } from '@svc/capsules';

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
 * `baseUrl`, as the client addresses every route: a base URL with a path (a service mounted under a
 * prefix) keeps it.
 */
export async function fetchCapsuleKeys(
  baseUrl: string,
  fetchFn: typeof fetch = globalThis.fetch,
): Promise<PublicJwk[]> {
  const res = await fetchFn(`${String(baseUrl).replace(/\/+$/, '')}/.well-known/svc-keys.json`);
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
