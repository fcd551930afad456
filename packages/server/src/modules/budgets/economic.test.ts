import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { collectEvents, ManualClock, setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { hashJson } from '../../ledger/canonical.js';

const clock = new ManualClock();
let seq = 0;

const t = useTestApp({}, { clock });

const ORG_CONFIG = {
  defaultPayer: 'corp-card',
  approvedPayers: ['corp-card', 'team-card'],
  perActionApprovalThresholdUsd: 50,
  sessionLimitUsd: 100,
  agentLimitUsd: 300,
  categoryPolicies: { travel: { limitUsd: 200, approvalThresholdUsd: 30 } },
  approvalWindowSeconds: 600,
};

const NO_THRESHOLD = { ...ORG_CONFIG, perActionApprovalThresholdUsd: null };

async function tenantWithConfig(config: object = ORG_CONFIG, tier = 'team'): Promise<Tenant> {
  const tenant = await createTenant(t);
  if (tier !== 'free') await setTier(t, tenant, tier);
  const res = await t.inject({
    method: 'PUT',
    url: '/v1/economic/config',
    headers: asUser(tenant),
    payload: config,
  });
  expect(res.statusCode).toBe(200);
  return tenant;
}

const action = (over: Record<string, unknown> = {}) => ({
  actionId: `act-${++seq}`,
  sessionId: 's-1',
  agentId: 'agent-1',
  toolName: 'buy_ticket',
  category: 'food',
  estimatedSpendUsd: 10,
  ...over,
});

const authorize = (tenant: Tenant, payload: object) =>
  t.inject({ method: 'POST', url: '/v1/economic/authorize', headers: keyHeader(tenant.apiKey), payload });
const commit = (tenant: Tenant, payload: object) =>
  t.inject({ method: 'POST', url: '/v1/economic/commit', headers: keyHeader(tenant.apiKey), payload });
const status = (tenant: Tenant, payload: object) =>
  t.inject({ method: 'POST', url: '/v1/economic/status', headers: keyHeader(tenant.apiKey), payload });
const commitOf = (a: Record<string, unknown>, actual: number, over: object = {}) => ({
  actionId: a.actionId,
  sessionId: a.sessionId,
  agentId: a.agentId,
  toolName: a.toolName,
  category: a.category,
  quotedSpendUsd: a.estimatedSpendUsd,
  actualSpendUsd: actual,
  ...over,
});
const resolve = (tenant: Tenant, id: string, actionName: 'approve' | 'deny') =>
  t.inject({
    method: 'POST',
    url: `/v1/approvals/${id}/resolve`,
    headers: asUser(tenant),
    payload: { action: actionName },
  });

async function economicReceipts(orgId: string): Promise<Record<string, unknown>[]> {
  await t.ctx.writer.drain();
  const rows = await t.ctx.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', orgId)
    .orderBy('sequence')
    .execute();
  return rows.map((r) => JSON.parse(r.payload)).filter((r) => r.source === 'economic');
}

const approvalRow = (orgId: string, id: string) =>
  t.ctx.store.db
    .selectFrom('approvals')
    .selectAll()
    .where('organization_id', '=', orgId)
    .where('id', '=', id)
    .executeTakeFirstOrThrow();

describe('economic config', () => {
  it('stores the organization config for users and shows it with defaults', async () => {
    const tenant = await tenantWithConfig();
    const res = await t.inject({ method: 'GET', url: '/v1/economic/config', headers: asUser(tenant) });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      scope: 'organization',
      projectId: null,
      authority: 'organization',
      config: { ...ORG_CONFIG, agentWindow: 'day', categoryWindow: 'day' },
    });
    expect(res.json().effective).toEqual(res.json().config);
  });

  it('lets a project key only tighten the organization config', async () => {
    const tenant = await tenantWithConfig();
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: {
        approvedPayers: ['team-card', 'other'],
        defaultPayer: 'team-card',
        sessionLimitUsd: 1000,
        agentLimitUsd: 20,
      },
    });
    expect(put.statusCode).toBe(200);
    const body = put.json();
    expect(body).toMatchObject({
      scope: 'project',
      projectId: tenant.projectId,
      authority: 'organization+project',
    });
    expect(body.config.sessionLimitUsd).toBe(1000);
    expect(body.effective).toMatchObject({
      defaultPayer: 'team-card',
      approvedPayers: ['team-card'],
      sessionLimitUsd: 100,
      agentLimitUsd: 20,
      perActionApprovalThresholdUsd: 50,
      approvalWindowSeconds: 600,
    });
    // The key's authorizations are decided under the combination: agent limit 20.
    const res = await authorize(tenant, action({ estimatedSpendUsd: 25 }));
    expect(res.json()).toMatchObject({
      decision: 'deny',
      reasonCode: 'agent_budget_exceeded',
      authority: 'organization+project',
    });
    // The user still sees the organization's own configuration.
    const org = await t.inject({ method: 'GET', url: '/v1/economic/config', headers: asUser(tenant) });
    expect(org.json().config.agentLimitUsd).toBe(300);
  });

  it('refuses invalid configurations with the field named, and changes nothing', async () => {
    const tenant = await tenantWithConfig();
    const cases: [object, string][] = [
      [{ ...ORG_CONFIG, sessionLimitUsd: -1 }, 'sessionLimitUsd'],
      [{ ...ORG_CONFIG, sessionLimitUsd: 0.1234567 }, 'sessionLimitUsd'],
      [{ ...ORG_CONFIG, sessionLimitUsd: 1e10 }, 'sessionLimitUsd'],
      [{ ...ORG_CONFIG, sessionLimitUsd: '10' }, 'sessionLimitUsd'],
      [{ ...ORG_CONFIG, defaultPayer: 'nobody' }, 'defaultPayer'],
      [{ ...ORG_CONFIG, approvedPayers: ['a', 'a'] }, 'approvedPayers'],
      [{ ...ORG_CONFIG, approvalWindowSeconds: 59 }, 'approvalWindowSeconds'],
      [{ ...ORG_CONFIG, approvalWindowSeconds: 86401 }, 'approvalWindowSeconds'],
      [{ ...ORG_CONFIG, approvalWindowSeconds: 60.5 }, 'approvalWindowSeconds'],
      [{ ...ORG_CONFIG, agentWindow: 'week' }, 'agentWindow'],
      [{ ...ORG_CONFIG, categoryPolicies: { x: { limitUsd: 0.0000001 } } }, 'categoryPolicies'],
      [{ ...ORG_CONFIG, categoryPolicies: { x: { cap: 1 } } }, 'categoryPolicies'],
      // Keys that could never be an action's category; a null policy under such a key answered 500.
      [{ ...ORG_CONFIG, categoryPolicies: { 'a\u0001': null } }, 'categoryPolicies/a\u0001'],
      [{ ...ORG_CONFIG, categoryPolicies: { 'a\u0001': { limitUsd: 1 } } }, 'not an allowed name'],
      [{ ...ORG_CONFIG, categoryPolicies: { '': { limitUsd: 1 } } }, 'not an allowed name'],
      [{ ...ORG_CONFIG, categoryPolicies: { ['c'.repeat(201)]: { limitUsd: 1 } } }, 'at most 200'],
      [{ ...ORG_CONFIG, extra: 1 }, 'extra'],
      [{ defaultPayer: 'x' }, 'approvedPayers'],
    ];
    for (const [payload, field] of cases) {
      const res = await t.inject({
        method: 'PUT',
        url: '/v1/economic/config',
        headers: asUser(tenant),
        payload,
      });
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toContain(field);
    }
    const res = await t.inject({ method: 'GET', url: '/v1/economic/config', headers: asUser(tenant) });
    expect(res.json().config).toMatchObject(ORG_CONFIG);
  });

  it('keeps windows the organization set, and accepts month and lifetime windows', async () => {
    const tenant = await tenantWithConfig({
      ...ORG_CONFIG,
      agentWindow: 'month',
      categoryWindow: 'lifetime',
    });
    const res = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: { approvedPayers: ['corp-card'], agentWindow: 'day' },
    });
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain('agentWindow');
    const ok = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: { approvedPayers: ['corp-card'] },
    });
    expect(ok.json().config).toMatchObject({ agentWindow: 'month', categoryWindow: 'lifetime' });
  });

  it('answers with no configuration: disabled, and authorization denied', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'GET',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
    });
    expect(res.json()).toMatchObject({ scope: 'project', config: null, effective: null, authority: 'none' });
    const a = await authorize(tenant, action());
    expect(a.json()).toMatchObject({ decision: 'deny', reasonCode: 'economic_disabled', authority: 'none' });
    const s = await status(tenant, { sessionId: 's-1', agentId: 'agent-1' });
    expect(s.json()).toMatchObject({
      enabled: false,
      healthy: true,
      authority: 'none',
      pendingApprovals: [],
    });
  });

  it("applies a project's configuration only once the organization has one", async () => {
    const tenant = await createTenant(t);
    await setTier(t, tenant, 'team');
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: { approvedPayers: ['me'], defaultPayer: 'me', sessionLimitUsd: 20 },
    });
    // Stored, but nothing applies: the organization has no configuration.
    expect(put.statusCode).toBe(200);
    expect(put.json()).toMatchObject({
      scope: 'project',
      config: { approvedPayers: ['me'], defaultPayer: 'me', sessionLimitUsd: 20 },
      effective: null,
      authority: 'none',
    });
    const live = await authorize(tenant, action({ estimatedSpendUsd: 1_000_000 }));
    expect(live.json()).toMatchObject({
      decision: 'deny',
      reasonCode: 'economic_disabled',
      authority: 'none',
      payer: null,
    });
    const sim = await authorize(tenant, action({ mode: 'simulation', estimatedSpendUsd: 5 }));
    expect(sim.json()).toMatchObject({
      decision: 'deny',
      reasonCode: 'economic_disabled',
      authority: 'none',
      provisional: true,
    });
    expect((await status(tenant, { sessionId: 's-1', agentId: 'agent-1' })).json()).toMatchObject({
      enabled: false,
      authority: 'none',
    });
    // Once a person configures the organization, the project's configuration tightens it.
    const org = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: asUser(tenant),
      payload: { ...NO_THRESHOLD, approvedPayers: ['corp-card', 'me'] },
    });
    expect(org.json()).toMatchObject({ authority: 'organization' });
    const got = await t.inject({
      method: 'GET',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
    });
    expect(got.json()).toMatchObject({
      authority: 'organization+project',
      effective: { approvedPayers: ['me'], defaultPayer: 'me', sessionLimitUsd: 20 },
    });
    expect((await authorize(tenant, action({ estimatedSpendUsd: 25 }))).json()).toMatchObject({
      decision: 'deny',
      reasonCode: 'session_budget_exceeded',
      authority: 'organization+project',
    });
    expect((await authorize(tenant, action({ estimatedSpendUsd: 5 }))).json()).toMatchObject({
      decision: 'allow',
      payer: 'me',
      authority: 'organization+project',
    });
  });

  it('isolates configurations between organizations', async () => {
    const a = await tenantWithConfig();
    const b = await createTenant(t);
    const res = await t.inject({ method: 'GET', url: '/v1/economic/config', headers: asUser(b) });
    expect(res.json().config).toBeNull();
    const other = await t.inject({
      method: 'GET',
      url: '/v1/economic/config',
      headers: { ...asUser(b), 'x-organization-id': a.orgId },
    });
    expectError(other, 403, 'authorization_error');
  });

  it('requires authentication', async () => {
    expectError(await t.inject({ method: 'GET', url: '/v1/economic/config' }), 401, 'unauthorized');
    expectError(
      await t.inject({ method: 'POST', url: '/v1/economic/authorize', payload: action() }),
      401,
      'unauthorized',
    );
  });
});

