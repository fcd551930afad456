import { useId, useMemo, useRef, useState } from 'react';
import { ApiError, api, type DraftReplay, type DraftRule, messageOf, type PolicyDraft } from './api.js';
import { type DraftView, draftChanges, heldText, nextViews, showCurrent } from './draftList.js';
import { POLL_MS, useCoalesced, useLiveEvents } from './live.js';
import type { PageProps } from './pages.js';
import { readAgainIfRefused } from './reads.js';
import { inspect, revealString } from './reveal.js';
import { CompactJson, Shown, Warnings } from './Shown.js';
import {
  ErrorLine,
  isFirstClick,
  LiveStatus,
  Loading,
  TableHead,
  useAnnouncer,
  useFocusReturn,
  useReload,
} from './ui.js';

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

/** What approving a draft answers: the policies it changed, and the rules it could not apply. */
export interface Approved {
  applied?: { toolName: string; version: number }[];
  skipped?: { ruleId: string; toolName?: string; reason: string }[];
}

/**
 * What approving did, in words: the policies changed, and each rule left out with the reason (a
 * rule whose action cannot become a constraint, a tool whose policy is in LLM mode). `applied` is
 * false when nothing at all was applied: the draft is approved, yet nothing of it is enforced.
 * Agent-supplied text (rule ids, tool names, reasons) is revealed.
 */
export function approvalOutcome(res: Approved): { text: string; applied: boolean } {
  const applied = res.applied ?? [];
  const skipped = (res.skipped ?? []).map(
    (s) =>
      `rule ${revealString(s.ruleId)}${s.toolName ? ` for ${revealString(s.toolName)}` : ''}: ${revealString(s.reason)}`,
  );
  const done = applied.map((p) => `${revealString(p.toolName)} version ${p.version}`).join(', ');
  if (applied.length === 0) {
    return {
      text: `Approved, but nothing was applied: no policy changed.${skipped.length > 0 ? ` Not applied: ${skipped.join('; ')}.` : ''}`,
      applied: false,
    };
  }
  return {
    text: `Applied: ${done}.${skipped.length > 0 ? ` Not applied: ${skipped.join('; ')}.` : ''}`,
    applied: true,
  };
}

/** What a draft's card says when approving or rejecting it answered 404: it was deleted meanwhile. */
export function refusedAsDeleted(action: 'approve' | 'reject'): string {
  return `Nothing was ${action === 'approve' ? 'approved' : 'rejected'}: the draft was deleted since you read it.`;
}

/**
 * The first line of a replay's result. A replay with no tool to read (every rule of the draft left
 * out, as listed below it) examined nothing because there was nothing to replay, not for want of
 * recorded decisions.
 */
export function replaySummary(replay: Pick<DraftReplay, 'tools' | 'examined' | 'changed'>): string {
  if (replay.tools.length === 0) return 'Nothing to replay: no rule of this draft can be applied.';
  const tools = revealString(replay.tools.join(', '));
  if (replay.examined === 0) return `No recorded decision for ${tools}.`;
  return `Of the last ${replay.examined} decisions for ${tools}, ${replay.changed.length} would have ended differently.`;
}

/** What the page follows: the events the service sends about drafts (SPEC §6, catalog A). */
const EVENTS = ['draft.submitted', 'draft.approved', 'draft.rejected'];
/** A burst of events causes at most one read a second. */
const REFRESH_MS = 1000;

/**
 * Policy drafts agents proposed: their rules, what they would have changed, approve or reject.
 * The list follows the organization (its event stream, a poll besides): drafts that come in are
 * added on top; a draft someone else moves is shown as it is now, with a note saying so; a draft
 * edited or deleted since it was read keeps what the person read until they ask for what it is now.
 */
export function Drafts({ organizationId, userId }: PageProps) {
  const [views, setViews] = useState<DraftView[] | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const [announcer, say] = useAnnouncer();
  /** The cards as last set: each read is compared with them. */
  const shown = useRef<DraftView[] | null>(null);
  /** Cards the person acted on: the next read shows their drafts as they are, whatever changed. */
  const adopting = useRef(new Set<string>());
  const headingRef = useRef<HTMLHeadingElement>(null);
  const returnFocus = useFocusReturn();

  const show = (next: DraftView[]) => {
    shown.current = next;
    setViews(next);
  };

  // Only the latest read's answer is shown: an earlier one answering later would undo a change.
  const reload = useReload(
    async () => (await api<{ data: PolicyDraft[] }>('/v1/policy-drafts', { organizationId })).data,
    (read) => {
      const adopt = [...adopting.current];
      adopting.current.clear();
      const before = shown.current;
      const next = nextViews(before, read, { adopt, userId });
      show(next);
      const said = draftChanges(before, next);
      if (said) say(said);
      setMessage(null);
    },
    setMessage,
    organizationId,
  );
  const refresh = useCoalesced(() => void reload(), REFRESH_MS);
  const live = useLiveEvents(organizationId, EVENTS, { onEvent: refresh, onStale: refresh });

  /** Read again after the person acted on card `id`: it then shows its draft as it is now. */
  const actedOn = (id: string) => {
    adopting.current.add(id);
    return reload();
  };
  const showCurrentOf = (id: string) => {
    if (shown.current) show(showCurrent(shown.current, id, userId));
    // A deleted draft's card is gone with the button pressed: the focus goes to the heading.
    returnFocus(null, () => headingRef.current);
  };

  return (
    <section aria-labelledby="drafts-title">
      <div className="heading">
        <h1 id="drafts-title" ref={headingRef} tabIndex={-1}>
          Policy drafts
        </h1>
        <LiveStatus live={live} />
      </div>
      {/* Drafts coming in and changing, said by screen readers (not a role=status: one is above). */}
      {announcer}
      <p className="empty">
        Rules agents proposed. Nothing is enforced until a person approves; approving appends the rules to
        each tool's policy.
      </p>
      <p className="meta">
        Submissions, approvals and rejections show as they happen; new drafts being written, edits and
        deletions within {POLL_MS / 1000} s.
      </p>
      <ErrorLine error={message} alert />
      {views === null ? (
        // A first read that failed is said above: not loading any more (it said so forever).
        <Loading failed={message !== null} />
      ) : views.length === 0 ? (
        <p className="empty">No agent has proposed a draft.</p>
      ) : (
        <ul className="cards">
          {views.map((v) => (
            <DraftCard
              key={v.shown.id}
              view={v}
              organizationId={organizationId}
              onChanged={() => actedOn(v.shown.id)}
              onShowCurrent={() => showCurrentOf(v.shown.id)}
            />
          ))}
        </ul>
      )}
    </section>
  );
}

