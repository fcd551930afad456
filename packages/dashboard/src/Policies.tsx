import {
  compilePolicy,
  type Evaluation,
  evaluate,
  evaluateSession,
  mergeEvaluation,
  type PolicyDefinition,
  PolicyDefinitionError,
} from '@svc/policy-engine';
import { type FormEvent, useCallback, useEffect, useId, useState } from 'react';
import { ApiError, api, messageOf, tagged } from './api.js';
import { type DryRunAnswer, serviceAnswer } from './dryRun.js';
import type { PageProps } from './pages.js';
import { currentEntry, historyOrder } from './policyHistory.js';
import { readAgainIfRefused } from './reads.js';
import { revealString } from './reveal.js';
import { Link, navigate, usePath } from './router.js';
import { Shown } from './Shown.js';
import {
  ACTIONS_COLUMN,
  ConfirmButton,
  ErrorLine,
  Field,
  Loading,
  TableHead,
  useBusy,
  useFocusReturn,
  useList,
} from './ui.js';

interface Policy {
  toolName: string;
  version: number;
  isActive: boolean;
  mode: 'deterministic' | 'llm';
  constraints: Record<string, unknown>[];
  sessionConstraints: Record<string, unknown> | null;
  llmConfig: Record<string, unknown> | null;
  createdAt: string;
  updatedAt: string;
}

interface Quality {
  valid: boolean;
  score: number;
  issues: string[];
}

interface PolicyVersion {
  toolName: string;
  version: number;
  policyHash: string;
  definition: Record<string, unknown>;
  createdAt: string;
}

const BASE = '/policies';
/**
 * The New-policy form. A tool's editor is `/policies/<tool name, URL-encoded>`: one path segment,
 * whatever the name (a `/` in it is encoded too). The form's path has two segments, so no tool name
 * (`new` included) leads to the form instead of its policy.
 */
const NEW_PATH = `${BASE}/-/new`;
/** Quality is asked for once typing pauses this long. */
const QUALITY_DELAY_MS = 300;

const pathOf = (toolName: string) => `${BASE}/${encodeURIComponent(toolName)}`;
/** The New-policy form with the tool name filled in. */
const newPathFor = (toolName: string) => `${NEW_PATH}?${new URLSearchParams({ tool: toolName })}`;
const apiPathOf = (toolName: string) => `/v1/policies/${encodeURIComponent(toolName)}`;

/** What a dashboard path under /policies shows. */
type Route = { page: 'list' } | { page: 'new' } | { page: 'policy'; toolName: string };

function routeOf(path: string): Route {
  if (path === NEW_PATH) return { page: 'new' };
  const rest = path.startsWith(`${BASE}/`) ? path.slice(BASE.length + 1) : '';
  if (!rest) return { page: 'list' };
  try {
    return { page: 'policy', toolName: decodeURIComponent(rest) };
  } catch {
    // Not valid percent-encoding (typed by hand): the name as written.
    return { page: 'policy', toolName: rest };
  }
}

/** The editable part of a policy, as the create/update body takes it. */
function definitionOf(p: Pick<Policy, 'mode' | 'constraints' | 'sessionConstraints' | 'llmConfig'>) {
  const def: Record<string, unknown> = { mode: p.mode, constraints: p.constraints };
  if (p.sessionConstraints) def.sessionConstraints = p.sessionConstraints;
  if (p.llmConfig) def.llmConfig = p.llmConfig;
  return def;
}

const definitionText = (p: Policy) => JSON.stringify(definitionOf(p), null, 2);

/** One policy as read, with the ETag of its version (null from a server that sends none). */
interface Read {
  policy: Policy;
  etag: string | null;
}

/** The same version of the same policy: a policy deleted and created again restarts at version 1. */
const sameVersion = (a: Policy, b: Policy) => a.version === b.version && a.createdAt === b.createdAt;

/**
 * GET of one policy with its ETag: the editor's writes send it back as If-Match, so that they apply
 * to the version shown or not at all (409).
 */
