import { useId, useMemo, useState } from 'react';
import { ApiError, api, type DraftReplay, type DraftRule, messageOf, type PolicyDraft } from './api.js';
import type { PageProps } from './pages.js';
import { inspect, revealString } from './reveal.js';
import { CompactJson, Shown, Warnings } from './Shown.js';
import { ErrorLine, isFirstClick, TableHead, useReload } from './ui.js';

const STATUS_LABEL: Record<PolicyDraft['status'], string> = {
  draft: 'Being written',
  pending_review: 'Waiting for review',
  approved: 'Approved',
  rejected: 'Rejected',
};

function condition(c: DraftRule['conditions'][number]): string {
  return `${c.field} ${c.operator.replaceAll('_', ' ')}${c.value !== undefined ? ` ${JSON.stringify(c.value)}` : ''}`;
}

/** The most recent decisions a replay may examine. */
export const REPLAY_MAX = 1000;

/**
 * The replay count typed in the box: a whole number from 1 to REPLAY_MAX, else null. The box keeps
 * what is typed (it may be empty while the person types), and this is read when replaying.
 */
export function replayLimit(text: string): number | null {
  if (!/^\s*\d+\s*$/.test(text)) return null;
  const n = Number(text);
  return n >= 1 && n <= REPLAY_MAX ? n : null;
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
      return [...data].sort((a, b) => order(a) - order(b) || b.updatedAt.localeCompare(a.updatedAt));
    },
    (sorted) => {
      setDrafts(sorted);
      setMessage(null);
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
  const [limit, setLimit] = useState('100');
  /** The last replay, with the revision of the draft it ran on. */
  const [replay, setReplay] = useState<{ revision: string; data: DraftReplay } | null>(null);
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<string | null>(null);
  const limitId = useId();
  const titleId = useId();

  const found = useMemo(() => inspect(d.name, d.description, d.createdByAgentId, d.reviewedBy, d.rules), [d]);

  async function run<T>(work: () => Promise<T>): Promise<T | undefined> {
    setBusy(true);
    setMessage(null);
    try {
      return await work();
    } catch (err) {
      setMessage(messageOf(err));
      return undefined;
    } finally {
      setBusy(false);
    }
  }

  const count = replayLimit(limit);
  const doReplay = () =>
    run(async () => {
      if (count === null)
        throw new Error(`Recent decisions to replay: a whole number from 1 to ${REPLAY_MAX}.`);
      const { data } = await api<{ data: DraftReplay }>(`/v1/policy-drafts/${d.id}/replay`, {
        method: 'POST',
        body: { limit: count },
        organizationId,
      });
      setReplay({ revision: data.revision, data });
      if (data.revision !== d.revision) {
        // Edited since this card was read: show the rules that were replayed beside their results.
        await onChanged();
        setMessage('The draft was edited since this page read it: these are its rules now, as replayed.');
      }
    });

  const decide = (action: 'approve' | 'reject') =>
    run(async () => {
      const res = await api<{ applied?: { toolName: string; version: number }[] }>(
        `/v1/policy-drafts/${d.id}/${action}`,
        // Approving applies the rules shown on this card or nothing, and rejecting rejects them or
        // nothing: 409 if the draft was edited since it was shown.
        { method: 'POST', organizationId, ifMatch: d.revision },
      ).catch(async (err: unknown) => {
        // Edited (409) or decided (400) since it was shown: show what it is now, with the reason
        // nothing was done.
        if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 401)
          await onChanged();
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
          <Shown text={d.name} />
        </h2>
        <span className="left">{STATUS_LABEL[d.status]}</span>
      </div>
      <Warnings found={found} />
      {d.description && (
        <p className="description">
          <Shown text={d.description} multiline />
        </p>
      )}
      <div className="meta">
        Proposed by agent <Shown text={d.createdByAgentId} /> · {new Date(d.createdAt).toLocaleString()}
        {d.reviewedBy && (
          <>
            {' '}
            · {d.status} by <Shown text={d.reviewedBy} />
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
                <td className="wrap">
                  <Shown text={r.id} />
                  {r.enabled === false ? ' (disabled)' : ''}
                </td>
                <td className="wrap">
                  <Shown text={r.action} />
                </td>
                <td className="tool">
                  <span className="name">
                    <Shown text={r.tools.join(', ')} />
                  </span>
                </td>
                <td className="wrap">
                  <Shown text={r.conditions.map(condition).join(' and ') || 'always'} />
                </td>
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
            max={REPLAY_MAX}
            value={limit}
            onChange={(e) => setLimit(e.target.value)}
            aria-invalid={count === null || undefined}
          />
        </label>
        <button type="button" disabled={busy} onClick={doReplay}>
          Replay against decisions
        </button>
        {d.status === 'pending_review' && (
          <>
            <button type="button" disabled={busy} onClick={(e) => isFirstClick(e) && decide('approve')}>
              Approve draft
            </button>
            <button
              type="button"
              className="deny"
              disabled={busy}
              onClick={(e) => isFirstClick(e) && decide('reject')}
            >
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
      {replay &&
        (replay.revision === d.revision ? (
          <ReplayResult replay={replay.data} />
        ) : (
          // The draft was edited since: what the replay found says nothing about the rules shown now.
          <p className="warn" data-replay-stale>
            The draft changed since the last replay: replay it again to see what these rules would change.
          </p>
        ))}
    </li>
  );
}

function ReplayResult({ replay }: { replay: DraftReplay }) {
  return (
    <div className="replay" data-replay>
      <p role="status">
        {replay.examined === 0
          ? 'No recorded decision for the tools of this draft.'
          : `Of the last ${replay.examined} decisions for ${revealString(replay.tools.join(', '))}, ${replay.changed.length} would have ended differently.`}
      </p>
      {replay.truncated && (
        <p className="warn" data-replay-truncated>
          The replay stopped after {replay.examined} decisions: their arguments reached 16 MiB. Older
          decisions were not replayed.
        </p>
      )}
      {replay.skipped.length > 0 && (
        <ul className="meta">
          {replay.skipped.map((s) => (
            <li key={`${s.ruleId}-${s.toolName ?? ''}`}>
              Rule <Shown text={s.ruleId} /> not replayed: <Shown text={s.reason} />
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
                  <td className="wrap">
                    <code>
                      <Shown text={c.toolName} /> <CompactJson value={c.arguments} />
                    </code>
                    {c.agentId && (
                      <div className="meta">
                        Agent <Shown text={c.agentId} />
                      </div>
                    )}
                  </td>
                  <td className={c.before.decision}>{c.before.decision}</td>
                  <td className={c.after.decision}>{c.after.decision}</td>
                  <td className="wrap">
                    <Shown
                      text={c.after.failedConstraints.map((f) => f.message).join('; ') || c.after.reason}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
