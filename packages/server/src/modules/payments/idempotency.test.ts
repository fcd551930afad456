import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { gatewayKit } from '../../../test/gateway-kit.js';
import { asUser, createTenant, gate, type Tenant } from '../../../test/helpers.js';
import { TestPaymentProvider } from '../../../test/payment-provider.js';
import { hashJson } from '../../ledger/canonical.js';
import { createIdempotencyStore } from '../../lib/idempotency-store.js';
import { GATEWAY_STALE_CLAIM_MS } from './routes.js';

let a: Tenant;
let k: ReturnType<typeof gatewayKit>;
let provider: TestPaymentProvider;
let offset = 0;
const clock = { now: () => new Date(Date.now() + offset) };

const PAYEE = { name: 'Initech', account_number: 'US000111222333' };

const t = useTestApp({ providerCredentialsKey: randomBytes(32) }, { clock });
beforeAll(async () => {
  provider = await new TestPaymentProvider().start();
  a = await createTenant(t);
  k = gatewayKit(t);
});
afterAll(async () => {
  await provider.stop();
});

const consumeWithKey = (body: object, key: string) =>
  t.inject({
    method: 'POST',
    url: '/v1/gateway/capsules/consume',
    headers: { ...k.key(a), 'idempotency-key': key },
    payload: body,
  });

describe('Idempotency-Key on the gateway', () => {
  it('holds a consume’s key for as long as its provider may take: the retry waits, the answer is kept', async () => {
    // A provider allowed the longest timeout: the consume may run for two minutes.
    k.ok(
      await k.inject('POST', '/v1/gateway/providers', asUser(a), {
        name: 'slow psp',
        rail: 'card',
        url: provider.endpoint('slow-idem', 'ok'),
        timeout_ms: 120_000,
      }),
      201,
    );
    const packId = await k.pack(a, { allowed_rails: ['card'], quarantine_seconds: 0 });
    const payee = await k.payee(a, PAYEE);
    const minted = k.ok(
      await k.mint(a, {
        entity_id: 'idem-entity',
        pack_id: packId,
        rails: ['card'],
        beneficiary: { payee_id: payee.id },
        amount_ceiling: { currency: 'USD', amount: '100' },
      }),
      201,
    );
    const body = {
      capsule: minted.capsule,
      amount: '100',
      currency: 'USD',
      rail: 'card',
      beneficiary: PAYEE,
    };
    const { opened: held, open: release } = gate();
    const { opened: arrived, open: reached } = gate();
    provider.beforeAnswer = async () => {
      reached();
      await held;
    };
    try {
      const first = consumeWithKey(body, 'slow-consume');
      await arrived;
      // Past a minute, the provider still within its timeout: the same request is still running.
      offset = 61_000;
      const meanwhile = await consumeWithKey(body, 'slow-consume');
      k.expectB(meanwhile as never, 409, 'idempotency_request_in_progress');
      release();
      const done = await first;
      expect([done.statusCode, done.json().status]).toEqual([200, 'consumed']);
      // Its answer was kept: the same request replays it.
      const again = await consumeWithKey(body, 'slow-consume');
      expect([again.statusCode, again.headers['idempotent-replayed']]).toEqual([200, 'true']);
      expect(again.json()).toEqual(done.json());
      expect(provider.requests.filter((r) => r.path === '/slow-idem')).toHaveLength(1);
    } finally {
      provider.beforeAnswer = null;
      release();
      offset = 0;
    }
  });

  it('takes over a claim left unanswered once it is older than the gateway’s stale age', async () => {
    const details = { name: 'Orphan Vendor', account_number: 'DE02120300000000202051' };
    const path = '/v1/gateway/payees';
    const hash = hashJson({ method: 'POST', path, body: { details } });
    const claimedAt = new Date(Date.now() - 120_000).toISOString();
    await createIdempotencyStore(t.store.db).takeKey(a.orgId, `${a.projectId}/orphan`, hash, claimedAt);
    const send = () =>
      t.inject({
        method: 'POST',
        url: path,
        headers: { ...k.key(a), 'idempotency-key': 'orphan' },
        payload: { details },
      });
    // Two minutes old: a consume could still be running under it.
    k.expectB((await send()) as never, 409, 'idempotency_request_in_progress');
    offset = GATEWAY_STALE_CLAIM_MS - 120_000;
    try {
      const res = await send();
      expect([res.statusCode, res.headers['idempotent-replayed']]).toEqual([201, undefined]);
    } finally {
      offset = 0;
    }
  });
});
