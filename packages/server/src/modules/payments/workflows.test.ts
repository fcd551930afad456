import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { gatewayKit } from '../../../test/gateway-kit.js';
import { asUser, createTenant, type Tenant } from '../../../test/helpers.js';

let a: Tenant;
let b: Tenant;
let k: ReturnType<typeof gatewayKit>;

const PAYEE = { name: 'Globex', account_number: 'US1234567890' };
const PACK = { allowed_rails: ['ach', 'ledger'], quarantine_seconds: 0 };

const t = useTestApp();
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
  k = gatewayKit(t);
});

const create = (x: Tenant, body: Record<string, unknown>, headers: Record<string, string> = k.key(x)) =>
  k.inject('POST', '/v1/gateway/workflows', headers, body);
const move = (
  x: Tenant,
  entity: string,
  id: string,
  to: string,
  headers: Record<string, string> = asUser(x),
) => k.inject('POST', `/v1/gateway/workflows/${entity}/${id}/transition`, headers, { to });

describe('workflows', () => {
  it('creates per (organization, entity, workflow_id), reads, and refuses duplicates and unknown ones', async () => {
    const wf = k.ok(await create(a, { entity_id: 'acme', workflow_id: 'po-1' }), 201);
    expect(wf).toMatchObject({ state: 'draft', next_states: ['approved', 'cancelled'] });
    k.expectB(await create(a, { entity_id: 'acme', workflow_id: 'po-1' }), 409, 'workflow_already_exists');
    // The same id under another entity, or in another organization, is another workflow.
    k.ok(await create(a, { entity_id: 'other', workflow_id: 'po-1' }), 201);
    k.ok(await create(b, { entity_id: 'acme', workflow_id: 'po-1' }), 201);
    expect(k.ok(await k.inject('GET', '/v1/gateway/workflows/acme/po-1', k.key(a))).state).toBe('draft');
    k.expectB(await k.inject('GET', '/v1/gateway/workflows/acme/nope', k.key(a)), 404, 'workflow_not_found');
    k.expectB(await move(a, 'acme', 'nope', 'approved'), 404, 'workflow_not_found');
  });

  it('moves along the default map; an illegal move answers the legal next states', async () => {
    k.ok(await create(a, { entity_id: 'acme', workflow_id: 'po-2' }), 201);
    const bad = k.expectB(await move(a, 'acme', 'po-2', 'settled'), 409, 'workflow_invalid_transition');
    expect(bad['hint']).toBe('legal next states: approved, cancelled');
    // Approving takes a person: an agent's key cannot approve its own workflow.
    k.expectB(await move(a, 'acme', 'po-2', 'approved', k.key(a)), 403, 'authorization_error');
    expect(k.ok(await move(a, 'acme', 'po-2', 'approved')).state).toBe('approved');
    // consumed is reached only by consuming a bound capsule.
    k.expectB(await move(a, 'acme', 'po-2', 'consumed'), 409, 'workflow_invalid_transition');
    const cancelled = k.ok(await move(a, 'acme', 'po-2', 'cancelled', k.key(a)));
    expect(cancelled).toMatchObject({ state: 'cancelled', next_states: [] });
    expect(cancelled.history.map((h: { to: string }) => h.to)).toEqual(['draft', 'approved', 'cancelled']);
    const final = k.expectB(await move(a, 'acme', 'po-2', 'draft'), 409, 'workflow_invalid_transition');
    expect(final['hint']).toMatch(/final/);
  });

  it('takes a map from the pack, checked when the pack is saved', async () => {
    k.expectB(
      await k.inject('PUT', '/v1/gateway/packs/bad-map', asUser(a), {
        ...PACK,
        workflow: { edges: { open: ['paid'], paid: [] }, consume_from: 'open', consume_to: 'nowhere' },
      }),
      400,
      'invalid_request',
    );
    const packId = await k.pack(a, {
      ...PACK,
      workflow: {
        edges: { open: ['ready', 'void'], ready: ['paid', 'void'], paid: ['booked'], booked: [], void: [] },
        consume_from: 'ready',
        consume_to: 'paid',
        settle_to: 'booked',
        person_states: ['ready'],
      },
    });
    const wf = k.ok(await create(a, { entity_id: 'acme', workflow_id: 'custom', pack_id: packId }), 201);
    expect(wf).toMatchObject({ state: 'open', next_states: ['ready', 'void'], pack_id: packId });
    k.expectB(
      await create(a, { entity_id: 'acme', workflow_id: 'x', pack_id: 'missing' }),
      404,
      'policy_pack_not_found',
    );

    const payee = await k.payee(a, PAYEE);
    const capsule = k.ok(
      await k.mint(a, {
        entity_id: 'acme',
        pack_id: packId,
        rails: ['ledger'],
        beneficiary: { payee_id: payee.id },
        amount_ceiling: { currency: 'USD', amount: '40' },
        workflow_id: 'custom',
      }),
      201,
    );
    const pay = () =>
      k.consume(a, {
        capsule: capsule.capsule,
        amount: '40',
        currency: 'USD',
        rail: 'ledger',
        beneficiary: PAYEE,
      });
    const early = k.expectB(await pay(), 409, 'workflow_invalid_transition');
    expect(early['hint']).toBe('legal next states: ready, void');
    k.ok(await move(a, 'acme', 'custom', 'ready'));
    const consumed = k.ok(await pay());
    expect(consumed.consumption.payment).toMatchObject({ rail: 'ledger', state: 'settled' });
    const after = k.ok(await k.inject('GET', '/v1/gateway/workflows/acme/custom', k.key(a)));
    expect(after).toMatchObject({ state: 'booked', capsule_id: capsule.id });
    expect(after.history.map((h: { to: string }) => h.to)).toEqual(['open', 'ready', 'paid', 'booked']);
  });

  it("a consume moves the workflow along the workflow's own map, not the capsule pack's", async () => {
    const custom = await k.pack(a, {
      ...PACK,
      workflow: {
        edges: { open: ['ready'], ready: ['paid'], paid: ['booked'], booked: [] },
        consume_from: 'ready',
        consume_to: 'paid',
        settle_to: 'booked',
        person_states: [],
      },
    });
    k.ok(await create(a, { entity_id: 'maps', workflow_id: 'own', pack_id: custom }), 201);
    k.ok(await move(a, 'maps', 'own', 'ready'));
    // The capsule is minted under another pack (the default map: approved → consumed).
    const plain = await k.pack(a, PACK);
    const payee = await k.payee(a, PAYEE);
    const capsule = k.ok(
      await k.mint(a, {
        entity_id: 'maps',
        pack_id: plain,
        rails: ['ledger'],
        beneficiary: { payee_id: payee.id },
        amount_ceiling: { currency: 'USD', amount: '10' },
        workflow_id: 'own',
      }),
      201,
    );
    k.ok(
      await k.consume(a, {
        capsule: capsule.capsule,
        amount: '10',
        currency: 'USD',
        rail: 'ledger',
        beneficiary: PAYEE,
      }),
    );
    const after = k.ok(await k.inject('GET', '/v1/gateway/workflows/maps/own', k.key(a)));
    expect(after.history.map((h: { to: string }) => h.to)).toEqual(['open', 'ready', 'paid', 'booked']);
  });

  it('a bound capsule consumes only in the pack state and moves the workflow on', async () => {
    const packId = await k.pack(a, PACK);
    const payee = await k.payee(a, PAYEE);
    const mint = (workflow: string) =>
      k.mint(a, {
        entity_id: 'acme',
        pack_id: packId,
        rails: ['ach', 'ledger'],
        beneficiary: { payee_id: payee.id },
        amount_ceiling: { currency: 'USD', amount: '40' },
        workflow_id: workflow,
      });
    k.expectB(await mint('never-created'), 404, 'workflow_not_found');
    k.ok(await create(a, { entity_id: 'acme', workflow_id: 'po-3' }), 201);
    const one = k.ok(await mint('po-3'), 201);
    const two = k.ok(await mint('po-3'), 201);
    const pay = (capsule: string, rail = 'ach') =>
      k.consume(a, { capsule, amount: '40', currency: 'USD', rail, beneficiary: PAYEE });
    const draft = k.expectB(await pay(one.capsule), 409, 'workflow_invalid_transition');
    expect(draft['hint']).toBe('legal next states: approved, cancelled');
    k.ok(await move(a, 'acme', 'po-3', 'approved'));
    // Over a rail the paying side pays itself: authorized, the workflow moves to consumed and waits.
    const consumed = k.ok(await pay(one.capsule));
    expect(consumed.consumption.payment).toMatchObject({ state: 'authorized', provider_id: null });
    expect(k.ok(await k.inject('GET', '/v1/gateway/workflows/acme/po-3', k.key(a))).state).toBe('consumed');
    // A second capsule for the same workflow: it is no longer in the consume state.
    k.expectB(await pay(two.capsule), 409, 'workflow_invalid_transition');
    expect(k.ok(await move(a, 'acme', 'po-3', 'settled', k.key(a))).state).toBe('settled');
  });

  it('is paid again once a map that loops brings it back to the consume state', async () => {
    const packId = await k.pack(a, {
      ...PACK,
      workflow: {
        edges: {
          draft: ['approved'],
          approved: ['consumed', 'cancelled'],
          consumed: ['settled', 'failed'],
          failed: ['approved', 'cancelled'],
          settled: [],
          cancelled: [],
        },
      },
    });
    const payee = await k.payee(a, PAYEE);
    k.ok(await create(a, { entity_id: 'loop', workflow_id: 'po-loop', pack_id: packId }), 201);
    k.ok(await move(a, 'loop', 'po-loop', 'approved'));
    const mint = async () =>
      k.ok(
        await k.mint(a, {
          entity_id: 'loop',
          pack_id: packId,
          rails: ['ach'],
          beneficiary: { payee_id: payee.id },
          amount_ceiling: { currency: 'USD', amount: '25' },
          workflow_id: 'po-loop',
        }),
        201,
      );
    const pay = (capsule: string) =>
      k.consume(a, { capsule, amount: '25', currency: 'USD', rail: 'ach', beneficiary: PAYEE });
    const first = await mint();
    const second = await mint();
    const third = await mint();
    k.ok(await pay(first.capsule));
    // The payment failed at the bank: a person approves paying it again.
    k.ok(await move(a, 'loop', 'po-loop', 'failed', k.key(a)));
    const again = k.ok(await move(a, 'loop', 'po-loop', 'approved'));
    expect(again).toMatchObject({ state: 'approved', capsule_id: null });
    k.ok(await pay(second.capsule));
    expect(k.ok(await k.inject('GET', '/v1/gateway/workflows/loop/po-loop', k.key(a)))).toMatchObject({
      state: 'consumed',
      capsule_id: second.id,
    });
    // Back in approved once more, it can also be cancelled rather than paid.
    k.ok(await move(a, 'loop', 'po-loop', 'failed', k.key(a)));
    k.ok(await move(a, 'loop', 'po-loop', 'approved'));
    expect(k.ok(await move(a, 'loop', 'po-loop', 'cancelled', k.key(a))).state).toBe('cancelled');
    k.expectB(await pay(third.capsule), 409, 'workflow_invalid_transition');
  });

  it("hides one project's workflows from another project's keys; a person sees the organization's", async () => {
    const sibling = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: { authorization: `Bearer ${a.token}` },
      payload: { organizationId: a.orgId, name: 'Sibling' },
    });
    const siblingKey = { 'x-service-api-key': sibling.json().apiKey as string };
    k.ok(await create(a, { entity_id: 'iso', workflow_id: 'po-iso' }), 201);
    const url = '/v1/gateway/workflows/iso/po-iso';
    k.expectB(await k.inject('GET', url, siblingKey), 404, 'workflow_not_found');
    k.expectB(await move(a, 'iso', 'po-iso', 'cancelled', siblingKey), 404, 'workflow_not_found');
    expect(k.ok(await k.inject('GET', url, asUser(a))).state).toBe('draft');
    expect(k.ok(await k.inject('GET', url, k.key(a))).state).toBe('draft');
    // A sibling key cannot bind it to a capsule either.
    const packId = await k.pack(a, PACK);
    const payee = await k.payee(a, PAYEE);
    const body = {
      agent_id: 'agent-1',
      ttl_seconds: 300,
      entity_id: 'iso',
      pack_id: packId,
      rails: ['ach'],
      beneficiary: { payee_id: payee.id },
      amount_ceiling: { currency: 'USD', amount: '40' },
      workflow_id: 'po-iso',
    };
    k.expectB(await k.inject('POST', '/v1/gateway/capsules', siblingKey, body), 404, 'workflow_not_found');
    k.ok(await k.inject('POST', '/v1/gateway/capsules', k.key(a), body), 201);
    // The workflow is untouched by the sibling's attempts.
    expect(k.ok(await k.inject('GET', url, asUser(a))).history).toHaveLength(1);
  });
});
