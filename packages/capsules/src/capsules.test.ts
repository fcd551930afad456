import { generateKeyPairSync, sign } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import {
  type BeneficiaryDetails,
  BeneficiaryError,
  base64url,
  beneficiaryHash,
  CAPSULE_PAYLOAD_SCHEMA,
  type CapsulePayload,
  canonicalJson,
  capsuleSigningInput,
  compactCapsule,
  type KeySet,
  keyList,
  normalizeBeneficiary,
  type PublicJwk,
  payloadProblems,
  precisionProblem,
  signingKey,
  verifyCapsule,
} from './index.js';

const { privateKey, publicKey } = generateKeyPairSync('ed25519');
const jwk = {
  ...(publicKey.export({ format: 'jwk' }) as { kty: string; crv: string; x: string }),
  kid: 'k1',
  alg: 'EdDSA',
};
const other = generateKeyPairSync('ed25519');

const payload = (over: Partial<Record<keyof CapsulePayload, unknown>> = {}): CapsulePayload =>
  ({
    version: 'svc.capsule/1',
    capsule_id: '0199a7e0-0000-7000-8000-000000000001',
    issuer: 'https://svc.example',
    organization_id: 'org-1',
    entity_id: 'acme-ops',
    agent_id: 'agent-7',
    rail_allowlist: ['ach', 'ledger'],
    beneficiary: `sha256:${'a'.repeat(64)}`,
    amount_ceiling: { currency: 'USD', amount: '125.50' },
    pack_id: 'default',
    pack_version: 3,
    policy_sha256: `sha256:${'b'.repeat(64)}`,
    issued_at: '2026-11-22T10:00:00.000Z',
    expires_at: '2026-11-22T10:05:00.000Z',
    nonce: 'bm9uY2Utbm9uY2Utbm9uY2U',
    ...over,
  }) as CapsulePayload;

const mint = (p: unknown, key = privateKey, kid = 'k1') => {
  const input = capsuleSigningInput(p as CapsulePayload, kid);
  return compactCapsule(input, sign(null, Buffer.from(input), key));
};
const at = new Date('2026-11-22T10:01:00Z');

