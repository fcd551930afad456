export {
  type BeneficiaryDetails,
  BeneficiaryError,
  beneficiaryHash,
  normalizeBeneficiary,
  normalizedName,
} from './beneficiary.js';
export { base64url, canonicalJson, fromBase64url, sha256Tagged } from './canonical.js';
export {
  capsuleSigningInput,
  compactCapsule,
  type VerifyCapsuleOptions,
  verifyCapsule,
  verifyEd25519,
} from './jws.js';
export { keyList, type SigningKeyLookup, signingKey } from './keys.js';
export * from './model.js';
export {
  CAPSULE_PAYLOAD_SCHEMA,
  isCapsulePayload,
  moneyProblems,
  type PayloadProblem,
  payloadProblems,
  precisionProblem,
} from './schema.js';
