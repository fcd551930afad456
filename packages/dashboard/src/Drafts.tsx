import { useId, useState } from 'react';
import { ApiError, api, type DraftReplay, type DraftRule, type PolicyDraft } from './api.js';
import type { PageProps } from './pages.js';
import { ErrorLine, TableHead, useReload } from './ui.js';

const STATUS_LABEL: Record<PolicyDraft['status'], string> = {
  draft: 'Being written',
  pending_review: 'Waiting for review',
  approved: 'Approved',
  rejected: 'Rejected',
};

function condition(c: DraftRule['conditions'][number]): string {
  return `${c.field} ${c.operator.replaceAll('_', ' ')}${c.value !== undefined ? ` ${JSON.stringify(c.value)}` : ''}`;
}

/** Policy drafts agents proposed: their rules, what they would have changed, approve or reject. */
export function Drafts({ organizationId }: PageProps) {
  const [drafts, setDrafts] = useState<PolicyDraft[] | null>(null);
  const [message, setMessage] = useState<string | null>(null);

  const reload = useReload(
    async () => {
      const { data } = await api<{ data: PolicyDraft[] }>('/v1/policy-drafts', { organizationId });
      // Waiting for review first, then the newest.
      const order = (d: PolicyDraft) => (d.status === 'pending_review' ? 0 : 1);
      setDrafts([...data].sort((a, b) => order(a) - order(b) || b.updatedAt.localeCompare(a.updatedAt)));
    },
    setMessage,
    organizationId,
  );

  return (
    <section aria-labelledby="drafts-title">
      <h1 id="drafts-title">Policy drafts</h1>
      <p className="empty">
        Rules agents proposed. Nothing is enforced until a person approves; approving appends the rules to
        each tool's policy.
      </p>
      <ErrorLine error={message} alert />
      {drafts === null ? (
        <p aria-busy="true">Loading…</p>
      ) : drafts.length === 0 ? (
        <p className="empty">No agent has proposed a draft.</p>
      ) : (
        <ul className="cards">
          {drafts.map((d) => (
            <DraftCard key={d.id} draft={d} organizationId={organizationId} onChanged={reload} />
          ))}
        </ul>
      )}
    </section>
  );
}

function DraftCard({
  draft: d,
  organizationId,
  onChanged,
}: {
  draft: PolicyDraft;
  organizationId: string;
  onChanged: () => Promise<void>;
}) {
  const [limit, setLimit] = useState(100);
  const [replay, setReplay] = useState<DraftReplay | null>(null);
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<string | null>(null);
  const limitId = useId();
  const titleId = useId();

  async function run<T>(work: () => Promise<T>): Promise<T | undefined> {
    setBusy(true);
    setMessage(null);
    try {
      return await work();
    } catch (err) {
      setMessage((err as Error).message);
      return undefined;
    } finally {
      setBusy(false);
    }
  }

  const doReplay = () =>
    run(async () =>
      setReplay(
        (
          await api<{ data: DraftReplay }>(`/v1/policy-drafts/${d.id}/replay`, {
            method: 'POST',
            body: { limit },
            organizationId,
          })
        ).data,
      ),
    );

  const decide = (action: 'approve' | 'reject') =>
    run(async () => {
      const res = await api<{ applied?: { toolName: string; version: number }[] }>(
        `/v1/policy-drafts/${d.id}/${action}`,
        // Approving applies the rules shown on this card or nothing (409 if the draft was edited since).
        { method: 'POST', organizationId, ...(action === 'approve' ? { ifMatch: d.revision } : {}) },
      ).catch(async (err: unknown) => {
        // Edited since it was shown: show what it says now, with the reason nothing was applied.
        if (err instanceof ApiError && err.status === 409) await onChanged();
        throw err;
      });
      if (res.applied)
        setMessage(
          `Applied: ${res.applied.map((p) => `${p.toolName} version ${p.version}`).join(', ') || 'nothing'}`,
        );
      await onChanged();
    });

  return (
    <li className="card" data-draft-id={d.id} aria-labelledby={titleId}>
      <div className="card-head">
        <h2 id={titleId} className="tool" style={{ margin: 0 }}>
          {d.name}
        </h2>
        <span className="left">{STATUS_LABEL[d.status]}</span>
      </div>
      {d.description && <p>{d.description}</p>}
      <div className="meta">
        Proposed by agent {d.createdByAgentId} · {new Date(d.createdAt).toLocaleString()}
        {d.reviewedBy && (
          <>
            {' '}
            · {d.status} by {d.reviewedBy}
          </>
        )}
      </div>
      <div className="scroll">
        <table>
          <caption className="meta" style={{ textAlign: 'left' }}>
            Rules
          </caption>
          <TableHead columns={['Rule', 'Action', 'Tools', 'When']} scoped />
          <tbody>
            {d.rules.map((r) => (
              <tr key={r.id}>
                <td>
                  {r.id}
                  {r.enabled === false ? ' (disabled)' : ''}
                </td>
                <td>{r.action}</td>
                <td>{r.tools.join(', ')}</td>
                <td>{r.conditions.map(condition).join(' and ') || 'always'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <div className="form">
        <label htmlFor={limitId}>
          Recent decisions to replay
          <input
            id={limitId}
            type="number"
            min={1}
            max={1000}
            value={limit}
            onChange={(e) => setLimit(Math.min(1000, Math.max(1, Number(e.target.value) || 1)))}
          />
        </label>
        <button type="button" disabled={busy} onClick={doReplay}>
          Replay against decisions
        </button>
        {d.status === 'pending_review' && (
          <>
            <button type="button" disabled={busy} onClick={() => decide('approve')}>
              Approve draft
            </button>
            <button type="button" className="deny" disabled={busy} onClick={() => decide('reject')}>
              Reject draft
            </button>
          </>
        )}
      </div>
      {message && (
        <p role="status" className={message.startsWith('Applied') ? undefined : 'error'}>
          {message}
        </p>
      )}
      {replay && <ReplayResult replay={replay} />}
    </li>
  );
}

function ReplayResult({ replay }: { replay: DraftReplay }) {
  return (
    <div className="replay" data-replay>
      <p role="status">
        {replay.examined === 0
          ? 'No recorded decision for the tools of this draft.'
          : `Of the last ${replay.examined} decisions for ${replay.tools.join(', ')}, ${replay.changed.length} would have ended differently.`}
      </p>
      {replay.skipped.length > 0 && (
        <ul className="meta">
          {replay.skipped.map((s) => (
            <li key={`${s.ruleId}-${s.toolName ?? ''}`}>
              Rule {s.ruleId} not replayed: {s.reason}
            </li>
          ))}
        </ul>
      )}
      {replay.changed.length > 0 && (
        <div className="scroll">
          <table>
            <TableHead columns={['When', 'Call', 'Was', 'Would be', 'Why']} scoped />
            <tbody>
              {replay.changed.map((c) => (
                <tr key={c.decisionId} data-decision-id={c.decisionId}>
                  <td>{new Date(c.createdAt).toLocaleString()}</td>
                  <td>
                    <code>
                      {c.toolName} {JSON.stringify(c.arguments)}
                    </code>
                    {c.agentId && <div className="meta">Agent {c.agentId}</div>}
                  </td>
                  <td className={c.before.decision}>{c.before.decision}</td>
                  <td className={c.after.decision}>{c.after.decision}</td>
                  <td>{c.after.failedConstraints.map((f) => f.message).join('; ') || c.after.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