describe('capsule JWS', () => {
  it('verifies a minted capsule with the published key', async () => {
    const r = await verifyCapsule(mint(payload()), [jwk], { now: at });
    expect(r).toEqual({ ok: true, payload: payload(), kid: 'k1' });
  });

  it('refuses each failure with its catalog code', async () => {
    expect(await verifyCapsule(mint(payload()), [{ ...jwk, kid: 'other' }], { now: at })).toMatchObject({
      ok: false,
      code: 'capsule_kid_unknown',
    });
    expect(await verifyCapsule(mint(payload(), other.privateKey), [jwk], { now: at })).toMatchObject({
      code: 'capsule_signature_invalid',
    });
    // A payload changed after signing.
    const [h, , s] = mint(payload()).split('.');
    const altered = base64url(
      new TextEncoder().encode(
        canonicalJson(payload({ amount_ceiling: { currency: 'USD', amount: '9999.00' } })),
      ),
    );
    expect(await verifyCapsule(`${h}.${altered}.${s}`, [jwk], { now: at })).toMatchObject({
      code: 'capsule_signature_invalid',
    });
    // Expired, with the skew tolerance on both sides of the edge.
    expect((await verifyCapsule(mint(payload()), [jwk], { now: new Date('2026-11-22T10:05:29Z') })).ok).toBe(
      true,
    );
    expect(
      await verifyCapsule(mint(payload()), [jwk], { now: new Date('2026-11-22T10:05:30Z') }),
    ).toMatchObject({
      code: 'capsule_expired',
      param: 'expires_at',
    });
    expect(await verifyCapsule('not.a-capsule', [jwk])).toMatchObject({
      code: 'capsule_payload_invalid',
      param: 'capsule',
    });
  });

  it('takes the key set as published, skips entries that are no key, refuses keys for another use', async () => {
    expect(await verifyCapsule(mint(payload()), { keys: [jwk] }, { now: at })).toMatchObject({ ok: true });
    expect(
      await verifyCapsule(mint(payload()), [null, jwk] as unknown as (typeof jwk)[], { now: at }),
    ).toMatchObject({ ok: true });
    for (const key of [
      { ...jwk, alg: 'ES256' },
      { ...jwk, use: 'enc' },
    ]) {
      expect(await verifyCapsule(mint(payload()), [key], { now: at }), JSON.stringify(key)).toMatchObject({
        ok: false,
        code: 'capsule_kid_unknown',
      });
    }
  });

  it('refuses a kid the key set publishes twice, whichever entry signed', async () => {
    const twin = {
      ...(other.publicKey.export({ format: 'jwk' }) as { kty: string; crv: string; x: string }),
      kid: 'k1',
      alg: 'EdDSA',
    };
    for (const keys of [[jwk, twin], [twin, jwk], { keys: [jwk, { ...jwk }] }]) {
      expect(await verifyCapsule(mint(payload()), keys, { now: at })).toEqual({
        ok: false,
        code: 'capsule_kid_unknown',
        message: 'key k1 appears 2 times in the key set: ambiguous, so it is not used',
        param: 'header.kid',
      });
    }
    // Another kid twice leaves this one usable.
    const k2 = { ...twin, kid: 'k2' };
    expect(await verifyCapsule(mint(payload()), [k2, jwk, k2], { now: at })).toMatchObject({ ok: true });
  });

  it('never takes an invalid clock or skew for "not expired": it throws', async () => {
    const expired = mint(payload());
    for (const opts of [
      { now: new Date('x') },
      { now: at, skewSeconds: Number.NaN },
      { now: at, skewSeconds: Number.POSITIVE_INFINITY },
      // Not numbers: '1e9' would multiply to a finite skew of 31 years.
      { now: at, skewSeconds: '1e9' as unknown as number },
      { now: Date.parse('2030-01-01') as unknown as Date },
    ]) {
      await expect(verifyCapsule(expired, [jwk], opts), JSON.stringify(opts)).rejects.toBeInstanceOf(
        TypeError,
      );
    }
  });

  it('refuses a signed payload that is not canonical, or has an unknown member, or misses one', async () => {
    const input = (text: string) => {
      const header = base64url(
        new TextEncoder().encode(canonicalJson({ alg: 'EdDSA', kid: 'k1', typ: 'svc.capsule+jws' })),
      );
      const signingInput = `${header}.${base64url(new TextEncoder().encode(text))}`;
      return compactCapsule(signingInput, sign(null, Buffer.from(signingInput), privateKey));
    };
    const spaced = JSON.stringify(payload(), null, 1);
    expect(await verifyCapsule(input(spaced), [jwk], { now: at })).toMatchObject({
      code: 'capsule_payload_invalid',
      param: 'payload',
    });
    expect(await verifyCapsule(mint({ ...payload(), extra: 1 }), [jwk], { now: at })).toMatchObject({
      code: 'capsule_payload_invalid',
      param: 'extra',
    });
    const { nonce: _n, ...noNonce } = payload();
    expect(await verifyCapsule(mint(noNonce), [jwk], { now: at })).toMatchObject({ param: 'nonce' });
    // Members named like those every object inherits are unknown members too.
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      const text = canonicalJson(payload()).replace(/^\{/, `{${JSON.stringify(name)}:1,`);
      const signed = mint(JSON.parse(text));
      expect(await verifyCapsule(signed, [jwk], { now: at }), name).toMatchObject({
        ok: false,
        code: 'capsule_payload_invalid',
        param: name,
      });
    }
  });
});

describe('key sets (signingKey, the rule capsules and checkpoints share)', () => {
  it('answers the one Ed25519 signing key of a kid, or why there is none', () => {
    expect(signingKey({ keys: [jwk] }, 'k1')).toEqual({ ok: true, jwk });
    expect(signingKey([{ ...jwk, use: 'sig' }], 'k1')).toMatchObject({ ok: true });
    expect(signingKey([jwk], 'k2')).toEqual({
      ok: false,
      problem: 'unknown',
      message: 'key k2 is not in the key set',
    });
    expect(signingKey([jwk, jwk], 'k1')).toMatchObject({ ok: false, problem: 'ambiguous' });
    for (const key of [
      { ...jwk, use: 'enc' },
      { ...jwk, alg: 'ES256' },
      { ...jwk, crv: 'X25519' },
      { ...jwk, kty: 'EC' },
      { ...jwk, x: undefined },
    ]) {
      expect(signingKey([key], 'k1'), JSON.stringify(key)).toEqual({
        ok: false,
        problem: 'unusable',
        message: 'key k1 is not an Ed25519 signing key',
      });
    }
  });

  it('reads a list or a published set, leaving out entries that are no key', () => {
    const set = [null, 3, 'k1', [jwk], jwk] as unknown as KeySet;
    expect(keyList(set)).toEqual([jwk]);
    expect(keyList({ keys: set as PublicJwk[] })).toEqual([jwk]);
    for (const notASet of [null, undefined, 7, 'keys', { keys: null }, {}]) {
      expect(keyList(notASet as unknown as KeySet)).toEqual([]);
    }
  });
});