function DraftCard({
  view,
  organizationId,
  onChanged,
  onShowCurrent,
}: {
  view: DraftView;
  organizationId: string;
  /** Reads the drafts again; this card then shows its draft as it is now. */
  onChanged: () => Promise<void>;
  /** Shows the draft as it is now (edited since), or drops the card (deleted since). */
  onShowCurrent: () => void;
}) {
  const d = view.shown;
  const gone = view.current === null;
  const [limit, setLimit] = useState('100');
  /** The last replay, with the revision of the draft it ran on. */
  const [replay, setReplay] = useState<{ revision: string; data: DraftReplay } | null>(null);
  const [busy, setBusy] = useState(false);
  /** What the last action said: an error, or what approving applied (a warning if nothing). */
  const [message, setMessage] = useState<{ text: string; kind: 'ok' | 'warn' | 'error' } | null>(null);
  const limitId = useId();
  const titleId = useId();
  const cardRef = useRef<HTMLLIElement>(null);
  const returnFocus = useFocusReturn();

  const found = useMemo(() => inspect(d.name, d.description, d.createdByAgentId, d.reviewedBy, d.rules), [d]);

  async function run<T>(work: () => Promise<T>): Promise<T | undefined> {
    // The buttons are disabled while this runs (approving removes them): the focus comes back to
    // the one pressed, else to the card, rather than to the top of the page.
    const from = document.activeElement;
    setBusy(true);
    setMessage(null);
    try {
      return await work();
    } catch (err) {
      setMessage({ text: messageOf(err), kind: 'error' });
      return undefined;
    } finally {
      setBusy(false);
      returnFocus(from, () => cardRef.current);
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
        setMessage({
          text: 'The draft was edited since this page read it: these are its rules now, as replayed.',
          kind: 'warn',
        });
      }
    });

  const decide = (action: 'approve' | 'reject') =>
    run(async () => {
      // Edited (409), decided (400) or deleted (404) since it was shown: show what it is now, with
      // the reason nothing was done.
      const res = await readAgainIfRefused(
        () =>
          api<Approved>(
            `/v1/policy-drafts/${d.id}/${action}`,
            // Approving applies the rules shown on this card or nothing, and rejecting rejects them
            // or nothing: 409 if the draft was edited since it was shown.
            { method: 'POST', organizationId, ifMatch: d.revision },
          ),
        onChanged,
      ).catch((err: unknown) => {
        // Deleted since it was shown: the card stays, held as deleted, and says what was not done.
        if (err instanceof ApiError && err.status === 404) throw new Error(refusedAsDeleted(action));
        throw err;
      });
      if (res.applied) {
        const outcome = approvalOutcome(res);
        setMessage({ text: outcome.text, kind: outcome.applied ? 'ok' : 'warn' });
      }
      await onChanged();
    });

  return (
    // Focusable so that the focus can come back here once its approve or reject buttons are gone.
    <li className="card" data-draft-id={d.id} aria-labelledby={titleId} ref={cardRef} tabIndex={-1}>
      <div className="card-head">
        <h2 id={titleId} className="tool" style={{ margin: 0 }}>
          <Shown text={d.name} />
        </h2>
        <span className="left">{STATUS_LABEL[d.status]}</span>
      </div>
      {view.note && (
        <p className="warn" data-draft-note>
          {view.note}
        </p>
      )}
      {view.current !== undefined && (
        <div className="warn" data-draft-held={gone ? 'deleted' : 'edited'}>
          <p>{heldText(view.current)}</p>
          <button
            type="button"
            className="secondary"
            onClick={() => {
              // The button goes: the focus goes to the card (or, the card gone too, to the heading).
              const from = document.activeElement;
              onShowCurrent();
              returnFocus(from, () => cardRef.current);
            }}
          >
            {gone ? 'Remove it from the list' : 'Show the current version'}
          </button>
        </div>
      )}
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
        <button type="button" disabled={busy || gone} onClick={doReplay}>
          Replay against decisions
        </button>
        {d.status === 'pending_review' && (
          <>
            <button
              type="button"
              disabled={busy || gone}
              onClick={(e) => isFirstClick(e) && decide('approve')}
            >
              Approve draft
            </button>
            <button
              type="button"
              className="deny"
              disabled={busy || gone}
              onClick={(e) => isFirstClick(e) && decide('reject')}
            >
              Reject draft
            </button>
          </>
        )}
      </div>
      {message && (
        <p
          role="status"
          className={message.kind === 'ok' ? undefined : message.kind}
          data-outcome={message.kind}
        >
          {message.text}
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
      <p role="status">{replaySummary(replay)}</p>
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