async function readPolicy(toolName: string, organizationId: string): Promise<Read> {
  const { data, etag } = await tagged<Policy>(apiPathOf(toolName), { organizationId });
  return { policy: data, etag };
}

const isNotFound = (err: unknown): boolean => err instanceof ApiError && err.status === 404;

/**
 * A refusal that says the page shows what is no longer so: the policy is another version (409
 * conflict), one was created meanwhile (409 policy_exists), or there is none any more (404).
 */
const staleRefusal = (err: unknown): boolean =>
  err instanceof ApiError &&
  (err.status === 404 || (err.status === 409 && (err.code === 'conflict' || err.code === 'policy_exists')));

const STARTER = JSON.stringify(
  { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100, action: 'deny' }] },
  null,
  2,
);

/**
 * Policies: the list, one policy's editor (/policies/<tool>) or a new one (/policies/-/new, with
 * `?tool=` to fill in the name).
 */
export function Policies({ organizationId, tier }: PageProps) {
  const route = routeOf(usePath());
  if (route.page === 'new')
    return <Editor key={NEW_PATH} organizationId={organizationId} toolName={null} tier={tier} />;
  if (route.page === 'policy') {
    return (
      <Editor key={route.toolName} organizationId={organizationId} toolName={route.toolName} tier={tier} />
    );
  }
  return <PolicyList organizationId={organizationId} />;
}

