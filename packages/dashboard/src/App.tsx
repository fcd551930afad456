import { useCallback, useEffect, useState } from 'react';
import {
  ApiError,
  api,
  loadSession,
  messageOf,
  ORGANIZATION_SAVED,
  type Organization,
  onSessionChanged,
  onSessionEnded,
  recheckSession,
  type Session,
  signOut,
} from './api.js';
import { PAGES, pageOf } from './pages.js';
import { Link, usePath } from './router.js';
import { SignIn, signInFailure } from './SignIn.js';
import { Loading } from './ui.js';

const orgKey = (userId: string) => `svc.organization.${userId}`;

export function App() {
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);
  /** Set when the session ended while the page was open (a request answered 401). */
  const [ended, setEnded] = useState(false);
  /** The person whose session the page showed before the cookie came to name another's. */
  const [replaced, setReplaced] = useState<string | null>(null);

  useEffect(() => {
    loadSession().then(setSession, (err: unknown) =>
      setError(
        err instanceof ApiError && err.status === 0
          ? messageOf(err)
          : `The sign-in could not be checked: ${messageOf(err)}`,
      ),
    );
  }, []);

  // Signed out in another tab, expired (12 hours) or ended on the server: back to the sign-in page,
  // saying why, instead of every page showing the API's 401 and stale data.
  useEffect(
    () =>
      onSessionEnded(() => {
        setEnded(true);
        setSession(null);
      }),
    [],
  );

  // Someone signed in as another person in another tab of this browser (the cookie replaced): the
  // page starts again as that person, saying so, rather than keep showing the previous person's data.
  useEffect(
    () =>
      onSessionChanged((now, before) => {
        setReplaced(before.userId);
        setSession(now);
      }),
    [],
  );

  // Coming back to this tab, the session is read again (at most every few seconds): a sign-in made
  // meanwhile in another tab shows at once, not at the next refused request.
  useEffect(() => {
    const back = () => {
      if (document.visibilityState === 'visible') void recheckSession({ throttled: true });
    };
    window.addEventListener('focus', back);
    document.addEventListener('visibilitychange', back);
    return () => {
      window.removeEventListener('focus', back);
      document.removeEventListener('visibilitychange', back);
    };
  }, []);

  if (error)
    return (
      <p role="alert" className="error">
        {error}
      </p>
    );
  if (session === undefined) return <Loading />;
  if (session === null) return <SignIn ended={ended} />;
  return (
    // Keyed by person: another person's session drops everything read for the previous one.
    <SignedIn
      key={session.userId}
      session={session}
      replaced={replaced}
      onSignedOut={() => {
        setEnded(false);
        setReplaced(null);
        setSession(null);
      }}
    />
  );
}

/**
 * What the address says of a sign-in that failed (`?signin=<reason>`, where the service sends a
 * browser back after a used, expired or mistyped link), taken out of the address so that a reload
 * does not say it again; null when there is none.
 */
function readSignInFailure(): string | null {
  const reason = new URLSearchParams(window.location.search).get('signin');
  return reason === null ? null : signInFailure(reason);
}

/** Takes `?signin=` out of the address, so that a reload does not say it again. */
function dropSignInFailure(): void {
  const params = new URLSearchParams(window.location.search);
  if (!params.has('signin')) return;
  params.delete('signin');
  const rest = params.toString();
  window.history.replaceState(
    window.history.state,
    '',
    `${window.location.pathname}${rest ? `?${rest}` : ''}${window.location.hash}`,
  );
}

function SignedIn({
  session,
  replaced,
  onSignedOut,
}: {
  session: Session;
  /** The person signed in before, when another person's sign-in in this browser replaced the session. */
  replaced: string | null;
  onSignedOut: () => void;
}) {
  const [organizations, setOrganizations] = useState<Organization[] | null>(null);
  const [current, setCurrent] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [signOutError, setSignOutError] = useState<string | null>(null);
  /** A sign-in that failed in this browser while this session stays (a used link opened again). */
  const [signInFailed] = useState(readSignInFailure);
  useEffect(dropSignInFailure, []);
  const page = pageOf(usePath());
  const Current = page.component;

  useEffect(() => {
    api<{ data: Organization[] }>('/v1/organizations').then(
      ({ data }) => {
        setOrganizations(data);
        // The last organization chosen, if this person still belongs to it; else the first.
        const saved = localStorage.getItem(orgKey(session.userId));
        setCurrent(data.find((o) => o._id === saved)?._id ?? data[0]?._id ?? null);
      },
      (err: Error) => setError(err.message),
    );
  }, [session.userId]);

  // A rename on the Settings page: the menu shows the organization's new name at once.
  useEffect(() => {
    const saved = (e: Event) => {
      const o = (e as CustomEvent<Organization>).detail;
      setOrganizations((list) => list?.map((x) => (x._id === o._id ? { ...x, name: o.name } : x)) ?? list);
    };
    window.addEventListener(ORGANIZATION_SAVED, saved);
    return () => window.removeEventListener(ORGANIZATION_SAVED, saved);
  }, []);

  const choose = useCallback(
    (id: string) => {
      localStorage.setItem(orgKey(session.userId), id);
      setCurrent(id);
    },
    [session.userId],
  );

  const leave = async () => {
    setSignOutError(null);
    try {
      await signOut();
    } catch (err) {
      // Not signed out (service unreachable or refusing): the session still works, in this browser
      // and for anyone at it, so the page must not look signed out. A 401 means it had already ended.
      if (!(err instanceof ApiError && err.status === 401)) {
        setSignOutError(`You are still signed in: the sign-out failed. ${messageOf(err)}`);
        return;
      }
    }
    onSignedOut();
  };

  return (
    <>
      <header className="bar">
        <strong className="brand">svc</strong>
        <nav aria-label="Main">
          {PAGES.map((p) => (
            <Link key={p.path} to={p.path} current={p === page}>
              {p.label}
            </Link>
          ))}
        </nav>
        {organizations && organizations.length > 0 && (
          <label className="org">
            Organization
            {/* A long name is cut short in the menu (see styles.css): whole in its title and options. */}
            <select
              value={current ?? ''}
              title={organizations.find((o) => o._id === current)?.name}
              onChange={(e) => choose(e.target.value)}
            >
              {organizations.map((o) => (
                <option key={o._id} value={o._id}>
                  {o.name}
                </option>
              ))}
            </select>
          </label>
        )}
        <span className="who">{session.userId}</span>
        <button type="button" onClick={leave}>
          Sign out
        </button>
      </header>
      <main>
        {signInFailed && (
          <p role="alert" className="error" data-sign-in-failed>
            {signInFailed} You are still signed in as {session.userId}.
          </p>
        )}
        {replaced !== null && replaced !== session.userId && (
          <p role="alert" className="error" data-session-changed>
            The session changed: {session.userId} signed in in another tab or window of this browser, which
            ended the session of {replaced} here. This page now shows what {session.userId} can see.
          </p>
        )}
        {error && <p role="alert">{error}</p>}
        {signOutError && (
          <p role="alert" className="error" data-sign-out-failed>
            {signOutError}
          </p>
        )}
        {/* No page until the organizations are read (a failure is said above). */}
        {organizations === null && <Loading failed={error !== null} />}
        {organizations?.length === 0 && (
          <p>You belong to no organization yet. Create one with POST /v1/organizations, then reload.</p>
        )}
        {/* Keyed by organization: switching drops everything shown for the previous one. */}
        {current && (
          <Current
            key={current}
            organizationId={current}
            userId={session.userId}
            tier={organizations?.find((o) => o._id === current)?.tier}
          />
        )}
      </main>
    </>
  );
}
