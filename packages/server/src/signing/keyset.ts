import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
  verify,
} from 'node:crypto';
import { statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { calculateJwkThumbprint } from 'jose';
import type { Clock } from '../lib/clock.js';
import {
  type KeySetDocument,
  type PublishedKey,
  type Signature,
  type SigningKeyInfo,
  SigningKeyMissingError,
  type SigningKeyRecord,
} from './model.js';
import type { KeySetStorage } from './storage.js';

/** How long a cached key set is trusted before it is read again (rotation by another process). */
const REFRESH_MS = 10_000;
/**
 * What is published, and what verifies, is read again once this old, or at once (at most this
 * often) when asked for a key the cached copy lacks: another instance may have just rotated, and
 * signs with its new key already.
 */
const PUBLISH_REFRESH_MS = 1_000;
const EMPTY: KeySetDocument = { version: 1, keys: [] };

interface Loaded {
  doc: KeySetDocument;
  /** The signing key (the one record without retiredAt) and its private half. */
  active: { record: SigningKeyRecord; privateKey: KeyObject } | null;
  /** Every key of the set by kid; whether it is still published is decided at the time of use. */
  publicKeys: Map<string, { record: SigningKeyRecord; key: KeyObject }>;
  readAt: number;
}

export interface KeySetOptions {
  storage: KeySetStorage;
  clock: Clock;
  /** How long a retired key stays published, so what it signed keeps verifying. */
  overlapSeconds: number;
  /** SVC_SIGNING_KEY_FILE: the operator supplies the signing key; the service then never generates one. */
  operatorKeyFile?: string | null;
  log?: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
}

export async function thumbprint(x: string): Promise<string> {
  return calculateJwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x }, 'sha256');
}

/** Refuses a key file that group or others may read: a leaked signing key forges history. */
export function assertPrivateFile(file: string): void {
  const mode = statSync(file).mode;
  if ((mode & 0o077) !== 0) {
    throw new Error(
      `SVC_SIGNING_KEY_FILE ${file} is readable by group or others (mode ${(mode & 0o777).toString(8)}); chmod 600 it`,
    );
  }
}

