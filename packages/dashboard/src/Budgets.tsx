import { type FormEvent, useEffect, useId, useState } from 'react';
import { usd } from './ApprovalDetails.js';
import { api, type EconomicConfig, type EconomicStatus, type ScopeBudget } from './api.js';
import type { PageProps } from './pages.js';
import { ErrorLine, Loading, TableHead, useFocusReturn } from './ui.js';

const SCOPES = [
  ['session', 'Session'],
  ['agent', 'Agent'],
  ['category', 'Category'],
] as const;

/**
 * A duration in seconds as a person reads it, exactly: `90` is "1 min 30 s" (rounded to minutes it
 * was "2 min", half a minute more than an approval waits), `3600` is "1 h".
 */
export function durationText(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const parts: string[] = [];
  if (s >= 3600) parts.push(`${Math.floor(s / 3600)} h`);
  if (s % 3600 >= 60) parts.push(`${Math.floor((s % 3600) / 60)} min`);
  if (s % 60 > 0 || s === 0) parts.push(`${s % 60} s`);
  return parts.join(' ');
}

/**
 * Spend budgets: the organization's economic configuration (limits, approval thresholds, windows)
 * and, for an agent's session, each budget's limit, spent, reserved and remaining from the ledger.
 */
export function Budgets({ organizationId }: PageProps) {
  const [config, setConfig] = useState<EconomicConfig | null>(null);
  const [status, setStatus] = useState<EconomicStatus | null>(null);
  const [form, setForm] = useState({ agentId: '', sessionId: '', category: '' });
  const [asked, setAsked] = useState<typeof form | null>(null);
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<string | null>(null);
  /** Why the configuration could not be read: it stays while figures are asked for. */
  const [configError, setConfigError] = useState<string | null>(null);
  const ids = { agent: useId(), session: useId(), category: useId() };
  const returnFocus = useFocusReturn();

  useEffect(() => {
    api<EconomicConfig>('/v1/economic/config', { organizationId }).then(setConfig, (err: Error) =>
      setConfigError(err.message),
    );
  }, [organizationId]);

  async function show(e: FormEvent) {
    e.preventDefault();
    // Show figures is disabled while they are read: the focus comes back to it.
    const from = document.activeElement;
    setBusy(true);
    setMessage(null);
    try {
      const body = {
        agentId: form.agentId.trim(),
        sessionId: form.sessionId.trim(),
        ...(form.category.trim() ? { category: form.category.trim() } : {}),
      };
      setStatus(await api<EconomicStatus>('/v1/economic/status', { method: 'POST', body, organizationId }));
      setAsked(form);
    } catch (err) {
      setMessage((err as Error).message);
    } finally {
      setBusy(false);
      returnFocus(from);
    }
  }

  const c = config?.effective ?? null;
  const field = (key: keyof typeof form) => ({
    value: form[key],
    onChange: (e: { target: { value: string } }) => setForm((f) => ({ ...f, [key]: e.target.value })),
  });

  return (
    <>
      <section aria-labelledby="budgets-title">
        <h1 id="budgets-title">Spend budgets</h1>
        <ErrorLine error={configError} alert />
        <ErrorLine error={message} alert />
        {config === null ? (
          <Loading failed={configError !== null} />
        ) : c === null ? (
          <p className="empty">
            No economic configuration: spend is not authorized against budgets. Set one with PUT
            /v1/economic/config.
          </p>
        ) : (
          <div className="scroll">
            <table className="figures" aria-label="Configured limits">
              <TableHead columns={['Budget', 'Limit', 'A person approves from', 'Window']} scoped />
              <tbody>
                <tr>
                  <th scope="row">Each action</th>
                  <td>—</td>
                  <td>
                    {c.perActionApprovalThresholdUsd === null ? '—' : usd(c.perActionApprovalThresholdUsd)}
                  </td>
                  <td>—</td>
                </tr>
                <tr>
                  <th scope="row">Session</th>
                  <td>{c.sessionLimitUsd === null ? 'none' : usd(c.sessionLimitUsd)}</td>
                  <td>—</td>
                  <td>the session</td>
                </tr>
                <tr>
                  <th scope="row">Agent</th>
                  <td>{c.agentLimitUsd === null ? 'none' : usd(c.agentLimitUsd)}</td>
                  <td>—</td>
                  <td>{c.agentWindow}</td>
                </tr>
                {Object.entries(c.categoryPolicies).map(([name, p]) => (
                  <tr key={name}>
                    <th scope="row">Category {name}</th>
                    <td>{p.limitUsd === null ? 'none' : usd(p.limitUsd)}</td>
                    <td>{p.approvalThresholdUsd === null ? '—' : usd(p.approvalThresholdUsd)}</td>
                    <td>{c.categoryWindow}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            <p className="meta">
              Set by: {config.authority}. Approved payers: {c.approvedPayers.join(', ') || 'none'}
              {c.defaultPayer ? ` (default ${c.defaultPayer})` : ''}. Approvals wait{' '}
              <span data-approval-window>{durationText(c.approvalWindowSeconds)}</span>.
            </p>
          </div>
        )}
      </section>
      <section aria-labelledby="usage-title">
        <h2 id="usage-title">Spent so far</h2>
        <p className="empty">Budgets count per agent and session: name the ones to look at.</p>
        <form className="form" onSubmit={show}>
          <label htmlFor={ids.agent}>
            Agent
            <input id={ids.agent} required maxLength={200} {...field('agentId')} />
          </label>
          <label htmlFor={ids.session}>
            Session
            <input id={ids.session} required maxLength={200} {...field('sessionId')} />
          </label>
          <label htmlFor={ids.category}>
            Category (optional)
            <input id={ids.category} maxLength={200} {...field('category')} />
          </label>
          <button type="submit" disabled={busy}>
            Show figures
          </button>
        </form>
        {status && asked && (
          <div className="scroll" data-budget>
            {!status.healthy ? (
              <p role="alert" className="error">
                The spend ledger could not be read: these figures are not known. Try again.
              </p>
            ) : !status.enabled || status.budget === null ? (
              <p className="empty">No economic configuration applies.</p>
            ) : (
              <table className="figures" aria-label="Budget figures">
                <TableHead columns={['Budget', 'Limit', 'Spent', 'Reserved', 'Remaining']} scoped />
                <tbody>
                  {SCOPES.map(([key, label]) => {
                    const b: ScopeBudget | undefined = status.budget?.[key];
                    if (!b) return null;
                    const name =
                      key === 'session' ? asked.sessionId : key === 'agent' ? asked.agentId : asked.category;
                    return (
                      <tr key={key} data-scope={key}>
                        <th scope="row">
                          {label} {name}
                        </th>
                        <td>{b.limitUsd === null ? 'none' : usd(b.limitUsd)}</td>
                        <td>{usd(b.spentUsd)}</td>
                        <td>{usd(b.reservedUsd)}</td>
                        <td>{b.remainingUsd === null ? 'unlimited' : usd(b.remainingUsd)}</td>
                      </tr>
                    );
                  })}
                </tbody>
              </table>
            )}
            {status.pendingApprovals.length > 0 && (
              <p className="meta">
                {status.pendingApprovals.length} spend approval(s) waiting: see Approvals.
              </p>
            )}
            {status.budget && (
              <p className="meta">
                As of {new Date(status.budget.asOf).toLocaleString()}, from the spend ledger.
              </p>
            )}
          </div>
        )}
      </section>
    </>
  );
}
