import { type FormEvent, type ReactNode, useEffect, useId, useRef, useState } from 'react';
import { api, messageOf, ORGANIZATION_SAVED, type Organization, query } from './api.js';
import type { PageProps } from './pages.js';
import { readAgainIfRefused } from './reads.js';
import { keyPrefixShown, revealString } from './reveal.js';
import { Shown } from './Shown.js';
import {
  ACTIONS_COLUMN,
  ConfirmButton,
  ErrorLine,
  Field,
  type FocusTarget,
  Loading,
  ProjectOptions,
  TableHead,
  useBusy,
  useFocusReturn,
  useList,
  useReload,
} from './ui.js';

interface Project {
  _id: string;
  name: string;
  isDefault: boolean;
  createdAt: string;
}

const SCOPES = ['api', 'approvals:resolve', 'policy-drafts:approve'] as const;
type Scope = (typeof SCOPES)[number];

const SCOPE_HELP: Record<Scope, string> = {
  api: 'validate calls, log decisions, manage policies',
  'approvals:resolve': 'approve or deny pending approvals',
  'policy-drafts:approve': 'approve policy drafts',
};

interface ApiKey {
  id: string;
  name: string;
  keyPrefix: string;
  projectId: string | null;
  scopes: Scope[];
  isRevoked: boolean;
  lastUsedAt: string | null;
  createdAt: string;
}

interface Upstream {
  id: string;
  name: string;
  slug: string;
  transport: string;
  url: string;
  timeoutMs: number;
  enabled: boolean;
  projectId: string | null;
  headers: Record<string, string>;
}

/** A secret shown once, right after it was made: the service keeps only its hash. */
interface Secret {
  label: string;
  key: string;
  /** Where the focus goes once it is put away (the box had it): the form that made it. */
  returnTo: FocusTarget;
}

/** Settings of the organization: its projects, API keys, MCP upstreams, name and plan. */
export function Settings({ organizationId }: PageProps) {
  /** Null until read (or when the read failed: then `projectsError` says why). */
  const [loaded, setLoaded] = useState<Project[] | null>(null);
  const [projectsError, setProjectsError] = useState<string | null>(null);
  const [secret, setSecret] = useState<Secret | null>(null);
  const [keysVersion, setKeysVersion] = useState(0);
  const projects = loaded ?? [];
  const returnFocus = useFocusReturn();

  // The latest read wins: the page's first read, answering after the one that follows a new project,
  // would take the new project off the list.
  const loadProjects = useReload(
    async () =>
      (await api<{ data: Project[] }>(`/v1/projects${query({ organizationId })}`, { organizationId })).data,
    (data) => {
      setLoaded(data);
      setProjectsError(null);
    },
    setProjectsError,
    organizationId,
  );

  return (
    <>
      <div className="heading">
        <h1>Settings</h1>
      </div>
      {/* Keyed by the key: a second secret moves the focus to itself again. */}
      {secret && (
        <SecretBox
          key={secret.key}
          secret={secret}
          onDone={() => {
            setSecret(null);
            // The box had the focus and is gone: back to the form that made the secret.
            returnFocus(null, secret.returnTo);
          }}
        />
      )}
      <OrganizationSection organizationId={organizationId} />
      <ProjectsSection
        organizationId={organizationId}
        projects={loaded}
        error={projectsError}
        onCreated={async (project, key, returnTo) => {
          setSecret({ label: `API key of the new project ${project.name}`, key, returnTo });
          await loadProjects();
          setKeysVersion((v) => v + 1);
        }}
      />
      <KeysSection
        version={keysVersion}
        organizationId={organizationId}
        projects={projects}
        projectsLoaded={loaded !== null}
        onCreated={(name, key, returnTo) => setSecret({ label: `API key ${name}`, key, returnTo })}
      />
      <UpstreamsSection organizationId={organizationId} projects={projects} />
    </>
  );
}

/** A panel with its heading; `headingId` names the heading, which can then take the focus. */
function Section({ title, headingId, children }: { title: string; headingId?: string; children: ReactNode }) {
  const own = useId();
  const id = headingId ?? own;
  return (
    <section className="panel" aria-labelledby={id}>
      <h2 id={id} tabIndex={headingId ? -1 : undefined}>
        {title}
      </h2>
      {children}
    </section>
  );
}

