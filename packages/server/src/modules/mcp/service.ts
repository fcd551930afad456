import type { Clock } from '../../lib/clock.js';
import { AppError, invalid, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import { isUniqueViolation } from '../../storage/errors.js';
import type { McpRepository, UpstreamPatch, UpstreamRow } from './repository.js';
import type { CreateUpstreamInput, UpdateUpstreamInput } from './schemas.js';
import { ALLOW_PRIVATE_HINT, upstreamHostRefusal } from './ssrf.js';
import type { ProbeResult, UpstreamTarget, UpstreamTransport } from './upstream-client.js';

export interface UpstreamRecord {
  id: string;
  name: string;
  slug: string;
  transport: string;
  url: string;
  timeoutMs: number;
  enabled: boolean;
  projectId: string | null;
  headers: Record<string, '***'>;
  createdAt: string;
  updatedAt: string;
}

export interface UpstreamServiceDeps {
  repo: McpRepository;
  clock: Clock;
  allowPrivate: boolean;
  /** Told after an upstream changed or was deleted: its sessions and cached lookups go. */
  changed: (organizationId: string, upstreamId: string) => void;
  probe: (target: UpstreamTarget) => Promise<ProbeResult>;
}

export const DEFAULT_TIMEOUT_MS = 30_000;
/** Path segments the API itself uses under /v1/mcp/. */
export const RESERVED_SLUGS = new Set(['upstreams', 'charter']);

// The transports set these themselves; a configured value would break the protocol.
const MANAGED_HEADERS = new Set([
  'accept',
  'connection',
  'content-length',
  'content-type',
  'host',
  'keep-alive',
  'last-event-id',
  'mcp-protocol-version',
  'mcp-session-id',
  'transfer-encoding',
  'upgrade',
]);
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;
const MAX_HEADERS = 50;

const slugTaken = (slug: string) =>
  new AppError('slug_taken', `The upstream slug "${slug}" is already in use`);

export const toUpstream = (row: UpstreamRow): UpstreamRecord => ({
  id: row.id,
  name: row.name,
  slug: row.slug,
  transport: row.transport,
  url: row.url,
  timeoutMs: row.timeout_ms,
  enabled: row.enabled === 1,
  projectId: row.project_id,
  headers: Object.fromEntries(Object.keys(JSON.parse(row.headers)).map((k) => [k, '***' as const])),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export const toTarget = (row: UpstreamRow): UpstreamTarget => ({
  id: row.id,
  transport: row.transport as UpstreamTransport,
  url: row.url,
  headers: JSON.parse(row.headers),
  timeoutMs: row.timeout_ms,
});

function checkTransport(input: {
  transport?: string | undefined;
  command?: string | null;
  args?: string[] | null;
}): void {
  if (input.transport === 'mcp-stdio') {
    throw invalid(
      'transport "mcp-stdio" is not supported: the service does not start local processes; ' +
        'run the server behind mcp-streamable-http or mcp-sse',
    );
  }
  // Empty (an HTTP upstream's record as a client may send it whole) says there is no process to start.
  if (input.command || (input.args && input.args.length > 0)) {
    throw invalid('command and args apply only to the mcp-stdio transport, which is not supported');
  }
}

function checkSlug(slug: string): void {
  if (RESERVED_SLUGS.has(slug)) throw invalid(`slug "${slug}" is reserved`);
}

function checkHeaders(headers: Record<string, string>): Record<string, string> {
  const names = Object.keys(headers);
  if (names.length > MAX_HEADERS) throw invalid(`headers: at most ${MAX_HEADERS} headers`);
  const seen = new Set<string>();
  for (const name of names) {
    const lower = name.toLowerCase();
    if (!HEADER_NAME.test(name)) throw invalid(`headers: "${name}" is not a valid header name`);
    if (MANAGED_HEADERS.has(lower)) throw invalid(`headers: "${name}" is set by the MCP transport itself`);
    if (seen.has(lower)) throw invalid(`headers: "${name}" is given twice`);
    seen.add(lower);
    const value = headers[name]!;
    if (value.length > 8192 || /[\r\n\0]/.test(value)) {
      throw invalid(`headers: the value of "${name}" must be at most 8192 characters without line breaks`);
    }
  }
  return headers;
}

/**
 * A user (JWT) controls every upstream of the organization; an API key only the organization-wide
 * ones and those of its own project. Another project's upstream is "not found" to it.
 */
export function visibleTo(scope: Pick<OrgScope, 'projectId'>, row: Pick<UpstreamRow, 'project_id'>): boolean {
  return scope.projectId === null || row.project_id === null || row.project_id === scope.projectId;
}

/** Scheme, host and port: where the stored headers (often credentials) are sent. */
function originOf(url: string): string {
  return new URL(url).origin;
}

export function createUpstreamService(deps: UpstreamServiceDeps) {
  const { repo, clock } = deps;

  /** http(s) only, no credentials in the URL (they belong in headers), and not a refused address. */
  async function checkUrl(raw: string): Promise<string> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw invalid(`url "${raw}" is not a valid URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('url must use http or https');
    if (url.username || url.password) throw invalid('url must not contain credentials; send them in headers');
    const refusal = await upstreamHostRefusal(url, { allowPrivate: deps.allowPrivate });
    if (refusal) throw invalid(`url refused: ${refusal} (${ALLOW_PRIVATE_HINT})`);
    return url.toString();
  }

  /**
   * A project's API key may only bind an upstream to nothing (organization-wide) or to its own
   * project; another project, like an unknown one, is "not found".
   */
  async function checkProject(scope: OrgScope, projectId: string | null | undefined): Promise<void> {
    if (!projectId) return;
    if (scope.projectId !== null && projectId !== scope.projectId) throw notFound('Project');
    if (!(await repo.projectExists(scope.organizationId, projectId))) throw notFound('Project');
  }

  async function load(scope: OrgScope, id: string): Promise<UpstreamRow> {
    const row = await repo.get(scope.organizationId, id);
    if (!row || !visibleTo(scope, row)) throw notFound('MCP upstream');
    return row;
  }

  return {
    async list(scope: OrgScope, projectId?: string): Promise<UpstreamRecord[]> {
      // An unknown or another organization's project is "not found", as everywhere else.
      if (projectId && !(await repo.projectExists(scope.organizationId, projectId)))
        throw notFound('Project');
      const rows = await repo.list(scope.organizationId, projectId);
      return rows.filter((row) => visibleTo(scope, row)).map(toUpstream);
    },

    async get(scope: OrgScope, id: string): Promise<UpstreamRecord> {
      return toUpstream(await load(scope, id));
    },

    async create(scope: OrgScope, input: CreateUpstreamInput): Promise<UpstreamRecord> {
      checkTransport(input);
      checkSlug(input.slug);
      if (input.url === undefined) throw invalid('body/url is required');
      const headers = checkHeaders(input.headers ?? {});
      const url = await checkUrl(input.url);
      await checkProject(scope, input.projectId);
      const now = clock.now().toISOString();
      const row: UpstreamRow = {
        id: uuidv7(),
        organization_id: scope.organizationId,
        project_id: input.projectId ?? null,
        name: input.name,
        slug: input.slug,
        transport: input.transport ?? 'mcp-streamable-http',
        url,
        headers: JSON.stringify(headers),
        timeout_ms: input.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        enabled: input.enabled === false ? 0 : 1,
        created_at: now,
        updated_at: now,
      };
      if (await repo.getBySlug(scope.organizationId, row.slug)) throw slugTaken(row.slug);
      try {
        await repo.insert(row);
      } catch (err) {
        if (isUniqueViolation(err)) throw slugTaken(row.slug);
        throw err;
      }
      return toUpstream(row);
    },

    /** Partial update; `headers` replaces the whole set (values are write-only, so there is nothing to merge). */
    async update(scope: OrgScope, id: string, input: UpdateUpstreamInput): Promise<UpstreamRecord> {
      const current = await load(scope, id);
      checkTransport(input);
      const patch: UpstreamPatch = { updated_at: clock.now().toISOString() };
      if (input.name !== undefined) patch.name = input.name;
      if (input.slug !== undefined && input.slug !== current.slug) {
        checkSlug(input.slug);
        if (await repo.getBySlug(scope.organizationId, input.slug)) throw slugTaken(input.slug);
        patch.slug = input.slug;
      }
      if (input.transport !== undefined) patch.transport = input.transport;
      // The address is checked again whenever where or how we connect changes.
      if (input.url !== undefined || input.transport !== undefined)
        patch.url = await checkUrl(input.url ?? current.url);
      // Stored headers usually carry the upstream's credentials: they never follow the URL to a new host.
      if (
        patch.url !== undefined &&
        input.headers === undefined &&
        originOf(patch.url) !== originOf(current.url) &&
        Object.keys(JSON.parse(current.headers)).length > 0
      ) {
        throw invalid('headers must be re-supplied when the url origin changes');
      }
      if (input.timeoutMs !== undefined) patch.timeout_ms = input.timeoutMs;
      if (input.enabled !== undefined) patch.enabled = input.enabled ? 1 : 0;
      if (input.headers !== undefined) patch.headers = JSON.stringify(checkHeaders(input.headers));
      if (input.projectId !== undefined) {
        await checkProject(scope, input.projectId);
        patch.project_id = input.projectId;
      }
      let row: UpstreamRow | undefined;
      try {
        row = await repo.update(scope.organizationId, id, patch);
      } catch (err) {
        if (isUniqueViolation(err)) throw slugTaken(input.slug ?? '');
        throw err;
      }
      if (!row) throw notFound('MCP upstream');
      deps.changed(scope.organizationId, id);
      return toUpstream(row);
    },

    async delete(scope: OrgScope, id: string): Promise<void> {
      await load(scope, id);
      if (!(await repo.delete(scope.organizationId, id))) throw notFound('MCP upstream');
      deps.changed(scope.organizationId, id);
    },

    /** A real handshake and tools/list, whether or not the upstream is enabled. */
    async test(scope: OrgScope, id: string): Promise<ProbeResult> {
      return deps.probe(toTarget(await load(scope, id)));
    },
  };
}

export type UpstreamService = ReturnType<typeof createUpstreamService>;