describe('payload schema', () => {
  const ajv = new Ajv2020({ strict: false });
  const validate = ajv.compile(CAPSULE_PAYLOAD_SCHEMA);

  it('is published as schema/capsule-payload.schema.json, identical to the one the code checks', () => {
    const file = JSON.parse(
      readFileSync(join(import.meta.dirname, '..', 'schema', 'capsule-payload.schema.json'), 'utf8'),
    );
    expect(file).toEqual(JSON.parse(JSON.stringify(CAPSULE_PAYLOAD_SCHEMA)));
  });

  it.each([
    ['a valid payload', payload()],
    [
      'with optional members',
      payload({ invoice_hash: `sha256:${'c'.repeat(64)}`, workflow_id: 'wf-1', approval_ref: 'ap-1' }),
    ],
    ['an unknown member', { ...payload(), extra: true }],
    ['a member named constructor', { ...payload(), constructor: 'x' }],
    ['a member named __proto__', JSON.parse(`{"__proto__":1,${canonicalJson(payload()).slice(1)}`)],
    ['a float amount', payload({ amount_ceiling: { currency: 'USD', amount: 12.5 } })],
    ['a bad hash', payload({ beneficiary: 'sha256:xyz' })],
    ['no rails', payload({ rail_allowlist: [] })],
    ['repeated rails', payload({ rail_allowlist: ['ach', 'ach'] })],
    ['a zero version', payload({ pack_version: 0 })],
    ['a wrong version', payload({ version: 'svc.capsule/2' })],
    ['a date without a zone', payload({ issued_at: '2026-11-22T10:00:00' })],
    // Lengths count code points, as JSON Schema does: 150 emoji are 150 characters (300 UTF-16 units).
    ['an id of 150 emoji', payload({ entity_id: '\u{1F600}'.repeat(150) })],
    [
      'an id of 200 emoji',
      payload({ agent_id: '\u{1F600}'.repeat(200), workflow_id: '\u{1F600}'.repeat(200) }),
    ],
    ['an id of 201 emoji', payload({ workflow_id: '\u{1F600}'.repeat(201) })],
    ['an id of 200 lone surrogates', payload({ entity_id: '\ud800'.repeat(200) })],
    ['an id of 201 characters', payload({ agent_id: 'a'.repeat(201) })],
  ])('the code and the JSON Schema agree on %s', (_name, value) => {
    const byCode = payloadProblems(value).length === 0;
    expect(byCode).toBe(validate(value));
  });

  it('adds what a schema cannot say: expiry after issue, currency precision', () => {
    expect(payloadProblems(payload({ expires_at: '2026-11-22T09:00:00.000Z' }))[0]?.param).toBe('expires_at');
    expect(
      payloadProblems(payload({ amount_ceiling: { currency: 'USD', amount: '1.005' } }))[0],
    ).toMatchObject({
      param: 'amount_ceiling.amount',
    });
    expect(precisionProblem({ currency: 'USDC', amount: '1.000001' })).toBeNull();
    expect(precisionProblem({ currency: 'USDC', amount: '1.0000001' })).toMatch(/6 decimal/);
  });
});

describe('beneficiary hash', () => {
  it('one payee written two ways hashes the same; another payee does not', async () => {
    const a = await beneficiaryHash({
      name: '  ACME  Supplies ',
      account_number: 'de89 3704-0044 0532 0130 00',
      country: 'de',
    });
    const b = await beneficiaryHash({
      name: 'acme supplies',
      account_number: 'DE89370400440532013000',
      country: 'DE',
    });
    const c = await beneficiaryHash({
      name: 'acme supplies',
      account_number: 'DE89370400440532013001',
      country: 'DE',
    });
    expect(a).toBe(b);
    expect(a).not.toBe(c);
    expect(a).toMatch(/^sha256:[0-9a-f]{64}$/);
    await expect(beneficiaryHash({ name: 'x' })).rejects.toThrow(/account_number or a wallet_address/);
    // Refusals name the member at fault, so a caller can point at it.
    const memberOf = (d: unknown) => {
      try {
        normalizeBeneficiary(d as BeneficiaryDetails);
      } catch (err) {
        return err instanceof BeneficiaryError ? err.member : 'other';
      }
      return 'accepted';
    };
    expect(memberOf({ name: ' \u00a0 ', account_number: '1' })).toBe('name');
    expect(memberOf({ name: 5, account_number: '1' })).toBe('name');
    expect(memberOf({ name: 'x', account_number: 5 })).toBe('account_number');
    expect(memberOf({ name: 'x', account_number: ' - ' })).toBe(null);
    expect(memberOf({ name: 'x', wallet_address: '0xab' })).toBe('accepted');
  });
});

describe('runtime neutrality', () => {
  it('imports nothing from node: in its sources', () => {
    const dir = import.meta.dirname;
    for (const f of readdirSync(dir).filter((n) => n.endsWith('.ts') && !n.endsWith('.test.ts'))) {
      expect(readFileSync(join(dir, f), 'utf8')).not.toMatch(/from ['"]node:/);
    }
  });
});
