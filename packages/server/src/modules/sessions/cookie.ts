import type { FastifyRequest } from 'fastify';
import { OIDC_STATE_COOKIE, SESSION_COOKIE } from './model.js';

/** A cookie's value in a request, or null. */
export function readCookie(request: FastifyRequest, name: string): string | null {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq !== -1 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim() || null;
  }
  return null;
}

/** The session cookie's value in a request, or null. */
export function sessionCookie(request: FastifyRequest): string | null {
  return readCookie(request, SESSION_COOKIE);
}

/** Secure when the service is reached over HTTPS (SVC_BASE_URL or the request itself). */
function secure(request: FastifyRequest, baseUrl: string): boolean {
  return baseUrl.startsWith('https:') || request.protocol === 'https';
}

/** HttpOnly so scripts never read it; SameSite=Lax so other sites' requests do not carry it. */
export function setSessionCookie(request: FastifyRequest, baseUrl: string, value: string, maxAge: number) {
  return `${SESSION_COOKIE}=${value}; Path=/; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${secure(request, baseUrl) ? '; Secure' : ''}`;
}

export function clearSessionCookie(request: FastifyRequest, baseUrl: string) {
  return setSessionCookie(request, baseUrl, '', 0);
}

/**
 * The OpenID sign-in's state, sent only to the callback. SameSite=Lax: the provider's redirect back
 * is a top-level navigation, which carries it.
 */
export function stateCookie(request: FastifyRequest, baseUrl: string, value: string, maxAge: number) {
  return `${OIDC_STATE_COOKIE}=${value}; Path=/v1/auth/oidc; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${secure(request, baseUrl) ? '; Secure' : ''}`;
}
