import { type FormEvent, Fragment, useCallback, useEffect, useId, useRef, useState } from 'react';
import { api, messageOf, query } from './api.js';
import {
  arrivalText,
  dateQuery,
  datesAdmitNow,
  type Filters,
  filterProblem,
  follows,
  type Heard,
  mayList,
  NO_FILTERS,
  newDecisions,
  toolFilterSpaces,
} from './decisionLog.js';
import { useCoalesced, useLiveEvents } from './live.js';
import type { PageProps } from './pages.js';
import { inspect, jsonPieces, revealString } from './reveal.js';
import { JsonBlock, Shown, Warnings } from './Shown.js';
import {
  ErrorLine,
  Field,
  focusLost,
  LiveStatus,
  Loading,
  PageRange,
  Pager,
  ProjectOptions,
  useAnnouncer,
  useFocusReturn,
} from './ui.js';
import { type ChainVerification, verifyChain, verifyOneReceipt } from './verify.js';

interface Decision {
  id: string;
  projectId: string | null;
  toolName: string;
  arguments: Record<string, unknown>;
  context: Record<string, unknown>;
  decision: string;
  mode: string;
  reason: string;
  failedArgument: string | null;
  policyVersion: number | null;
  latencyMs: number;
  receipt: { receipt_id: string; receipt_hash: string; previous_receipt_hash: string; merkle_root: string };
  createdAt: string;
}

interface Project {
  _id: string;
  name: string;
}

const PAGE = 50;
const EVENTS = ['decision.created'];
/** New decisions cause at most one read a second, however many arrive. */
const REFRESH_MS = 1000;
/** The live region speaks at most this often, so that a busy organization does not flood it. */
const ANNOUNCE_MS = 10_000;

const short = (hash: string) => hash.replace(/^sha256:/, '').slice(0, 12);

/**
 * The decision log with the API's filters, each decision's receipt, and the chain verified here.
 * New decisions the filters list appear by themselves on the first page; where they would move
 * what the person reads (a later page, a decision's details open), they are counted and offered.
 */
