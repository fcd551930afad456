import { type ReactNode, type Ref, type RefObject, useCallback, useEffect, useRef, useState } from 'react';
import { api, messageOf } from './api.js';
import { type Live, liveText } from './live.js';
import { latestOnly } from './reads.js';

/**
 * A list the page reads from `path` (`{ data: T[] }`) when it mounts, whenever `load` is called, and
 * whenever `version` changes (something elsewhere on the page changed what it lists): `null` until
 * the first answer. A failed read keeps what was shown and sets `error`.
 */
export function useList<T>(path: string, organizationId: string, version = 0) {
  const [data, setData] = useState<T[] | null>(null);
  const [error, setShownError] = useState<string | null>(null);
  /** The error shown is a failed read's: the next read that succeeds takes it away. */
  const readFailed = useRef(false);
  const load = useReload(
    async () => (await api<{ data: T[] }>(path, { organizationId })).data,
    (rows) => {
      setData(rows);
      if (readFailed.current) {
        readFailed.current = false;
        setShownError(null);
      }
    },
    (message) => {
      readFailed.current = true;
      setShownError(message);
    },
    `${organizationId} ${path} ${version}`,
  );
  // An action's error (the page's own) stays until the page clears it: a read does not hide it.
  const setError = useCallback((message: string | null) => {
    readFailed.current = false;
    setShownError(message);
  }, []);
  return { data, load, error, setError };
}

/**
 * `read` run when the page mounts and again whenever `key` (what `read` depends on, e.g. the
 * organization's id) changes; the returned function runs it on demand. What it read goes to `show`,
 * a failure's message to `onError`, only for the latest run: an earlier read that answers later
 * would show what the page knew before. The returned promise settles once the latest run's answer
 * is shown: a run that a later one superseded waits for that one (what follows it, e.g. buttons
 * enabled again, then sees the list as read after it).
 */
export function useReload<T>(
  read: () => Promise<T>,
  show: (value: T) => void,
  onError: (message: string) => void,
  key: string,
): () => Promise<void> {
  const runs = useRef(latestOnly());
  // biome-ignore lint/correctness/useExhaustiveDependencies: `key` stands for everything `read` depends on
  const reload = useCallback(() => runs.current(read, show, (err) => onError(messageOf(err))), [key]);
  const latest = useRef(reload);
  latest.current = reload;

  useEffect(() => {
    void reload();
  }, [reload]);

  // One function for the page's whole life, reading with what `key` is now: a handler that kept it
  // from an earlier render (an action still under way when the page moved on) does not read what
  // the page showed then, over what it shows now.
  return useCallback(() => latest.current(), []);
}

/**
 * Whether the focus is nowhere: on the page itself, as when the element that had it went away, or
 * on a control just disabled, which the browser takes it from once it renders.
 */
export const focusLost = (): boolean =>
  !document.activeElement ||
  document.activeElement === document.body ||
  document.activeElement.matches(':disabled');

/**
 * Newer and Older under a list read a page at a time, newest first. `offset` and `count` are those of
 * the rows shown, so a button pressed twice before its page is read asks for the same page once.
 */
export function Pager({
  label,
  offset,
  count,
  total,
  pageSize,
  onPage,
}: {
  label: string;
  offset: number;
  count: number;
  total: number;
  pageSize: number;
  onPage: (offset: number) => void;
}) {
  return (
    <nav className="pager" aria-label={label}>
      <button
        type="button"
        className="secondary"
        disabled={offset === 0}
        onClick={() => onPage(Math.max(0, offset - pageSize))}
      >
        Newer
      </button>
      <button
        type="button"
        className="secondary"
        disabled={offset + count >= total}
        onClick={() => onPage(offset + pageSize)}
      >
        Older
      </button>
    </nav>
  );
}

/** The rows a page shows, "51–100 of 230"; focusable, for the focus a disabled pager button lost. */
export function PageRange({
  offset,
  count,
  total,
  ref,
}: {
  offset: number;
  count: number;
  total: number;
  ref?: Ref<HTMLParagraphElement>;
}) {
  return (
    <p className="meta" ref={ref} tabIndex={-1} data-range>
      {offset + 1}–{offset + count} of {total}
    </p>
  );
}

/**
 * The focus after paging. Call the returned function as a pager button is pressed: once `shown` (the
 * rows read) changes, the focus goes to `target` if the button lost it, as one disabled on the first
 * or last page does; a focus elsewhere stays where it is.
 */
