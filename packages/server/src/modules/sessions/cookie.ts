import type { FastifyRequest } from 'fastify';
import { SESSION_COOKIE } from './model.js';

/** The session cookie's value in a request, or null. */
export function sessionCookie(request: FastifyRequest): string | null {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq !== -1 && part.slice(0, eq).trim() === SESSION_COOKIE) return part.slice(eq + 1).trim() || null;
  }
  return null;
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
