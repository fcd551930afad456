export function SignIn() {
  const failed = new URLSearchParams(window.location.search).get('signin') === 'invalid';
  return (
    <main className="signin">
      <h1>Sign in to svc</h1>
      {failed && (
        <p role="alert" className="error">
          That sign-in link is not valid: it was already used, it expired, or it was mistyped. Ask for a new
          one.
        </p>
      )}
      <p>
        The dashboard has no password form. An operator of this service creates a one-time sign-in link for
        you:
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
