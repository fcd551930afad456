import type { FastifyBaseLogger } from 'fastify';
import * as client from 'openid-client';
import type { OidcSettings } from '../../config.js';
import { boundedFetch, ResponseRefused } from '../../lib/bounded-fetch.js';
import { isUserId } from '../../lib/schemas.js';
import type { PendingSignIn } from './model.js';

/** How long one request to the identity provider may take. */
const PROVIDER_TIMEOUT_SECONDS = 10;
/** After a failed discovery, the next sign-in tries again at the earliest this much later. */
const DISCOVERY_RETRY_MS = 5_000;
/** The largest answer read from the provider (discovery, token, UserInfo, key set): 1 MiB. */
const PROVIDER_ANSWER_MAX_BYTES = 1024 * 1024;

/** Every request to the provider: no redirect followed, no answer over the limit read. */
const providerFetch: client.CustomFetch = (url, options) =>
  boundedFetch(url, options as RequestInit, { maxBytes: PROVIDER_ANSWER_MAX_BYTES });

export type OidcSignIn = ReturnType<typeof createOidcSignIn>;

/** Why a sign-in through the provider failed: shown to the person as a short reason, logged in full. */
export class SignInFailed extends Error {
  constructor(
    readonly reason: 'provider_unreachable' | 'provider_refused' | 'invalid_answer' | 'no_user',
    message: string,
  ) {
    super(message);
  }
}

/**
 * Dashboard sign-in through an OpenID Connect provider: the authorization code flow with PKCE
 * (S256), `state` and `nonce`, the ID token checked by openid-client (issuer, audience, signature
 * from the provider's JWKS, expiry, nonce). The provider's discovery document is read on first use
 * and kept once it is usable; if the provider cannot be reached or its document is unusable, the
 * sign-in fails and one at least 5 s later tries again.
 */
export function createOidcSignIn(
  settings: OidcSettings,
  redirectUri: string,
  log: Pick<FastifyBaseLogger, 'warn'>,
) {
  let configuration: Promise<client.Configuration> | null = null;
  let lastFailure: { at: number; reason: SignInFailed['reason']; message: string } | null = null;
  const insecure = new URL(settings.issuer).protocol === 'http:';

  const discover = (): Promise<client.Configuration> => {
    if (configuration) return configuration;
    if (lastFailure && Date.now() - lastFailure.at < DISCOVERY_RETRY_MS) {
      return Promise.reject(new SignInFailed(lastFailure.reason, `${lastFailure.message} (a moment ago)`));
    }
    configuration = client
      .discovery(
        new URL(settings.issuer),
        settings.clientId,
        { redirect_uris: [redirectUri], response_types: ['code'] },
        settings.clientSecret !== null ? client.ClientSecretBasic(settings.clientSecret) : client.None(),
        {
          timeout: PROVIDER_TIMEOUT_SECONDS,
          [client.customFetch]: providerFetch,
          execute: [
            // Without it openid-client checks the ID token's claims but not its signature.
            client.enableNonRepudiationChecks,
            // Plain HTTP only for a provider on this machine (the configuration refuses any other).
            ...(insecure ? [client.allowInsecureRequests] : []),
          ],
        },
      )
      .then((config) => {
        checkMetadata(config.serverMetadata(), insecure);
        return config;
      })
      .catch((err: unknown) => {
        const failed = err instanceof SignInFailed ? err : classify(err, 'discovery');
        configuration = null;
        lastFailure = { at: Date.now(), reason: failed.reason, message: failed.message };
        log.warn({ err, issuer: settings.issuer, reason: failed.reason }, 'OpenID provider discovery failed');
        throw failed;
      });
    return configuration;
  };

  return {
    displayName: settings.displayName,

    /** The provider's authorization URL for a new sign-in, and what its answer must be checked with. */
    async begin(state: string): Promise<{ url: string; pending: PendingSignIn }> {
      const config = await discover();
      const codeVerifier = client.randomPKCECodeVerifier();
      const nonce = client.randomNonce();
      const codeChallenge = await client.calculatePKCECodeChallenge(codeVerifier);
      let url: URL;
      try {
        url = client.buildAuthorizationUrl(config, {
          redirect_uri: redirectUri,
          scope: settings.scopes,
          code_challenge: codeChallenge,
          code_challenge_method: 'S256',
          state,
          nonce,
        });
      } catch (err) {
        throw new SignInFailed(
          'invalid_answer',
          `no authorization URL can be built from the provider's discovery document: ${(err as Error).message}`,
        );
      }
      return { url: url.href, pending: { codeVerifier, nonce } };
    },

    /** Finishes a sign-in from the provider's redirect; answers the person's user id. */
    async finish(callbackUrl: URL, state: string, pending: PendingSignIn): Promise<string> {
      const config = await discover();
      let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
      try {
        tokens = await client.authorizationCodeGrant(config, callbackUrl, {
          pkceCodeVerifier: pending.codeVerifier,
          expectedNonce: pending.nonce,
          expectedState: state,
          idTokenExpected: true,
        });
      } catch (err) {
        throw classify(err, 'the token request');
      }
      const claims = tokens.claims();
      let source: Record<string, unknown> | undefined = claims;
      // Providers often keep claims other than `sub` (email, preferred_username) to the UserInfo
      // endpoint, and some put `email` in the ID token but `email_verified` only there.
      const unverifiedEmail =
        settings.userClaim === 'email' &&
        claims?.email_verified === undefined &&
        config.serverMetadata().userinfo_endpoint !== undefined;
      if (claims && (claims[settings.userClaim] === undefined || unverifiedEmail)) {
        try {
          // UserInfo answers for the same subject (checked): what it says stands over the ID token.
          source = { ...claims, ...(await client.fetchUserInfo(config, tokens.access_token, claims.sub)) };
        } catch (err) {
          throw classify(err, 'the UserInfo request');
        }
      }
      const user = source?.[settings.userClaim];
      // An address the provider has not verified names whoever typed it: never a member's identity.
      if (settings.userClaim === 'email' && source?.email_verified !== true) {
        throw new SignInFailed(
          'no_user',
          'the provider does not say the email address is verified (email_verified)',
        );
      }
      if (!isUserId(user)) {
        throw new SignInFailed(
          'no_user',
          `the ID token has no usable "${settings.userClaim}" claim (a string of 1 to 200 characters without control characters)`,
        );
      }
      return user;
    },
  };
}

