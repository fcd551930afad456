/** The API as the dashboard uses it: same origin, the session cookie, and the CSRF token on writes. */

export interface Session {
  userId: string;
  csrfToken: string;
  expiresAt: string;
}

export interface Organization {
  _id: string;
  name: string;
  slug: string;
  tier: string;
}

export interface PendingApproval {
  id: string;
  toolName: string;
  arguments: Record<string, unknown>;
  expiresAt: string;
  createdAt: string;
  agentId?: string;
  sessionId?: string;
}

export interface ResolvedApproval {
  id: string;
  status: 'approved' | 'denied';
  toolName: string;
  decisionId: string | null;
  resolvedBy?: string;
  resolvedAt?: string;
  createdAt: string;
}

export interface BatchResult {
  id: string;
  status: string;
  error?: { code: string; message: string };
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrfToken: string | null = null;

interface CallOptions {
  method?: 'GET' | 'POST';
  body?: unknown;
  organizationId?: string;
}

export async function api<T>(
  path: string,
  { method = 'GET', body, organizationId }: CallOptions = {},
): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrfToken) headers['x-csrf-token'] = csrfToken;
  if (organizationId) headers['x-organization-id'] = organizationId;
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  if (res.status === 204) return undefined as T;
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const error = (data as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(res.status, error?.code ?? 'http_error', error?.message ?? `HTTP ${res.status}`);
  }
  return data as T;
}

/** The signed-in session, or null when signed out. */
export async function loadSession(): Promise<Session | null> {
  try {
    const session = await api<Session>('/v1/auth/session');
    csrfToken = session.csrfToken;
    return session;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return null;
    throw err;
  }
}

export async function signOut(): Promise<void> {
  await api('/v1/auth/logout', { method: 'POST' });
  csrfToken = null;
}
