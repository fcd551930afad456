/**
 * Table shapes. Booleans are stored as integers 0/1 and timestamps as ISO 8601 UTC strings on both
 * stores, so the two dialects return identical rows and string order is time order.
 */
export interface OrganizationsTable {
  id: string;
  name: string;
  slug: string;
  owner_id: string;
  tier: string;
  rate_limit_per_minute: number | null;
  billing_period_start: string | null;
  created_at: string;
  updated_at: string | null;
}

export interface MembershipsTable {
  organization_id: string;
  user_id: string;
  role: string;
  created_at: string;
}

export interface ProjectsTable {
  id: string;
  organization_id: string;
  name: string;
  is_default: number;
  created_at: string;
  updated_at: string | null;
}

export interface ApiKeysTable {
  id: string;
  organization_id: string;
  project_id: string | null;
  name: string;
  key_hash: string;
  key_prefix: string;
  is_revoked: number;
  last_used_at: string | null;
  created_at: string;
  updated_at: string | null;
  /** JSON array of KeyScope, sorted; null only on rows written outside the service (read as the default). */
  scopes: string | null;
  /**
   * The key's lineage: the id of the key a person (or the service) minted, which every key minted by
   * a key of the lineage shares. Null only on rows written outside the service (read as the key's id).
   */
  lineage_id: string | null;
  /**
   * The person (user id) who created the key with their token; for a key minted by a key, that key's
   * creator (migration 0030). Null when unknown: keys from before 0030, a project's automatic key and
   * keys minted by such keys. Under dual control a key relays as its creator too.
   */
  created_by: string | null;
}

export interface SettingsTable {
  key: string;
  value: string;
}

export interface ToolsTable {
  organization_id: string;
  name: string;
  description: string | null;
  /** JSON array of tool arguments as registered. */
  arguments: string;
  created_at: string;
  updated_at: string;
}

export interface PoliciesTable {
  organization_id: string;
  tool_name: string;
  /** Project of the key that last wrote the policy (carried in policy events); null for users. */
  project_id: string | null;
  version: number;
  is_active: number;
  mode: string;
  /** JSON array of constraints. */
  constraints: string;
  session_constraints: string | null;
  llm_config: string | null;
  created_at: string;
  updated_at: string;
}

export interface DecisionsTable {
  id: string;
  organization_id: string;
  project_id: string | null;
  tool_name: string;
  arguments: string;
  context: string;
  decision: string;
  mode: string;
  reason: string;
  failed_argument: string | null;
  matched_exception: string | null;
  /** JSON array of failed constraints, or null when none failed. */
  validations: string | null;
  latency_ms: number;
  /** `server` for validations, `client` for decisions logged by SDKs. */
  source: string;
  policy_version: number | null;
  receipt_id: string;
  receipt_hash: string;
  previous_receipt_hash: string;
  merkle_root: string;
  created_at: string;
}

export interface ReceiptsTable {
  organization_id: string;
  sequence: number;
  receipt_id: string;
  decision_id: string | null;
  receipt_hash: string;
  /** The full receipt as canonical JSON. */
  payload: string;
  created_at: string;
}

export interface ChainHeadsTable {
  organization_id: string;
  /** Next sequence to assign. */
  sequence: number;
  last_hash: string;
  /** JSON array: Merkle frontier (compact range), largest subtree first. */
  frontier: string;
  updated_at: string;
}

export interface SessionCountersTable {
  organization_id: string;
  session_id: string;
  tool_name: string;
  calls: number;
  /** JSON object: argument name to running total. */
  cumulative: string;
  updated_at: string;
}

