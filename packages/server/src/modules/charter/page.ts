import { describePolicy } from '@svc/policy-engine';
import type { Verification } from './model.js';

const esc = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

const list = (items: string[]) =>
  items.length ? `<ul>${items.map((i) => `<li>${esc(i)}</li>`).join('')}</ul>` : '<p>—</p>';

/**
 * The review link's page: a plain, readable summary of the change side by side with what is live,
 * the review findings and example calls. Approving and rejecting happen through the API with a user
 * token (the dashboard builds buttons on the same routes).
 */
export function verificationPage(v: Verification, baseUrl: string): string {
  const sections = v.changes.map((c) => {
    const current = c.current
      ? describePolicy(c.current.definition)
      : ['No policy: every call is allowed without checks'];
    const examples = c.analysis.examples.map(
      (e) =>
        `<tr><td><code>${esc(JSON.stringify(e.arguments))}</code></td><td>${esc(e.decision)}</td><td>${esc(e.reason)}</td></tr>`,
    );
    return `<section>
<h2>${esc(c.toolName)}</h2>
<table class="side"><tr><th>Now${c.current ? ` (version ${c.current.version}${c.current.isActive === false ? ', inactive: calls pass without checks until it is activated; approving keeps it inactive' : ''})` : ''}</th><th>Proposed</th></tr>
<tr><td>${list(current)}</td><td>${list(describePolicy(c.proposed))}</td></tr></table>
<h3>Review findings</h3>${list(c.analysis.findings.map((f) => `${f.kind}: ${f.message}`))}
<h3>Quality</h3><p>${c.quality.valid ? 'valid' : 'INVALID'}, score ${c.quality.score}</p>${list(c.quality.issues)}
<h3>Example calls</h3><table><tr><th>arguments</th><th>decision</th><th>reason</th></tr>${examples.join('')}</table>
</section>`;
  });
  const tools = v.tools.length
    ? `<section><h2>Tools to register</h2>${list(v.tools.map((t) => `${t.name}(${t.arguments.map((a) => `${a.name}: ${a.type}${a.required ? ', required' : ''}`).join('; ')})`))}</section>`
    : '';
  const api = `${baseUrl}/v1/charter/verifications/${v.id}`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Policy change ${esc(v.id)}: ${esc(v.status)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.4}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.4rem;vertical-align:top;text-align:left}
.side td{width:50%}code{word-break:break-all}</style></head>
<body>
<h1>Policy change waiting for review</h1>
<p>Status: <strong>${esc(v.status)}</strong>${v.resolvedBy ? ` by ${esc(v.resolvedBy)} at ${esc(v.resolvedAt ?? '')}` : ''}. Proposed ${esc(v.createdAt)}.</p>
<p>${esc(v.summary)}</p>
<p>Nothing here is live until a person approves it. Signed in to the dashboard, this link opens the review with approve and reject buttons (sign in, then open the link again). Through the API: approve with <code>POST ${esc(api)}/approve</code>; reject with <code>POST ${esc(api)}/reject</code>, each with a user token (<code>Authorization: Bearer &lt;JWT&gt;</code>, <code>X-Organization-Id</code>).</p>
${tools}${sections.join('\n')}
</body></html>`;
}