export function Decisions({ organizationId }: PageProps) {
  const [draft, setDraft] = useState<Filters>(NO_FILTERS);
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const [offset, setOffset] = useState(0);
  const [rows, setRows] = useState<Decision[] | null>(null);
  /** The offset the rows shown were read at (the range under them): `offset` moves first, the rows when read. */
  const [rowsAt, setRowsAt] = useState(0);
  const [total, setTotal] = useState(0);
  const [projects, setProjects] = useState<Project[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  /** Bumped by Apply and Clear: the list is read again even when the filters did not change. */
  const [asked, setAsked] = useState(0);
  /** The dates in the form were refused: nothing is shown, so nothing is read either. */
  const [refused, setRefused] = useState(false);
  /** Decisions the filters list that arrived since the list shown was read, and are not in it. */
  const [waiting, setWaiting] = useState(0);
  const [announcer, say] = useAnnouncer();
  /** Reads under way: only the latest one's answer is shown. */
  const reads = useRef(0);
  /** The filters, offset and total of the list shown: new decisions are counted from that total. */
  const shown = useRef<{ filters: string; offset: number; total: number } | null>(null);
  /** What arrived since the live region last spoke, and the waiting count it last said. */
  const heard = useRef<Heard>({ shown: 0, tools: [], waiting: 0 });
  const saidWaiting = useRef(0);
  /**
   * Set by "Show new decisions": the focus goes to the list once it is read. Set to 'lost' by the
   * pager: the focus goes there only if the button pressed lost it (disabled on the last page).
   */
  const focusList = useRef<boolean | 'lost'>(false);
  const summaryRef = useRef<HTMLParagraphElement>(null);
  const ids = useId();

  const announce = useCoalesced(() => {
    const text = arrivalText(heard.current);
    if (heard.current.waiting > 0) saidWaiting.current = heard.current.waiting;
    heard.current = { shown: 0, tools: [], waiting: 0 };
    if (text) say(text);
  }, ANNOUNCE_MS);

  /** Reads the list; `byPerson` when the person asked (a failure then shows nothing, see below). */
  const load = useCallback(
    async (byPerson: boolean) => {
      const read = ++reads.current;
      const key = JSON.stringify(filters);
      try {
        const res = await api<{ data: Decision[]; pagination: { total: number } }>(
          `/v1/decisions${query({ ...filters, ...dateQuery(filters), limit: PAGE, offset })}`,
          { organizationId },
        );
        if (read !== reads.current) return;
        const before = shown.current;
        // Decisions are never removed: a larger total of the same first page is that many new rows on top.
        const added =
          before?.filters === key && before.offset === 0 && offset === 0
            ? res.pagination.total - before.total
            : 0;
        shown.current = { filters: key, offset, total: res.pagination.total };
        setRows(res.data);
        setRowsAt(offset);
        setTotal(res.pagination.total);
        setError(null);
        setWaiting(0);
        heard.current.waiting = 0;
        saidWaiting.current = 0;
        if (added > 0) {
          const h = heard.current;
          h.shown += added;
          for (const d of res.data.slice(0, added)) if (h.tools.length < 20) h.tools.push(d.toolName);
          announce();
        }
      } catch (err) {
        if (read !== reads.current) return;
        // Asked for by the person, what is shown must match the filters above it: nothing rather than
        // the previous results. A live read that fails leaves the list as it was, only not the newest.
        if (byPerson) {
          shown.current = null;
          setRows(null);
          setTotal(0);
        }
        setError(messageOf(err));
      }
    },
    [filters, offset, organizationId, announce],
  );

  // biome-ignore lint/correctness/useExhaustiveDependencies: `asked` stands for a new request
  useEffect(() => {
    void load(true);
  }, [load, asked]);

  /** How many decisions arrived since the list was read: the total of the same filters, read again. */
  const count = async () => {
    const base = shown.current;
    const key = JSON.stringify(filters);
    if (!base || base.filters !== key) return;
    const read = reads.current;
    try {
      const res = await api<{ pagination: { total: number } }>(
        `/v1/decisions${query({ ...filters, ...dateQuery(filters), limit: 1, offset: 0 })}`,
        { organizationId },
      );
      // A list read since counts from its own total.
      if (read !== reads.current || shown.current !== base) return;
      const n = Math.max(0, res.pagination.total - base.total);
      setWaiting(n);
      if (n > saidWaiting.current) {
        heard.current.waiting = n;
        announce();
      }
    } catch {
      // Only a hint: the next event or poll counts again.
    }
  };

  const openShown = open !== null && rows?.some((d) => d.id === open) ? open : null;
  const refresh = useCoalesced(() => {
    if (refused) return;
    if (follows({ offset, open: openShown })) void load(false);
    else void count();
  }, REFRESH_MS);

  const live = useLiveEvents(organizationId, EVENTS, {
    // Only decisions the filters list cause a read (a tool, a project, or dates in the past excluded).
    onEvent: (_type, data) => {
      if (mayList(data, filters, Date.now())) refresh();
    },
    onStale: () => {
      if (datesAdmitNow(filters, Date.now())) refresh();
    },
  });

  useEffect(() => {
    if (!focusList.current || !rows) return;
    const onlyIfLost = focusList.current === 'lost';
    focusList.current = false;
    if (!onlyIfLost || focusLost()) summaryRef.current?.focus();
  }, [rows]);

  useEffect(() => {
    api<{ data: Project[] }>(`/v1/projects${query({ organizationId })}`, { organizationId }).then(
      ({ data }) => setProjects(data),
      () => setProjects([]),
    );
  }, [organizationId]);

  const apply = (e: FormEvent) => {
    e.preventDefault();
    const problem = filterProblem(draft);
    if (problem) {
      // Not asked: the results shown would otherwise be those of the previous filters.
      reads.current++;
      shown.current = null;
      setRefused(true);
      setRows(null);
      setTotal(0);
      setWaiting(0);
      setError(problem);
      return;
    }
    setRefused(false);
    // A new read: what the last one (or the refused dates) said no longer stands.
    setError(null);
    setOffset(0);
    setFilters(draft);
    setAsked((n) => n + 1);
  };
  /** The tool filter applied has spaces at an end: said, with the name without them offered. */
  const spaced = refused ? null : toolFilterSpaces(filters.toolName);
  const unspace = () => {
    if (!spaced) return;
    // The field too, unless it was changed since (not applied yet).
    setDraft((d) => (d.toolName === filters.toolName ? { ...d, toolName: spaced.trimmed } : d));
    setFilters({ ...filters, toolName: spaced.trimmed });
    setError(null);
    setOffset(0);
    setAsked((n) => n + 1);
  };
  const set = (key: keyof Filters) => (e: { target: { value: string } }) =>
    setDraft((d) => ({ ...d, [key]: e.target.value }));
  const showNew = () => {
    focusList.current = true;
    setOpen(null);
    setOffset(0);
    setAsked((n) => n + 1);
  };
  const toggle = (id: string) => {
    const closing = open === id;
    setOpen(closing ? null : id);
    // Back on the first page with nothing open: what waited comes in.
    if (closing && offset === 0 && waiting > 0) void load(false);
  };

  return (
    <>
      <div className="heading">
        <h1>Decisions</h1>
        <LiveStatus live={live} />
      </div>
      {/* New decisions, said once in a while by screen readers (not a role=status: one is above). */}
      {announcer}
      <ChainCheck organizationId={organizationId} />

      <form className="filters" onSubmit={apply} aria-label="Filter decisions">
        <Field id={`${ids}-tool`} label="Tool">
          <input id={`${ids}-tool`} value={draft.toolName} onChange={set('toolName')} maxLength={200} />
        </Field>
        <Field id={`${ids}-decision`} label="Decision">
          <select id={`${ids}-decision`} value={draft.decision} onChange={set('decision')}>
            <option value="">Any</option>
            <option value="allow">allow</option>
            <option value="deny">deny</option>
            <option value="require_approval">require_approval</option>
          </select>
        </Field>
        <Field id={`${ids}-project`} label="Project">
          <select id={`${ids}-project`} value={draft.projectId} onChange={set('projectId')}>
            <option value="">Any</option>
            <ProjectOptions projects={projects} />
          </select>
        </Field>
        <Field id={`${ids}-from`} label="From">
          <input id={`${ids}-from`} type="date" value={draft.startDate} onChange={set('startDate')} />
        </Field>
        <Field id={`${ids}-to`} label="To">
          <input id={`${ids}-to`} type="date" value={draft.endDate} onChange={set('endDate')} />
        </Field>
        <div className="filter-actions">
          <button type="submit">Apply filters</button>
          <button
            type="button"
            className="secondary"
            onClick={() => {
              setDraft(NO_FILTERS);
              setFilters(NO_FILTERS);
              setRefused(false);
              setError(null);
              setOffset(0);
              setAsked((n) => n + 1);
            }}
          >
            Clear
          </button>
        </div>
      </form>

      {spaced && (
        <div className="warn" data-tool-spaces>
          <p>{spaced.said}</p>
          <button type="button" className="secondary" onClick={unspace}>
            {spaced.trimmed === '' ? (
              'Clear the tool filter'
            ) : (
              <>
                Filter by <Shown text={spaced.trimmed} /> without the spaces
              </>
            )}
          </button>
        </div>
      )}
      <ErrorLine error={error} alert />
      {waiting > 0 && (
        <p className="arrived">
          <button type="button" onClick={showNew} data-new-decisions={waiting}>
            Show {newDecisions(waiting)}
          </button>
        </p>
      )}
      {/* Null before the first answer, and after a read or filters refused (said above). */}
      {rows === null && <Loading failed={error !== null} />}
      {rows?.length === 0 && <p className="empty">No decision matches.</p>}
      {rows && rows.length > 0 && (
        <>
          <PageRange ref={summaryRef} offset={rowsAt} count={rows.length} total={total} />
          <div className="scroll">
            <table>
              {/* On a phone, time and reason go under the tool: decision and receipt stay on screen. */}
              <thead>
                <tr>
                  <th className="wide-only">Time</th>
                  <th>Tool</th>
                  <th>Decision</th>
                  <th className="wide-only">Reason</th>
                  <th>Receipt</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((d) => (
                  <DecisionRow
                    key={d.id}
                    decision={d}
                    open={open === d.id}
                    onToggle={() => toggle(d.id)}
                    organizationId={organizationId}
                  />
                ))}
              </tbody>
            </table>
          </div>
          <Pager
            label="Pages of decisions"
            offset={rowsAt}
            count={rows.length}
            total={total}
            pageSize={PAGE}
            onPage={(next) => {
              // A button disabled on the first or last page loses the focus: it goes to the range.
              focusList.current = 'lost';
              setOffset(next);
            }}
          />
        </>
      )}
    </>
  );
}

