import { useCallback, useEffect, useState } from 'react';
import { ApprovalDetails, boundAction } from './ApprovalDetails.js';
import { api, type BatchResult, type PendingApproval, type ResolvedApproval } from './api.js';
import { ErrorLine, TableHead } from './ui.js';

type Action = 'approve' | 'deny';
type Live = 'connecting' | 'live' | 'polling';

const POLL_MS = 15_000;
const EVENTS = ['approval.created', 'approval.resolved', 'approval.expired'];

function timeLeft(expiresAt: string, now: number): string {
  const s = Math.max(0, Math.round((Date.parse(expiresAt) - now) / 1000));
  if (s === 0) return 'expired';
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h} h ${m} min` : m > 0 ? `${m} min ${s % 60} s` : `${s} s`;
}

/** The pending queue (live over the event stream, polled as a fallback) and the resolved history. */
export function Approvals({ organizationId, userId }: { organizationId: string; userId: string }) {
  const [pending, setPending] = useState<PendingApproval[]>([]);
  const [resolved, setResolved] = useState<ResolvedApproval[]>([]);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [live, setLive] = useState<Live>('connecting');
  const [message, setMessage] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [now, setNow] = useState(Date.now());

  const reload = useCallback(async () => {
    try {
      const [p, r] = await Promise.all([
        api<{ data: PendingApproval[] }>('/v1/approvals/pending', { organizationId }),
        api<{ data: ResolvedApproval[] }>('/v1/approvals/resolved?limit=50', { organizationId }),
      ]);
      setPending(p.data);
      setResolved(r.data);
      setSelected((s) => new Set([...s].filter((id) => p.data.some((a) => a.id === id))));
    } catch (err) {
      setMessage((err as Error).message);
    }
  }, [organizationId]);

  useEffect(() => {
    void reload();
    const stream = new EventSource(
      `/v1/events/stream?organizationId=${encodeURIComponent(organizationId)}&types=${EVENTS.join(',')}`,
    );
    stream.onopen = () => setLive('live');
    // The browser reconnects by itself; meanwhile the poll below keeps the queue fresh.
    stream.onerror = () => setLive('polling');
    for (const type of EVENTS) stream.addEventListener(type, () => void reload());
    const poll = setInterval(() => void reload(), POLL_MS);
    const tick = setInterval(() => setNow(Date.now()), 1000);
    return () => {
      stream.close();
      clearInterval(poll);
      clearInterval(tick);
    };
  }, [organizationId, reload]);

  async function resolve(ids: string[], action: Action) {
    setBusy(true);
    setMessage(null);
    try {
      if (ids.length === 1) {
        await api(`/v1/approvals/${ids[0]}/resolve`, { method: 'POST', body: { action }, organizationId });
      } else {
        const { results } = await api<{ results: BatchResult[] }>('/v1/approvals/batch-resolve', {
          method: 'POST',
          body: { ids, action },
          organizationId,
        });
        const failed = results.filter((r) => r.error);
        if (failed.length > 0)
          setMessage(`${failed.length} not resolved: ${failed.map((f) => f.error?.message).join('; ')}`);
      }
    } catch (err) {
      setMessage((err as Error).message);
    } finally {
      setBusy(false);
      await reload();
    }
  }

  const toggle = (id: string) =>
    setSelected((s) => {
      const next = new Set(s);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  const chosen = [...selected];

  return (
    <>
      <section aria-labelledby="pending-title">
        <div className="heading">
          <h1 id="pending-title">Pending approvals</h1>
          <span className={`live ${live}`} role="status">
            {live === 'live'
              ? 'Live'
              : live === 'polling'
                ? `Refreshing every ${POLL_MS / 1000} s`
                : 'Connecting…'}
          </span>
        </div>
        <ErrorLine error={message} alert />
        {pending.length === 0 ? (
          <p className="empty">Nothing is waiting for a decision.</p>
        ) : (
          <>
            <div className="batch">
              <button
                type="button"
                disabled={busy || chosen.length === 0}
                onClick={() => resolve(chosen, 'approve')}
              >
                Approve selected ({chosen.length})
              </button>
              <button
                type="button"
                className="deny"
                disabled={busy || chosen.length === 0}
                onClick={() => resolve(chosen, 'deny')}
              >
                Deny selected ({chosen.length})
              </button>
            </div>
            <ul className="cards">
              {pending.map((a) => (
                <li key={a.id} className="card" data-approval-id={a.id}>
                  <div className="card-head">
                    <label>
                      <input type="checkbox" checked={selected.has(a.id)} onChange={() => toggle(a.id)} />
                      <span className="tool">{a.toolName}</span>
                    </label>
                    <span className="left">{timeLeft(a.expiresAt, now)} left</span>
                  </div>
                  <ApprovalDetails approval={a} userId={userId} />
                  {boundAction(a) ? (
                    <details>
                      <summary>All arguments</summary>
                      <pre>{JSON.stringify(a.arguments, null, 2)}</pre>
                    </details>
                  ) : (
                    <pre>{JSON.stringify(a.arguments, null, 2)}</pre>
                  )}
                  <div className="meta">
                    {a.agentId && <>Agent {a.agentId} · </>}
                    {a.sessionId && <>Session {a.sessionId} · </>}
                    Requested {new Date(a.createdAt).toLocaleString()} · <code>{a.id}</code>
                  </div>
                  <div className="actions">
                    <button
                      type="button"
                      disabled={busy || a.approvers?.some((g) => g.resolvedBy === userId)}
                      onClick={() => resolve([a.id], 'approve')}
                      aria-label={`Approve ${a.toolName} ${a.id}`}
                    >
                      Approve
                    </button>
                    <button
                      type="button"
                      className="deny"
                      disabled={busy}
                      onClick={() => resolve([a.id], 'deny')}
                      aria-label={`Deny ${a.toolName} ${a.id}`}
                    >
                      Deny
                    </button>
                  </div>
                </li>
              ))}
            </ul>
          </>
        )}
      </section>
      <section aria-labelledby="history-title">
        <h2 id="history-title">Resolved</h2>
        {resolved.length === 0 ? (
          <p className="empty">No approval has been resolved yet.</p>
        ) : (
          <div className="scroll">
            <table>
              <TableHead columns={['Tool', 'Decision', 'By', 'When']} scoped />
              <tbody>
                {resolved.map((a) => (
                  <tr key={a.id} data-approval-id={a.id}>
                    <td>{a.toolName}</td>
                    <td className={a.status}>{a.status}</td>
                    <td>{a.resolvedBy === userId ? `${a.resolvedBy} (you)` : a.resolvedBy}</td>
                    <td>{a.resolvedAt ? new Date(a.resolvedAt).toLocaleString() : ''}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}
