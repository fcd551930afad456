import { useCallback, useEffect, useState } from 'react';
import { ApiError, api, loadSession, type Organization, type Session, signOut } from './api.js';
import { PAGES, pageOf } from './pages.js';
import { Link, usePath } from './router.js';
import { SignIn } from './SignIn.js';

const orgKey = (userId: string) => `svc.organization.${userId}`;

export function App() {
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    loadSession().then(setSession, (err: Error) => setError(err.message));
  }, []);

  if (error) return <p role="alert">The service could not be reached: {error}</p>;
  if (session === undefined) return <p aria-busy="true">Loading…</p>;
  if (session === null) return <SignIn />;
  return <SignedIn session={session} onSignedOut={() => setSession(null)} />;
}

function SignedIn({ session, onSignedOut }: { session: Session; onSignedOut: () => void }) {
  const [organizations, setOrganizations] = useState<Organization[] | null>(null);
  const [current, setCurrent] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
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

  const choose = useCallback(
    (id: string) => {
      localStorage.setItem(orgKey(session.userId), id);
      setCurrent(id);
    },
    [session.userId],
  );

  const leave = async () => {
    try {
      await signOut();
    } catch (err) {
      // Already signed out or expired: the page shows the sign-in either way.
      if (!(err instanceof ApiError)) throw err;
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
            <select value={current ?? ''} onChange={(e) => choose(e.target.value)}>
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
        {error && <p role="alert">{error}</p>}
        {organizations?.length === 0 && (
          <p>You belong to no organization yet. Create one with POST /v1/organizations, then reload.</p>
        )}
        {/* Keyed by organization: switching drops everything shown for the previous one. */}
        {current && <Current key={current} organizationId={current} userId={session.userId} />}
      </main>
    </>
  );
}