function DecisionRow({
  decision: d,
  open,
  onToggle,
  organizationId,
}: {
  decision: Decision;
  open: boolean;
  onToggle: () => void;
  organizationId: string;
}) {
  const found = inspect(d.toolName, d.reason, d.arguments, d.context);
  return (
    <>
      <tr data-decision-id={d.id}>
        <td className="wide-only">{new Date(d.createdAt).toLocaleString()}</td>
        <td className="tool">
          <span className="name">
            <Shown text={d.toolName} />
          </span>
          {(found.hidden || found.spaces) && (
            <span className="flag" data-hidden-chars={found.hidden || undefined}>
              {found.hidden ? 'contains invisible characters' : 'contains long runs of spaces'}
            </span>
          )}
          <span className="narrow-only meta">
            {new Date(d.createdAt).toLocaleString()} · <Shown text={d.reason} />
          </span>
        </td>
        <td className={`verdict ${d.decision}`}>
          {/* require_approval may break after its underscore on a narrow screen. */}
          {d.decision.split('_').map((part, i) => (
            <Fragment key={part}>
              {i > 0 && (
                <>
                  _<wbr />
                </>
              )}
              {part}
            </Fragment>
          ))}
        </td>
        <td className="wrap wide-only">
          <Shown text={d.reason} />
        </td>
        <td>
          <button
            type="button"
            className="secondary"
            aria-expanded={open}
            aria-label={`Receipt of ${revealString(d.toolName)} ${d.id}`}
            onClick={onToggle}
          >
            {short(d.receipt.receipt_hash)}
          </button>
        </td>
      </tr>
      {open && (
        <tr className="detail">
          <td colSpan={5}>
            <Receipt decision={d} organizationId={organizationId} />
          </td>
        </tr>
      )}
    </>
  );
}