describe('authorize and commit', () => {
  it('allows within budget, reserves, and commits the actual spend', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 12.5, maxAcceptableSpendUsd: 15, metadata: { vendor: 'x' } });
    const res = await authorize(tenant, req);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      actionId: req.actionId,
      decision: 'allow',
      reasonCode: 'economic_authorized',
      authority: 'organization',
      payer: 'corp-card',
      quotedSpendUsd: 12.5,
      budget: {
        currency: 'USD',
        source: 'ledger',
        session: { limitUsd: 100, spentUsd: 0, reservedUsd: 12.5, remainingUsd: 87.5 },
        agent: { limitUsd: 300, spentUsd: 0, reservedUsd: 12.5, remainingUsd: 287.5 },
        category: { limitUsd: null, spentUsd: 0, reservedUsd: 12.5, remainingUsd: null },
      },
    });
    expect(body.approvalId).toBeUndefined();
    expect(body.provisional).toBeUndefined();
    expect(Date.parse(body.reservationExpiresAt) - Date.parse(body.budget.asOf)).toBe(600_000);

    const events = collectEvents(t, tenant.orgId);
    const c = await commit(tenant, commitOf(req, 11.25));
    events.stop();
    expect(c.statusCode).toBe(200);
    expect(c.json()).toMatchObject({
      actionId: req.actionId,
      status: 'committed',
      authority: 'organization',
      category: 'food',
      payer: 'corp-card',
      quotedSpendUsd: 12.5,
      actualSpendUsd: 11.25,
      overrunUsd: 0,
      approvalId: null,
      reasonCode: 'economic_committed',
      budget: { session: { spentUsd: 11.25, reservedUsd: 0, remainingUsd: 88.75 } },
    });
    expect(events.events.map((e) => e.type)).toEqual(['economic.committed']);
    expect(events.events[0]!.data).toMatchObject({
      actionId: req.actionId,
      actualSpendUsd: 11.25,
      quotedSpendUsd: 12.5,
      overrunUsd: 0,
      payer: 'corp-card',
      category: 'food',
      projectId: tenant.projectId,
    });
  });

  it('denies in the documented order with a reason code for each', async () => {
    const tenant = await tenantWithConfig();
    const cases: [object, string][] = [
      [action({ estimatedSpendUsd: 20, maxAcceptableSpendUsd: 19.99 }), 'quote_exceeds_max_acceptable'],
      [action({ payer: 'stranger' }), 'payer_not_approved'],
      [action({ estimatedSpendUsd: 100.01, maxAcceptableSpendUsd: 200 }), 'session_budget_exceeded'],
      [action({ sessionId: 'other', estimatedSpendUsd: 40, category: 'travel' }), 'approval_required'],
    ];
    for (const [payload, code] of cases)
      expect((await authorize(tenant, payload)).json().reasonCode).toBe(code);
    // The category budget: travel is limited to 200 over the day (approval at 30 and above).
    for (let i = 0; i < 6; i++) {
      const r = await authorize(
        tenant,
        action({ sessionId: `tr-${i}`, category: 'travel', estimatedSpendUsd: 29 }),
      );
      expect(r.json().decision).toBe('allow');
    }
    const over = await authorize(
      tenant,
      action({ sessionId: 'tr-x', category: 'travel', estimatedSpendUsd: 27 }),
    );
    expect(over.json()).toMatchObject({ decision: 'deny', reasonCode: 'category_budget_exceeded' });
    expect(over.json().budget.category).toMatchObject({ limitUsd: 200, reservedUsd: 174, remainingUsd: 26 });
    // Every limit is checked and shown, whatever budgetScopes names.
    const agentOnly = await authorize(
      tenant,
      action({ sessionId: 'tr-y', category: 'travel', estimatedSpendUsd: 27, budgetScopes: ['agent'] }),
    );
    expect(agentOnly.json()).toMatchObject({ decision: 'deny', reasonCode: 'category_budget_exceeded' });
    expect(Object.keys(agentOnly.json().budget).sort()).toEqual([
      'agent',
      'asOf',
      'category',
      'currency',
      'session',
      'source',
    ]);
    // The agent budget: 300 over the day, across sessions (174 reserved, then 49: 77 left).
    const more = await authorize(tenant, action({ sessionId: 'ag', estimatedSpendUsd: 49 }));
    expect(more.json()).toMatchObject({ decision: 'allow' });
    const agent = await authorize(
      tenant,
      action({ sessionId: 'ag-2', estimatedSpendUsd: 78, budgetScopes: ['agent', 'category'] }),
    );
    expect(agent.json()).toMatchObject({ decision: 'deny', reasonCode: 'agent_budget_exceeded' });
  });

  it('checks every configured limit whatever budgetScopes leaves out', async () => {
    const tenant = await tenantWithConfig({ ...NO_THRESHOLD, sessionLimitUsd: 100, agentLimitUsd: 150 });
    const scoped = (over: Record<string, unknown>) =>
      action({ sessionId: 'rxs', agentId: 'rxa', toolName: 't', category: 'c', ...over });
    expect((await authorize(tenant, scoped({ estimatedSpendUsd: 80 }))).json().decision).toBe('allow');
    // The session has $20 left: leaving it out of budgetScopes does not skip its limit.
    const session = await authorize(tenant, scoped({ estimatedSpendUsd: 90, budgetScopes: ['category'] }));
    expect(session.json()).toMatchObject({ decision: 'deny', reasonCode: 'session_budget_exceeded' });
    expect(session.json().budget.session).toMatchObject({ limitUsd: 100, reservedUsd: 80, remainingUsd: 20 });
    // The same in simulation.
    const simulated = await authorize(
      tenant,
      scoped({ estimatedSpendUsd: 90, budgetScopes: ['agent'], mode: 'simulation' }),
    );
    expect(simulated.json()).toMatchObject({ decision: 'deny', reasonCode: 'session_budget_exceeded' });
    // The agent has $70 left across sessions.
    const agent = await authorize(
      tenant,
      scoped({ sessionId: 'rxs-2', estimatedSpendUsd: 71, budgetScopes: ['session', 'category'] }),
    );
    expect(agent.json()).toMatchObject({ decision: 'deny', reasonCode: 'agent_budget_exceeded' });
    // Nothing was reserved by the refusals.
    const s = await status(tenant, { sessionId: 'rxs', agentId: 'rxa' });
    expect(s.json().budget.session).toMatchObject({ limitUsd: 100, reservedUsd: 80 });
    expect(s.json().budget.agent).toMatchObject({ limitUsd: 150, reservedUsd: 80 });
    // A project's own (tighter) limit is checked the same way.
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: { approvedPayers: ['corp-card'], sessionLimitUsd: 10 },
    });
    expect(put.statusCode).toBe(200);
    const project = await authorize(
      tenant,
      scoped({ sessionId: 'rxs-3', estimatedSpendUsd: 11, budgetScopes: ['category'] }),
    );
    expect(project.json()).toMatchObject({ decision: 'deny', reasonCode: 'session_budget_exceeded' });
  });

  it('validates every field of authorize and commit', async () => {
    const tenant = await tenantWithConfig();
    const bad: [object, string][] = [
      [{ ...action(), actionId: '' }, 'actionId'],
      [{ ...action(), actionId: 'x'.repeat(201) }, 'actionId'],
      [{ ...action(), sessionId: 'a\u0001b' }, 'sessionId'],
      [{ ...action(), agentId: 3 }, 'agentId'],
      [(({ toolName: _t, ...r }) => r)(action()), 'toolName'],
      [(({ category: _c, ...r }) => r)(action()), 'category'],
      [(({ estimatedSpendUsd: _e, ...r }) => r)(action()), 'estimatedSpendUsd'],
      [{ ...action(), estimatedSpendUsd: -0.01 }, 'estimatedSpendUsd'],
      [{ ...action(), estimatedSpendUsd: 0.0000001 }, 'estimatedSpendUsd'],
      [{ ...action(), estimatedSpendUsd: 1e9 + 1 }, 'estimatedSpendUsd'],
      [{ ...action(), estimatedSpendUsd: '10' }, 'estimatedSpendUsd'],
      [{ ...action(), maxAcceptableSpendUsd: 1.1234567 }, 'maxAcceptableSpendUsd'],
      [{ ...action(), mode: 'dry' }, 'mode'],
      [{ ...action(), budgetScopes: [] }, 'budgetScopes'],
      [{ ...action(), budgetScopes: ['session', 'session'] }, 'budgetScopes'],
      [{ ...action(), budgetScopes: ['org'] }, 'budgetScopes'],
      [{ ...action(), metadata: [] }, 'metadata'],
      [{ ...action(), payer: '' }, 'payer'],
      [{ ...action(), surprise: true }, 'surprise'],
    ];
    for (const [payload, field] of bad) {
      const res = await authorize(tenant, payload);
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toContain(field);
    }
    const deep: Record<string, unknown> = {};
    let cur = deep;
    for (let i = 0; i < 70; i++) cur = cur.n = {} as Record<string, unknown>;
    expectError(await authorize(tenant, action({ metadata: deep })), 400, 'validation_failed');
    const a = action();
    const badCommits: [object, string][] = [
      [{ ...commitOf(a, 1), actualSpendUsd: -1 }, 'actualSpendUsd'],
      [{ ...commitOf(a, 1), actualSpendUsd: 0.1 + 0.2 }, 'actualSpendUsd'],
      [(({ quotedSpendUsd: _q, ...r }) => r)(commitOf(a, 1)), 'quotedSpendUsd'],
      [{ ...commitOf(a, 1), extra: 1 }, 'extra'],
    ];
    for (const [payload, field] of badCommits) {
      const res = await commit(tenant, payload);
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toContain(field);
    }
    expectError(await status(tenant, { sessionId: 's' }), 400, 'validation_failed');
    // Nothing was recorded by any of them.
    expect(
      await t.ctx.store.db
        .selectFrom('spend_ledger')
        .selectAll()
        .where('organization_id', '=', tenant.orgId)
        .execute(),
    ).toEqual([]);
  });

  it('replays the first answer for the same action, and refuses different content', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 10 });
    const first = await authorize(tenant, req);
    clock.advance(1);
    const again = await authorize(tenant, req);
    expect(again.json()).toEqual(first.json());
    const changed = await authorize(tenant, { ...req, estimatedSpendUsd: 11, payer: 'team-card' });
    expectError(changed, 409, 'action_conflict');
    expect(changed.json().error.message).toContain('estimatedSpendUsd');
    expect(changed.json().error.message).toContain('payer');
    const s = await status(tenant, { sessionId: req.sessionId, agentId: req.agentId });
    expect(s.json().budget.session).toMatchObject({ reservedUsd: 10, spentUsd: 0 });

    const c = await commit(tenant, commitOf(req, 10));
    const c2 = await commit(tenant, commitOf(req, 10));
    expect(c2.json()).toEqual(c.json());
    expectError(await commit(tenant, commitOf(req, 9)), 409, 'action_conflict');
    // After the commit the authorization still replays its first answer.
    expect((await authorize(tenant, req)).json()).toEqual(first.json());
    const entries = await t.ctx.store.db
      .selectFrom('spend_ledger')
      .select('kind')
      .where('organization_id', '=', tenant.orgId)
      .where('action_id', '=', req.actionId)
      .orderBy('sequence')
      .execute();
    expect(entries.map((e) => e.kind)).toEqual(['authorization', 'reservation', 'commit', 'release']);
  });

  it('answers the documented commit errors', async () => {
    const tenant = await tenantWithConfig();
    expectError(await commit(tenant, commitOf(action(), 1)), 404, 'not_found');
    const denied = action({ payer: 'stranger' });
    await authorize(tenant, denied);
    expectError(
      await commit(tenant, commitOf(denied, 1, { payer: 'stranger' })),
      409,
      'action_not_authorized',
    );
    const ok = action();
    await authorize(tenant, ok);
    const mismatch = await commit(tenant, commitOf(ok, 1, { quotedSpendUsd: 9, agentId: 'other' }));
    expectError(mismatch, 409, 'action_conflict');
    expect(mismatch.json().error.message).toContain('agentId');
    expect(mismatch.json().error.message).toContain('quotedSpendUsd');
    expectError(await commit(tenant, commitOf(ok, 1, { approvalId: 'nope' })), 409, 'action_conflict');
    expectError(await commit(tenant, commitOf(ok, 1, { payer: 'team-card' })), 409, 'action_conflict');
    expect((await commit(tenant, commitOf(ok, 1, { payer: 'corp-card' }))).statusCode).toBe(200);
  });

  it('records an actual above the quote in full and reports the overrun', async () => {
    const tenant = await tenantWithConfig(NO_THRESHOLD);
    const req = action({ estimatedSpendUsd: 40 });
    await authorize(tenant, req);
    const c = await commit(tenant, commitOf(req, 70));
    expect(c.json()).toMatchObject({
      actualSpendUsd: 70,
      overrunUsd: 30,
      budget: { session: { spentUsd: 70, reservedUsd: 0, remainingUsd: 30 } },
    });
    expect(c.json().message).toContain('over the quote');
    // The overrun counts: 31 no longer fits the session's 100.
    const next = await authorize(tenant, action({ estimatedSpendUsd: 31 }));
    expect(next.json().reasonCode).toBe('session_budget_exceeded');
    // A zero commit releases a reservation without spending.
    const free = action({ estimatedSpendUsd: 30 });
    expect((await authorize(tenant, free)).json().decision).toBe('allow');
    expect((await commit(tenant, commitOf(free, 0))).json().budget.session).toMatchObject({
      spentUsd: 70,
      reservedUsd: 0,
    });
  });

  it('keeps running sums exact past 2^53 micros', async () => {
    const tenant = await tenantWithConfig({ approvedPayers: ['corp-card'], defaultPayer: 'corp-card' });
    const agentId = `agent-big-${++seq}`;
    const spend = async (actual: number) => {
      const req = action({ agentId, sessionId: `s-big-${++seq}`, estimatedSpendUsd: 0 });
      expect((await authorize(tenant, req)).json().decision).toBe('allow');
      expect((await commit(tenant, commitOf(req, actual))).statusCode).toBe(200);
    };
    for (let i = 0; i < 10; i++) await spend(1_000_000_000);
    for (let i = 0; i < 3; i++) await spend(0.000001);
    // Read as text: a JavaScript number cannot hold 10^16 + 3.
    const balance = await t.store.db
      .selectFrom('spend_balances')
      .select(sql<string>`CAST(spent_micros AS TEXT)`.as('spent'))
      .where('organization_id', '=', tenant.orgId)
      .where('scope', '=', 'agent')
      .executeTakeFirstOrThrow();
    expect(balance.spent).toBe('10000000000000003');
  });

  it('expires an uncommitted reservation after approvalWindowSeconds, then authorizes again', async () => {
    const tenant = await tenantWithConfig(NO_THRESHOLD);
    const req = action({ estimatedSpendUsd: 90 });
    expect((await authorize(tenant, req)).json().decision).toBe('allow');
    expect((await authorize(tenant, action({ estimatedSpendUsd: 20 }))).json().reasonCode).toBe(
      'session_budget_exceeded',
    );
    clock.advance(599);
    expect(
      (await status(tenant, { sessionId: 's-1', agentId: 'agent-1' })).json().budget.session.reservedUsd,
    ).toBe(90);
    clock.advance(1);
    const s = await status(tenant, { sessionId: 's-1', agentId: 'agent-1' });
    expect(s.json().budget.session).toMatchObject({ reservedUsd: 0, remainingUsd: 100 });
    const late = await commit(tenant, commitOf(req, 90));
    expectError(late, 409, 'reservation_expired');
    // The same action authorized again is decided afresh, with a new reservation.
    const again = await authorize(tenant, req);
    expect(again.json()).toMatchObject({ decision: 'allow', budget: { session: { reservedUsd: 90 } } });
    expect((await commit(tenant, commitOf(req, 90))).statusCode).toBe(200);
    const kinds = await t.ctx.store.db
      .selectFrom('spend_ledger')
      .select(['kind', 'amount_micros'])
      .where('organization_id', '=', tenant.orgId)
      .where('action_id', '=', req.actionId)
      .orderBy('sequence')
      .execute();
    expect(kinds.map((k) => k.kind)).toEqual([
      'authorization',
      'reservation',
      'expiry',
      'authorization',
      'reservation',
      'commit',
      'release',
    ]);
    expect(kinds.every((k) => Number(k.amount_micros) === 90_000_000)).toBe(true);
  });

  it('counts agent budgets per UTC day by default', async () => {
    const tenant = await tenantWithConfig({ ...ORG_CONFIG, sessionLimitUsd: null, agentLimitUsd: 20 });
    const req = action({ estimatedSpendUsd: 20 });
    await authorize(tenant, req);
    await commit(tenant, commitOf(req, 20));
    expect((await authorize(tenant, action({ estimatedSpendUsd: 1 }))).json().reasonCode).toBe(
      'agent_budget_exceeded',
    );
    clock.advance(86_400);
    const next = await authorize(tenant, action({ estimatedSpendUsd: 20 }));
    expect(next.json()).toMatchObject({
      decision: 'allow',
      budget: { agent: { spentUsd: 0, reservedUsd: 20 } },
    });
  });

  it('isolates ledgers between organizations', async () => {
    const a = await tenantWithConfig(NO_THRESHOLD);
    const b = await tenantWithConfig(NO_THRESHOLD);
    const req = action({ estimatedSpendUsd: 90 });
    await authorize(a, req);
    // The same action id and session in another organization: its own ledger, its own answer.
    const other = await authorize(b, req);
    expect(other.json()).toMatchObject({ decision: 'allow', budget: { session: { reservedUsd: 90 } } });
    expectError(await commit(b, commitOf(action(), 1)), 404, 'not_found');
    await commit(b, commitOf(req, 5));
    const sa = await status(a, { sessionId: 's-1', agentId: 'agent-1' });
    expect(sa.json().budget.session).toMatchObject({ spentUsd: 0, reservedUsd: 90 });
  });
});

