import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';

/**
 * An OpenID provider on 127.0.0.1 that speaks the wire formats (discovery, authorization redirect,
 * token, UserInfo, JWKS) and can be told to misbehave: edit its discovery document, sign ID tokens with
 * a key it does not publish (or not at all), name any user, and answer an endpoint with a stalled,
 * reset, huge or redirected body. Everything else is a well-behaved provider, so a test changes one thing.
 */
export type Endpoint = 'discovery' | 'token' | 'userinfo' | 'jwks';

export type Misbehaviour =
  /** Headers and the start of the body, then nothing: the connection stays open. */
  | 'stall'
  /** Headers and the start of the body, then the connection is reset. */
  | 'reset'
  /** A 302 to the same path on another host name (`localhost`), which answers as this provider would. */
  | 'redirect'
  /** The usual answer padded to `bytes` (with `Content-Length` when `declared`), streamed as read. */
  | { huge: number; declared?: boolean };

export interface Behaviour {
  /** Edits the discovery document before it is sent. */
  metadata?: (doc: Record<string, unknown>) => Record<string, unknown>;
  /** The ID token's key: the published one, a key pair of the same `kid` not published, or `alg: none`. */
  signWith?: 'published' | 'unpublished' | 'none';
  /** ID token claims over the defaults (`sub` is the user name the test signed in with). */
  claims?: Record<string, unknown>;
  /** UserInfo claims over `{sub, email, email_verified: true}`. */
  userinfo?: Record<string, unknown>;
  misbehave?: Partial<Record<Endpoint, Misbehaviour>>;
}

export interface MisbehavingProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Requests per endpoint, counting those made to the redirect target as `elsewhere:<endpoint>`. */
  hits: Map<string, number>;
  /** Body bytes written per endpoint (for the huge answers: how much the client took). */
  sent: Map<Endpoint, number>;
  /** How the provider answers from now on (replaces the previous behaviour). */
  behave(b: Behaviour): void;
  /**
   * Plays the browser: sends it to the provider's authorization URL as `user`, answers the callback
   * URL the provider redirects back to.
   */
  authorize(authorizationUrl: string, user: string): Promise<string>;
  stop(): Promise<void>;
}

const CLIENT_ID = 'svc-dashboard';
const CLIENT_SECRET = 'dashboard-secret-0123456789abcdef0123456789';
const KID = 'signing-key';

