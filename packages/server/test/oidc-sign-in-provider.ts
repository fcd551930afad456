import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

/**
 * A real OpenID provider (oidc-provider) on 127.0.0.1 for the dashboard's sign-in: one confidential
 * client using the authorization code flow, and a login page with a user-name field (anyone may sign
 * in as anyone: it stands for the organization's identity provider). Consent is granted at once.
 */
export interface SignInProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Stops answering (connections refused), as a provider that is down. */
  stop(): Promise<void>;
}

const CLIENT_ID = 'svc-dashboard';
const CLIENT_SECRET = 'dashboard-secret-0123456789abcdef0123456789';

const page = (uid: string) => `<!doctype html>
<html><head><title>Example identity provider</title></head><body>
<h1>Example identity provider</h1>
<form method="post" action="/interaction/${uid}/login">
<label>User name <input name="login" autocomplete="username" required></label>
<button type="submit">Continue</button>
</form></body></html>`;

async function formBody(req: IncomingMessage): Promise<URLSearchParams> {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

export async function startSignInProvider(redirectUri: string): Promise<SignInProvider> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENT_ID,
        client_secret: CLIENT_SECRET,
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: [redirectUri],
      },
    ],
    cookies: { keys: ['provider-cookie-key-0123456789abcdef'] },
    ttl: {
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
      AccessToken: 600,
      IdToken: 600,
      AuthorizationCode: 60,
    },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    findAccount: (_ctx, id) => ({
      accountId: id,
      // A user name starting with "unverified-" has an address the provider has not verified.
      claims: () => ({ sub: id, email: `${id}@example.test`, email_verified: !id.startsWith('unverified-') }),
    }),
    claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  });

  const interaction = async (req: IncomingMessage, res: ServerResponse, uid: string, action?: string) => {
    const details = await provider.interactionDetails(req, res);
    if (details.uid !== uid) throw new Error('interaction mismatch');
    if (details.prompt.name === 'login') {
      if (action !== 'login') {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page(uid));
        return;
      }
      const login = (await formBody(req)).get('login')?.trim();
      if (!login) {
        res.writeHead(400).end('a user name is required');
        return;
      }
      await provider.interactionFinished(
        req,
        res,
        { login: { accountId: login } },
        { mergeWithLastSubmission: false },
      );
      return;
    }
    // Consent: everything the client asked for.
    const accountId = details.session?.accountId;
    const clientId = details.params.client_id;
    if (typeof accountId !== 'string' || typeof clientId !== 'string')
      throw new Error('no session at consent');
    const grant = new provider.Grant({ accountId, clientId });
    const scope = details.params.scope;
    grant.addOIDCScope(typeof scope === 'string' ? scope : 'openid');
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  };

  const callback = provider.callback();
  server.on('request', (req, res) => {
    const match = /^\/interaction\/([^/?]+)(?:\/(login))?/.exec(req.url ?? '');
    if (!match) {
      callback(req, res);
      return;
    }
    interaction(req, res, match[1]!, match[2]).catch((err: Error) => {
      if (!res.headersSent) res.writeHead(500).end(err.message);
    });
  });
  let listening = true;
  return {
    issuer,
    clientId: CLIENT_ID,
    clientSecret: CLIENT_SECRET,
    async stop() {
      if (!listening) return;
      listening = false;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
