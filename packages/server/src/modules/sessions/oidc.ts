import type { FastifyBaseLogger } from 'fastify';
import * as client from 'openid-client';
import type { OidcSettings } from '../../config.js';
import { isUserId } from '../../lib/schemas.js';
import type { PendingSignIn } from './model.js';

/** How long one request to the identity provider may take. */
const PROVIDER_TIMEOUT_SECONDS = 10;
/** After a failed discovery, the next sign-in tries again at the earliest this much later. */
const DISCOVERY_RETRY_MS = 5_000;

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
 * and kept; if the provider cannot be reached, the sign-in fails and the next one tries again.
 */
export function createOidcSignIn(settings: OidcSettings, redirectUri: string, log: FastifyBaseLogger) {
  let configuration: Promise<client.Configuration> | null = null;
  let failedAt = 0;

  const discover = (): Promise<client.Configuration> => {
    if (configuration) return configuration;
    if (Date.now() - failedAt < DISCOVERY_RETRY_MS) {
      return Promise.reject(
        new SignInFailed('provider_unreachable', 'the identity provider could not be reached a moment ago'),
      );
    }
    const insecure = new URL(settings.issuer).protocol === 'http:';
    configuration = client
      .discovery(
        new URL(settings.issuer),
        settings.clientId,
        { redirect_uris: [redirectUri], response_types: ['code'] },
        settings.clientSecret !== null ? client.ClientSecretBasic(settings.clientSecret) : client.None(),
        {
          timeout: PROVIDER_TIMEOUT_SECONDS,
          // Plain HTTP only for a provider on this machine (the configuration refuses any other).
          ...(insecure ? { execute: [client.allowInsecureRequests] } : {}),
        },
      )
      .catch((err: unknown) => {
        configuration = null;
        failedAt = Date.now();
        log.warn({ err, issuer: settings.issuer }, 'OpenID provider discovery failed');
        throw new SignInFailed(
          'provider_unreachable',
          `the identity provider's discovery document could not be read: ${(err as Error).message}`,
        );
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
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: redirectUri,
        scope: settings.scopes,
        code_challenge: await client.calculatePKCECodeChallenge(codeVerifier),
        code_challenge_method: 'S256',
        state,
        nonce,
      });
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
        throw classify(err);
      }
      const claims = tokens.claims();
      let source: Record<string, unknown> | undefined = claims;
      // Providers often keep claims other than `sub` (email, preferred_username) to the UserInfo endpoint.
      if (claims && claims[settings.userClaim] === undefined) {
        try {
          source = await client.fetchUserInfo(config, tokens.access_token, claims.sub);
        } catch (err) {
          throw classify(err);
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

/** The provider said no, the answer failed a check, or the provider could not be reached. */
function classify(err: unknown): SignInFailed {
  const message = (err as Error).message;
  if (
    err instanceof client.AuthorizationResponseError ||
    err instanceof client.ResponseBodyError ||
    err instanceof client.WWWAuthenticateChallengeError
  ) {
    return new SignInFailed('provider_refused', `the identity provider refused the sign-in: ${message}`);
  }
  const code = (err as { code?: string }).code;
  if (
    err instanceof client.ClientError &&
    code !== 'OAUTH_TIMEOUT' &&
    code !== 'OAUTH_RESPONSE_IS_NOT_CONFORM'
  ) {
    return new SignInFailed('invalid_answer', `the identity provider's answer failed its checks: ${message}`);
  }
  return new SignInFailed('provider_unreachable', `the identity provider could not be reached: ${message}`);
}
