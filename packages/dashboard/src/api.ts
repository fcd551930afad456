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

/** The event a page sends on `window` when it renamed an organization: the header's menu shows it. */
export const ORGANIZATION_SAVED = 'svc:organization-saved';

/** What asked for a person: a tool's policy, the spend budgets, or a payment policy pack. */
export interface Escalation {
  source: 'policy' | 'economic' | 'gateway';
  policy: string;
  constraint: string;
  policyVersion?: number;
  constraints?: { parameter: string; constraint_type: string; message: string }[];
}

export interface PendingApproval {
  id: string;
  toolName: string;
  arguments: Record<string, unknown>;
  expiresAt: string;
  createdAt: string;
  agentId?: string;
  sessionId?: string;
  escalation?: Escalation;
  /** Dual control: how many distinct people must approve (1 when absent). */
  requiredApprovals?: number;
  /** Dual control: the approvals given so far. */
  approvers?: { resolvedBy: string; resolvedAt: string }[];
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

export interface DraftRule {
  id: string;
  action: string;
  tools: string[];
  conditions: { field: string; operator: string; value?: unknown }[];
  severity: string;
  enabled?: boolean;
}

export interface PolicyDraft {
  id: string;
  projectId: string;
  name: string;
  description: string;
  status: 'draft' | 'pending_review' | 'approved' | 'rejected';
  createdByAgentId: string;
  rules: DraftRule[];
  createdAt: string;
  updatedAt: string;
  reviewedBy: string | null;
  reviewedAt: string | null;
  /** The content shown, as one hash: approving sends it so that only what was shown is applied. */
  revision: string;
}

export interface FailedConstraint {
  parameter: string;
  constraint_type: string;
  message: string;
}

export interface DraftReplay {
  draftId: string;
  /** The revision of the draft that was replayed. */
  revision: string;
  tools: string[];
  examined: number;
  /** Stopped before the limit asked for: the decisions read held 16 MiB of arguments. */
  truncated: boolean;
  changed: {
    decisionId: string;
    toolName: string;
    arguments: Record<string, unknown>;
    createdAt: string;
    agentId?: string;
    sessionId?: string;
    before: { decision: string; reason: string };
    after: { decision: string; reason: string; failedConstraints: FailedConstraint[] };
  }[];
  skipped: { ruleId: string; toolName?: string; reason: string }[];
}

/** A policy definition as Charter shows it (current and proposed). */
/** The policy definition and constraint shapes are the engine's own. */
export type { Constraint, PolicyDefinition } from '@svc/policy-engine';

import type { PolicyDefinition } from '@svc/policy-engine';

export interface PolicyChange {
  toolName: string;
  /** `isActive` is absent on changes proposed before it was recorded (they count as active). */
  current: { version: number; isActive?: boolean; definition: PolicyDefinition } | null;
  proposed: PolicyDefinition;
  rules: string[];
  quality: { valid: boolean; score: number; issues: string[] };
  analysis: {
    findings: { kind: string; message: string }[];
    examples: { arguments: Record<string, unknown>; decision: string; reason: string }[];
  };
}

export interface Verification {
  id: string;
  kind: 'policy_change' | 'tool_registration';
  status: 'pending' | 'approved' | 'rejected';
  summary: string;
  changes: PolicyChange[];
  tools: { name: string; arguments: { name: string; type: string; required?: boolean }[] }[];
  createdAt: string;
  resolvedAt: string | null;
  resolvedBy: string | null;
  applied: { toolName: string; version: number }[] | null;
}

export interface CharterTurn {
  conversationId: string;
  mode: 'chat' | 'compile';
  reply: string;
  understood: string[];
  notUnderstood: { text: string; why: string }[];
  changes: PolicyChange[];
  dryRuns: { toolName: string; arguments: Record<string, unknown>; decision: string; reason: string }[];
  verification: { required: true; id: string; status: string; linkUrl: string } | { required: false };
}

export interface ScopeBudget {
  limitUsd: number | null;
  spentUsd: number;
  reservedUsd: number;
  remainingUsd: number | null;
}

export interface Budget {
  currency: 'USD';
  asOf: string;
  session?: ScopeBudget;
  agent?: ScopeBudget;
  category?: ScopeBudget;
}

export interface EconomicConfigView {
  defaultPayer: string | null;
  approvedPayers: string[];
  perActionApprovalThresholdUsd: number | null;
  sessionLimitUsd: number | null;
  agentLimitUsd: number | null;
  categoryPolicies: Record<string, { limitUsd: number | null; approvalThresholdUsd: number | null }>;
  approvalWindowSeconds: number;
  agentWindow: string;
  categoryWindow: string;
}

export interface EconomicConfig {
  scope: 'organization' | 'project';
  config: EconomicConfigView | null;
  effective: EconomicConfigView | null;
  authority: string;
  updatedAt: string | null;
}

export interface EconomicStatus {
  enabled: boolean;
  authority: string;
  healthy: boolean;
  pendingApprovals: string[];
  budget: Budget | null;
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
/** The session the page works with: the one read at start, or since (see `onSessionChanged`). */
let loaded: Session | null = null;

/** What a failed request says when the service did not answer at all (network down, service stopped). */
export const UNREACHABLE =
  'The service cannot be reached: check the network connection, or try again once the service is back.';

const sessionEndedListeners = new Set<() => void>();

/**
 * Calls `listener` when a request made with the session answers 401: the session ended elsewhere
 * (signed out in another tab, expired after 12 hours, deleted). Returns the unsubscribe.
 */
export function onSessionEnded(listener: () => void): () => void {
  sessionEndedListeners.add(listener);
  return () => sessionEndedListeners.delete(listener);
}

const sessionChangedListeners = new Set<(now: Session, before: Session) => void>();

/**
 * Calls `listener` when the session cookie now names another person's session than the page's:
 * someone signed in as another user in another tab or window of this browser, which replaced the
 * cookie. Every request of the page then answers as that person (403 "not a member", or a CSRF
 * refusal), so the page must show whose session it is. Returns the unsubscribe.
 */
export function onSessionChanged(listener: (now: Session, before: Session) => void): () => void {
  sessionChangedListeners.add(listener);
  return () => sessionChangedListeners.delete(listener);
}

/**
 * How the session the cookie names now (`now`, null when none: 401) stands to the one the page works
 * with (`before`): the same one, a new session of the same person (signed in again elsewhere: only
 * the CSRF token changed), another person's, or none.
 */
export function sessionChange(
  before: Session,
  now: Session | null,
): 'same' | 'renewed' | 'changed' | 'ended' {
  if (now === null) return 'ended';
  if (now.userId !== before.userId) return 'changed';
  return now.csrfToken === before.csrfToken ? 'same' : 'renewed';
}

/** Called with every answer of a request made with the session cookie. */
function noticeSessionEnd(status: number): void {
  // Only once signed in (the session read before sign-in answers 401 by design), and only once.
  if (status !== 401 || csrfToken === null) return;
  csrfToken = null;
  loaded = null;
  for (const listener of [...sessionEndedListeners]) listener();
}

/** The re-read of the session under way, if any: a burst of refusals reads it once. */
let checking: Promise<void> | null = null;
/** When the session was last read again: on returning to the tab, at most once per RECHECK_MS. */
let checkedAt = 0;
const RECHECK_MS = 5_000;

/**
 * A request answered 403 (a CSRF refusal, or "not a member" of the organization shown): the cookie
 * may name another session than the page's. Reads the session as the page did at start and compares.
 */
export function recheckSession({ throttled = false }: { throttled?: boolean } = {}): Promise<void> {
  if (checking) return checking;
  const before = loaded;
  if (before === null || csrfToken === null) return Promise.resolve();
  // A refusal is always looked into; returning to the tab (focus and visibility both fire) is not
  // worth more than one read per RECHECK_MS.
  if (throttled && Date.now() - checkedAt < RECHECK_MS) return Promise.resolve();
  checkedAt = Date.now();
  checking = (async () => {
    try {
      const res = await fetch('/v1/auth/session', {
        credentials: 'same-origin',
        headers: { accept: 'application/json' },
      });
      if (res.status === 401) return noticeSessionEnd(401);
      if (!res.ok || loaded !== before) return;
      const now = (await res.json()) as Session;
      const change = sessionChange(before, now);
      if (change === 'same') return;
      csrfToken = now.csrfToken;
      loaded = now;
      if (change === 'changed') for (const listener of [...sessionChangedListeners]) listener(now, before);
    } catch {
      // Not answered: nothing is known, nothing changes.
    } finally {
      checking = null;
    }
  })();
  return checking;
}

/**
 * `fetch` for the dashboard's own requests: a failure to connect becomes an ApiError saying the
 * service cannot be reached (status 0), a 401 once signed in tells the page that the session ended,
 * and a 403 has the session read again, in case the cookie now names another person's.
 */
export async function request(path: string, init: RequestInit = {}): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, { credentials: 'same-origin', ...init });
  } catch (err) {
    // An aborted request stays what it is; anything else thrown by fetch is a network failure.
    if (err instanceof DOMException && err.name === 'AbortError') throw err;
    throw new ApiError(0, 'unreachable', UNREACHABLE);
  }
  noticeSessionEnd(res.status);
  // Known before the refusal reaches the page: a page whose session changed is replaced as a whole.
  if (res.status === 403) await recheckSession();
  return res;
}