/** The endpoints a sign-in uses, as URLs the service may send the person and its requests to. */
const REQUIRED_ENDPOINTS = ['authorization_endpoint', 'token_endpoint', 'jwks_uri'] as const;

function checkMetadata(metadata: client.ServerMetadata, insecure: boolean): void {
  const schemes = insecure ? ['https:', 'http:'] : ['https:'];
  for (const name of [...REQUIRED_ENDPOINTS, 'userinfo_endpoint'] as const) {
    const value = metadata[name];
    if (value === undefined && name === 'userinfo_endpoint') continue;
    const url = typeof value === 'string' && URL.canParse(value) ? new URL(value) : null;
    if (!url || !schemes.includes(url.protocol)) {
      throw new SignInFailed(
        'invalid_answer',
        `the identity provider's discovery document has ${
          value === undefined
            ? `no "${name}"`
            : `an unusable "${name}" (${schemes.join(' or ')} URL expected)`
        }`,
      );
    }
  }
}

/**
 * Why a request to the provider failed: it said no (`provider_refused`), its answer failed a check
 * or was too large (`invalid_answer`), or it could not be reached: refused or dropped connection, an
 * answer cut short or not complete within the timeout, an error status, a redirect
 * (`provider_unreachable`). openid-client wraps what the request met, so the causes are looked at.
 */
function classify(err: unknown, what: string): SignInFailed {
  const message = `${what}: ${describe(err)}`;
  if (
    err instanceof client.AuthorizationResponseError ||
    err instanceof client.ResponseBodyError ||
    err instanceof client.WWWAuthenticateChallengeError
  ) {
    return new SignInFailed('provider_refused', `the identity provider refused the sign-in: ${message}`);
  }
  const causes = causeChain(err);
  const refused = causes.find((c): c is ResponseRefused => c instanceof ResponseRefused);
  if (refused?.reason === 'too_large') {
    return new SignInFailed('invalid_answer', `the identity provider's answer is unusable: ${message}`);
  }
  if (refused || causes.some(isTransportFailure)) {
    return new SignInFailed('provider_unreachable', `the identity provider could not be reached: ${message}`);
  }
  const code = (err as { code?: string }).code;
  if (
    err instanceof client.ClientError &&
    code !== 'OAUTH_TIMEOUT' &&
    code !== 'OAUTH_ABORT' &&
    code !== 'OAUTH_RESPONSE_IS_NOT_CONFORM'
  ) {
    return new SignInFailed('invalid_answer', `the identity provider's answer failed its checks: ${message}`);
  }
  return new SignInFailed('provider_unreachable', `the identity provider could not be reached: ${message}`);
}

/** The error and what caused it, outermost first (a few levels: enough for openid-client's wrapping). */
function causeChain(err: unknown): unknown[] {
  const chain: unknown[] = [];
  for (let e = err; e !== undefined && e !== null && chain.length < 8; e = (e as { cause?: unknown }).cause) {
    chain.push(e);
  }
  return chain;
}

/**
 * The request did not complete: the deadline passed or it was aborted (DOMException), the connection
 * failed or the body was cut short (fetch's TypeError "fetch failed"/"terminated"; its cause carries a
 * socket error code).
 */
function isTransportFailure(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  if (e.name === 'TimeoutError' || e.name === 'AbortError') return true;
  if (e instanceof TypeError && (e.message === 'fetch failed' || e.message === 'terminated')) return true;
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('UND_ERR_') || /^E(?!RR_)[A-Z_]+$/.test(code));
}

/** The message, with the innermost cause's when it says more (openid-client's are generic). */
function describe(err: unknown): string {
  const chain = causeChain(err).filter((e): e is Error => e instanceof Error);
  const outer = chain[0]?.message ?? String(err);
  const inner = chain.at(-1)?.message;
  return inner && inner !== outer ? `${outer} (${inner})` : outer;
}
