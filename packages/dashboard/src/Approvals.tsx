import { useEffect, useMemo, useRef, useState } from 'react';
import { ApprovalDetails, boundAction } from './ApprovalDetails.js';
import {
  api,
  type BatchResult,
  messageOf,
  type PendingApproval,
  query,
  type ResolvedApproval,
} from './api.js';
import { useLiveEvents } from './live.js';
import { batchOutcome, inBatches, queueChange, selectLabel, timeLeft } from './queue.js';
import { inspect, jsonPieces, revealString } from './reveal.js';
import { JsonBlock, Shown, Warnings } from './Shown.js';
import {
  ErrorLine,
  isFirstClick,
  LiveStatus,
  Loading,
  PageRange,
  Pager,
  TableHead,
  useFocusReturn,
  usePageFocus,
  useReload,
} from './ui.js';

type Action = 'approve' | 'deny';

const EVENTS = ['approval.created', 'approval.resolved', 'approval.expired'];
/** Resolved approvals shown per page. */
const PAGE = 50;

interface Page {
  total: number;
  offset: number;
}

/**
 * The pending queue (live over the event stream, polled as a fallback) and the resolved history, a
 * page at a time. Both are read again whenever approvals change; a later page of the history stays
 * where it is (its rows move down as new resolutions come in on top) rather than going back to the first.
 */
