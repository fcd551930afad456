import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';
import { createSpendLedger } from './repository.js';

const t = useTestApp();

/** The running sums recomputed from the ledger entries alone. */
function recompute(
  entries: {
    kind: string;
    amount_micros: number;
    session_id: string;
    agent_id: string;
    category: string;
    agent_window: string;
    category_window: string;
  }[],
) {
  const sums = new Map<string, { spent: number; reserved: number }>();
  for (const e of entries) {
    const amount = Number(e.amount_micros);
    const d =
      e.kind === 'commit'
        ? { spent: amount, reserved: 0 }
        : e.kind === 'reservation'
          ? { spent: 0, reserved: amount }
          : e.kind === 'release' || e.kind === 'expiry'
            ? { spent: 0, reserved: -amount }
            : null;
    if (!d) continue;
    for (const key of [
      `session|${e.session_id}|`,
      `agent|${e.agent_id}|${e.agent_window}`,
      `category|${e.category}|${e.category_window}`,
    ]) {
      const s = sums.get(key) ?? { spent: 0, reserved: 0 };
      sums.set(key, { spent: s.spent + d.spent, reserved: s.reserved + d.reserved });
    }
  }
  return sums;
}

/** A tenant whose organization allows $100 per session (payer corp). */
async function tenantWithSessionLimit(): Promise<Tenant> {
  const tenant = await createTenant(t);
  const put = await t.inject({
    method: 'PUT',
    url: '/v1/economic/config',
    headers: asUser(tenant),
    payload: { approvedPayers: ['corp'], defaultPayer: 'corp', sessionLimitUsd: 100 },
  });
  expect(put.statusCode).toBe(200);
  return tenant;
}

/** `n` parallel $10 authorizations in session `race`, each with its own fields from `vary(i)`. */
function parallelAuthorizations(tenant: Tenant, n: number, vary: (i: number) => Record<string, unknown>) {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      t.inject({
        method: 'POST',
        url: '/v1/economic/authorize',
        headers: keyHeader(tenant.apiKey),
        payload: {
          sessionId: 'race',
          toolName: 'buy',
          category: 'supplies',
          estimatedSpendUsd: 10,
          ...vary(i),
        },
      }),
    ),
  );
}