export async function startMisbehavingProvider(): Promise<MisbehavingProvider> {
  const published = await generateKeyPair('RS256', { extractable: true });
  const unpublished = await generateKeyPair('RS256');
  const jwks = { keys: [{ ...(await exportJWK(published.publicKey)), kid: KID, alg: 'RS256', use: 'sig' }] };

  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const issuer = `http://127.0.0.1:${port}`;
  const codes = new Map<string, { nonce: string; user: string }>();
  const hits = new Map<string, number>();
  const sent = new Map<Endpoint, number>();
  let behaviour: Behaviour = {};

  const discovery = () =>
    (behaviour.metadata ?? ((d) => d))({
      issuer,
      authorization_endpoint: `${issuer}/authorize`,
      token_endpoint: `${issuer}/token`,
      userinfo_endpoint: `${issuer}/userinfo`,
      jwks_uri: `${issuer}/jwks`,
      response_types_supported: ['code'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256'],
      token_endpoint_auth_methods_supported: ['client_secret_basic'],
      code_challenge_methods_supported: ['S256'],
    });

  const idToken = async (user: string, nonce: string) => {
    const now = Math.floor(Date.now() / 1000);
    const claims = { iss: issuer, aud: CLIENT_ID, sub: user, nonce, iat: now, exp: now + 600 };
    const payload = { ...claims, ...behaviour.claims };
    if (behaviour.signWith === 'none') {
      const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
      return `${part({ alg: 'none', typ: 'JWT' })}.${part(payload)}.`;
    }
    const key = behaviour.signWith === 'unpublished' ? unpublished.privateKey : published.privateKey;
    return new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid: KID, typ: 'JWT' }).sign(key);
  };

  const formBody = async (req: IncomingMessage) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    return new URLSearchParams(body);
  };

  /** The usual answer of an endpoint, as JSON text. */
  const answerOf = async (endpoint: Endpoint, req: IncomingMessage): Promise<string> => {
    switch (endpoint) {
      case 'discovery':
        return JSON.stringify(discovery());
      case 'jwks':
        return JSON.stringify(jwks);
      case 'userinfo': {
        const user = /^Bearer at-(.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? 'nobody';
        const sub = decodeURIComponent(user);
        return JSON.stringify({
          sub,
          email: `${sub}@example.test`,
          email_verified: true,
          ...behaviour.userinfo,
        });
      }
      case 'token': {
        const grant = codes.get((await formBody(req)).get('code') ?? '');
        if (!grant) return JSON.stringify({ error: 'invalid_grant' });
        return JSON.stringify({
          access_token: `at-${encodeURIComponent(grant.user)}`,
          token_type: 'Bearer',
          expires_in: 600,
          id_token: await idToken(grant.user, grant.nonce),
        });
      }
    }
  };

  const count = (key: string) => hits.set(key, (hits.get(key) ?? 0) + 1);
  const wrote = (endpoint: Endpoint, n: number) => sent.set(endpoint, (sent.get(endpoint) ?? 0) + n);

  const answer = async (
    endpoint: Endpoint,
    req: IncomingMessage,
    res: ServerResponse,
    elsewhere: boolean,
  ) => {
    count(elsewhere ? `elsewhere:${endpoint}` : endpoint);
    const how = elsewhere ? undefined : behaviour.misbehave?.[endpoint];
    const body = await answerOf(endpoint, req);
    const json = { 'content-type': 'application/json' };
    if (how === 'redirect') {
      res.writeHead(302, { location: `http://localhost:${port}/elsewhere${req.url}` }).end();
      return;
    }
    if (how === 'stall' || how === 'reset') {
      res.writeHead(200, json);
      const start = body.slice(0, Math.floor(body.length / 2));
      res.write(start, () => {
        wrote(endpoint, start.length);
        if (how === 'reset') res.socket?.destroy();
      });
      return;
    }
    if (how && typeof how === 'object') {
      // The answer's own fields, then one more holding the padding: valid JSON of `huge` bytes.
      const head = `${body.slice(0, -1)},"padding":"`;
      const tail = '"}';
      const padding = how.huge - head.length - tail.length;
      res.writeHead(200, { ...json, ...(how.declared ? { 'content-length': String(how.huge) } : {}) });
      const chunk = 'x'.repeat(64 * 1024);
      let left = padding;
      let closed = false;
      res.on('close', () => {
        closed = true;
      });
      const write = (text: string) =>
        new Promise<void>((resolve) => {
          wrote(endpoint, text.length);
          if (res.write(text)) return resolve();
          const done = () => {
            res.off('drain', done).off('close', done);
            resolve();
          };
          res.on('drain', done).on('close', done);
        });
      await write(head);
      while (left > 0 && !closed) {
        const piece = left >= chunk.length ? chunk : chunk.slice(0, left);
        left -= piece.length;
        await write(piece);
      }
      if (!closed) res.end(tail);
      return;
    }
    wrote(endpoint, body.length);
    res.writeHead(endpoint === 'token' && body.includes('invalid_grant') ? 400 : 200, json).end(body);
  };

  const route = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', issuer);
    const elsewhere = url.pathname.startsWith('/elsewhere/');
    const path = elsewhere ? url.pathname.slice('/elsewhere'.length) : url.pathname;
    const endpoints: Record<string, Endpoint> = {
      '/.well-known/openid-configuration': 'discovery',
      '/token': 'token',
      '/userinfo': 'userinfo',
      '/jwks': 'jwks',
    };
    const endpoint = endpoints[path];
    if (endpoint) return answer(endpoint, req, res, elsewhere);
    if (path === '/authorize') {
      count('authorize');
      const q = url.searchParams;
      const code = randomBytes(16).toString('base64url');
      codes.set(code, { nonce: q.get('nonce') ?? '', user: q.get('login_hint') ?? '' });
      const back = new URL(q.get('redirect_uri') ?? '');
      back.searchParams.set('code', code);
      back.searchParams.set('state', q.get('state') ?? '');
      back.searchParams.set('iss', issuer);
      res.writeHead(302, { location: back.href }).end();
      return;
    }
    res.writeHead(404).end();
  };

  server.on('request', (req, res) => {
    route(req, res).catch((err: Error) => {
      if (!res.headersSent) res.writeHead(500).end(err.message);
    });
  });

  return {
    issuer,
    clientId: CLIENT_ID,
    clientSecret: CLIENT_SECRET,
    hits,
    sent,
    behave(b) {
      behaviour = b;
    },
    async authorize(authorizationUrl, user) {
      const url = new URL(authorizationUrl);
      // The person's name at the login page: here, a hint the provider takes as the answer.
      url.searchParams.set('login_hint', user);
      const res = await fetch(url, { redirect: 'manual' });
      const location = res.headers.get('location');
      if (res.status !== 302 || !location) throw new Error(`the provider answered ${res.status}`);
      return location;
    },
    async stop() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