export function Approvals({ organizationId, userId }: { organizationId: string; userId: string }) {
  const [pending, setPending] = useState<PendingApproval[]>([]);
  const [resolved, setResolved] = useState<ResolvedApproval[]>([]);
  /** Where the history page asked for starts; the rows shown start at `shownPage.offset` once read. */
  const [resolvedOffset, setResolvedOffset] = useState(0);
  const [shownPage, setShownPage] = useState<Page>({ total: 0, offset: 0 });
  /** Both lists have been read once: until then they are not known to be empty. */
  const [loaded, setLoaded] = useState(false);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  /** The last read failed (cleared by the next read that works). */
  const [loadError, setLoadError] = useState<string | null>(null);
  /** What the last approve or deny said, when it did not go through entirely. */
  const [message, setMessage] = useState<string | null>(null);
  const [announcement, setAnnouncement] = useState('');
  const [busy, setBusy] = useState(false);
  const [now, setNow] = useState(Date.now());
  /** The ids of the last read, to announce what changed. */
  const known = useRef<string[] | null>(null);
  /** After a card is resolved from its own buttons: where the focus goes once it is gone. */
  const focusAfter = useRef<{ id: string; index: number } | null>(null);
  const listRef = useRef<HTMLUListElement>(null);
  const headingRef = useRef<HTMLHeadingElement>(null);
  const rangeRef = useRef<HTMLParagraphElement>(null);

  // Only the latest read's answer is shown.
  const reload = useReload(
    () =>
      Promise.all([
        api<{ data: PendingApproval[] }>('/v1/approvals/pending', { organizationId }),
        api<{ data: ResolvedApproval[]; pagination: Page }>(
          `/v1/approvals/resolved${query({ limit: PAGE, offset: resolvedOffset })}`,
          { organizationId },
        ),
      ]),
    ([p, r]) => {
      const change = queueChange(known.current, p.data);
      known.current = p.data.map((a) => a.id);
      if (change) setAnnouncement(change);
      setPending(p.data);
      setResolved(r.data);
      setShownPage(r.pagination);
      setLoaded(true);
      setLoadError(null);
      setSelected((s) => new Set([...s].filter((id) => p.data.some((a) => a.id === id))));
    },
    setLoadError,
    `${organizationId} ${resolvedOffset}`,
  );
  const live = useLiveEvents(organizationId, EVENTS, {
    onEvent: () => void reload(),
    onStale: () => void reload(),
  });
  useEffect(() => {
    const tick = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(tick);
  }, []);

  // A card resolved from its own buttons took the focus with it: give it to the next card (or the
  // previous, or the heading), not to the page.
  useEffect(() => {
    const after = focusAfter.current;
    if (!after || pending.some((a) => a.id === after.id)) return;
    focusAfter.current = null;
    const active = document.activeElement;
    if (active && active !== document.body && active.isConnected) return;
    const cards = listRef.current?.querySelectorAll<HTMLElement>(':scope > li');
    const next = cards?.[Math.min(after.index, cards.length - 1)];
    (next ?? headingRef.current)?.focus();
  }, [pending]);
  // After the effect above (same render, later effect): a card it gave the focus to keeps it.
  const returnFocus = useFocusReturn();
  const paged = usePageFocus(resolved, rangeRef);

  async function resolve(ids: string[], action: Action) {
    const index = ids.length === 1 ? pending.findIndex((a) => a.id === ids[0]) : -1;
    // The buttons are disabled while this runs, which takes the focus from the one pressed.
    const from = document.activeElement;
    const card = from instanceof HTMLElement ? from.closest<HTMLElement>('li.card') : null;
    setBusy(true);
    setMessage(null);
    try {
      if (ids.length === 1) {
        await api(`/v1/approvals/${ids[0]}/resolve`, { method: 'POST', body: { action }, organizationId });
        if (index >= 0) focusAfter.current = { id: ids[0]!, index };
      } else {
        // The batch route takes at most 100 ids: larger selections go in several requests.
        const failures: string[] = [];
        for (const batch of inBatches(ids)) {
          try {
            const { results } = await api<{ results: BatchResult[] }>('/v1/approvals/batch-resolve', {
              method: 'POST',
              body: { ids: batch, action },
              organizationId,
            });
            for (const r of results) if (r.error) failures.push(r.error.message);
          } catch (err) {
            for (const _ of batch) failures.push(messageOf(err));
          }
        }
        setMessage(batchOutcome(action, ids.length, failures));
      }
    } catch (err) {
      setMessage(messageOf(err));
    } finally {
      // The buttons wait for the queue as it is now: until it is read, the cards just resolved are
      // still shown, and acting on one again would be refused.
      await reload();
      setBusy(false);
      // Back to the button pressed; else (a batch done, the selection gone, an approval of yours
      // given under dual control) its card, or the heading.
      returnFocus(from, () => (card?.isConnected ? card : headingRef.current));
    }
  }

  const toggle = (id: string) =>
    setSelected((s) => {
      const next = new Set(s);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  const byId = useMemo(() => new Map(pending.map((a) => [a.id, a])), [pending]);
  // Expired approvals can no longer be resolved: they are left out of the selection's actions.
  const chosen = [...selected].filter((id) => {
    const a = byId.get(id);
    return a !== undefined && !timeLeft(a.expiresAt, now).expired;
  });

  return (
    <>
      <section aria-labelledby="pending-title">
        <div className="heading">
          <h1 id="pending-title" ref={headingRef} tabIndex={-1}>
            Pending approvals
          </h1>
          <LiveStatus live={live} />
        </div>
        {/* Cards arriving and leaving, said once by screen readers (not a role=status: one is above). */}
        <div className="visually-hidden" aria-live="polite" data-announcer>
          {announcement}
        </div>
        <ErrorLine error={loadError} alert />
        <ErrorLine error={message} alert />
        {!loaded ? (
          <Loading failed={loadError !== null} />
        ) : pending.length === 0 ? (
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
            <ul className="cards" ref={listRef}>
              {pending.map((a) => (
                <ApprovalCard
                  key={a.id}
                  approval={a}
                  userId={userId}
                  now={now}
                  busy={busy}
                  selected={selected.has(a.id)}
                  onToggle={() => toggle(a.id)}
                  onResolve={(action) => resolve([a.id], action)}
                />
              ))}
            </ul>
          </>
        )}
      </section>
      <section aria-labelledby="history-title">
        <h2 id="history-title">Resolved</h2>
        {/* Read with the queue: the "Loading…" above stands for both. */}
        {!loaded ? null : shownPage.total === 0 ? (
          <p className="empty">No approval has been resolved yet.</p>
        ) : (
          <>
            <PageRange
              ref={rangeRef}
              offset={shownPage.offset}
              count={resolved.length}
              total={shownPage.total}
            />
            <div className="scroll">
              <table>
                <TableHead columns={['Tool', 'Decision', 'By', 'When']} scoped />
                <tbody>
                  {resolved.map((a) => (
                    <tr key={a.id} data-approval-id={a.id}>
                      <td className="tool">
                        <span className="name">
                          <Shown text={a.toolName} />
                        </span>
                      </td>
                      <td className={a.status}>{a.status}</td>
                      <td className="wrap">
                        <Shown text={a.resolvedBy} />
                        {a.resolvedBy === userId ? ' (you)' : ''}
                      </td>
                      <td>{a.resolvedAt ? new Date(a.resolvedAt).toLocaleString() : ''}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            <Pager
              label="Pages of resolved approvals"
              offset={shownPage.offset}
              count={resolved.length}
              total={shownPage.total}
              pageSize={PAGE}
              onPage={(offset) => {
                paged();
                // The page asked for already (its read failed, or a later one read another): read it again.
                if (offset === resolvedOffset) void reload();
                else setResolvedOffset(offset);
              }}
            />
          </>
        )}
      </section>
    </>
  );
}

function ApprovalCard({
  approval: a,
  userId,
  now,
  busy,
  selected,
  onToggle,
  onResolve,
}: {
  approval: PendingApproval;
  userId: string;
  now: number;
  busy: boolean;
  selected: boolean;
  onToggle: () => void;
  onResolve: (action: Action) => void;
}) {
  const view = useMemo(() => jsonPieces(a.arguments), [a.arguments]);
  const found = useMemo(() => {
    const f = inspect(a.toolName, a.agentId, a.sessionId, a.escalation, a.approvers);
    return { hidden: f.hidden || view.hidden, spaces: f.spaces || view.spaces };
  }, [a, view]);
  const left = timeLeft(a.expiresAt, now);
  const tool = revealString(a.toolName);
  const args = <JsonBlock view={view} label={`Arguments of ${tool}`} />;
  return (
    // Focusable so that the focus can move here when the card before it is resolved.
    <li className="card" data-approval-id={a.id} tabIndex={-1}>
      <div className="card-head">
        <label>
          <input
            type="checkbox"
            checked={selected}
            disabled={left.expired}
            onChange={onToggle}
            aria-label={selectLabel(a)}
          />
          <span className="tool">
            <Shown text={a.toolName} />
          </span>
        </label>
        <span className={left.expired ? 'left expired' : 'left'} data-expired={left.expired || undefined}>
          {left.text}
        </span>
      </div>
      <Warnings found={found} long={view.long} />
      <ApprovalDetails approval={a} userId={userId} />
      {boundAction(a) ? (
        <details>
          <summary>All arguments</summary>
          {args}
        </details>
      ) : (
        args
      )}
      <div className="meta">
        {a.agentId && (
          <>
            Agent <Shown text={a.agentId} /> ·{' '}
          </>
        )}
        {a.sessionId && (
          <>
            Session <Shown text={a.sessionId} /> ·{' '}
          </>
        )}
        Requested {new Date(a.createdAt).toLocaleString()} · <code>{a.id}</code>
      </div>
      <div className="actions">
        <button
          type="button"
          disabled={busy || left.expired || a.approvers?.some((g) => g.resolvedBy === userId)}
          onClick={(e) => isFirstClick(e) && onResolve('approve')}
          aria-label={`Approve ${tool} ${a.id}`}
        >
          Approve
        </button>
        <button
          type="button"
          className="deny"
          disabled={busy || left.expired}
          onClick={(e) => isFirstClick(e) && onResolve('deny')}
          aria-label={`Deny ${tool} ${a.id}`}
        >
          Deny
        </button>
      </div>
    </li>
  );
}
