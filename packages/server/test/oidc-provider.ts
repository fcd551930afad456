import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import Provider from 'oidc-provider';

export const PROVIDER_ALGORITHMS = ['RS256', 'ES256', 'EdDSA'] as const;
export type ProviderAlgorithm = (typeof PROVIDER_ALGORITHMS)[number];

/**
 * A real OpenID provider (oidc-provider) on 127.0.0.1 with one signing key per algorithm. It issues
 * JWT access tokens through the client-credentials grant; the resource indicator `urn:svc:<alg>`
 * picks the signing algorithm, `urn:other:<alg>` a token for another audience. `sub` is the client id.
 */
export interface LocalProvider {
  issuer: string;
  jwksUrl: string;
  audience: string;
  /** A fresh access token for `clientId`, signed with `alg`. */
  token(alg: ProviderAlgorithm, opts?: { clientId?: string; otherAudience?: boolean }): Promise<string>;
  /** Stops answering (connections refused), as a provider that is down. */
  stop(): Promise<void>;
  /** Answers again on the same address. */
  start(): Promise<void>;
}

export const PROVIDER_CLIENTS = ['alice-agent', 'bob-agent'];
const SECRET = 'client-secret-0123456789abcdef0123456789';

export async function startLocalProvider(): Promise<LocalProvider> {
  const keys: JWK[] = [];
  for (const alg of PROVIDER_ALGORITHMS) {
    const { privateKey } = await generateKeyPair(alg, { extractable: true });
    keys.push({ ...(await exportJWK(privateKey)), kid: `key-${alg}`, alg, use: 'sig' });
  }
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const issuer = `http://127.0.0.1:${port}`;
  const audience = 'svc-api';
  const provider = new Provider(issuer, {
    clients: PROVIDER_CLIENTS.map((client_id) => ({
      client_id,
      client_secret: SECRET,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
    })),
    jwks: { keys },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => 'urn:svc:RS256',
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => {
          const [, kind, alg] = resource.split(':');
          return {
            scope: 'api',
            audience: kind === 'svc' ? audience : 'someone-else',
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: alg as ProviderAlgorithm } },
          };
        },
      },
    },
  });
  const handler = provider.callback();
  server.on('request', handler);
  let listening = true;
  return {
    issuer,
    jwksUrl: `${issuer}/jwks`,
    audience,
    async token(alg, opts = {}) {
      const clientId = opts.clientId ?? PROVIDER_CLIENTS[0]!;
      const res = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${Buffer.from(`${clientId}:${SECRET}`).toString('base64')}`,
        },
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          scope: 'api',
          resource: `urn:${opts.otherAudience ? 'other' : 'svc'}:${alg}`,
        }),
      });
      const body = (await res.json()) as { access_token?: string };
      if (!body.access_token) throw new Error(`token request failed: ${JSON.stringify(body)}`);
      return body.access_token;
    },
    async stop() {
      if (!listening) return;
      listening = false;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
    async start() {
      if (listening) return;
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
      listening = true;
    },
  };
}