/** A query string of the values that are set (empty strings and undefined are left out). */
export function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** The message to show for a failed call: the API's own message, else the error's. */
export const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

interface CallOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  body?: unknown;
  organizationId?: string;
  /** Conditional request: the ETag of what the page shows (If-Match). */
  ifMatch?: string;
}

export async function api<T>(path: string, options: CallOptions = {}): Promise<T> {
  return (await tagged<T>(path, options)).data;
}

/**
 * As `api`, with the answer's ETag (unquoted; null when it has none): what a conditional write sends
 * back as If-Match.
 */
export async function tagged<T>(
  path: string,
  { method = 'GET', body, organizationId, ifMatch }: CallOptions = {},
): Promise<{ data: T; etag: string | null }> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (ifMatch) headers['if-match'] = `"${ifMatch}"`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrfToken) headers['x-csrf-token'] = csrfToken;
  if (organizationId) headers['x-organization-id'] = organizationId;
  const res = await request(path, {
    method,
    headers,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const tag = res.headers.get('etag');
  const etag = tag ? tag.replace(/^"(.*)"$/, '$1') : null;
  if (res.status === 204) return { data: undefined as T, etag };
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const error = (data as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(res.status, error?.code ?? 'http_error', error?.message ?? `HTTP ${res.status}`);
  }
  return { data: data as T, etag };
}

/** The signed-in session, or null when signed out. */
export async function loadSession(): Promise<Session | null> {
  try {
    const session = await api<Session>('/v1/auth/session');
    csrfToken = session.csrfToken;
    loaded = session;
    return session;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return null;
    throw err;
  }
}

export async function signOut(): Promise<void> {
  await api('/v1/auth/logout', { method: 'POST' });
  csrfToken = null;
  loaded = null;
}
