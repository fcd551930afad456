import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, gate, keyHeader, type Tenant } from '../../../test/helpers.js';
import { type FakeModelServer, fakeLlmEnv, startFakeModelServer } from '../../../test/llm-providers.js';
import type { Clock } from '../../lib/clock.js';
import { loadLlmSettings } from '../llm-judge/config.js';

let server: FakeModelServer;
/** Holds the policy assistant's calls at the model until opened (open unless a test holds them). */
let held = gate();
held.open();

const isJudgement = (system: string) => system.startsWith('You judge whether');

beforeAll(async () => {
  // Judgements are answered at once; the policy assistant's calls wait until the test lets them go.
  server = await startFakeModelServer(async (req) => {
    if (isJudgement(req.system)) {
      return { object: { decision: 'allow', reason: 'fine', failedArgument: null, matchedException: null } };
    }
    await held.opened;
    return { object: { answer: 'It is the scattering of sunlight.' } };
  });
});
afterAll(async () => server.close());

// A fixed clock keeps the per-minute window from rolling over during a test.
const clock: Clock = { now: () => new Date('2026-11-21T12:00:30.000Z') };
const t = useTestApp(
  () => ({
    llm: loadLlmSettings(
      fakeLlmEnv(server.url, { SVC_LLM_TIMEOUT_MS: '10000', SVC_LLM_MAX_CONCURRENCY: '1' }),
    ),
  }),
  { clock },
);

/** A tenant with one registered tool: a question about none of it goes to the model. */
async function tenantWithTool(): Promise<Tenant> {
  const tenant = await createTenant(t);
  const res = await t.inject({
    method: 'POST',
    url: '/v1/tools/register',
    headers: keyHeader(tenant.apiKey),
    payload: { tools: [{ name: 'lookup', parameters: [{ name: 'query', type: 'string' }] }] },
  });
  expect(res.statusCode).toBe(200);
  return tenant;
}

const turn = (tenant: Tenant, message: string) =>
  t.inject({
    method: 'POST',
    url: '/v1/charter/turn',
    headers: keyHeader(tenant.apiKey),
    payload: { message, mode: 'chat' },
  });

describe("Charter's model calls and the judge", () => {
  it("never makes another organization's judgement wait; an organization's calls beyond its share answer 429", async () => {
    held = gate();
    const a = await tenantWithTool();
    const b = await createTenant(t);
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(b.apiKey),
      payload: {
        toolName: 'send_email',
        mode: 'llm',
        llmConfig: { description: 'Only example.com recipients.', preferredModel: 'openai' },
      },
    });
    expect(policy.statusCode).toBe(201);
    const assistantCalls = () => server.seen.filter((s) => !isJudgement(s.system)).length;
    const before = assistantCalls();

    let settled = 0;
    const flood = Array.from({ length: 6 }, (_, i) =>
      turn(a, `why is the sky blue ${i}?`).then((r) => {
        settled++;
        return r;
      }),
    );
    // Two turns are held (one at the model, one waiting for the assistant's only slot) and cannot
    // answer before the gate opens: so once four answered, every turn has asked for its model call.
    await vi.waitFor(
      () => {
        expect(settled).toBe(4);
        expect(assistantCalls()).toBe(before + 1);
      },
      { timeout: 10_000 },
    );
    const validate = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(b.apiKey),
      payload: { tool_name: 'send_email', arguments: { to: 'y@example.com' } },
    });
    expect(validate.json()).toMatchObject({ decision: 'allow', reason: 'Allowed by the LLM judge: fine' });

    held.open();
    const answers = await Promise.all(flood);
    const ok = answers.filter((r) => r.statusCode === 200);
    const refused = answers.filter((r) => r.statusCode !== 200);
    expect(ok).toHaveLength(2);
    for (const r of ok) expect(r.json().reply).toBe('It is the scattering of sunlight.');
    expect(refused).toHaveLength(4);
    for (const r of refused) {
      expectError(r, 429, 'rate_limit_exceeded');
      expect(r.json().error.message).toContain('at most 2 at once');
      expect(r.headers['retry-after']).toBe('5');
    }
    // The model was not asked for the refused turns.
    expect(assistantCalls()).toBe(before + 2);
    // Once they answered, the organization may ask again.
    expect((await turn(a, 'why is the sea blue?')).statusCode).toBe(200);
  });

  it('reports the refusal as an error event on the stream', async () => {
    held = gate();
    const a = await tenantWithTool();
    const streams = ['why is grass green?', 'why is snow white?', 'why is coal black?'].map((message) =>
      t.inject({
        method: 'POST',
        url: '/v1/charter/stream',
        headers: keyHeader(a.apiKey),
        payload: { message, mode: 'chat' },
      }),
    );
    // The refused one ends first: the others wait for the model.
    await Promise.race(streams);
    held.open();
    const bodies = (await Promise.all(streams)).map((r) => r.body);
    const refused = bodies.filter((b) => b.includes('event: error'));
    expect(refused).toHaveLength(1);
    expect(refused[0]).toContain('"code":"rate_limit_exceeded"');
    expect(bodies.filter((b) => b.includes('event: result'))).toHaveLength(2);
  });
});

describe('rate limit of /v1/charter/*', () => {
  it('counts 60 requests a minute per API key and per user, with the X-RateLimit headers', async () => {
    const tenant = await createTenant(t);
    const list = (headers: Record<string, string>) =>
      t.inject({ method: 'GET', url: '/v1/charter/verifications', headers });
    for (const headers of [keyHeader(tenant.apiKey), asUser(tenant)]) {
      let last = await list(headers);
      for (let i = 1; i < 60; i++) last = await list(headers);
      expect(last.statusCode).toBe(200);
      expect(last.headers['x-ratelimit-limit']).toBe('60');
      expect(last.headers['x-ratelimit-remaining']).toBe('0');
      const over = await list(headers);
      expectError(over, 429, 'rate_limit_exceeded');
      expect(over.headers['retry-after']).toBe('30');
      // Every /v1/charter route counts against the same budget.
      const turnOver = await t.inject({
        method: 'POST',
        url: '/v1/charter/turn',
        headers,
        payload: { message: 'What is the policy of send_payment?' },
      });
      expectError(turnOver, 429, 'rate_limit_exceeded');
    }
    // Another key has a budget of its own; the stream carries the headers too.
    const other = await createTenant(t);
    const fresh = await t.inject({
      method: 'POST',
      url: '/v1/charter/stream',
      headers: keyHeader(other.apiKey),
      payload: { message: 'What is the policy of send_payment?' },
    });
    expect(fresh.statusCode).toBe(200);
    expect(fresh.headers['x-ratelimit-remaining']).toBe('59');
  });
});
