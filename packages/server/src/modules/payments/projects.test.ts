import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveApproval, setTier } from '../../../test/approvals.js';
import {
  asUser,
  createTenant,
  createTestApp,
  keyHeader,
  type Tenant,
  type TestApp,
} from '../../../test/helpers.js';

const PAYEE = { name: 'Shared Vendor', account_number: 'FR7630006000011234567890189' };

let t: TestApp;
let a: Tenant;
/** A second project of a's organization, with its own key. */
let sibling: Record<string, string>;
let siblingProject: string;
const own = () => keyHeader(a.apiKey);

beforeAll(async () => {
  t = await createTestApp();
  a = await createTenant(t);
  await setTier(t, a, 'team');
  const res = await t.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: { authorization: `Bearer ${a.token}` },
    payload: { organizationId: a.orgId, name: 'Sibling' },
  });
  expect(res.statusCode).toBe(201);
  sibling = keyHeader(res.json().apiKey as string);
  siblingProject = res.json()._id as string;
  for (const [id, payload] of [
    ['open', { allowed_rails: ['ach'], quarantine_seconds: 0 }],
    ['gated', { allowed_rails: ['ach'], quarantine_seconds: 0, approval_threshold_usd: '100' }],
  ] as const) {
    const put = await t.inject({
      method: 'PUT',
      url: `/v1/gateway/packs/${id}`,
      headers: asUser(a),
      payload,
    });
    expect(put.statusCode).toBe(201);
  }
});
afterAll(async () => {
  await t.close();
});

let seq = 0;
const mintBody = (over: Record<string, unknown> = {}) => ({
  entity_id: `proj-${++seq}`,
  agent_id: 'agent',
  pack_id: 'open',
  rails: ['ach'],
  beneficiary: { details: PAYEE },
  amount_ceiling: { currency: 'USD', amount: '50.00' },
  ttl_seconds: 300,
  ...over,
});
const post = (url: string, headers: Record<string, string>, payload: object) =>
  t.inject({ method: 'POST', url, headers, payload });
const consumeBody = (capsule: string) => ({
  capsule,
  amount: '10.00',
  currency: 'USD',
  rail: 'ach',
  beneficiary: PAYEE,
});

describe('projects of one organization', () => {
  it('have their own Idempotency-Keys: the same key never replays or refuses across projects', async () => {
    const [mineBody, theirsBody] = [mintBody(), mintBody()];
    const mine = await post('/v1/gateway/capsules', { ...own(), 'idempotency-key': 'shared-key' }, mineBody);
    expect(mine.statusCode).toBe(201);
    // Another body under the same key in the sibling project is a new request, not a reuse.
    const theirs = await post(
      '/v1/gateway/capsules',
      { ...sibling, 'idempotency-key': 'shared-key' },
      theirsBody,
    );
    expect(theirs.statusCode).toBe(201);
    expect(theirs.headers['idempotent-replayed']).toBeUndefined();
    expect(theirs.json().id).not.toBe(mine.json().id);
    // A person of the organization has the organization's key space, apart from both projects.
    const person = await post(
      '/v1/gateway/capsules',
      { ...asUser(a), 'idempotency-key': 'shared-key' },
      mintBody(),
    );
    expect(person.statusCode).toBe(201);
    expect([mine.json().id, theirs.json().id]).not.toContain(person.json().id);
    // Each replays its own answer, and only its own.
    const again = await post(
      '/v1/gateway/capsules',
      { ...sibling, 'idempotency-key': 'shared-key' },
      theirsBody,
    );
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json().id).toBe(theirs.json().id);
    const crossed = await post(
      '/v1/gateway/capsules',
      { ...own(), 'idempotency-key': 'shared-key' },
      theirsBody,
    );
    expect(crossed.statusCode).toBe(400);
    expect(crossed.json().error.code).toBe('idempotency_key_reused_with_different_payload');
  });

  it("never let a key consume another project's capsule; a person may", async () => {
    const minted = (await post('/v1/gateway/capsules', own(), mintBody())).json();
    const refused = await post('/v1/gateway/capsules/consume', sibling, consumeBody(minted.capsule));
    expect(refused.statusCode).toBe(404);
    expect(refused.json().error.code).toBe('capsule_not_found');
    const still = await t.inject({ method: 'GET', url: `/v1/gateway/capsules/${minted.id}`, headers: own() });
    expect(still.json().status).toBe('active');
    const ok = await post('/v1/gateway/capsules/consume', own(), consumeBody(minted.capsule));
    expect(ok.statusCode).toBe(200);
    const entry = await t.store.db
      .selectFrom('spend_ledger')
      .select('project_id')
      .where('organization_id', '=', a.orgId)
      .where('id', '=', ok.json().consumption.ledger_entry_id)
      .executeTakeFirstOrThrow();
    expect(entry.project_id).toBe(a.projectId);
    const other = (await post('/v1/gateway/capsules', sibling, mintBody())).json();
    expect(
      (await post('/v1/gateway/capsules/consume', asUser(a), consumeBody(other.capsule))).statusCode,
    ).toBe(200);
  });

  it("never let a key mint under an approval another project's key opened", async () => {
    const body = mintBody({ pack_id: 'gated', amount_ceiling: { currency: 'USD', amount: '500.00' } });
    const opened = await post('/v1/gateway/capsules', own(), body);
    expect(opened.json().error.code).toBe('approval_required');
    const id = opened.json().error.approval_id as string;
    expect((await resolveApproval(t, a, id, 'approve')).statusCode).toBe(200);
    const theirs = await post('/v1/gateway/capsules', sibling, { ...body, approval_ref: id });
    expect(theirs.statusCode).toBe(404);
    expect(theirs.json().error.code).toBe('approval_not_found');
    const mine = await post('/v1/gateway/capsules', own(), { ...body, approval_ref: id });
    expect(mine.statusCode).toBe(201);
    expect(siblingProject).not.toBe(a.projectId);
  });
});
