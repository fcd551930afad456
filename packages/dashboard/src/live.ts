/**
 * Following the organization as it changes: its event stream, a poll that stands in while the
 * stream is down (and catches what a stream may miss), and a way to fold bursts of events into a
 * bounded number of reads. One implementation for every page that updates by itself.
 */
import { useEffect, useLayoutEffect, useRef, useState } from 'react';

/** Where a page stands: opening the stream, on it, or reading on a timer without it. */
export type Live = 'connecting' | 'live' | 'polling';

/** How often the page reads again, and how long a stream the server refused waits to be reopened. */
export const POLL_MS = 15_000;

/** The status words every live page shows. */
export function liveText(live: Live): string {
  return live === 'live'
    ? 'Live'
    : live === 'polling'
      ? `Refreshing every ${POLL_MS / 1000} s`
      : 'Connecting…';
}

export interface LiveHandlers {
  /** An event of one of the types followed, with its data (null when it is not JSON). */
  onEvent: (type: string, data: unknown) => void;
  /**
   * What the stream says may be out of date: it (re)connected (events sent while it was down are
   * never replayed), it was refused, or the poll came round.
   */
  onStale: () => void;
}

/**
 * Follows the organization's event stream for `types` (`GET /v1/events/stream`, the session cookie
 * authorizes it) and polls every POLL_MS as a fallback. The handlers may change at every render;
 * the stream is reopened only when the organization or the types change. Returns the status.
 */
export function useLiveEvents(
  organizationId: string,
  types: readonly string[],
  handlers: LiveHandlers,
): Live {
  const [live, setLive] = useState<Live>('connecting');
  const latest = useRef(handlers);
  useLayoutEffect(() => {
    latest.current = handlers;
  });
  const typeList = types.join(',');

  useEffect(() => {
    const stale = () => latest.current.onStale();
    let stream: EventSource | null = null;
    let reopen: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const open = () => {
      const s = new EventSource(
        `/v1/events/stream?organizationId=${encodeURIComponent(organizationId)}&types=${typeList}`,
      );
      stream = s;
      // (Re)connected: read again, for what happened while the stream was down.
      s.onopen = () => {
        setLive('live');
        stale();
      };
      s.onerror = () => {
        setLive('polling');
        // The browser reconnects by itself after a dropped connection; an answer that is not a stream
        // (a 401 once the session ended, an error page) closes it for good: read now (which signs out
        // on a 401) and open a new stream later. Meanwhile the poll below keeps the page fresh.
        if (s.readyState === EventSource.CLOSED) {
          stale();
          if (!stopped) reopen = setTimeout(open, POLL_MS);
        }
      };
      for (const type of typeList.split(',')) {
        s.addEventListener(type, (e) => latest.current.onEvent(type, parseData((e as MessageEvent).data)));
      }
    };
    open();
    const poll = setInterval(stale, POLL_MS);
    return () => {
      stopped = true;
      stream?.close();
      clearTimeout(reopen);
      clearInterval(poll);
    };
  }, [organizationId, typeList]);

  return live;
}

function parseData(data: unknown): unknown {
  if (typeof data !== 'string') return null;
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
}

export interface Coalesced {
  /** Asks for a run: at once if the last one is at least the gap ago, else one run when it is. */
  call(): void;
  /** Drops a run asked for and not made yet. */
  cancel(): void;
}

/**
 * `run` at most once per `gapMs`: the first call runs it at once; every call within the gap after a
 * run is folded into one run at the end of the gap. So a burst of a thousand events costs two reads.
 */
export function coalesce(run: () => void, gapMs: number): Coalesced {
  let last = Number.NEGATIVE_INFINITY;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const fire = () => {
    timer = undefined;
    last = Date.now();
    run();
  };
  return {
    call() {
      if (timer !== undefined) return;
      const wait = last + gapMs - Date.now();
      if (wait <= 0) fire();
      else timer = setTimeout(fire, wait);
    },
    cancel() {
      clearTimeout(timer);
      timer = undefined;
    },
  };
}

/** `coalesce` for a component: a stable function that runs the latest `run`; nothing runs after unmount. */
export function useCoalesced(run: () => void, gapMs: number): () => void {
  const latest = useRef(run);
  useLayoutEffect(() => {
    latest.current = run;
  });
  const [coalesced] = useState(() => coalesce(() => latest.current(), gapMs));
  useEffect(() => () => coalesced.cancel(), [coalesced]);
  return coalesced.call;
}