export interface ApprovalsTable {
  id: string;
  organization_id: string;
  /** Project of the key whose call (or request) opened the approval; null for users. */
  project_id: string | null;
  decision_id: string | null;
  tool_name: string;
  /** JSON object: the arguments the approval was asked for. */
  arguments: string;
  /** argumentHash() of the arguments: an approval is used only by a call with the same hash. */
  argument_hash: string;
  /** pending, approved, denied or expired (a pending row past expires_at reads as expired). */
  status: string;
  expires_at: string;
  resolved_by: string | null;
  resolved_at: string | null;
  /** When an approved approval allowed its call; an approval is usable once. */
  used_at: string | null;
  created_at: string;
  /** The API key whose call (or request) opened the approval; that key may not resolve it. Null for users. */
  requested_by_key_id: string | null;
  /** The lineage of requested_by_key_id: no key of it may resolve the approval. */
  requested_by_lineage_id: string | null;
  /** The API key that resolved it, relaying the person in resolved_by; null when a user resolved it. */
  resolved_by_key_id: string | null;
  /** JSON Escalation: the policy and constraint that asked for it; null when opened by hand. */
  escalation: string | null;
  /** Distinct people who must approve before it is approved (2 under dual control). */
  required_approvals: number;
  /** JSON array of the approvals given so far: [{resolvedBy, resolvedAt, byKeyId}]. */
  approvers: string;
  /** The person (user id) whose request opened it; null when an API key did. */
  requested_by: string | null;
  /**
   * The creator (api_keys.created_by) of requested_by_key_id when the approval opened: under dual
   * control they may not approve it. Null for users, and for keys without a recorded creator.
   */
  requested_by_key_creator: string | null;
}

export interface PolicyDraftsTable {
  id: string;
  organization_id: string;
  project_id: string;
  name: string;
  description: string;
  /** draft, pending_review, approved or rejected. */
  status: string;
  created_by_agent_id: string;
  /** JSON array of draft rules. */
  rules: string;
  reviewed_by: string | null;
  reviewed_at: string | null;
  created_at: string;
  updated_at: string;
  /** The API key that created the draft; that key may not approve it. Null for users. */
  created_by_key_id: string | null;
  /** The lineage of created_by_key_id: no key of it may approve the draft. */
  created_by_lineage_id: string | null;
}

export interface McpUpstreamsTable {
  id: string;
  organization_id: string;
  /** Null: usable by every key of the organization; else only by keys of that project. */
  project_id: string | null;
  name: string;
  slug: string;
  transport: string;
  url: string;
  /** JSON object of header name to value, sent upstream; never returned by the API. */
  headers: string;
  timeout_ms: number;
  enabled: number;
  created_at: string;
  updated_at: string;
}

export interface PolicyVersionsTable {
  organization_id: string;
  tool_name: string;
  version: number;
  /** sha256:<hex> of the canonical definition, as bound into receipts (policy_hash). */
  policy_hash: string;
  mode: string;
  constraints: string;
  session_constraints: string | null;
  llm_config: string | null;
  created_at: string;
}

export interface CheckpointsTable {
  organization_id: string;
  tree_size: number;
  /** sha256:<hex> RFC 6962 root over the first tree_size receipts. */
  root_hash: string;
  /** receipt_hash of receipt tree_size - 1 (the chain head the checkpoint covers). */
  last_receipt_hash: string;
  timestamp: string;
  kid: string;
  /** Base64url Ed25519 signature over the canonical JSON of the checkpoint without `signature`. */
  signature: string;
  /** The origin the checkpoint was signed with; null on rows signed before migration 0023. */
  origin: string | null;
}

export interface EconomicConfigsTable {
  organization_id: string;
  /** '' for the organization's configuration, else the project id. */
  scope_key: string;
  project_id: string | null;
  /** JSON of the configuration in micro-dollars (policy-engine EconomicConfig). */
  config: string;
  created_at: string;
  updated_at: string;
}

export interface SpendHeadsTable {
  organization_id: string;
  /** Entries in the organization's spend ledger so far (next sequence). */
  sequence: number;
  updated_at: string;
}

/** One append-only entry of an organization's spend ledger. Amounts are integer micro-dollars. */
export interface SpendLedgerTable {
  organization_id: string;
  sequence: number;
  id: string;
  project_id: string | null;
  /** authorization, reservation, commit, release or expiry. */
  kind: string;
  action_id: string;
  /** The reservation a commit, release or expiry settles. */
  reservation_id: string | null;
  session_id: string;
  agent_id: string;
  category: string;
  payer: string | null;
  tool_name: string;
  amount_micros: number;
  decision: string | null;
  reason_code: string | null;
  approval_id: string | null;
  agent_window: string;
  category_window: string;
  expires_at: string | null;
  created_at: string;
}

/** Running sums of the ledger per budget scope and window. */
export interface SpendBalancesTable {
  organization_id: string;
  scope: string;
  scope_key: string;
  period: string;
  spent_micros: number;
  reserved_micros: number;
}

