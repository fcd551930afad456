import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, expectError, JWT_SECRET, withTestApp } from '../../test/helpers.js';
import { loadConfig } from '../config.js';
import { createJwtVerifier, KeySourceError, signUserToken, TokenError } from './jwt.js';

/**
 * The key set of SVC_JWT_JWKS_URL from a provider that misbehaves: an endless or oversized key set,
 * a redirect to another host. And a `sub` that is not well-formed Unicode, from either kind of token.
 */
const MiB = 1024 * 1024;
let server: Server;
let base: string;
let privateKey: Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
let jwks: string;
const hits: string[] = [];
let sent = 0;

beforeAll(async () => {
  const pair = await generateKeyPair('ES256');
  privateKey = pair.privateKey;
  jwks = JSON.stringify({ keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'ES256' }] });
  server = createServer((req, res) => {
    const path = req.url ?? '/';
    hits.push(path);
    if (path === '/jwks' || path === '/elsewhere/jwks') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(jwks);
    } else if (path === '/redirect') {
      const port = (server.address() as AddressInfo).port;
      res.writeHead(302, { location: `http://localhost:${port}/elsewhere/jwks` }).end();
    } else if (path.startsWith('/huge')) {
      // The key set, then 100 MiB of padding in one more member: valid JSON, streamed as it is read.
      const head = `${jwks.slice(0, -1)},"padding":"`;
      const size = head.length + 100 * MiB + 2;
      res.writeHead(200, {
        'content-type': 'application/json',
        ...(path === '/huge-declared' ? { 'content-length': String(size) } : {}),
      });
      let left = 100 * MiB;
      const chunk = 'x'.repeat(64 * 1024);
      res.write(head);
      const pump = () => {
        while (left > 0 && !res.destroyed) {
          left -= chunk.length;
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (!res.destroyed) res.end('"}');
      };
      pump();
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
});

/** The settings of a key set at `path` (only those: a test app keeps its own database). */
const keySetConfig = (path: string) => ({
  jwtSecret: null,
  jwtJwksUrl: `${base}${path}`,
  jwtIssuer: null,
  jwtAudience: null,
});
const token = (sub = 'alice') =>
  new SignJWT({})
    .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
    .setSubject(sub)
    .setExpirationTime('5m')
    .sign(privateKey);
const verifyWith = (path: string, jwt: string) =>
  createJwtVerifier({ ...loadConfig({}), ...keySetConfig(path) }, null)
    .verify(jwt)
    .then(
      (claims) => claims,
      (err: unknown) => err,
    );

describe('the key set of SVC_JWT_JWKS_URL', () => {
  it('is fetched and used', async () => {
    expect(await verifyWith('/jwks', await token())).toEqual({ sub: 'alice' });
  });

  it.each(['/huge', '/huge-declared'])(
    'over 1 MiB (%s) is refused unread: the key source failed',
    async (path) => {
      sent = 0;
      const err = await verifyWith(path, await token());
      expect(err).toBeInstanceOf(KeySourceError);
      expect((err as Error).message).toBe(
        `the identity provider's key set at ${base}${path} could not be fetched: the answer from ${base} is larger than 1048576 bytes`,
      );
      expect(sent).toBeLessThan(16 * MiB);
    },
  );

  it('over 1 MiB answers 503 service_unavailable to the user request', async () => {
    await withTestApp(keySetConfig('/huge'), async (t) => {
      const res = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(await token()) });
      expectError(res, 503, 'service_unavailable');
    });
  });

  it('behind a redirect is not followed: the key source failed, as for any answer but 200', async () => {
    hits.length = 0;
    const err = await verifyWith('/redirect', await token());
    expect(err).toBeInstanceOf(KeySourceError);
    expect((err as Error).message).toContain('redirects are not followed');
    expect(hits).toEqual(['/redirect']);
  });
});

describe('a token sub that is not well-formed Unicode', () => {
  it.each(['\ud800', '\udfff'])(
    '(%j) is refused, from the provider or signed with the secret',
    async (sub) => {
      const fromProvider = await verifyWith('/jwks', await token(sub));
      expect(fromProvider).toBeInstanceOf(TokenError);
      expect((fromProvider as Error).message).toBe(
        'token sub must be 1-200 characters of well-formed Unicode without control characters',
      );
      const withSecret = await createJwtVerifier({ ...loadConfig({}), jwtSecret: JWT_SECRET }, JWT_SECRET)
        .verify(await signUserToken(JWT_SECRET, sub, 60, { jwtIssuer: null, jwtAudience: null }))
        .catch((err: unknown) => err);
      expect(withSecret).toBeInstanceOf(TokenError);
    },
  );
});
