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
import { ApiError, api, messageOf } from './api.js';
import type { PageProps } from './pages.js';
import { Link, navigate, usePath } from './router.js';
import { ACTIONS_COLUMN, ConfirmButton, ErrorLine, Field, TableHead, useList } from './ui.js';

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
const NEW = 'new';
/** Quality is asked for once typing pauses this long. */
const QUALITY_DELAY_MS = 300;

const pathOf = (toolName: string) => `${BASE}/${encodeURIComponent(toolName)}`;

/** The editable part of a policy, as the create/update body takes it. */
function definitionOf(p: Pick<Policy, 'mode' | 'constraints' | 'sessionConstraints' | 'llmConfig'>) {
  const def: Record<string, unknown> = { mode: p.mode, constraints: p.constraints };
  if (p.sessionConstraints) def.sessionConstraints = p.sessionConstraints;
  if (p.llmConfig) def.llmConfig = p.llmConfig;
  return def;
}

const STARTER = JSON.stringify(
  { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100, action: 'deny' }] },
  null,
  2,
);

/** Policies: the list, and one policy's editor (/policies/<tool>) or a new one (/policies/new). */
export function Policies({ organizationId }: PageProps) {
  const path = usePath();
  const rest = path.startsWith(`${BASE}/`) ? decodeURIComponent(path.slice(BASE.length + 1)) : '';
  if (rest === NEW) return <Editor key={NEW} organizationId={organizationId} toolName={null} />;
  if (rest) return <Editor key={rest} organizationId={organizationId} toolName={rest} />;
  return <PolicyList organizationId={organizationId} />;
}

function PolicyList({ organizationId }: { organizationId: string }) {
  const { data: policies, load, error, setError } = useList<Policy>('/v1/policies', organizationId);
  const [message, setMessage] = useState<string | null>(null);

  const toggle = async (p: Policy) => {
    setError(null);
    try {
      const action = p.isActive ? 'deactivate' : 'activate';
      const res = await api<{ message: string }>(`/v1/policies/${encodeURIComponent(p.toolName)}/${action}`, {
        method: 'POST',
        organizationId,
      });
      setMessage(res.message);
      await load();
    } catch (err) {
      setError(messageOf(err));
    }
  };

  return (
    <>
      <div className="heading">
        <h1>Policies</h1>
        <Link to={`${BASE}/${NEW}`}>New policy</Link>
      </div>
      <ErrorLine error={error} alert />
      <p role="status" className="meta">
        {message}
      </p>
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
                    <Link to={pathOf(p.toolName)}>{p.toolName}</Link>
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
                      aria-label={`${p.isActive ? 'Deactivate' : 'Activate'} ${p.toolName}`}
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

function Editor({ organizationId, toolName }: { organizationId: string; toolName: string | null }) {
  const ids = useId();
  const [name, setName] = useState(toolName ?? '');
  const [text, setText] = useState(toolName ? '' : STARTER);
  const [policy, setPolicy] = useState<Policy | null>(null);
  const [quality, setQuality] = useState<Quality | null>(null);
  const [qualityError, setQualityError] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [versions, setVersions] = useState<PolicyVersion[]>([]);
  const [tools, setTools] = useState<string[]>([]);
  const parsed = parseDefinition(text);

  const load = useCallback(async () => {
    if (!toolName) return;
    const path = `/v1/policies/${encodeURIComponent(toolName)}`;
    try {
      const [p, v] = await Promise.all([
        api<Policy>(path, { organizationId }),
        api<{ data: PolicyVersion[] }>(`${path}/versions`, { organizationId }),
      ]);
      setPolicy(p);
      setVersions([...v.data].sort((a, b) => b.version - a.version));
      return p;
    } catch (err) {
      setError(
        err instanceof ApiError && err.status === 404
          ? `There is no policy for ${toolName}.`
          : messageOf(err),
      );
      return null;
    }
  }, [organizationId, toolName]);

  useEffect(() => {
    void load().then((p) => {
      if (p) setText(JSON.stringify(definitionOf(p), null, 2));
    });
  }, [load]);

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
      api<Quality>(`/v1/policies/${encodeURIComponent(target)}/validate`, {
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

  const save = async (e: FormEvent) => {
    e.preventDefault();
    if (!parsed.ok) return;
    setBusy(true);
    setError(null);
    setMessage(null);
    try {
      if (toolName) {
        const saved = await api<Policy & { quality: Quality }>(
          `/v1/policies/${encodeURIComponent(toolName)}`,
          {
            method: 'PUT',
            body: parsed.body,
            organizationId,
          },
        );
        setMessage(`Saved as version ${saved.version}.`);
        await load();
      } else {
        const created = await api<Policy>('/v1/policies', {
          method: 'POST',
          body: { toolName: name.trim(), ...parsed.body },
          organizationId,
        });
        navigate(pathOf(created.toolName));
      }
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };

  const act = async (action: 'activate' | 'deactivate' | 'delete') => {
    if (!toolName) return;
    setBusy(true);
    setError(null);
    setMessage(null);
    const path = `/v1/policies/${encodeURIComponent(toolName)}`;
    try {
      if (action === 'delete') {
        await api(path, { method: 'DELETE', organizationId });
        navigate(BASE);
        return;
      }
      const res = await api<{ message: string }>(`${path}/${action}`, { method: 'POST', organizationId });
      setMessage(res.message);
      await load();
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
      setConfirmDelete(false);
    }
  };

  return (
    <>
      <p>
        <Link to={BASE}>← All policies</Link>
      </p>
      <div className="heading">
        <h1>{toolName ? `Policy for ${toolName}` : 'New policy'}</h1>
        {policy && (
          <span className="meta">
            version {policy.version} · {policy.isActive ? 'active' : 'inactive'}
          </span>
        )}
      </div>
      <ErrorLine error={error} alert />
      {toolName && !policy && !error && <p aria-busy="true">Loading…</p>}
      {(!toolName || policy) && (
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
              {toolName ? 'Save' : 'Create policy'}
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

      <DryRun text={text} />

      {toolName && versions.length > 0 && (
        <section aria-labelledby={`${ids}-history`}>
          <h2 id={`${ids}-history`}>Version history</h2>
          <ul className="versions">
            {versions.map((v) => (
              <li key={v.version} data-version={v.version}>
                <details>
                  <summary>
                    Version {v.version} · {new Date(v.createdAt).toLocaleString()}
                    {policy?.version === v.version ? ' (current)' : ''}
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

type DryRunResult = { ok: true; evaluation: Evaluation } | { ok: false; problem: string };

/**
 * A call tried against the definition being edited, evaluated in this browser with the policy
 * engine the server runs: nothing is saved or recorded. Session limits apply as to a session's
 * first call.
 */
function DryRun({ text }: { text: string }) {
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
      setResult({ ok: true, evaluation: mergeEvaluation(evaluate(compiled, a), session) });
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
        browser. Nothing is recorded.
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
            <p className={`verdict ${result.evaluation.decision}`} data-dry-run={result.evaluation.decision}>
              Decision: {result.evaluation.decision}
              {result.evaluation.reason ? ` — ${result.evaluation.reason}` : ''}
            </p>
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
