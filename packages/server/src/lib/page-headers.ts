/**
 * Headers of every HTML page the service serves to people (the dashboard, a Charter review link).
 * Their buttons approve calls and policy changes, so no other site may frame them (a transparent
 * frame over a decoy would turn a click there into an approval here): frame-ancestors 'none' and,
 * for older browsers, X-Frame-Options. The policy also allows only the service's own scripts.
 * Inline styles stay allowed: the review page carries its own, and React sets style attributes.
 */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; '),
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
};