function PolicyList({ organizationId }: { organizationId: string }) {
  const { data: policies, load, error, setError } = useList<Policy>('/v1/policies', organizationId);
  const [message, setMessage] = useState<string | null>(null);
  // Until the list is read again, a row still offers the action just taken: a second click would
  // undo it (a double click deactivates, then activates again).
  const { busy, run } = useBusy(setError);

  const toggle = (p: Policy) =>
    run(async () => {
      const action = p.isActive ? 'deactivate' : 'activate';
      // Deleted (or changed) elsewhere since the list was read: the list is read again.
      const res = await readAgainIfRefused(
        () =>
          api<{ message: string }>(`${apiPathOf(p.toolName)}/${action}`, { method: 'POST', organizationId }),
        load,
      );
      setMessage(res.message);
      await load();
    });

  return (
    <>
      <div className="heading">
        <h1>Policies</h1>
        <Link to={NEW_PATH}>New policy</Link>
      </div>
      <ErrorLine error={error} alert />
      <p role="status" className="meta">
        {message}
      </p>
      {policies === null && <Loading failed={error !== null} />}
      {policies?.length === 0 && <p className="empty">No policy yet: every tool call is allowed.</p>}
      {policies && policies.length > 0 && (
        <div className="scroll">
          <table>
            <TableHead
              columns={['Tool', 'Mode', 'Version', 'Constraints', 'State', 'Updated', ACTIONS_COLUMN]}
            />
            <tbody>
              {policies.map((p) => (
                <tr key={p.toolName} data-policy={p.toolName}>
                  <td className="tool">
                    <Link to={pathOf(p.toolName)}>
                      <Shown text={p.toolName} />
                    </Link>
                  </td>
                  <td>{p.mode}</td>
                  <td>{p.version}</td>
                  <td>{p.constraints.length}</td>
                  <td>{p.isActive ? 'active' : 'inactive'}</td>
                  <td>{new Date(p.updatedAt).toLocaleString()}</td>
                  <td>
                    <button
                      type="button"
                      className="secondary"
                      aria-label={`${p.isActive ? 'Deactivate' : 'Activate'} ${revealString(p.toolName)}`}
                      disabled={busy}
                      onClick={() => void toggle(p)}
                    >
                      {p.isActive ? 'Deactivate' : 'Activate'}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

type Parsed = { ok: true; body: Record<string, unknown> } | { ok: false; problem: string };

function parseDefinition(text: string): Parsed {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, problem: `Not valid JSON: ${messageOf(err)}` };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return {
      ok: false,
      problem: 'The definition must be a JSON object ({"mode": ..., "constraints": [...]})',
    };
  }
  if ('toolName' in value) return { ok: false, problem: 'The tool name is set above, not in the definition' };
  return { ok: true, body: value as Record<string, unknown> };
}

/** The server's version when a write of the editor found the policy changed since it was opened. */
interface Conflict extends Read {
  /** What was not done: "Nothing was saved." */
  outcome: string;
}

function Editor({
  organizationId,
  toolName,
  tier,
}: {
  organizationId: string;
  toolName: string | null;
  /** The organization's plan, when known: the dry run applies the service's rule for approvals. */
  tier: string | undefined;
}) {
  const ids = useId();
  // The New-policy form may come with the name filled in (`?tool=`), from a policy that does not exist.
  const [name, setName] = useState(() =>
    toolName === null ? (new URLSearchParams(window.location.search).get('tool') ?? '') : toolName,
  );
  const [text, setText] = useState(toolName ? '' : STARTER);
  /** The version the text in the editor is based on, and its ETag: every write sends it as If-Match. */
  const [base, setBase] = useState<Read | null>(null);
  const policy = base?.policy ?? null;
  const [conflict, setConflict] = useState<Conflict | null>(null);
  /** The tool had no policy when the page opened it. */
  const [missing, setMissing] = useState(false);
  /**
   * The policy was deleted (elsewhere) while the editor was open: the text stays, and saving it
   * creates the tool's policy anew.
   */
  const [gone, setGone] = useState(false);
  const [quality, setQuality] = useState<Quality | null>(null);
  const [qualityError, setQualityError] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [versions, setVersions] = useState<PolicyVersion[]>([]);
  const [tools, setTools] = useState<string[]>([]);
  const parsed = parseDefinition(text);
  // Save, Activate and Delete are disabled while one runs: the focus comes back to the one pressed.
  const returnFocus = useFocusReturn();

  /**
   * The policy as it is now, and its history: 'none' when the tool has no policy (after a write,
   * the history of the one deleted is read all the same: its versions can be loaded and saved
   * anew), null (with the reason shown) when either cannot be read. `opening`: read for the page,
   * else again after a write.
   */
  const read = useCallback(
    async (opening: boolean): Promise<Read | 'none' | null> => {
      if (!toolName) return null;
      const [current, history] = await Promise.allSettled([
        readPolicy(toolName, organizationId),
        api<{ data: PolicyVersion[] }>(`${apiPathOf(toolName)}/versions`, { organizationId }),
      ]);
      const none = current.status === 'rejected' && isNotFound(current.reason);
      if (current.status === 'rejected' && !none) {
        setError(messageOf(current.reason));
        return null;
      }
      if (none && opening) return 'none';
      if (history.status === 'fulfilled') setVersions(historyOrder(history.value.data));
      // No version was ever saved for the tool.
      else if (isNotFound(history.reason)) setVersions([]);
      else {
        setError(messageOf(history.reason));
        return null;
      }
      return current.status === 'fulfilled' ? current.value : 'none';
    },
    [organizationId, toolName],
  );

  // Opened: the text is the current version's.
  useEffect(() => {
    void read(true).then((current) => {
      if (current === 'none') {
        setMissing(true);
        setError(`There is no policy for ${toolName}.`);
        return;
      }
      if (!current) return;
      setBase(current);
      setText(definitionText(current.policy));
    });
  }, [read, toolName]);

  /**
   * Reads the policy again after a write (or a refused one). The version the text is based on
   * (`ours`; its activity may have changed) becomes the base again; another version is a conflict:
   * the text in the editor is based on one that is no longer current (or on none: it was deleted,
   * and a policy was created since), so the current one is shown beside it and the person decides.
   * No policy any more: the page says so, and the text can be saved as a new policy. The text is
   * never replaced here. True when the page now shows a change it had not (a conflict or the
   * policy gone), with its own message.
   */
  const refresh = async (ours: Read | null, outcome: string): Promise<boolean> => {
    const current = await read(false);
    if (current === 'none') {
      setBase(null);
      setConflict(null);
      setConfirmDelete(false);
      setGone(true);
      setError(
        `${outcome ? `${outcome} ` : ''}The policy for ${toolName} was deleted since you opened it: the tool has no policy now, so every call of it is allowed. Your text is still in the editor; Create policy saves it as the tool's new policy.`,
      );
      return true;
    }
    if (!current) return false;
    if (ours && sameVersion(current.policy, ours.policy)) {
      setGone(false);
      setBase(current);
      setConflict(null);
      return false;
    }
    setBase(ours);
    setConflict({ ...current, outcome });
    return true;
  };

  useEffect(() => {
    if (toolName) return;
    api<{ data: { name: string }[] }>('/v1/tools', { organizationId }).then(
      ({ data }) => setTools(data.map((t) => t.name)),
      () => setTools([]),
    );
  }, [organizationId, toolName]);

  // The quality report as you type: the server's dry run, once typing pauses.
  const target = toolName ?? name.trim();
  const bodyKey = parsed.ok ? JSON.stringify(parsed.body) : null;
  useEffect(() => {
    if (bodyKey === null || !target) {
      setQuality(null);
      return;
    }
    let current = true;
    const timer = setTimeout(() => {
      api<Quality>(`${apiPathOf(target)}/validate`, {
        method: 'POST',
        body: JSON.parse(bodyKey),
        organizationId,
      }).then(
        (q) => {
          if (!current) return;
          setQuality(q);
          setQualityError(null);
        },
        (err) => {
          if (!current) return;
          setQuality(null);
          setQualityError(messageOf(err));
        },
      );
    }, QUALITY_DELAY_MS);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [bodyKey, target, organizationId]);

  /**
   * A write refused because the page is out of date (see staleRefusal): the policy is read again and
   * what it is now shown beside the text (another version, or none). False when the read found
   * nothing changed, or failed: the refusal's own message is then said.
   */
  const refused = async (err: unknown, outcome: string): Promise<boolean> => {
    if (!staleRefusal(err)) return false;
    return refresh(base, outcome);
  };

  const save = async (e: FormEvent) => {
    e.preventDefault();
    if (!parsed.ok) return;
    const from = document.activeElement;
    setBusy(true);
    setError(null);
    setMessage(null);
    try {
      if (toolName && !policy && gone) {
        // Deleted since the page opened it: the text becomes the tool's policy again (409
        // policy_exists if someone created one meanwhile).
        const { data: created, etag } = await tagged<Policy>('/v1/policies', {
          method: 'POST',
          body: { toolName, ...parsed.body },
          organizationId,
        });
        setMessage(`Created as version ${created.version}.`);
        // The created version is the base from here, whether or not the read below answers.
        setGone(false);
        setBase({ policy: created, etag });
        await refresh(
          { policy: created, etag },
          `Version ${created.version} was created from your text, then changed again.`,
        );
      } else if (toolName) {
        // Only over the version the text is based on: 409 if someone saved another since.
        const saved = await api<Policy & { quality: Quality }>(apiPathOf(toolName), {
          method: 'PUT',
          body: parsed.body,
          organizationId,
          ...(base?.etag ? { ifMatch: base.etag } : {}),
        });
        setMessage(`Saved as version ${saved.version}.`);
        // Its ETag is read with it; if it changed again meanwhile, the old one (stale by then) stays,
        // so that the next save cannot overwrite that change unseen.
        await refresh(
          { policy: saved, etag: base?.etag ?? null },
          `Version ${saved.version} was saved from your text, then changed again.`,
        );
      } else {
        const created = await api<Policy>('/v1/policies', {
          method: 'POST',
          body: { toolName: name.trim(), ...parsed.body },
          organizationId,
        });
        navigate(pathOf(created.toolName));
      }
    } catch (err) {
      if (!(await refused(err, 'Nothing was saved.'))) setError(messageOf(err));
    } finally {
      setBusy(false);
      returnFocus(from);
    }
  };

  const act = async (action: 'activate' | 'deactivate' | 'delete') => {
    if (!toolName) return;
    const from = document.activeElement;
    setBusy(true);
    setError(null);
    setMessage(null);
    const path = apiPathOf(toolName);
    const ifMatch = base?.etag ? { ifMatch: base.etag } : {};
    try {
      if (action === 'delete') {
        await api(path, { method: 'DELETE', organizationId, ...ifMatch });
        navigate(BASE);
        return;
      }
      const res = await api<{ message: string }>(`${path}/${action}`, {
        method: 'POST',
        organizationId,
        ...ifMatch,
      });
      setMessage(res.message);
      await refresh(base, '');
    } catch (err) {
      const outcome = action === 'delete' ? 'Nothing was deleted.' : `The policy was not ${action}d.`;
      if (!(await refused(err, outcome))) setError(messageOf(err));
    } finally {
      setBusy(false);
      setConfirmDelete(false);
      // Delete refused: its confirm button is gone with the question, the focus goes to Delete
      // (ConfirmButton's own). Activate or Deactivate: the same button, its label changed.
      returnFocus(from);
    }
  };

  /** Keeps the text, now based on the current version: saving replaces that version with it. */
  const keepMine = () => {
    if (!conflict) return;
    setError(null);
    setGone(false);
    setBase(conflict);
    setConflict(null);
    setMessage(
      `Your text is kept, now based on version ${conflict.policy.version}: saving replaces version ${conflict.policy.version} with it.`,
    );
  };

  /** Drops the text for the current version. */
  const takeCurrent = () => {
    if (!conflict) return;
    setError(null);
    setGone(false);
    setBase(conflict);
    setText(definitionText(conflict.policy));
    setConflict(null);
    setMessage(`Version ${conflict.policy.version} is loaded into the editor.`);
  };

  const current = conflict?.policy ?? policy;
  /** The live version's entry: version numbers repeat across a policy deleted and created again. */
  const currentVersion = currentEntry(versions, current);
  return (
    <>
      <p>
        <Link to={BASE}>← All policies</Link>
      </p>
      <div className="heading">
        <h1>
          {toolName ? (
            <>
              Policy for <Shown text={toolName} />
            </>
          ) : (
            'New policy'
          )}
        </h1>
        {policy && (
          <span className="meta">
            version {policy.version} · {policy.isActive ? 'active' : 'inactive'}
          </span>
        )}
        {toolName && !policy && gone && !conflict && (
          <span className="meta" data-no-policy>
            no policy
          </span>
        )}
      </div>
      <ErrorLine error={error} alert />
      {toolName && missing && !policy && (
        <p>
          <Link to={newPathFor(toolName)}>
            Create a policy for <Shown text={toolName} />
          </Link>
        </p>
      )}
      {toolName && !policy && !gone && <Loading failed={error !== null} />}
      {conflict && (policy || gone) && (
        <section className="panel conflict" role="alert" aria-labelledby={`${ids}-conflict`}>
          <h2 id={`${ids}-conflict`}>This policy changed since you opened it</h2>
          <p>
            {policy
              ? `Your text is based on version ${policy.version}; `
              : 'Your text is based on a policy deleted since; a new one was created: '}
            version {conflict.policy.version} is current now (saved{' '}
            {new Date(conflict.policy.updatedAt).toLocaleString()},{' '}
            {conflict.policy.isActive ? 'active' : 'inactive'}). {conflict.outcome} Your text is still in the
            editor.
          </p>
          <p className="meta">Version {conflict.policy.version} as it is now:</p>
          <pre data-current-version={conflict.policy.version}>{definitionText(conflict.policy)}</pre>
          <div className="actions">
            {/* Both wait while a write (or its refusal) is read back: that read sets the base and the
                conflict, and would undo a choice taken before it. */}
            <button type="button" onClick={keepMine} disabled={busy}>
              Keep my text, based on version {conflict.policy.version}
            </button>
            <button type="button" className="secondary" onClick={takeCurrent} disabled={busy}>
              Discard my text and load version {conflict.policy.version}
            </button>
          </div>
        </section>
      )}
      {(!toolName || policy || gone) && (
        <form className="editor" onSubmit={save}>
          {!toolName && (
            <Field id={`${ids}-tool`} label="Tool name">
              <input
                id={`${ids}-tool`}
                value={name}
                onChange={(e) => setName(e.target.value)}
                required
                maxLength={200}
                list={`${ids}-tools`}
                autoComplete="off"
              />
              <datalist id={`${ids}-tools`}>
                {tools.map((t) => (
                  <option key={t} value={t} />
                ))}
              </datalist>
            </Field>
          )}
          <Field
            id={`${ids}-definition`}
            label="Definition (JSON: mode, constraints, sessionConstraints, llmConfig)"
          >
            <textarea
              id={`${ids}-definition`}
              value={text}
              onChange={(e) => setText(e.target.value)}
              rows={14}
              spellCheck={false}
              aria-describedby={`${ids}-quality`}
            />
          </Field>
          <div id={`${ids}-quality`} className="quality" role="status" aria-live="polite">
            {!parsed.ok && <p className="error">{parsed.problem}</p>}
            {parsed.ok && qualityError && <p className="error">{qualityError}</p>}
            {parsed.ok && quality && (
              <>
                <p className={quality.valid ? 'ok' : 'error'} data-quality-score={quality.score}>
                  {quality.valid ? 'Valid' : 'Invalid'} · quality score {quality.score}/100
                </p>
                {quality.issues.length > 0 && (
                  <ul>
                    {quality.issues.map((i) => (
                      <li key={i}>{i}</li>
                    ))}
                  </ul>
                )}
              </>
            )}
          </div>
          <div className="actions">
            <button type="submit" disabled={busy || !parsed.ok || (!toolName && !name.trim())}>
              {toolName && (policy || !gone) ? 'Save' : 'Create policy'}
            </button>
            {policy && (
              <>
                <button
                  type="button"
                  className="secondary"
                  disabled={busy}
                  onClick={() => void act(policy.isActive ? 'deactivate' : 'activate')}
                >
                  {policy.isActive ? 'Deactivate' : 'Activate'}
                </button>
                <ConfirmButton
                  asking={confirmDelete}
                  onAsk={() => setConfirmDelete(true)}
                  onCancel={() => setConfirmDelete(false)}
                  onConfirm={() => void act('delete')}
                  busy={busy}
                  label="Delete"
                  confirmLabel="Confirm delete"
                  cancelLabel="Keep it"
                  disableAsk
                />
              </>
            )}
          </div>
          <p role="status" className="meta">
            {message}
          </p>
        </form>
      )}

      {/* Only beside a definition: without one (no such policy, or not read yet) there is nothing to try. */}
      {(!toolName || policy || gone) && (
        // A new policy is created active.
        <DryRun text={text} toolName={target} isActive={policy?.isActive ?? true} tier={tier} />
      )}

      {toolName && versions.length > 0 && (
        <section aria-labelledby={`${ids}-history`}>
          <h2 id={`${ids}-history`}>Version history</h2>
          <ul className="versions">
            {versions.map((v) => (
              // A policy deleted and created again lists its earlier incarnation's versions too.
              <li key={`${v.version} ${v.policyHash} ${v.createdAt}`} data-version={v.version}>
                <details>
                  <summary>
                    Version {v.version} · {new Date(v.createdAt).toLocaleString()}
                    {v === currentVersion ? ' (current)' : ''}
                  </summary>
                  <p className="meta">policy_hash {v.policyHash}</p>
                  <pre>{JSON.stringify(v.definition, null, 2)}</pre>
                  <button
                    type="button"
                    className="secondary"
                    onClick={() => setText(JSON.stringify(v.definition, null, 2))}
                  >
                    Load version {v.version} into the editor
                  </button>
                </details>
              </li>
            ))}
          </ul>
        </section>
      )}
    </>
  );
}

type DryRunResult =
  | { ok: true; evaluation: Evaluation; answer: DryRunAnswer }
  | { ok: false; problem: string };

/**
 * A call tried against the definition being edited, evaluated in this browser with the policy
 * engine the server runs: nothing is saved or recorded. Session limits apply as to a session's
 * first call.
 */
function DryRun({
  text,
  toolName,
  isActive,
  tier,
}: {
  text: string;
  toolName: string;
  isActive: boolean;
  tier: string | undefined;
}) {
  const ids = useId();
  const [args, setArgs] = useState('{\n  "amount": 50\n}');
  const [result, setResult] = useState<DryRunResult | null>(null);

  const run = (e: FormEvent) => {
    e.preventDefault();
    const def = parseDefinition(text);
    if (!def.ok) return setResult({ ok: false, problem: `The definition: ${def.problem}` });
    let callArgs: unknown;
    try {
      callArgs = JSON.parse(args);
    } catch (err) {
      return setResult({ ok: false, problem: `The arguments are not valid JSON: ${messageOf(err)}` });
    }
    if (callArgs === null || typeof callArgs !== 'object' || Array.isArray(callArgs)) {
      return setResult({ ok: false, problem: 'The arguments must be a JSON object' });
    }
    const definition = { mode: 'deterministic', ...def.body } as PolicyDefinition;
    try {
      const compiled = compilePolicy(definition);
      const a = callArgs as Record<string, unknown>;
      const session = evaluateSession(definition.sessionConstraints, { calls: 0, cumulative: {} }, a);
      const evaluation = mergeEvaluation(evaluate(compiled, a), session);
      setResult({ ok: true, evaluation, answer: serviceAnswer(evaluation, { toolName, isActive, tier }) });
    } catch (err) {
      const problem =
        err instanceof PolicyDefinitionError ? err.problems.join(' ') : `Cannot evaluate: ${messageOf(err)}`;
      setResult({ ok: false, problem });
    }
  };

  return (
    <section aria-labelledby={`${ids}-heading`} className="panel">
      <h2 id={`${ids}-heading`}>Try a call</h2>
      <p className="meta">
        Evaluates a call against the definition above, saved or not, with the service's policy engine in this
        browser, and answers as the service would: an inactive policy lets every call through unchecked, and
        below the Team plan a call that requires approval is denied. Nothing is recorded.
      </p>
      <form onSubmit={run}>
        <Field id={`${ids}-args`} label="Arguments (JSON)">
          <textarea
            id={`${ids}-args`}
            value={args}
            onChange={(e) => setArgs(e.target.value)}
            rows={5}
            spellCheck={false}
          />
        </Field>
        <div className="actions">
          <button type="submit">Try it</button>
        </div>
      </form>
      <div role="status" aria-live="polite" className="dry-run">
        {result && !result.ok && <p className="error">{result.problem}</p>}
        {result?.ok && (
          <>
            <p className={`verdict ${result.answer.decision}`} data-dry-run={result.answer.decision}>
              Decision: {result.answer.decision}
              {result.answer.reason ? ` — ${revealString(result.answer.reason)}` : ''}
            </p>
            {result.answer.note && (
              <p className="warn" data-dry-run-note>
                {result.answer.note}
              </p>
            )}
            {result.answer.whenActive && (
              <p
                className={`verdict ${result.answer.whenActive.decision}`}
                data-dry-run-when-active={result.answer.whenActive.decision}
              >
                When active: {result.answer.whenActive.decision}
                {result.answer.whenActive.reason ? ` — ${revealString(result.answer.whenActive.reason)}` : ''}
              </p>
            )}
            {result.evaluation.failedConstraints.length > 1 && (
              <ul>
                {result.evaluation.failedConstraints.map((f) => (
                  <li key={`${f.parameter}-${f.constraint_type}`}>{f.message}</li>
                ))}
              </ul>
            )}
          </>
        )}
      </div>
    </section>
  );
}
