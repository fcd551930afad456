import type { PendingApproval } from './api.js';
import { revealString } from './reveal.js';
import { Shown } from './Shown.js';

/** The tool name under which the payment gateway asks to approve a capsule mint. */
export const CAPSULE_TOOL = 'gateway.capsule';

const obj = (v: unknown): Record<string, unknown> =>
  v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
const text = (v: unknown): string =>
  v === undefined || v === null || v === '' ? '—' : typeof v === 'string' ? v : JSON.stringify(v);

export function usd(n: unknown): string {
  if (typeof n !== 'number') return '—';
  // Whole dollars as such, cents always with two digits, sub-cent amounts as exact as given.
  return `$${n.toLocaleString('en-US', { minimumFractionDigits: Number.isInteger(n) ? 0 : 2, maximumFractionDigits: 6 })}`;
}

/** A payee as the gateway stored its details: its name and the end of its account, when given. */
function payeeOf(details: unknown): string {
  const d = obj(details);
  const name = typeof d.name === 'string' ? d.name : null;
  const account = [d.account_number, d.iban, d.account].find((v) => typeof v === 'string') as
    | string
    | undefined;
  const tail = account ? `account …${account.slice(-4)}` : null;
  return [name, tail].filter(Boolean).join(', ') || text(details);
}

/** The action an approval is bound to, for economic authorizations and capsule mints; else null. */
export function boundAction(a: PendingApproval): [string, string][] | null {
  const args = a.arguments;
  if (a.toolName === CAPSULE_TOOL || a.escalation?.source === 'gateway') {
    const ceiling = obj(args.amount_ceiling);
    const rails = Array.isArray(args.rail_allowlist)
      ? args.rail_allowlist.join(', ')
      : text(args.rail_allowlist);
    return [
      ['Amount', `${text(ceiling.amount)} ${text(ceiling.currency)}`],
      ['Payee', payeeOf(args.payee)],
      ['Rail', rails],
      ['Invoice', args.invoice_hash ? text(args.invoice_hash) : 'none'],
      ['Entity', text(args.entity_id)],
    ];
  }
  if (a.escalation?.source === 'economic') {
    return [
      ['Action', text(args.actionId)],
      ['Amount', usd(args.estimatedSpendUsd)],
      ['Category', text(args.category)],
      ['Payer', text(args.payer)],
      ['Tool', a.toolName],
    ];
  }
  return null;
}

/** "approved by X; 1 more approval needed" under dual control; null for a single approval. */
export function dualControl(a: PendingApproval, userId: string): string | null {
  const required = a.requiredApprovals ?? 1;
  const given = a.approvers ?? [];
  if (required <= 1 && given.length === 0) return null;
  const left = Math.max(0, required - given.length);
  const more = `${left} more approval${left === 1 ? '' : 's'} needed`;
  if (given.length === 0) return `Needs ${required} approvals from different people`;
  const who = given
    .map((g) => revealString(g.resolvedBy) + (g.resolvedBy === userId ? ' (you)' : ''))
    .join(', ');
  return `approved by ${who}; ${more}`;
}

/** Why a person is asked, what exactly they approve, and who approved already. */
export function ApprovalDetails({ approval, userId }: { approval: PendingApproval; userId: string }) {
  const e = approval.escalation;
  const bound = boundAction(approval);
  const dual = dualControl(approval, userId);
  return (
    <>
      {e && (
        <p className="why" data-escalation={e.source}>
          <strong>Escalated by</strong> <Shown text={e.policy} />: <Shown text={e.constraint} />
        </p>
      )}
      {bound ? (
        <dl className="bound" aria-label="Bound action">
          {bound.map(([k, v]) => (
            <div key={k}>
              <dt>{k}</dt>
              <dd>
                <Shown text={v} />
              </dd>
            </div>
          ))}
        </dl>
      ) : null}
      {dual && (
        <p className="dual" data-dual-control>
          {dual}
        </p>
      )}
    </>
  );
}