/** Current state of an action id: its first request, its answer, and its reservation. */
export interface SpendActionsTable {
  organization_id: string;
  action_id: string;
  project_id: string | null;
  request_hash: string;
  /** JSON of the normalized authorize request. */
  request: string;
  /** denied, pending_approval, reserved, committed or expired. */
  state: string;
  /** JSON of the current authorization answer. */
  answer: string;
  approval_id: string | null;
  /** The ledger entry of the current answer. */
  authorization_id: string;
  reservation_id: string | null;
  amount_micros: number;
  session_id: string;
  agent_id: string;
  category: string;
  agent_window: string;
  category_window: string;
  expires_at: string | null;
  decided_at: string;
  authorize_receipt_id: string | null;
  /** Set while a request writes the authorization's receipt (see 0024_spend_receipt_claims). */
  authorize_receipt_claimed_at: string | null;
  commit_id: string | null;
  commit_hash: string | null;
  commit_answer: string | null;
  commit_receipt_id: string | null;
  commit_receipt_claimed_at: string | null;
  created_at: string;
}

export interface CharterConversationsTable {
  id: string;
  organization_id: string;
  project_id: string | null;
  last_tool: string | null;
  /** JSON array of {role, text, at}. */
  turns: string;
  created_at: string;
  updated_at: string;
}

export interface CharterVerificationsTable {
  id: string;
  organization_id: string;
  project_id: string | null;
  conversation_id: string | null;
  /** policy_change or tool_registration. */
  kind: string;
  /** pending, approved or rejected. */
  status: string;
  summary: string;
  /** JSON array of PolicyChange. */
  changes: string;
  /** JSON array of ToolRegistration. */
  tools: string;
  link_hash: string;
  requested_by: string;
  /** JSON array of {toolName, version} written on approval. */
  applied: string | null;
  resolved_by: string | null;
  resolved_at: string | null;
  created_at: string;
}

/** A one-time dashboard sign-in link; only the token's hash is kept. */
export interface LoginLinksTable {
  token_hash: string;
  user_id: string;
  created_at: string;
  expires_at: string;
  used_at: string | null;
}

/** An OpenID Connect sign-in under way: the PKCE verifier and nonce, found by the state's hash. */
export interface OidcSignInsTable {
  state_hash: string;
  code_verifier: string;
  nonce: string;
  created_at: string;
  expires_at: string;
}

/** A dashboard session opened by a login link; only the session id's hash is kept. */
export interface UserSessionsTable {
  id_hash: string;
  user_id: string;
  csrf_token: string;
  created_at: string;
  expires_at: string;
}

/**
 * The process serving an embedded store (storage/owner.ts): at most one row (id 1). Unused on
 * PostgreSQL.
 */
export interface ServeOwnerTable {
  id: number;
  /** Random, per process start: tells a process's own row from another's with the same pid. */
  instance_id: string;
  pid: number;
  hostname: string;
  /** Linux: boot id and pid namespace, where `pid` means that process; null where unknown. */
  pid_scope: string | null;
  /** Linux: the process's start time (clock ticks since boot), which a reused pid does not share. */
  pid_started: string | null;
  started_at: string;
  heartbeat_at: string;
}

export interface Database {
  organizations: OrganizationsTable;
  memberships: MembershipsTable;
  projects: ProjectsTable;
  api_keys: ApiKeysTable;
  settings: SettingsTable;
  tools: ToolsTable;
  policies: PoliciesTable;
  decisions: DecisionsTable;
  receipts: ReceiptsTable;
  chain_heads: ChainHeadsTable;
  session_counters: SessionCountersTable;
  approvals: ApprovalsTable;
  policy_drafts: PolicyDraftsTable;
  mcp_upstreams: McpUpstreamsTable;
  checkpoints: CheckpointsTable;
  policy_versions: PolicyVersionsTable;
  economic_configs: EconomicConfigsTable;
  spend_heads: SpendHeadsTable;
  spend_ledger: SpendLedgerTable;
  spend_balances: SpendBalancesTable;
  spend_actions: SpendActionsTable;
  charter_conversations: CharterConversationsTable;
  charter_verifications: CharterVerificationsTable;
  login_links: LoginLinksTable;
  user_sessions: UserSessionsTable;
  oidc_sign_ins: OidcSignInsTable;
  serve_owner: ServeOwnerTable;
}
