import { describePolicy } from '@svc/policy-engine';
import { type FormEvent, useEffect, useId, useRef, useState } from 'react';
import {
  ApiError,
  api,
  type CharterTurn,
  messageOf,
  type Organization,
  type PolicyChange,
  request,
  type Verification,
} from './api.js';
import type { PageProps } from './pages.js';
import { inspect, revealString } from './reveal.js';
import { Link, usePath } from './router.js';
import { CompactJson, Shown, Warnings } from './Shown.js';
import { ErrorLine, Loading, TableHead, useFocusReturn, useReload } from './ui.js';

type Mode = 'auto' | 'chat' | 'compile';

interface Entry {
  who: 'you' | 'charter';
  text: string;
  turn?: CharterTurn;
}

/** A path in the dashboard for a link the server gave (absolute, with its secret). */
const pathOf = (url: string) => {
  const u = new URL(url, window.location.origin);
  return u.pathname + u.search;
};

/**
 * Charter, the policy assistant: a conversation that answers questions about the policies and
 * proposes changes, the changes waiting for review, and the review of one (/charter/verify/:id, the
 * link Charter gives, or /charter/reviews/:id from the list).
 */
export function Charter({ organizationId, userId }: PageProps) {
  const path = usePath();
  const review = /^\/charter\/(?:verify|reviews)\/([^/]+)$/.exec(path);
  if (review) {
    const id = decodeURIComponent(review[1]!);
    // Keyed by the change: another one's review (history moves between two) starts afresh, rather
    // than showing the previous change, and its buttons, until the new one is read.
    return <Review key={id} id={id} organizationId={organizationId} userId={userId} />;
  }
  return <Chat organizationId={organizationId} />;
}