describe('simulation', () => {
  it('answers provisionally and records nothing', async () => {
    const tenant = await tenantWithConfig();
    const events = collectEvents(t, tenant.orgId);
    const sim = await authorize(tenant, action({ mode: 'simulation', estimatedSpendUsd: 60 }));
    expect(sim.json()).toMatchObject({
      decision: 'allow',
      provisional: true,
      reasonCode: 'approval_required',
      budget: { session: { reservedUsd: 0 } },
    });
    expect(sim.json().approvalId).toBeUndefined();
    const allow = await authorize(tenant, action({ mode: 'simulation' }));
    expect(allow.json()).toMatchObject({
      decision: 'allow',
      provisional: true,
      reasonCode: 'economic_authorized',
    });
    const deny = await authorize(
      tenant,
      action({ mode: 'simulation', estimatedSpendUsd: 101, maxAcceptableSpendUsd: 101 }),
    );
    expect(deny.json()).toMatchObject({
      decision: 'deny',
      provisional: true,
      reasonCode: 'session_budget_exceeded',
    });
    events.stop();
    expect(events.events).toEqual([]);
    const pending = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(tenant) });
    expect(pending.json().data).toEqual([]);
    expect(
      await t.ctx.store.db
        .selectFrom('spend_ledger')
        .selectAll()
        .where('organization_id', '=', tenant.orgId)
        .execute(),
    ).toEqual([]);
    // A simulated action id stays free for the live call.
    const live = action({ estimatedSpendUsd: 10 });
    await authorize(tenant, { ...live, mode: 'simulation', estimatedSpendUsd: 99 });
    expect((await authorize(tenant, live)).json()).toMatchObject({ decision: 'allow', quotedSpendUsd: 10 });
  });
});