/** The element of that id, once the page has rendered (a focus target). */
const byId = (id: string) => () => document.getElementById(id);

/** A required name of at most 100 characters, with its label. */
function NameField({
  id,
  label,
  value,
  onChange,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
}) {
  return (
    <Field id={id} label={label}>
      <input id={id} value={value} onChange={(e) => onChange(e.target.value)} required maxLength={100} />
    </Field>
  );
}

/**
 * Copies `text` to the clipboard. False where the browser gives the page no clipboard (a page served
 * over plain HTTP from anywhere but this machine is not a secure context) or refuses the write.
 */
async function copyText(text: string): Promise<boolean> {
  if (!navigator.clipboard?.writeText) return false;
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}

function SecretBox({ secret, onDone }: { secret: Secret; onDone: () => void }) {
  /** Whether the last Copy worked; null before any. */
  const [copied, setCopied] = useState<boolean | null>(null);
  const box = useRef<HTMLDivElement>(null);
  const code = useRef<HTMLElement>(null);
  // Shown at the top of the page, far from the button that made it: brought into view, and the focus
  // moved to it, so that nobody leaves without having seen it.
  useEffect(() => {
    box.current?.scrollIntoView({ block: 'center' });
    box.current?.focus({ preventScroll: true });
  }, []);
  return (
    <div className="secret" role="alert" ref={box} tabIndex={-1} data-secret-box>
      <p>
        <strong>{secret.label}</strong>: copy it now. It is shown only this once; the service keeps only its
        hash.
      </p>
      <code data-secret ref={code}>
        {secret.key}
      </code>
      <div className="actions">
        <button
          type="button"
          onClick={async () => {
            const ok = await copyText(secret.key);
            setCopied(ok);
            // Not copied: the key is selected, for the person to copy it (Ctrl+C) themselves.
            if (!ok && code.current) window.getSelection()?.selectAllChildren(code.current);
          }}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        <button type="button" className="secondary" onClick={onDone}>
          I have stored it
        </button>
      </div>
      {copied === false && (
        <p role="alert" className="error" data-copy-failed>
          This browser did not let the page copy the key: it is selected above, copy it yourself (Ctrl+C or
          ⌘C).
        </p>
      )}
    </div>
  );
}

