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
}

export interface SettingsTable {
  key: string;
  value: string;
}

export interface Database {
  organizations: OrganizationsTable;
  memberships: MembershipsTable;
  projects: ProjectsTable;
  api_keys: ApiKeysTable;
  settings: SettingsTable;
}