describe('approvals', () => {
  it('asks a person, then allows the approved action once', async () => {
    const tenant = await tenantWithConfig();
    const events = collectEvents(t, tenant.orgId);
    const req = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const first = await authorize(tenant, req);
    expect(first.json()).toMatchObject({ decision: 'require_approval', reasonCode: 'approval_required' });
    const approvalId = first.json().approvalId as string;
    expect(approvalId).toMatch(/^[0-9a-f-]{36}$/);
    // Nothing is reserved while a person decides.
    expect(first.json().budget.session).toMatchObject({ reservedUsd: 0 });
    expect(events.events.map((e) => e.type)).toEqual(['approval.created', 'economic.approval_required']);
    expect(events.events[1]!.data).toMatchObject({
      approvalId,
      actionId: req.actionId,
      quotedSpendUsd: 60,
      payer: 'corp-card',
      category: 'food',
      toolName: 'buy_ticket',
    });
    // The approval sits in the same queue as tool-call approvals, showing the action.
    const pending = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(tenant) });
    expect(pending.json().data).toEqual([
      expect.objectContaining({
        id: approvalId,
        toolName: 'buy_ticket',
        arguments: expect.objectContaining({
          actionId: req.actionId,
          estimatedSpendUsd: 60,
          payer: 'corp-card',
        }),
      }),
    ]);
    const s = await status(tenant, { sessionId: 's-1', agentId: 'agent-1' });
    expect(s.json().pendingApprovals).toEqual([approvalId]);
    // Before a decision, asking again (with or without the approval) answers the same.
    expect((await authorize(tenant, req)).json()).toEqual(first.json());
    expect((await authorize(tenant, { ...req, approvalId })).json()).toEqual(first.json());
    expect((await resolve(tenant, approvalId, 'approve')).statusCode).toBe(200);
    // Approved but not presented: still the first answer.
    expect((await authorize(tenant, req)).json().decision).toBe('require_approval');
    // It allows this action, not a tool call with the same tool and its arguments (the agent can
    // read them back): a person approved a priced action.
    await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: {
        toolName: 'buy_ticket',
        constraints: [{ argumentName: 'estimatedSpendUsd', maximum: 50, action: 'require_approval' }],
      },
    });
    const bound = pending.json().data[0].arguments;
    const asCall = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: {
        tool_name: 'buy_ticket',
        arguments: bound,
        context: { approval_id: approvalId },
      },
    });
    expect(asCall.json(), asCall.body).toMatchObject({ decision: 'deny' });
    expect(asCall.json().reason).toContain('was opened for a spend authorization');
    const allowed = await authorize(tenant, { ...req, approvalId });
    expect(allowed.json()).toMatchObject({
      decision: 'allow',
      reasonCode: 'approval_granted',
      approvalId,
      budget: { session: { reservedUsd: 60 } },
    });
    // Once: the replay answers the allow, and reserves nothing more.
    expect((await authorize(tenant, { ...req, approvalId })).json()).toEqual(allowed.json());
    expect((await authorize(tenant, req)).json()).toEqual(allowed.json());
    const approval = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${approvalId}`,
      headers: asUser(tenant),
    });
    expect(approval.json().status).toBe('approved');
    const c = await commit(tenant, commitOf(req, 60, { approvalId }));
    expect(c.json()).toMatchObject({ approvalId, actualSpendUsd: 60 });
    // Another action cannot use it.
    const other = await authorize(
      tenant,
      action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60, sessionId: 's-2' }),
    );
    expect(other.json().decision).toBe('require_approval');
    expectError(
      await authorize(tenant, { ...action({ sessionId: 's-3' }), approvalId }),
      400,
      'validation_failed',
    );
    events.stop();
  });

  it('denies when a person denies, and decides again when the approval expires', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const approvalId = (await authorize(tenant, req)).json().approvalId as string;
    await resolve(tenant, approvalId, 'deny');
    const denied = await authorize(tenant, { ...req, approvalId });
    expect(denied.json()).toMatchObject({ decision: 'deny', reasonCode: 'approval_denied' });
    expect((await authorize(tenant, req)).json()).toEqual(denied.json());

    const late = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const firstId = (await authorize(tenant, late)).json().approvalId as string;
    clock.advance(601);
    const again = await authorize(tenant, late);
    expect(again.json()).toMatchObject({ decision: 'require_approval' });
    expect(again.json().approvalId).not.toBe(firstId);
  });

  it('does not use an approval for another payer than the one a person approved', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const approvalId = (await authorize(tenant, req)).json().approvalId as string;
    const shown = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${approvalId}`,
      headers: asUser(tenant),
    });
    expect(shown.json().arguments.payer).toBe('corp-card');
    await resolve(tenant, approvalId, 'approve');
    // The agent's key changes which payer the action resolves to.
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: { approvedPayers: ['team-card'], defaultPayer: 'team-card' },
    });
    expect(put.statusCode).toBe(200);
    const res = await authorize(tenant, { ...req, approvalId });
    expect(res.json()).toMatchObject({
      decision: 'deny',
      reasonCode: 'approval_invalid',
      payer: 'team-card',
      approvalId,
      budget: { session: { reservedUsd: 0 } },
    });
    expect(res.json().message).toContain(`Approval ${approvalId} was granted for a different action`);
    expect(res.json().message).toContain('payer "corp-card", now "team-card"');
    expect(res.json().reservationExpiresAt).toBeUndefined();
    // The approval is not used, and the answer stands.
    expect((await approvalRow(tenant.orgId, approvalId)).used_at).toBeNull();
    expect((await authorize(tenant, { ...req, approvalId })).json()).toEqual(res.json());
    expect((await authorize(tenant, req)).json()).toEqual(res.json());
    const receipts = await economicReceipts(tenant.orgId);
    expect(receipts.at(-1)).toMatchObject({
      decision: 'deny',
      action_id: req.actionId,
      payer: 'team-card',
      approval_id: approvalId,
    });
    expect(receipts.at(-1)!.reason).toMatch(/^approval_invalid: /);

    // A payer the request names keeps its approval whatever the default payer becomes.
    const named = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60, payer: 'team-card' });
    const namedId = (await authorize(tenant, named)).json().approvalId as string;
    await resolve(tenant, namedId, 'approve');
    await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: keyHeader(tenant.apiKey),
      payload: { approvedPayers: ['team-card', 'corp-card'], defaultPayer: 'corp-card' },
    });
    expect((await authorize(tenant, { ...named, approvalId: namedId })).json()).toMatchObject({
      decision: 'allow',
      reasonCode: 'approval_granted',
      payer: 'team-card',
      approvalId: namedId,
    });
  });

  it('lets an approved approval lapse approvalWindowSeconds after it was approved', async () => {
    const tenant = await tenantWithConfig();
    // Usable within the window counted from its approval, not from its opening.
    const inTime = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const inTimeId = (await authorize(tenant, inTime)).json().approvalId as string;
    clock.advance(500);
    await resolve(tenant, inTimeId, 'approve');
    clock.advance(599);
    expect((await authorize(tenant, { ...inTime, approvalId: inTimeId })).json()).toMatchObject({
      decision: 'allow',
      reasonCode: 'approval_granted',
    });

    const req = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60, sessionId: 's-lapse' });
    const approvalId = (await authorize(tenant, req)).json().approvalId as string;
    await resolve(tenant, approvalId, 'approve');
    const approvedAt = (await approvalRow(tenant.orgId, approvalId)).resolved_at!;
    clock.advance(30 * 86_400);
    const again = await authorize(tenant, { ...req, approvalId });
    expect(again.json()).toMatchObject({ decision: 'require_approval', reasonCode: 'approval_required' });
    const newId = again.json().approvalId as string;
    expect(newId).not.toBe(approvalId);
    const lapsedAt = new Date(Date.parse(approvedAt) + 600_000).toISOString();
    expect(again.json().message).toContain(
      `Approval ${approvalId} (approved at ${approvedAt}) lapsed unused at ${lapsedAt}`,
    );
    expect(again.json().message).toContain('a person must approve');
    expect((await approvalRow(tenant.orgId, approvalId)).used_at).toBeNull();
    // The lapsed approval is no longer the action's; the new one is, once a person approves it.
    expectError(await authorize(tenant, { ...req, approvalId }), 400, 'validation_failed');
    expect((await authorize(tenant, req)).json()).toEqual(again.json());
    await resolve(tenant, newId, 'approve');
    expect((await authorize(tenant, { ...req, approvalId: newId })).json()).toMatchObject({
      decision: 'allow',
      reasonCode: 'approval_granted',
      approvalId: newId,
    });
    const receipts = await economicReceipts(tenant.orgId);
    expect(receipts.find((r) => String(r.reason).includes('lapsed'))).toMatchObject({
      decision: 'require_approval',
      approval_id: newId,
    });

    // Approved but not presented before it lapsed: decided again as well.
    const idle = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60, sessionId: 's-idle' });
    const idleId = (await authorize(tenant, idle)).json().approvalId as string;
    await resolve(tenant, idleId, 'approve');
    clock.advance(600);
    const idleAgain = await authorize(tenant, idle);
    expect(idleAgain.json()).toMatchObject({ decision: 'require_approval' });
    expect(idleAgain.json().approvalId).not.toBe(idleId);
    expect(idleAgain.json().message).toContain(`Approval ${idleId} (approved at`);
  });

  it('still checks the budget when the approval is presented', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const approvalId = (await authorize(tenant, req)).json().approvalId as string;
    await resolve(tenant, approvalId, 'approve');
    await authorize(tenant, action({ estimatedSpendUsd: 45 }));
    const res = await authorize(tenant, { ...req, approvalId });
    expect(res.json()).toMatchObject({ decision: 'deny', reasonCode: 'session_budget_exceeded' });
  });

  it('denies on the free plan where a person would be needed', async () => {
    const tenant = await tenantWithConfig(ORG_CONFIG, 'free');
    const res = await authorize(tenant, action({ estimatedSpendUsd: 60 }));
    expect(res.json()).toMatchObject({ decision: 'deny', reasonCode: 'approvals_unavailable' });
    expect(res.json().approvalId).toBeUndefined();
  });
});

