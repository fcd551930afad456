/**
 * What an API key may do. `api` is the general API an agent or a CI job uses (validate, policies,
 * tools, decisions, MCP…). The approver scopes are separate so that the key an agent runs with cannot
 * approve its own escalations: a person approves with a user token, or a service that relays a
 * person's click (a chat bot) uses a key made for that.
 */
export const KEY_SCOPES = ['api', 'approvals:resolve', 'policy-drafts:approve'] as const;
export type KeyScope = (typeof KEY_SCOPES)[number];

/** Scopes of a key created without naming any (and of a project's automatic key). */
export const DEFAULT_KEY_SCOPES: readonly KeyScope[] = ['api'];

const KNOWN = new Set<string>(KEY_SCOPES);

/** A stored scopes column; a row without one reads as the default (never as more). */
export function parseScopes(stored: string | null): KeyScope[] {
  if (stored === null) return [...DEFAULT_KEY_SCOPES];
  const parsed: unknown = JSON.parse(stored);
  return Array.isArray(parsed) ? normalizeScopes(parsed.filter((s): s is KeyScope => KNOWN.has(s))) : [];
}

/** Unique, in the order of KEY_SCOPES, so equal sets always look the same. */
export function normalizeScopes(scopes: readonly KeyScope[]): KeyScope[] {
  const set = new Set(scopes);
  return KEY_SCOPES.filter((s) => set.has(s));
}

export interface ApiKey {
  id: string;
  name: string;
  keyPrefix: string;
  projectId: string | null;
  scopes: KeyScope[];
  isRevoked: boolean;
  lastUsedAt: string | null;
  createdAt: string;
}

export interface CreatedApiKey {
  id: string;
  name: string;
  key: string;
  keyPrefix: string;
  projectId: string;
  scopes: KeyScope[];
  createdAt: string;
  warning: string;
}

export const KEY_WARNING = 'Store this key now: it is shown only once and cannot be retrieved later.';

/**
 * Keys that stopped authenticating, as every instance learns it: these keys (revoked, deleted, their
 * project deleted or its key regenerated), or every key of an organization that was deleted. What
 * a key holds open (gateway sessions, event streams) ends on it.
 */
export type KeyRevocation = { keyIds: string[] } | { organizationId: string };