export function usePageFocus(shown: unknown, target: RefObject<HTMLElement | null>): () => void {
  const asked = useRef(false);
  // biome-ignore lint/correctness/useExhaustiveDependencies: `shown` stands for the page just shown
  useEffect(() => {
    if (!asked.current) return;
    asked.current = false;
    if (focusLost()) target.current?.focus();
  }, [shown, target]);
  return useCallback(() => {
    asked.current = true;
  }, []);
}

/** Where the focus may go: an element, or a function that finds one once the page has rendered. */
export type FocusTarget = HTMLElement | null | undefined | (() => HTMLElement | null | undefined);

/**
 * Gives the focus back after an action that took it away. A button disabled while its action runs
 * loses the focus (the browser moves it to the page), and so does one that is gone once the action
 * is done (an Approve button of a draft now approved): a keyboard user is then sent back to the top
 * of the page. Call the returned function with the element that had the focus as the action
 * started, once the action is over: after the page has rendered, if the focus is nowhere, it goes
 * back to that element if it is still there and enabled, else to `fallback`. A focus the person (or
 * the page) moved elsewhere meanwhile stays where it is.
 */
export function useFocusReturn(): (from: Element | null, fallback?: FocusTarget) => void {
  const pending = useRef<{ from: Element | null; fallback?: FocusTarget } | null>(null);
  const [asked, setAsked] = useState(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: `asked` stands for a new request
  useEffect(() => {
    const p = pending.current;
    pending.current = null;
    if (!p || !focusLost()) return;
    const { from, fallback } = p;
    if (
      from instanceof HTMLElement &&
      from !== document.body &&
      from.isConnected &&
      !from.matches(':disabled')
    ) {
      from.focus();
      return;
    }
    const target = typeof fallback === 'function' ? fallback() : fallback;
    target?.focus();
  }, [asked]);
  return useCallback((from: Element | null, fallback?: FocusTarget) => {
    pending.current = { from, fallback };
    setAsked((n) => n + 1);
  }, []);
}

/**
 * Runs one change at a time: `busy` while it runs, the error cleared before and set from a failure;
 * `after` runs once it is over, whatever the outcome. The focus comes back to the control that
 * started the change (disabled meanwhile), else to `fallback` when that control is gone or stays
 * disabled.
 */
export function useBusy(setError: (error: string | null) => void, fallback?: FocusTarget) {
  const [busy, setBusy] = useState(false);
  const returnFocus = useFocusReturn();
  const run = async (change: () => Promise<void>, after?: () => void) => {
    const from = document.activeElement;
    setBusy(true);
    setError(null);
    try {
      await change();
    } catch (err) {
      setError(messageOf(err));
    } finally {
      after?.();
      setBusy(false);
      returnFocus(from, fallback);
    }
  };
  return { busy, run };
}

/**
 * Whether a click is the first of a run (a double click's second click is not), or comes from the
 * keyboard. A card's own Approve or Deny acts on the first click only: once the card is resolved the
 * next card moves into its place, and the second click of a double click would land on that card's
 * button, resolving a call the person never read.
 */
export const isFirstClick = (e: { detail: number }): boolean => e.detail <= 1;

/** An error line; `alert` announces it as it appears. Nothing when there is no error. */
export function ErrorLine({ error, alert = false }: { error: string | null | undefined; alert?: boolean }) {
  if (!error) return null;
  return (
    <p role={alert ? 'alert' : undefined} className="error">
      {error}
    </p>
  );
}

/**
 * What a list or panel shows in its place until its first read answers: "Loading…" while it is
 * read, never its empty state ("No X yet" before anything is known is a claim, and a wrong one).
 * Once that read failed: its `error`, given here to be said in the list's place; or nothing,
 * `failed`, where the page says the error elsewhere.
 */
export function Loading({ error, failed = false }: { error?: string | null; failed?: boolean }) {
  if (error) return <ErrorLine error={error} alert />;
  return failed ? null : <p aria-busy="true">Loading…</p>;
}

/**
 * A polite live region for what arrives or changes on a page, and the function that says something
 * there. The same words said again are said again (each one renews the region's content).
 */
export function useAnnouncer(): [ReactNode, (text: string) => void] {
  const [said, setSaid] = useState({ text: '', n: 0 });
  const say = useCallback((text: string) => setSaid((a) => ({ text, n: a.n + 1 })), []);
  const region = (
    <div className="visually-hidden" aria-live="polite" data-announcer>
      <span key={said.n}>{said.text}</span>
    </div>
  );
  return [region, say];
}

/** Whether the page follows the event stream or polls, said once (a role=status of its own). */
export function LiveStatus({ live }: { live: Live }) {
  return (
    <span className={`live ${live}`} role="status">
      {liveText(live)}
    </span>
  );
}

/** A form control with its label above it; the control carries `id`. */
export function Field({ id, label, children }: { id: string; label: ReactNode; children: ReactNode }) {
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children}
    </div>
  );
}