describe('receipts', () => {
  it('chains a receipt for every authorize and commit, binding action, amount, payer and decision', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 12 });
    await authorize(tenant, req);
    await authorize(tenant, req);
    await commit(tenant, commitOf(req, 11));
    await t.ctx.writer.drain();
    const rows = await t.ctx.store.db
      .selectFrom('receipts')
      .select('payload')
      .where('organization_id', '=', tenant.orgId)
      .orderBy('sequence')
      .execute();
    const receipts = rows.map((r) => JSON.parse(r.payload));
    expect(receipts).toHaveLength(2);
    expect(receipts[0]).toMatchObject({
      decision: 'allow',
      action_id: req.actionId,
      amount_micros: 12_000_000,
      payer: 'corp-card',
      tool_name: 'buy_ticket',
      source: 'economic',
    });
    expect(receipts[1]).toMatchObject({
      decision: 'economic_committed',
      action_id: req.actionId,
      amount_micros: 11_000_000,
      payer: 'corp-card',
    });
    expect(receipts[1].previous_receipt_hash).toBe(receipts[0].receipt_hash);
    const exported = await t.inject({
      method: 'GET',
      url: '/v1/receipts/export',
      headers: keyHeader(tenant.apiKey),
    });
    expect(exported.body.trim().split('\n')).toHaveLength(2);
  });

  it('binds the request as docs/receipts.md spells it out, from what the client sent', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 12.345678, category: 'travel' });
    await authorize(tenant, req);
    await commit(tenant, commitOf(req, 11.5));
    const [authorized, committed] = await economicReceipts(tenant.orgId);
    const { estimatedSpendUsd: _usd, ...sent } = req;
    expect(authorized!.argument_hash).toBe(
      hashJson({
        ...sent,
        payer: null,
        estimatedSpendMicros: 12_345_678,
        maxAcceptableSpendMicros: 12_345_678,
        budgetScopes: ['session', 'agent', 'category'],
        metadata: {},
      }),
    );
    expect(committed!.argument_hash).toBe(
      hashJson({
        actionId: req.actionId,
        sessionId: req.sessionId,
        agentId: req.agentId,
        toolName: req.toolName,
        category: req.category,
        payer: null,
        quotedSpendMicros: 12_345_678,
        actualSpendMicros: 11_500_000,
        approvalId: null,
      }),
    );
  });
});

