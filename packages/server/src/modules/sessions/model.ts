/** A dashboard session as the auth plugin sees it: whose it is and the CSRF token its writes carry. */
export interface SessionInfo {
  userId: string;
  csrfToken: string;
  expiresAt: string;
}

export interface LoginLink {
  url: string;
  expiresAt: string;
}

/** A redeemed login link: the new session's id (the cookie value) and what it carries. */
export interface OpenedSession extends SessionInfo {
  sessionId: string;
}

/** Cookie name, and the header the dashboard sends the session's CSRF token in. */
export const SESSION_COOKIE = 'svc_session';
export const CSRF_HEADER = 'x-csrf-token';

/** Fixed (not sliding) session lifetime: a stolen cookie stops working at the latest after this. */
export const SESSION_TTL_SECONDS = 12 * 3600;
export const LOGIN_LINK_DEFAULT_TTL_SECONDS = 15 * 60;
export const LOGIN_LINK_MAX_TTL_SECONDS = 24 * 3600;

/** An OpenID Connect sign-in under way: what the provider's answer is checked with. */
export interface PendingSignIn {
  codeVerifier: string;
  nonce: string;
}

/** How long a person has at the identity provider before the sign-in must start again. */
export const OIDC_SIGN_IN_TTL_SECONDS = 10 * 60;
/**
 * Sign-ins kept under way at once (begun and not finished or expired); a new one beyond makes room by
 * dropping the oldest, so nobody can lock sign-in by beginning many (see beginSignIn).
 */
export const OIDC_SIGN_INS_MAX = 10_000;
/** Cookie binding a sign-in to the browser that began it (so nobody can finish someone else's). */
export const OIDC_STATE_COOKIE = 'svc_oidc_state';