/** The hidden heading of a table's column of row actions. */
export const ACTIONS_COLUMN = <span className="visually-hidden">Actions</span>;

/** A table's header row; `scoped` marks every heading as a column heading (`scope="col"`). */
export function TableHead({ columns, scoped = false }: { columns: ReactNode[]; scoped?: boolean }) {
  return (
    <thead>
      <tr>
        {columns.map((c, i) => (
          // The columns are fixed for a table: their position is their identity.
          // biome-ignore lint/suspicious/noArrayIndexKey: see above
          <th key={i} scope={scoped ? 'col' : undefined}>
            {c}
          </th>
        ))}
      </tr>
    </thead>
  );
}

/**
 * How long the confirming step ignores activation after it appears: the second click of a double
 * click, or a second Enter, on the first button must not confirm.
 */
export const CONFIRM_DELAY_MS = 500;

/**
 * A destructive action asked for twice: `label` first, then `cancelLabel` and `confirmLabel` side by
 * side (wrapped in a span of `pairClassName` when given). Confirming takes a deliberate second
 * action: the cancel button takes the first button's place and the focus, the confirm button comes
 * after it and stays disabled for CONFIRM_DELAY_MS, and cancelling is ignored for as long (so that a
 * double click leaves the question open). Escape cancels. Whether it is asking is the caller's, so
 * that one list has at most one question open.
 */
export function ConfirmButton({
  asking,
  onAsk,
  onCancel,
  onConfirm,
  busy,
  label,
  confirmLabel,
  cancelLabel = 'Cancel',
  ariaLabel,
  disableAsk = false,
  pairClassName,
}: {
  asking: boolean;
  onAsk: () => void;
  onCancel: () => void;
  onConfirm: () => void;
  busy: boolean;
  label: string;
  confirmLabel: string;
  cancelLabel?: string;
  ariaLabel?: string;
  /** The first button is disabled while busy too. */
  disableAsk?: boolean;
  pairClassName?: string;
}) {
  const askRef = useRef<HTMLButtonElement>(null);
  const cancelRef = useRef<HTMLButtonElement>(null);
  const askedAt = useRef(0);
  const wasAsking = useRef(false);
  const [ready, setReady] = useState(false);

  useEffect(() => {
    if (!asking) {
      setReady(false);
      // Cancelled (or done) from the pair: the focus goes back to the first button, not to the page.
      if (wasAsking.current && (!document.activeElement || document.activeElement === document.body))
        askRef.current?.focus();
      wasAsking.current = false;
      return;
    }
    wasAsking.current = true;
    if (askedAt.current === 0) askedAt.current = Date.now();
    cancelRef.current?.focus();
    const timer = setTimeout(() => setReady(true), CONFIRM_DELAY_MS);
    return () => clearTimeout(timer);
  }, [asking]);

  if (!asking) {
    return (
      <button
        ref={askRef}
        type="button"
        className="deny"
        aria-label={ariaLabel}
        disabled={disableAsk ? busy : undefined}
        onClick={() => {
          askedAt.current = Date.now();
          onAsk();
        }}
      >
        {label}
      </button>
    );
  }
  const cancel = () => {
    askedAt.current = 0;
    onCancel();
  };
  const pair = (
    <>
      <button
        ref={cancelRef}
        type="button"
        className="secondary"
        onClick={() => {
          if (Date.now() - askedAt.current >= CONFIRM_DELAY_MS) cancel();
        }}
        onKeyDown={(e) => {
          if (e.key === 'Escape') cancel();
        }}
      >
        {cancelLabel}
      </button>
      <button
        type="button"
        className="deny"
        disabled={busy || !ready}
        onClick={() => {
          askedAt.current = 0;
          onConfirm();
        }}
        onKeyDown={(e) => {
          if (e.key === 'Escape') cancel();
        }}
      >
        {confirmLabel}
      </button>
    </>
  );
  return pairClassName ? <span className={pairClassName}>{pair}</span> : pair;
}

/** One option a project, its id the value. */
export function ProjectOptions({ projects }: { projects: { _id: string; name: string }[] }) {
  return (
    <>
      {projects.map((p) => (
        <option key={p._id} value={p._id}>
          {p.name}
        </option>
      ))}
    </>
  );
}
