import { useEffect, useState } from 'react';

interface Methods {
  loginLink: boolean;
  oidc: { name: string } | null;
}

/** What a failed sign-in sent the person back with (`/?signin=<reason>`), in words. */
const FAILURES: Record<string, string> = {
  invalid:
    'That sign-in did not work: the link was already used, it expired or it was mistyped, or the sign-in was started in another browser. Start again.',
  provider_unreachable:
    'The identity provider could not be reached. Try again in a moment, or ask an operator.',
  provider_refused: 'The identity provider refused the sign-in.',
  invalid_answer:
    "The identity provider's answer failed the service's checks. Ask an operator to look at the log.",
  no_user:
    'The identity provider did not say who you are (no usable user claim, or an email address it has not verified).',
};

/** What the page says of a sign-in that failed for `reason` (the `signin` of the address). */
export const signInFailure = (reason: string): string =>
  (Object.hasOwn(FAILURES, reason) ? FAILURES[reason] : undefined) ??
  'The sign-in did not work. Start again.';

/** `ended`: the session ended while the dashboard was open (signed out elsewhere, or expired). */
export function SignIn({ ended = false }: { ended?: boolean }) {
  const reason = new URLSearchParams(window.location.search).get('signin');
  const [methods, setMethods] = useState<Methods | null>(null);

  useEffect(() => {
    fetch('/v1/auth/methods')
      .then((res) => (res.ok ? (res.json() as Promise<Methods>) : null))
      .then(setMethods, () => setMethods(null));
  }, []);

  return (
    <main className="signin">
      <h1>Sign in to svc</h1>
      {ended && (
        <p role="alert" className="error" data-session-ended>
          Your session has ended: it expired (sessions last 12 hours) or you signed out in another tab or
          window. Sign in again to continue.
        </p>
      )}
      {reason && (
        <p role="alert" className="error">
          {signInFailure(reason)}
        </p>
      )}
      {methods?.oidc && (
        <p>
          <a className="button" href="/v1/auth/oidc/login">
            Sign in with {methods.oidc.name}
          </a>
        </p>
      )}
      <p>
        {methods?.oidc ? 'Or use a one-time sign-in link. ' : 'The dashboard has no password form. '}
        An operator of this service creates a one-time sign-in link for you:
      </p>
      <pre>
        <code>svc login-link --sub YOUR_USER_ID</code>
      </pre>
      <p>
        Open the link it prints in this browser. It works once, for 15 minutes by default; the session it
        opens lasts 12 hours.
      </p>
    </main>
  );
}
