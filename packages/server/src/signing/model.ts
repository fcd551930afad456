/** An Ed25519 public key as published in the key set (RFC 8037 OKP JWK). */
export interface PublishedKey {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
  /** RFC 7638 JWK thumbprint (SHA-256, base64url) of {crv, kty, x}. */
  kid: string;
  alg: 'EdDSA';
  use: 'sig';
}

/** One key of the service's signing key set, as kept by its storage. */
export interface SigningKeyRecord {
  kid: string;
  /** Base64url Ed25519 public key (the JWK `x`). */
  x: string;
  /** Base64url Ed25519 private key (the JWK `d`); absent for an operator-supplied key, which stays in its file. */
  d?: string;
  source: 'generated' | 'file';
  createdAt: string;
  /** When a newer key took over signing; null while this key signs. */
  retiredAt: string | null;
}

/** The whole key set as one document, so a rotation is one compare-and-swap write. */
export interface KeySetDocument {
  version: 1;
  keys: SigningKeyRecord[];
}

export interface SigningKeyInfo {
  kid: string;
  source: 'generated' | 'file';
  status: 'active' | 'retired';
  createdAt: string;
  retiredAt: string | null;
  /** Until when the public key stays in the published key set (null while active). */
  publishedUntil: string | null;
  published: boolean;
}

export interface Signature {
  kid: string;
  /** Base64url Ed25519 signature. */
  signature: string;
}

/** No signing key can be loaded: operations that must sign answer 503 `signing_key_missing`. */
export class SigningKeyMissingError extends Error {
  constructor(message = 'No Ed25519 signing key is available') {
    super(message);
    this.name = 'SigningKeyMissingError';
  }
}
