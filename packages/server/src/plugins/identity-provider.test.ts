import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { bearer, expectError, JWT_SECRET, type TestApp, withTestApp } from '../../test/helpers.js';
import { type LocalProvider, PROVIDER_ALGORITHMS, startLocalProvider } from '../../test/oidc-provider.js';
import { loadConfig } from '../config.js';
import { createJwtVerifier } from '../lib/jwt.js';

let idp: LocalProvider;
beforeAll(async () => {
  idp = await startLocalProvider();
});
afterAll(async () => idp.stop());

const providerConfig = () => ({
  jwtSecret: null,
  jwtJwksUrl: idp.jwksUrl,
  jwtIssuer: idp.issuer,
  jwtAudience: idp.audience,
  jwtJwksCacheSeconds: 1,
});

/** A user request that needs nothing but a valid token: the caller's organizations. */
const whoAmI = (t: TestApp, token: string) =>
  t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });

describe('user tokens from an identity provider (SVC_JWT_JWKS_URL)', () => {
  const t = useTestApp(providerConfig);

  it.each(PROVIDER_ALGORITHMS)('accepts %s tokens and acts as their sub', async (alg) => {
    const token = await idp.token(alg);
    const slug = `idp-${alg.toLowerCase()}-${Date.now()}`;
    const created = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(token),
      payload: { name: 'Provider org', slug },
    });
    expect(created.statusCode).toBe(201);
    expect(created.json().ownerId).toBe('alice-agent');
    expect((await whoAmI(t, token)).statusCode).toBe(200);
  });

  it('refuses forged, foreign-audience and shared-secret tokens with 401', async () => {
    const { privateKey } = await generateKeyPair('ES256');
    const forged = await new SignJWT({})
      .setProtectedHeader({ alg: 'ES256', kid: 'key-ES256' })
      .setSubject('alice-agent')
      .setIssuer(idp.issuer)
      .setAudience(idp.audience)
      .setExpirationTime('5m')
      .sign(privateKey);
    const hs = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('alice-agent')
      .setIssuer(idp.issuer)
      .setAudience(idp.audience)
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(JWT_SECRET));
    for (const token of [forged, await idp.token('RS256', { otherAudience: true }), hs]) {
      expectError(await whoAmI(t, token), 401, 'unauthorized');
    }
  });

  it('answers 503 and warns while the key set is stale and the provider unreachable, then recovers', async () => {
    // Its own app, so the key set is fetched by this test's first request, not earlier.
    const cacheMs = 2000;
    await withTestApp({ ...providerConfig(), jwtJwksCacheSeconds: cacheMs / 1000 }, async (own) => {
      const warn = vi.spyOn(own.app.log, 'warn');
      try {
        const token = await idp.token('ES256');
        // The first request fetches the key set: after fetchedAfter, before fetchedBy.
        const fetchedAfter = Date.now();
        expect((await whoAmI(own, token)).statusCode).toBe(200);
        const fetchedBy = Date.now();
        await idp.stop();
        // Within the cache duration the cached keys still answer (checked only while surely within it).
        if (Date.now() - fetchedAfter < cacheMs / 2) expect((await whoAmI(own, token)).statusCode).toBe(200);
        await new Promise((r) => setTimeout(r, Math.max(0, fetchedBy + cacheMs + 100 - Date.now())));
        const res = await whoAmI(own, token);
        expectError(res, 503, 'service_unavailable');
        expect(res.headers['retry-after']).toBe('5');
        expect(res.json().error.message).toMatch(/identity provider is unreachable/);
        expect(warn).toHaveBeenCalledWith(
          expect.objectContaining({
            err: expect.objectContaining({ message: expect.stringContaining(idp.jwksUrl) }),
          }),
          expect.stringContaining('identity provider key set unavailable'),
        );
        // An API key does not depend on the provider.
        expectError(
          await own.inject({
            method: 'GET',
            url: '/v1/organizations',
            headers: { 'x-service-api-key': 'svc_x' },
          }),
          401,
          'invalid_api_key',
        );
        await idp.start();
        expect((await whoAmI(own, token)).statusCode).toBe(200);
      } finally {
        warn.mockRestore();
        await idp.start();
      }
    });
  });
});

describe('with both SVC_JWT_SECRET and SVC_JWT_JWKS_URL', () => {
  const t = useTestApp(() => ({ ...providerConfig(), jwtSecret: JWT_SECRET }));

  it('accepts shared-secret tokens and every provider algorithm, and says so', async () => {
    expect((await whoAmI(t, await t.token('ops'))).statusCode).toBe(200);
    for (const alg of PROVIDER_ALGORITHMS) {
      expect((await whoAmI(t, await idp.token(alg, { clientId: 'bob-agent' }))).statusCode).toBe(200);
    }
    const verifier = createJwtVerifier(
      { ...loadConfig({}), ...providerConfig(), jwtSecret: JWT_SECRET },
      JWT_SECRET,
    );
    expect(verifier.sources).toEqual(['HS256 (SVC_JWT_SECRET)', `RS256/ES256/EdDSA from ${idp.jwksUrl}`]);
  });

  it('refuses an HS256 token keyed with the provider public key, and a token bringing its own key', async () => {
    const { keys } = (await (await fetch(idp.jwksUrl)).json()) as { keys: { kid: string }[] };
    const rsa = keys[0]!;
    // The classic confusion: the provider's public key used as an HMAC secret.
    const confused = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256', kid: rsa.kid })
      .setSubject('mallory')
      .setIssuer(idp.issuer)
      .setAudience(idp.audience)
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(JSON.stringify(rsa)));
    expectError(await whoAmI(t, confused), 401, 'unauthorized');
    // A token that brings its own key in the header.
    const { privateKey, publicKey } = await generateKeyPair('EdDSA');
    const selfMade = await new SignJWT({})
      .setProtectedHeader({ alg: 'EdDSA', kid: 'key-EdDSA', jwk: await exportJWK(publicKey) })
      .setSubject('mallory')
      .setIssuer(idp.issuer)
      .setAudience(idp.audience)
      .setExpirationTime('5m')
      .sign(privateKey);
    expectError(await whoAmI(t, selfMade), 401, 'unauthorized');
  });
});

describe('SVC_JWT_JWKS_CACHE_SECONDS', () => {
  it('defaults to 600 and refuses nonsense', () => {
    expect(loadConfig({}).jwtJwksCacheSeconds).toBe(600);
    expect(loadConfig({ SVC_JWT_JWKS_CACHE_SECONDS: '60' }).jwtJwksCacheSeconds).toBe(60);
    for (const bad of ['0', '-1', '1.5', 'soon', '86401']) {
      expect(() => loadConfig({ SVC_JWT_JWKS_CACHE_SECONDS: bad })).toThrow(/SVC_JWT_JWKS_CACHE_SECONDS/);
    }
  });
});