function OrganizationSection({ organizationId }: { organizationId: string }) {
  const ids = useId();
  const [org, setOrg] = useState<Organization | null>(null);
  const [name, setName] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  // Renamed, the button is disabled (the name is the organization's): the focus goes to the name.
  const { busy, run } = useBusy(setError, byId(`${ids}-name`));

  useEffect(() => {
    api<Organization>(`/v1/organizations/${organizationId}`, { organizationId }).then(
      (o) => {
        setOrg(o);
        setName(o.name);
      },
      (err) => setError(messageOf(err)),
    );
  }, [organizationId]);

  const save = (e: FormEvent) => {
    e.preventDefault();
    const sent = name.trim();
    setMessage(null);
    return run(async () => {
      const o = await api<Organization>(`/v1/organizations/${organizationId}`, {
        method: 'PUT',
        body: { name: sent },
        organizationId,
      });
      setOrg(o);
      // What was typed while the rename was on its way stays.
      setName((n) => (n.trim() === sent ? o.name : n));
      window.dispatchEvent(new CustomEvent<Organization>(ORGANIZATION_SAVED, { detail: o }));
      setMessage('Saved.');
    });
  };

  return (
    <Section title="Organization">
      {/* Its error, when the read failed, is said below. */}
      {!org && <Loading failed={error !== null} />}
      {org && (
        <form className="row-form" onSubmit={save}>
          <NameField id={`${ids}-name`} label="Name" value={name} onChange={setName} />
          <button type="submit" disabled={busy || !name.trim() || name.trim() === org.name}>
            Rename
          </button>
        </form>
      )}
      {org && (
        <dl className="facts">
          <dt>Plan</dt>
          <dd data-plan>{org.tier}</dd>
          <dt>Slug</dt>
          <dd>{org.slug}</dd>
          <dt>ID</dt>
          <dd>
            <code>{org._id}</code>
          </dd>
        </dl>
      )}
      {org && <p className="meta">The plan is set by the service's operator.</p>}
      <ErrorLine error={error} />
      <p role="status" className="meta">
        {message}
      </p>
    </Section>
  );
}

function ProjectsSection({
  organizationId,
  projects,
  error: loadError,
  onCreated,
}: {
  organizationId: string;
  /** Null until read. */
  projects: Project[] | null;
  /** Why the projects could not be read. */
  error: string | null;
  onCreated: (project: Project, key: string, returnTo: FocusTarget) => Promise<void>;
}) {
  const ids = useId();
  const [name, setName] = useState('');
  const [error, setError] = useState<string | null>(null);
  const { busy, run } = useBusy(setError, byId(`${ids}-name`));

  const create = async (e: FormEvent) => {
    e.preventDefault();
    await run(async () => {
      const p = await api<Project & { apiKey: string }>('/v1/projects', {
        method: 'POST',
        body: { organizationId, name: name.trim() },
        organizationId,
      });
      setName('');
      await onCreated(p, p.apiKey, byId(`${ids}-name`));
    });
  };

  return (
    <Section title="Projects">
      <ErrorLine error={loadError} alert />
      {projects === null ? (
        <Loading failed={loadError !== null} />
      ) : projects.length === 0 ? (
        <p className="empty">No project yet.</p>
      ) : (
        <ul className="plain">
          {projects.map((p) => (
            <li key={p._id} data-project-id={p._id}>
              <strong>
                <Shown text={p.name} />
              </strong>
              {p.isDefault ? ' (default)' : ''} <span className="meta">{p._id}</span>
            </li>
          ))}
        </ul>
      )}
      <form className="row-form" onSubmit={create}>
        <NameField id={`${ids}-name`} label="New project name" value={name} onChange={setName} />
        <button type="submit" disabled={busy || !name.trim()}>
          Create project
        </button>
      </form>
      <p className="meta">A new project comes with its first API key, shown once.</p>
      <ErrorLine error={error} />
    </Section>
  );
}

function KeysSection({
  version,
  organizationId,
  projects,
  projectsLoaded,
  onCreated,
}: {
  /** Changes when a new project brought a key of its own: the list is read again, the form kept. */
  version: number;
  organizationId: string;
  projects: Project[];
  projectsLoaded: boolean;
  onCreated: (name: string, key: string, returnTo: FocusTarget) => void;
}) {
  const ids = useId();
  const { data: keys, load, error, setError } = useList<ApiKey>('/v1/api-keys', organizationId, version);
  // A key revoked loses its Revoke button (and the confirm that had the focus): the focus goes to
  // the section's heading.
  const { busy, run } = useBusy(setError, byId(`${ids}-heading`));
  const [name, setName] = useState('');
  const [projectId, setProjectId] = useState('');
  const [scopes, setScopes] = useState<Set<Scope>>(new Set(['api']));
  const [confirm, setConfirm] = useState<string | null>(null);

  const project = projectId || projects.find((p) => p.isDefault)?._id || projects[0]?._id || '';
  const projectName = (id: string | null) => projects.find((p) => p._id === id)?.name ?? id ?? '—';

  const create = async (e: FormEvent) => {
    e.preventDefault();
    await run(async () => {
      const created = await api<{ name: string; key: string }>('/v1/api-keys', {
        method: 'POST',
        body: { name: name.trim(), projectId: project, scopes: SCOPES.filter((s) => scopes.has(s)) },
        organizationId,
      });
      setName('');
      onCreated(created.name, created.key, byId(`${ids}-name`));
      await load();
    });
  };

  const revoke = (id: string) =>
    run(
      async () => {
        // Revoked or deleted elsewhere since the list was read (404): the list is read again.
        await readAgainIfRefused(
          () => api(`/v1/api-keys/${id}/revoke`, { method: 'POST', organizationId }),
          load,
        );
        await load();
      },
      () => setConfirm(null),
    );

  const toggleScope = (s: Scope) =>
    setScopes((cur) => {
      const next = new Set(cur);
      if (next.has(s)) next.delete(s);
      else next.add(s);
      return next;
    });

  return (
    <Section title="API keys" headingId={`${ids}-heading`}>
      {/* Until the keys are read, a failure (of the read, or of a change) is said in their place. */}
      {keys === null && <Loading error={error} />}
      {keys?.length === 0 && <p className="empty">No API key yet.</p>}
      {keys && keys.length > 0 && (
        <div className="scroll">
          <table>
            <TableHead columns={['Name', 'Key', 'Project', 'Scopes', 'State', 'Last used', ACTIONS_COLUMN]} />
            <tbody>
              {keys.map((k) => (
                <tr key={k.id} data-key-id={k.id}>
                  <td className="wrap">
                    <Shown text={k.name} />
                  </td>
                  <td>
                    <code>{keyPrefixShown(k.keyPrefix)}</code>
                  </td>
                  {/* A 100-character project name wraps in a column of its own width at most. */}
                  <td className="wrap">
                    <span className="name">{projectName(k.projectId)}</span>
                  </td>
                  <td>{k.scopes.join(', ')}</td>
                  <td className={k.isRevoked ? 'denied' : 'approved'}>
                    {k.isRevoked ? 'revoked' : 'active'}
                  </td>
                  <td>{k.lastUsedAt ? new Date(k.lastUsedAt).toLocaleString() : 'never'}</td>
                  <td>
                    {!k.isRevoked && (
                      <ConfirmButton
                        asking={confirm === k.id}
                        onAsk={() => setConfirm(k.id)}
                        onCancel={() => setConfirm(null)}
                        onConfirm={() => void revoke(k.id)}
                        busy={busy}
                        label="Revoke"
                        ariaLabel={`Revoke ${revealString(k.name)}`}
                        confirmLabel="Confirm revoke"
                        pairClassName="actions"
                      />
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <form className="stack-form" onSubmit={create}>
        <h3>New API key</h3>
        <NameField id={`${ids}-name`} label="Key name" value={name} onChange={setName} />
        <Field id={`${ids}-project`} label="Project">
          <select id={`${ids}-project`} value={project} onChange={(e) => setProjectId(e.target.value)}>
            <ProjectOptions projects={projects} />
          </select>
        </Field>
        <fieldset>
          <legend>Scopes</legend>
          {SCOPES.map((s) => (
            <label key={s} className="check">
              <input type="checkbox" checked={scopes.has(s)} onChange={() => toggleScope(s)} />
              <code>{s}</code> <span className="meta">{SCOPE_HELP[s]}</span>
            </label>
          ))}
        </fieldset>
        <div className="actions">
          <button type="submit" disabled={busy || !name.trim() || !project || scopes.size === 0}>
            Create key
          </button>
        </div>
      </form>
      {projectsLoaded && projects.length === 0 && (
        <p className="meta">Create a project first: every key belongs to one.</p>
      )}
      {keys !== null && <ErrorLine error={error} />}
    </Section>
  );
}

function UpstreamsSection({ organizationId, projects }: { organizationId: string; projects: Project[] }) {
  const ids = useId();
  const empty = {
    name: '',
    slug: '',
    url: '',
    transport: 'mcp-streamable-http',
    projectId: '',
    header: '',
    value: '',
  };
  const { data: upstreams, load, error, setError } = useList<Upstream>('/v1/mcp/upstreams', organizationId);
  // An upstream deleted takes its buttons with it: the focus goes to the section's heading.
  const { busy, run } = useBusy(setError, byId(`${ids}-heading`));
  const [form, setForm] = useState(empty);
  const [confirm, setConfirm] = useState<string | null>(null);

  const set = (key: keyof typeof empty) => (e: { target: { value: string } }) =>
    setForm((f) => ({ ...f, [key]: e.target.value }));

  const create = async (e: FormEvent) => {
    e.preventDefault();
    await run(async () => {
      const body: Record<string, unknown> = {
        name: form.name.trim(),
        slug: form.slug.trim(),
        url: form.url.trim(),
        transport: form.transport,
      };
      if (form.projectId) body.projectId = form.projectId;
      if (form.header.trim()) body.headers = { [form.header.trim()]: form.value };
      await api('/v1/mcp/upstreams', { method: 'POST', body, organizationId });
      setForm(empty);
      await load();
    });
  };

  const remove = (id: string) =>
    run(
      async () => {
        // Deleted elsewhere since the list was read (404): the list is read again.
        await readAgainIfRefused(
          () => api(`/v1/mcp/upstreams/${id}`, { method: 'DELETE', organizationId }),
          load,
        );
        await load();
      },
      () => setConfirm(null),
    );

  return (
    <Section title="MCP upstreams" headingId={`${ids}-heading`}>
      <p className="meta">
        MCP servers the gateway proxies at <code>/v1/mcp/&lt;slug&gt;</code>, every tool call checked against
        the policies.
      </p>
      {upstreams === null && <Loading error={error} />}
      {upstreams?.length === 0 && <p className="empty">No upstream yet.</p>}
      {upstreams && upstreams.length > 0 && (
        <ul className="cards">
          {upstreams.map((u) => (
            <li key={u.id} className="card" data-upstream={u.slug}>
              <div className="card-head">
                <span>
                  <strong>
                    <Shown text={u.name} />
                  </strong>{' '}
                  <code>
                    <Shown text={u.slug} />
                  </code>
                </span>
                <span className="meta">
                  {u.transport} · {u.enabled ? 'enabled' : 'disabled'} · timeout {u.timeoutMs} ms
                </span>
              </div>
              <p className="meta">
                <Shown text={u.url} />
                {u.projectId
                  ? ` · project ${projects.find((p) => p._id === u.projectId)?.name ?? u.projectId}`
                  : ''}
                {Object.keys(u.headers).length > 0 && (
                  <>
                    {' · headers: '}
                    <Shown text={Object.keys(u.headers).join(', ')} />
                  </>
                )}
              </p>
              <div className="actions">
                <ConfirmButton
                  asking={confirm === u.id}
                  onAsk={() => setConfirm(u.id)}
                  onCancel={() => setConfirm(null)}
                  onConfirm={() => void remove(u.id)}
                  busy={busy}
                  label="Delete"
                  ariaLabel={`Delete upstream ${revealString(u.slug)}`}
                  confirmLabel="Confirm delete"
                />
              </div>
            </li>
          ))}
        </ul>
      )}
      <form className="stack-form" onSubmit={create}>
        <h3>New upstream</h3>
        <Field id={`${ids}-name`} label="Upstream name">
          <input id={`${ids}-name`} value={form.name} onChange={set('name')} required maxLength={100} />
        </Field>
        <Field id={`${ids}-slug`} label="Slug (lowercase letters, digits and dashes)">
          {/* What the service takes (^[a-z0-9-]+$), checked here in words rather than refused in its own. */}
          <input
            id={`${ids}-slug`}
            value={form.slug}
            onChange={set('slug')}
            required
            maxLength={100}
            pattern="[a-z0-9\-]+"
            title="Lowercase letters (a-z), digits and dashes only, e.g. docs-server"
          />
        </Field>
        <Field id={`${ids}-url`} label="URL">
          <input
            id={`${ids}-url`}
            type="url"
            value={form.url}
            onChange={set('url')}
            required
            maxLength={2048}
          />
        </Field>
        <Field id={`${ids}-transport`} label="Transport">
          <select id={`${ids}-transport`} value={form.transport} onChange={set('transport')}>
            <option value="mcp-streamable-http">Streamable HTTP</option>
            <option value="mcp-sse">SSE (legacy)</option>
          </select>
        </Field>
        <Field id={`${ids}-project`} label="Restrict to project">
          <select id={`${ids}-project`} value={form.projectId} onChange={set('projectId')}>
            <option value="">Whole organization</option>
            <ProjectOptions projects={projects} />
          </select>
        </Field>
        <Field id={`${ids}-header`} label="Header name (optional, e.g. Authorization)">
          <input id={`${ids}-header`} value={form.header} onChange={set('header')} maxLength={200} />
        </Field>
        <Field id={`${ids}-value`} label="Header value (write-only)">
          <input
            id={`${ids}-value`}
            type="password"
            value={form.value}
            onChange={set('value')}
            autoComplete="off"
            disabled={!form.header.trim()}
          />
        </Field>
        <div className="actions">
          <button type="submit" disabled={busy}>
            Add upstream
          </button>
        </div>
      </form>
      {upstreams !== null && <ErrorLine error={error} />}
    </Section>
  );
}