function Receipt({ decision, organizationId }: { decision: Decision; organizationId: string }) {
  const [receipt, setReceipt] = useState<Record<string, unknown> | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [check, setCheck] = useState<string | null>(null);
  const [checkOk, setCheckOk] = useState<boolean | null>(null);
  const [busy, setBusy] = useState(false);
  const returnFocus = useFocusReturn();

  useEffect(() => {
    api<Record<string, unknown>>(`/v1/decisions/${decision.id}/receipt`, { organizationId }).then(
      setReceipt,
      (err) => setError(messageOf(err)),
    );
  }, [decision.id, organizationId]);

  const verify = async () => {
    if (!receipt) return;
    const from = document.activeElement;
    setBusy(true);
    setCheck(null);
    try {
      const r = await verifyOneReceipt(organizationId, receipt);
      setCheckOk(r.ok);
      setCheck(
        r.ok
          ? `Verified: this receipt is leaf ${String(receipt.sequence)} of the signed checkpoint of ${r.treeSize} receipts.`
          : `Not verified: ${r.reason}`,
      );
    } catch (err) {
      setCheckOk(false);
      setCheck(`Could not verify: ${messageOf(err)}`);
    } finally {
      setBusy(false);
      returnFocus(from);
    }
  };

  const shown = {
    arguments: decision.arguments,
    context: decision.context,
    mode: decision.mode,
    policyVersion: decision.policyVersion,
    latencyMs: decision.latencyMs,
  };
  const view = jsonPieces(shown);
  const receiptView = receipt ? jsonPieces(receipt) : null;
  return (
    <div className="receipt">
      <h3>Decision</h3>
      <Warnings
        found={{
          hidden: view.hidden || receiptView?.hidden || inspect(decision.toolName).hidden,
          spaces: view.spaces || receiptView?.spaces,
        }}
        long={view.long}
      />
      <JsonBlock view={view} label="The decision" />
      <h3>Receipt</h3>
      {receiptView ? (
        <JsonBlock view={receiptView} label="The receipt" data-receipt />
      ) : (
        <Loading error={error} />
      )}
      <div className="actions">
        <button type="button" onClick={verify} disabled={!receipt || busy}>
          Verify this receipt
        </button>
      </div>
      {check && (
        <p role="status" className={checkOk ? 'ok' : 'error'}>
          {check}
        </p>
      )}
    </div>
  );
}