/** Reads an Ed25519 private key from a JWK (OKP, with d) or a PKCS#8 PEM file. */
export async function readOperatorKey(file: string): Promise<KeyObject> {
  assertPrivateFile(file);
  const text = (await readFile(file, 'utf8')).trim();
  let key: KeyObject;
  try {
    key = text.startsWith('{')
      ? createPrivateKey({ key: JSON.parse(text), format: 'jwk' })
      : createPrivateKey({ key: text, format: 'pem' });
  } catch (err) {
    throw new Error(`SVC_SIGNING_KEY_FILE ${file} holds no readable private key: ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new Error(
      `SVC_SIGNING_KEY_FILE ${file} holds a ${key.asymmetricKeyType} key; an Ed25519 key is required`,
    );
  }
  return key;
}

/** A retired key only ever verifies: its private half is dropped, so a leaked key set cannot sign with it. */
function retire(k: SigningKeyRecord, at: string): SigningKeyRecord {
  const { d: _private, ...rest } = k;
  return { ...rest, retiredAt: at };
}

function publicX(key: KeyObject): string {
  const jwk = createPublicKey(key).export({ format: 'jwk' }) as { x: string };
  return jwk.x;
}

function privateFromRecord(r: SigningKeyRecord): KeyObject {
  return createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', x: r.x, d: r.d }, format: 'jwk' });
}

function publicFromRecord(r: SigningKeyRecord): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: r.x }, format: 'jwk' });
}

/**
 * The service's Ed25519 signing key set: one active key signs; retired keys stay published for the
 * overlap so that everything they signed still verifies. Generated on first use and kept by the
 * storage, or supplied by the operator in a file (then rotating means replacing the file).
 */
export class SigningKeySet {
  private loaded: Loaded | null = null;
  private loading: Promise<{ loaded: Loaded; generation: number }> | null = null;
  /** Bumped by each rotation this process makes: a read begun before it may hold the set it replaced. */
  private generation = 0;
  /** When the set was last read again because a key was asked for that the cached copy lacks. */
  private unknownReadAt = 0;
  /** When a read of the set for publishing or verifying last failed. */
  private failedReadAt = 0;

  constructor(private readonly opts: KeySetOptions) {}

  /** Loads (and on first start creates) the key set; a malformed operator key file throws. */
  async open(): Promise<void> {
    await this.reload();
  }

  private now(): string {
    return this.opts.clock.now().toISOString();
  }

  private async reload(): Promise<Loaded> {
    if (!this.loading) {
      const generation = this.generation;
      this.loading = this.load()
        .then((loaded) => ({ loaded, generation }))
        .finally(() => {
          this.loading = null;
        });
    }
    const { loaded, generation } = await this.loading;
    // A rotation made here since that read began installed a newer set: keep it, or the retired key
    // (its private half still in the older copy) would sign again until the next read.
    if (generation !== this.generation && this.loaded) return this.loaded;
    this.loaded = loaded;
    return loaded;
  }

  private async load(): Promise<Loaded> {
    for (let attempt = 0; ; attempt++) {
      const stored = await this.opts.storage.read();
      const doc = stored ?? EMPTY;
      const operatorKey = await this.operatorKey();
      const next = await this.reconcile(doc, operatorKey);
      if (next !== doc && !(await this.opts.storage.swap(stored, next))) {
        if (attempt < 5) continue; // another process wrote first: read theirs
        throw new Error('the signing key set keeps changing under this process');
      }
      return this.index(next, operatorKey);
    }
  }

  /** The operator's key, or null when none is configured or its file cannot be read right now. */
  private async operatorKey(): Promise<KeyObject | null> {
    const file = this.opts.operatorKeyFile;
    if (!file) return null;
    try {
      return await readOperatorKey(file);
    } catch (err) {
      if (
        (err as NodeJS.ErrnoException).code === 'ENOENT' ||
        (err as NodeJS.ErrnoException).code === 'EACCES'
      ) {
        this.opts.log?.error({ file }, 'SVC_SIGNING_KEY_FILE cannot be read: signing is unavailable');
        return null;
      }
      throw err;
    }
  }

  /** The document as it must be: the operator's key active, or a generated key when none signs. */
  private async reconcile(doc: KeySetDocument, operatorKey: KeyObject | null): Promise<KeySetDocument> {
    const active = doc.keys.find((k) => k.retiredAt === null);
    if (this.opts.operatorKeyFile) {
      if (!operatorKey) return doc;
      const x = publicX(operatorKey);
      if (active?.x === x) return doc;
      const kid = await thumbprint(x);
      const keys = doc.keys
        .filter((k) => k.kid !== kid)
        .map((k) => (k.retiredAt === null ? retire(k, this.now()) : k));
      return {
        version: 1,
        keys: [{ kid, x, source: 'file', createdAt: this.now(), retiredAt: null }, ...keys],
      };
    }
    if (active?.d) return doc;
    return this.withNewKey(doc);
  }

  private async withNewKey(doc: KeySetDocument): Promise<KeySetDocument> {
    const { privateKey } = generateKeyPairSync('ed25519');
    const jwk = privateKey.export({ format: 'jwk' }) as { x: string; d: string };
    const kid = await thumbprint(jwk.x);
    const now = this.now();
    const keys = doc.keys.map((k) => (k.retiredAt === null ? retire(k, now) : k));
    return {
      version: 1,
      keys: [{ kid, x: jwk.x, d: jwk.d, source: 'generated', createdAt: now, retiredAt: null }, ...keys],
    };
  }

  private index(doc: KeySetDocument, operatorKey: KeyObject | null): Loaded {
    const record = doc.keys.find((k) => k.retiredAt === null) ?? null;
    let active: Loaded['active'] = null;
    if (record?.source === 'file' && operatorKey && publicX(operatorKey) === record.x) {
      active = { record, privateKey: operatorKey };
    } else if (record?.d && !this.opts.operatorKeyFile) {
      active = { record, privateKey: privateFromRecord(record) };
    }
    const publicKeys = new Map(doc.keys.map((k) => [k.kid, { record: k, key: publicFromRecord(k) }]));
    return { doc, active, publicKeys, readAt: Date.now() };
  }

  private publishedUntil(k: SigningKeyRecord): string | null {
    if (k.retiredAt === null) return null;
    return new Date(Date.parse(k.retiredAt) + this.opts.overlapSeconds * 1000).toISOString();
  }

  private isPublished(k: SigningKeyRecord): boolean {
    const until = this.publishedUntil(k);
    return until === null || until > this.now();
  }

  /** The key set, read again when the cached copy is older than REFRESH_MS (another process may have rotated). */
  private async current(): Promise<Loaded> {
    const l = this.loaded;
    if (l && Date.now() - l.readAt < REFRESH_MS) return l;
    try {
      return await this.reload();
    } catch (err) {
      // Keep signing with what was loaded: a storage hiccup must not stop the service.
      if (l) {
        this.opts.log?.warn({ err }, 'signing key set could not be re-read; using the cached copy');
        return l;
      }
      throw err;
    }
  }

  /**
   * The key set for publishing and verifying: no older than PUBLISH_REFRESH_MS, and read again when
   * `kid` is not in it (at most once per PUBLISH_REFRESH_MS, so unknown kids cannot flood the store).
   */
  private async recent(kid?: string): Promise<Loaded> {
    let l = await this.current();
    let missing = kid !== undefined && !l.publicKeys.has(kid);
    // A read under way may be the one that brings the key: wait for it rather than answer without.
    // It may also have begun just before another process rotated: without the key, this request
    // may still read the set again below, as if nothing had been under way.
    if (missing && this.loading) {
      l = await this.reload().catch(() => l);
      missing = !l.publicKeys.has(kid!);
      if (!missing) return l;
    }
    const now = Date.now();
    // After a failed read, the cached set serves for a while: a store away is not read per request.
    const since = Math.max(l.readAt, this.failedReadAt);
    const stale = now - since >= PUBLISH_REFRESH_MS;
    const unknown = missing && now - Math.max(this.unknownReadAt, this.failedReadAt) >= PUBLISH_REFRESH_MS;
    if (!stale && !unknown) return l;
    if (unknown) this.unknownReadAt = now;
    return this.reload().catch((err: unknown) => {
      this.failedReadAt = Date.now();
      this.opts.log?.warn({ err }, 'signing key set could not be re-read; using the cached copy');
      return l;
    });
  }

  /** Signs bytes with the active key; throws SigningKeyMissingError when no key can be loaded. */
  async sign(data: Uint8Array): Promise<Signature> {
    const l = await this.current().catch(() => null);
    if (!l?.active) throw new SigningKeyMissingError();
    return {
      kid: l.active.record.kid,
      signature: sign(null, data, l.active.privateKey).toString('base64url'),
    };
  }

  /**
   * Signs bytes that name the signing key themselves: `build` receives the kid of the key that will
   * sign and returns the bytes, so a rotation in between can never make them disagree.
   */
  async signNaming(build: (kid: string) => Uint8Array): Promise<Signature> {
    const l = await this.current().catch(() => null);
    if (!l?.active) throw new SigningKeyMissingError();
    const kid = l.active.record.kid;
    return { kid, signature: sign(null, build(kid), l.active.privateKey).toString('base64url') };
  }

  /** The kid that signs now, or null. */
  async activeKid(): Promise<string | null> {
    const l = await this.current().catch(() => null);
    return l?.active?.record.kid ?? null;
  }

  /**
   * Whether `kid` is a key of the set that no longer signs (retired, published or not). A kid this
   * process does not know yet (another process rotated and this one has not re-read the set) is not.
   */
  async isRetired(kid: string): Promise<boolean> {
    const l = await this.current().catch(() => null);
    const entry = l?.publicKeys.get(kid);
    return entry !== undefined && entry.record.retiredAt !== null;
  }

  /** Verifies against the published keys only: a retired key past its overlap no longer verifies. */
  async verify(data: Uint8Array, sig: Signature): Promise<boolean> {
    const l = await this.recent(sig.kid);
    const entry = l.publicKeys.get(sig.kid);
    if (!entry || !this.isPublished(entry.record)) return false;
    return verify(null, data, entry.key, Buffer.from(sig.signature, 'base64url'));
  }

  /**
   * The public key set (JWKS), the signing key first, read within the last second (with `kid`: also
   * read again when that key is not in it). Throws SigningKeyMissingError when nothing signs.
   */
  async published(kid?: string): Promise<PublishedKey[]> {
    const l = await this.recent(kid).catch(() => null);
    if (!l?.active) throw new SigningKeyMissingError();
    return l.doc.keys
      .filter((k) => this.isPublished(k))
      .map((k) => ({ kty: 'OKP', crv: 'Ed25519', x: k.x, kid: k.kid, alg: 'EdDSA', use: 'sig' }));
  }

  async list(): Promise<SigningKeyInfo[]> {
    const l = await this.reload();
    return l.doc.keys.map((k) => ({
      kid: k.kid,
      source: k.source,
      status: k.retiredAt === null ? 'active' : 'retired',
      createdAt: k.createdAt,
      retiredAt: k.retiredAt,
      publishedUntil: this.publishedUntil(k),
      published: this.isPublished(k),
    }));
  }

  /**
   * A new generated key signs from now on; the previous one stays published for the overlap. Refused
   * when the operator supplies the key (rotating then means replacing SVC_SIGNING_KEY_FILE).
   */
  async rotate(): Promise<{
    kid: string;
    previousKid: string | null;
    previousPublishedUntil: string | null;
  }> {
    if (this.opts.operatorKeyFile) {
      throw new Error('the signing key comes from SVC_SIGNING_KEY_FILE: replace that file to rotate');
    }
    for (let attempt = 0; attempt < 5; attempt++) {
      const stored = await this.opts.storage.read();
      const doc = stored ?? EMPTY;
      const previous = doc.keys.find((k) => k.retiredAt === null) ?? null;
      const next = await this.withNewKey(doc);
      if (await this.opts.storage.swap(stored, next)) {
        this.generation++;
        this.loaded = this.index(next, null);
        const retired = previous ? next.keys.find((k) => k.kid === previous.kid)! : null;
        return {
          kid: next.keys[0]!.kid,
          previousKid: previous?.kid ?? null,
          previousPublishedUntil: retired ? this.publishedUntil(retired) : null,
        };
      }
    }
    throw new Error('the signing key set keeps changing; try the rotation again');
  }
}