describe('spend ledger under concurrency', () => {
  it('allows exactly 10 of 100 parallel $10 authorizations against a $100 session budget', async () => {
    const tenant = await tenantWithSessionLimit();
    const results = await parallelAuthorizations(tenant, 100, (i) => ({
      actionId: `buy-${i}`,
      agentId: `agent-${i % 7}`,
    }));
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    const allowed = results.filter((r) => r.json().decision === 'allow');
    expect(allowed).toHaveLength(10);
    expect(results.filter((r) => r.json().reasonCode === 'session_budget_exceeded')).toHaveLength(90);

    // Commits race too; the ledger's sums stay what its entries say.
    await Promise.all(
      allowed.map((r, i) => {
        const a = r.json();
        return t.inject({
          method: 'POST',
          url: '/v1/economic/commit',
          headers: keyHeader(tenant.apiKey),
          payload: {
            actionId: a.actionId,
            sessionId: 'race',
            agentId: `agent-${Number(a.actionId.slice(4)) % 7}`,
            toolName: 'buy',
            category: 'supplies',
            quotedSpendUsd: 10,
            actualSpendUsd: i % 2 ? 10 : 7.5,
          },
        });
      }),
    );
    const ledger = createSpendLedger(t.store);
    const entries = await ledger.entries(tenant.orgId);
    expect(entries.map((e) => Number(e.sequence))).toEqual(entries.map((_, i) => i));
    expect(entries.filter((e) => e.kind === 'authorization')).toHaveLength(100);
    expect(entries.filter((e) => e.kind === 'reservation')).toHaveLength(10);
    expect(entries.filter((e) => e.kind === 'commit')).toHaveLength(10);
    const stored = new Map(
      (await ledger.balances(tenant.orgId)).map((b) => [
        `${b.scope}|${b.scope_key}|${b.period}`,
        { spent: Number(b.spent_micros), reserved: Number(b.reserved_micros) },
      ]),
    );
    expect(stored).toEqual(recompute(entries));
    expect(stored.get('session|race|')).toEqual({ spent: 87_500_000, reserved: 0 });
    const other = await createTenant(t);
    expect(await ledger.entries(other.orgId)).toEqual([]);
  });

  it('holds the session budget in parallel when callers leave the session out of budgetScopes', async () => {
    const tenant = await tenantWithSessionLimit();
    const results = await parallelAuthorizations(tenant, 40, (i) => ({
      actionId: `scoped-${i}`,
      agentId: 'agent',
      budgetScopes: [i % 2 ? 'category' : 'agent'],
    }));
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(results.filter((r) => r.json().decision === 'allow')).toHaveLength(10);
    expect(results.filter((r) => r.json().reasonCode === 'session_budget_exceeded')).toHaveLength(30);
    const balances = await createSpendLedger(t.store).balances(tenant.orgId);
    const session = balances.find((b) => b.scope === 'session' && b.scope_key === 'race');
    expect(Number(session!.reserved_micros)).toBe(100_000_000);
  });

  it('answers 20 parallel copies of one authorize and of its commit alike, reserving and spending once', async () => {
    const tenant = await tenantWithSessionLimit();
    const body = {
      actionId: 'once',
      sessionId: 'dup',
      agentId: 'agent',
      toolName: 'buy',
      category: 'supplies',
      estimatedSpendUsd: 40,
    };
    const send = (url: string, payload: object) =>
      t.inject({ method: 'POST', url, headers: keyHeader(tenant.apiKey), payload });
    const answers = await Promise.all(Array.from({ length: 20 }, () => send('/v1/economic/authorize', body)));
    expect(new Set(answers.map((a) => a.body)).size).toBe(1);
    expect(answers[0]!.json()).toMatchObject({ decision: 'allow', budget: { session: { reservedUsd: 40 } } });
    const commit = { ...body, quotedSpendUsd: 40, actualSpendUsd: 39 };
    delete (commit as Record<string, unknown>).estimatedSpendUsd;
    const commits = await Promise.all(Array.from({ length: 20 }, () => send('/v1/economic/commit', commit)));
    expect(new Set(commits.map((c) => c.body)).size).toBe(1);
    expect(commits[0]!.json()).toMatchObject({
      status: 'committed',
      budget: { session: { spentUsd: 39, reservedUsd: 0 } },
    });
    const entries = await createSpendLedger(t.store).entries(tenant.orgId);
    expect(entries.map((e) => e.kind)).toEqual(['authorization', 'reservation', 'commit', 'release']);
  });

  it('expires a reservation for an operation at or after its expiry, even behind an earlier one in the same batch', async () => {
    const tenant = await tenantWithSessionLimit();
    const body = {
      actionId: 'lapses',
      sessionId: 'edge',
      agentId: 'agent',
      toolName: 'buy',
      category: 'supplies',
      estimatedSpendUsd: 100,
    };
    const res = await t.inject({
      method: 'POST',
      url: '/v1/economic/authorize',
      headers: keyHeader(tenant.apiKey),
      payload: body,
    });
    expect(res.json()).toMatchObject({ decision: 'allow' });
    const expiresAt = Date.parse(res.json().reservationExpiresAt);
    const at = (ms: number) => () => new Date(ms).toISOString();
    const ledger = createSpendLedger(t.store);
    const keys = {
      sessionId: 'edge',
      agentId: 'agent',
      category: 'supplies',
      agentWindow: new Date(expiresAt).toISOString().slice(0, 10),
      categoryWindow: new Date(expiresAt).toISOString().slice(0, 10),
    };
    // Queued in the same turn, so both run in one transaction: the first a millisecond before the
    // reservation lapses, the second when it has.
    const [before, after] = await Promise.all([
      ledger.locked(tenant.orgId, at(expiresAt - 1), async (tx) => (await tx.action('lapses'))!.state),
      ledger.locked(tenant.orgId, at(expiresAt), async (tx) => ({
        state: (await tx.action('lapses'))!.state,
        session: (await tx.usage(keys)).session,
      })),
    ]);
    expect(before).toBe('reserved');
    expect(after).toEqual({ state: 'expired', session: { spentMicros: 0, reservedMicros: 0 } });
    const entries = await ledger.entries(tenant.orgId);
    expect(entries.map((e) => e.kind)).toEqual(['authorization', 'reservation', 'expiry']);
  });
});