/** The whole chain and its signed checkpoints, verified in this browser. */
function ChainCheck({ organizationId }: { organizationId: string }) {
  const [result, setResult] = useState<ChainVerification | null>(null);
  const [progress, setProgress] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [signed, setSigned] = useState<string | null>(null);
  // Both buttons are disabled while either runs: the focus comes back to the one pressed.
  const returnFocus = useFocusReturn();

  const verify = async () => {
    const from = document.activeElement;
    setBusy(true);
    setResult(null);
    setError(null);
    setSigned(null);
    setProgress('Verifying…');
    try {
      const r = await verifyChain(organizationId, (n) => setProgress(`Verifying… ${n} receipts read`));
      setResult(r);
      setProgress(null);
    } catch (err) {
      setProgress(null);
      setError(`The chain could not be verified: ${messageOf(err)}`);
    } finally {
      setBusy(false);
      returnFocus(from);
    }
  };

  const sign = async () => {
    const from = document.activeElement;
    setBusy(true);
    setSigned(null);
    setResult(null);
    setError(null);
    try {
      const c = await api<{ tree_size: number }>('/v1/receipts/checkpoints', {
        method: 'POST',
        organizationId,
      });
      setSigned(`Checkpoint of ${c.tree_size} receipts signed.`);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
      returnFocus(from);
    }
  };

  const checked = result?.checkpoints.filter((c) => c.status === 'ok').length ?? 0;
  return (
    <section className="panel" aria-labelledby="chain-heading">
      <h2 id="chain-heading">Receipt chain</h2>
      <p className="meta">
        Downloads the chain and its signed checkpoints and verifies them in this browser: every receipt hash,
        link and Merkle root, and every checkpoint signature against the published key set.
      </p>
      <div className="actions">
        <button type="button" onClick={verify} disabled={busy}>
          Verify chain
        </button>
        <button type="button" className="secondary" onClick={sign} disabled={busy}>
          Sign a checkpoint now
        </button>
      </div>
      <div role="status" aria-live="polite" className="chain-result">
        {progress && <p>{progress}</p>}
        {signed && <p>{signed}</p>}
        <ErrorLine error={error} />
        {result?.ok && (
          <p className="ok" data-verified="true">
            Verified: {result.chain.count} receipt(s), chain intact
            {result.chain.merkleRoot ? ` (root ${short(result.chain.merkleRoot)})` : ''};{' '}
            {checked === 0 ? 'no signed checkpoint to check yet.' : `${checked} signed checkpoint(s) match.`}
          </p>
        )}
        {result && !result.ok && (
          <p className="error" data-verified="false">
            Broken at {result.firstBreak}
          </p>
        )}
      </div>
      {result && (result.chain.errors.length > 0 || result.checkpoints.length > 0) && (
        <details className="chain-details">
          <summary>Details</summary>
          {result.chain.errors.length > 0 && (
            <ul>
              {result.chain.errors.map((e) => (
                <li key={`${e.line}-${e.problem}`}>
                  {e.sequence === null ? `line ${e.line}` : `receipt ${e.sequence}`}: {e.problem}
                </li>
              ))}
            </ul>
          )}
          {result.chain.warnings.length > 0 && (
            <ul>
              {result.chain.warnings.map((w) => (
                <li key={w}>{w}</li>
              ))}
            </ul>
          )}
          {result.checkpoints.length > 0 && (
            <ul>
              {result.checkpoints.map((c) => (
                <li key={c.tree_size}>
                  Checkpoint {c.tree_size} ({c.timestamp}, key {c.kid}): {c.status}
                  {c.problem ? `: ${c.problem}` : ''}
                </li>
              ))}
            </ul>
          )}
        </details>
      )}
    </section>
  );
}