function Chat({ organizationId }: { organizationId: string }) {
  const [entries, setEntries] = useState<Entry[]>([]);
  const [conversationId, setConversationId] = useState<string | undefined>(undefined);
  const [text, setText] = useState('');
  const [mode, setMode] = useState<Mode>('auto');
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<string | null>(null);
  /** The changes waiting for review: null until read (not known to be none). */
  const [pending, setPending] = useState<Verification[] | null>(null);
  const messageId = useId();
  const modeId = useId();
  const textRef = useRef<HTMLTextAreaElement>(null);
  const returnFocus = useFocusReturn();

  /** Why the changes waiting for review could not be read (said beside them). */
  const [listError, setListError] = useState<string | null>(null);

  const reload = useReload(
    async () => (await api<{ data: Verification[] }>('/v1/charter/verifications', { organizationId })).data,
    (data) => {
      setPending(data);
      setListError(null);
    },
    setListError,
    organizationId,
  );

  async function send(e: FormEvent) {
    e.preventDefault();
    const said = text.trim();
    if (!said) return;
    const from = document.activeElement;
    setBusy(true);
    setMessage(null);
    setEntries((es) => [...es, { who: 'you', text: said }]);
    try {
      const turn = await api<CharterTurn>('/v1/charter/turn', {
        method: 'POST',
        body: { message: said, mode, surface: 'dashboard', ...(conversationId ? { conversationId } : {}) },
        organizationId,
      });
      setConversationId(turn.conversationId);
      setEntries((es) => [...es, { who: 'charter', text: turn.reply, turn }]);
      // What was typed while Charter answered stays.
      setText((t) => (t.trim() === said ? '' : t));
      if (turn.verification.required) await reload();
    } catch (err) {
      setMessage(messageOf(err));
    } finally {
      setBusy(false);
      // Send is disabled while Charter answers (and stays so once the box is emptied): the focus
      // goes back to the message box, for the next message.
      returnFocus(from, () => textRef.current);
    }
  }

  return (
    <>
      <section aria-labelledby="charter-title">
        <h1 id="charter-title">Charter</h1>
        <p className="empty">
          Ask about your policies, or say in plain words what an agent may do. Proposed changes wait for a
          person's review; nothing is live before.
        </p>
        <ul className="chat" aria-live="polite">
          {entries.map((e, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: the conversation only grows
            <li key={i} className={e.who}>
              <strong>{e.who === 'you' ? 'You' : 'Charter'}:</strong> <Shown text={e.text} multiline />
              {e.turn && <TurnDetails turn={e.turn} />}
            </li>
          ))}
        </ul>
        <ErrorLine error={message} alert />
        <form className="form" onSubmit={send}>
          <label htmlFor={messageId} style={{ flex: '1 1 100%' }}>
            Message
            <textarea
              id={messageId}
              ref={textRef}
              value={text}
              onChange={(e) => setText(e.target.value)}
              maxLength={20_000}
              placeholder="Block send_payment over $1,000 and ask a person above $500"
            />
          </label>
          <label htmlFor={modeId}>
            Mode
            <select id={modeId} value={mode} onChange={(e) => setMode(e.target.value as Mode)}>
              <option value="auto">Let Charter decide</option>
              <option value="chat">Ask a question</option>
              <option value="compile">Propose a change</option>
            </select>
          </label>
          <button type="submit" disabled={busy || !text.trim()}>
            {busy ? 'Sending…' : 'Send'}
          </button>
          {conversationId && (
            // Waits for the answer under way: it belongs to this conversation, and would otherwise
            // open the new one, which would then go on with this one.
            <button
              type="button"
              className="deny"
              disabled={busy}
              onClick={() => {
                setConversationId(undefined);
                setEntries([]);
                // This button goes with the conversation: the focus goes to the message box.
                textRef.current?.focus();
              }}
            >
              New conversation
            </button>
          )}
        </form>
      </section>
      <section aria-labelledby="reviews-title">
        <h2 id="reviews-title">Changes waiting for review</h2>
        <ErrorLine error={listError} alert />
        {pending === null ? (
          // Not read yet (or the read failed, as said above): not known to be none.
          <Loading failed={listError !== null} />
        ) : pending.length === 0 ? (
          <p className="empty">No change is waiting.</p>
        ) : (
          <ul>
            {pending.map((v) => (
              <li key={v.id} data-verification-id={v.id}>
                <Link to={`/charter/reviews/${v.id}`}>
                  <Shown text={v.summary} />
                </Link>{' '}
                <span className="meta">proposed {new Date(v.createdAt).toLocaleString()}</span>
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  );
}

function TurnDetails({ turn }: { turn: CharterTurn }) {
  return (
    <div className="meta">
      {turn.understood.length > 0 && (
        <p>
          Understood: <Shown text={turn.understood.join('; ')} />
        </p>
      )}
      {turn.notUnderstood.length > 0 && (
        <p>
          Not understood: <Shown text={turn.notUnderstood.map((n) => `"${n.text}" (${n.why})`).join('; ')} />
        </p>
      )}
      {turn.dryRuns.map((d, i) => (
        // biome-ignore lint/suspicious/noArrayIndexKey: a fixed list
        <p key={i}>
          <Shown text={d.toolName} /> <CompactJson value={d.arguments} /> → {d.decision}:{' '}
          <Shown text={d.reason} />
        </p>
      ))}
      {turn.verification.required && (
        <p>
          <Link to={pathOf(turn.verification.linkUrl)}>Review the proposed change</Link>
        </p>
      )}
    </div>
  );
}

/** Seconds until a refused request may be sent again, from Retry-After (seconds or a date); null if none. */
function retryAfterSeconds(value: string | null): number | null {
  if (!value?.trim()) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, Math.ceil(seconds));
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** One organization's answer for a verification: it, none there, or refused for too many requests. */
type Lookup = { v: Verification } | null | { retryAfter: number | null };

/** Reads a verification in one organization; 404 and 400 (not a verification id) mean none there. */
async function lookUp(id: string, organizationId: string): Promise<Lookup> {
  const res = await request(`/v1/charter/verifications/${encodeURIComponent(id)}`, {
    headers: { accept: 'application/json', 'x-organization-id': organizationId },
  });
  if (res.status === 429) return { retryAfter: retryAfterSeconds(res.headers.get('retry-after')) };
  if (res.status === 404 || res.status === 400) return null;
  const data = await res.json().catch(() => null);
  if (res.ok) return { v: data as Verification };
  const error = (data as { error?: { code?: string; message?: string } } | null)?.error;
  throw new ApiError(res.status, error?.code ?? 'http_error', error?.message ?? `HTTP ${res.status}`);
}

/**
 * One proposed change beside what is live, with approve and reject. The link names no organization:
 * it is looked up in the chosen one first, then in the person's other organizations. An organization
 * that refuses the read for too many requests does not stop the others being read; if the change is
 * in none of those, the page says when to try again.
 */
function Review({ id, organizationId, userId }: { id: string; organizationId: string; userId: string }) {
  const [found, setFound] = useState<{ v: Verification; org: Organization | null; orgId: string } | null>(
    null,
  );
  const [missing, setMissing] = useState(false);
  /** Set when the change was in none of the organizations read, and some refused for too many requests. */
  const [limited, setLimited] = useState<{ retryAfter: number | null } | null>(null);
  const [attempt, setAttempt] = useState(0);
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<string | null>(null);
  const statusRef = useRef<HTMLParagraphElement>(null);
  const returnFocus = useFocusReturn();

  useEffect(() => {
    let stop = false;
    // Looked up again (after too many requests): loading until it is read.
    if (attempt > 0) setLimited(null);
    (async () => {
      /** The Retry-After of each organization that refused the read for too many requests. */
      const refusals: (number | null)[] = [];
      /** The verification if this organization has it; a refusal is noted and read as none. */
      const read = async (orgId: string) => {
        const answer = await lookUp(id, orgId);
        if (answer && 'v' in answer) return answer.v;
        if (answer) refusals.push(answer.retryAfter);
        return null;
      };
      const here = await read(organizationId);
      if (here) {
        if (!stop) setFound({ v: here, org: null, orgId: organizationId });
        return;
      }
      const { data } = await api<{ data: Organization[] }>('/v1/organizations');
      for (const o of data) {
        if (o._id === organizationId) continue;
        const there = await read(o._id);
        if (there) {
          if (!stop) setFound({ v: there, org: o, orgId: o._id });
          return;
        }
      }
      if (stop) return;
      if (refusals.length === 0) {
        setMissing(true);
        return;
      }
      // Until every organization that refused may be asked again.
      const known = refusals.filter((s) => s !== null);
      setLimited({ retryAfter: known.length > 0 ? Math.max(...known) : null });
    })().catch((err: Error) => !stop && setMessage(err.message));
    return () => {
      stop = true;
    };
  }, [id, organizationId, attempt]);

  async function decide(action: 'approve' | 'reject') {
    if (!found) return;
    const from = document.activeElement;
    setBusy(true);
    setMessage(null);
    const path = `/v1/charter/verifications/${found.v.id}`;
    try {
      const v = await api<Verification>(`${path}/${action}`, { method: 'POST', organizationId: found.orgId });
      setFound({ ...found, v });
    } catch (err) {
      setMessage(messageOf(err));
      // Refused because it changed meanwhile (approved or rejected elsewhere): show it as it is now,
      // so that the page no longer says it waits, nor offers the buttons.
      if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 401) {
        try {
          const v = await api<Verification>(path, { organizationId: found.orgId });
          setFound({ ...found, v });
        } catch {
          // The message above says what went wrong; the page keeps what it showed.
        }
      }
    } finally {
      setBusy(false);
      // Decided, the buttons are gone: the focus goes to what the change is now.
      returnFocus(from, () => statusRef.current);
    }
  }

  if (missing)
    return (
      <section aria-labelledby="review-title">
        <h1 id="review-title">Change not found</h1>
        <p>None of your organizations has this proposed change.</p>
        <Link to="/charter">Back to Charter</Link>
      </section>
    );
  if (limited)
    return (
      <section aria-labelledby="review-title">
        <h1 id="review-title">Too many requests</h1>
        <p role="alert" className="error" data-retry-after={limited.retryAfter ?? undefined}>
          {`Too many requests to Charter in the last minute: the change could not be looked up in every one of your organizations. Try again in ${limited.retryAfter === null ? 'a minute' : `${limited.retryAfter} s`}.`}
        </p>
        <p>
          <button type="button" onClick={() => setAttempt((n) => n + 1)}>
            Try again
          </button>{' '}
          <Link to="/charter">Back to Charter</Link>
        </p>
      </section>
    );
  if (!found) return <Loading error={message} />;
  const { v, org } = found;
  return (
    <section aria-labelledby="review-title" data-verification-id={v.id}>
      <p>
        <Link to="/charter">← Charter</Link>
      </p>
      <h1 id="review-title">Review a policy change</h1>
      {org && (
        <p className="dual">
          This change belongs to organization <Shown text={org.name} />.
        </p>
      )}
      <Warnings found={inspect(v.summary, v.changes, v.tools)} />
      <p className="description">
        <Shown text={v.summary} multiline />
      </p>
      <p role="status" data-status={v.status} ref={statusRef} tabIndex={-1}>
        {v.status === 'pending'
          ? `Waiting for review since ${new Date(v.createdAt).toLocaleString()}. Nothing of it is live yet.`
          : `${v.status === 'approved' ? 'Approved' : 'Rejected'} by ${v.resolvedBy === userId ? `${v.resolvedBy} (you)` : v.resolvedBy}${v.resolvedAt ? ` on ${new Date(v.resolvedAt).toLocaleString()}` : ''}${v.applied?.length ? `: live as ${v.applied.map((a) => `${a.toolName} version ${a.version}`).join(', ')}` : ''}.`}
      </p>
      <ErrorLine error={message} alert />
      {v.tools.length > 0 && (
        <>
          <h2>Tools to register</h2>
          <ul>
            {v.tools.map((t) => (
              <li key={t.name} className="wrap">
                <Shown
                  text={`${t.name}(${t.arguments.map((a) => `${a.name}: ${a.type}${a.required ? ', required' : ''}`).join('; ')})`}
                />
              </li>
            ))}
          </ul>
        </>
      )}
      {v.changes.map((c) => (
        <ChangeView key={c.toolName} change={c} />
      ))}
      {v.status === 'pending' && (
        <div className="actions">
          <button type="button" disabled={busy} onClick={() => decide('approve')}>
            Approve change
          </button>
          <button type="button" className="deny" disabled={busy} onClick={() => decide('reject')}>
            Reject change
          </button>
        </div>
      )}
    </section>
  );
}

/**
 * The heading over the policy a change replaces: its version, and whether it is enforced at all (a
 * change to an inactive policy stays unenforced until someone activates it).
 */
export function nowHeading(c: Pick<PolicyChange, 'current'>): string {
  if (!c.current) return 'Now';
  const inactive = c.current.isActive === false ? ', inactive: not enforced until activated' : '';
  return `Now (version ${c.current.version}${inactive})`;
}

function ChangeView({ change: c }: { change: PolicyChange }) {
  return (
    <article aria-label={`Change to ${revealString(c.toolName)}`}>
      <h2 className="tool">
        <Shown text={c.toolName} />
      </h2>
      <div className="side">
        <div>
          <h3>{nowHeading(c)}</h3>
          <ul>
            {(c.current?.definition
              ? describePolicy(c.current.definition)
              : ['No policy: every call is allowed without checks']
            ).map((l) => (
              <li key={l}>
                <Shown text={l} />
              </li>
            ))}
          </ul>
        </div>
        <div data-proposed>
          <h3>Proposed</h3>
          <ul>
            {describePolicy(c.proposed).map((l) => (
              <li key={l}>
                <Shown text={l} />
              </li>
            ))}
          </ul>
        </div>
      </div>
      {c.analysis.findings.length > 0 && (
        <>
          <h3>Review findings</h3>
          <ul>
            {c.analysis.findings.map((f) => (
              <li key={f.message}>
                {f.kind.replaceAll('_', ' ')}: <Shown text={f.message} />
              </li>
            ))}
          </ul>
        </>
      )}
      <p className="meta">
        Quality: {c.quality.valid ? 'valid' : 'invalid'}, score {c.quality.score}
        {c.quality.issues.length > 0 ? ` — ${c.quality.issues.join('; ')}` : ''}
      </p>
      {c.analysis.examples.length > 0 && (
        <div className="scroll">
          <table>
            <caption className="meta" style={{ textAlign: 'left' }}>
              Example calls under the proposed policy
            </caption>
            <TableHead columns={['Arguments', 'Decision', 'Reason']} scoped />
            <tbody>
              {c.analysis.examples.map((e) => (
                <tr key={JSON.stringify(e.arguments)}>
                  <td className="wrap">
                    <code>
                      <CompactJson value={e.arguments} />
                    </code>
                  </td>
                  <td className={e.decision}>{e.decision}</td>
                  <td className="wrap">
                    <Shown text={e.reason} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </article>
  );
}