describe('receipts of approvals', () => {
  it('names the denied approval in the answer and the receipt of the deny', async () => {
    const tenant = await tenantWithConfig();
    const req = action({ estimatedSpendUsd: 60, maxAcceptableSpendUsd: 60 });
    const approvalId = (await authorize(tenant, req)).json().approvalId as string;
    await resolve(tenant, approvalId, 'deny');
    const denied = await authorize(tenant, { ...req, approvalId });
    expect(denied.json()).toMatchObject({ decision: 'deny', reasonCode: 'approval_denied', approvalId });
    const receipts = await economicReceipts(tenant.orgId);
    expect(receipts.map((r) => [r.decision, r.approval_id])).toEqual([
      ['require_approval', approvalId],
      ['deny', approvalId],
    ]);
    expect(receipts[1]!.reason).toMatch(/^approval_denied: /);
  });
});

describe('actions belong to their project', () => {
  it("another project's key can neither replay an authorization nor commit its reservation", async () => {
    const tenant = await tenantWithConfig(NO_THRESHOLD);
    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: { authorization: `Bearer ${tenant.token}` },
      payload: { organizationId: tenant.orgId, name: 'Other' },
    });
    expect(second.statusCode).toBe(201);
    const other = { ...tenant, projectId: second.json()._id, apiKey: second.json().apiKey };
    const a = action();
    expect((await authorize(tenant, a)).json().decision).toBe('allow');
    expectError(await authorize(other, a), 409, 'action_conflict');
    expectError(await commit(other, commitOf(a, 5)), 409, 'action_conflict');
    // The owner still commits it.
    expect((await commit(tenant, commitOf(a, 5))).json().status).toBe('committed');
  });
});
