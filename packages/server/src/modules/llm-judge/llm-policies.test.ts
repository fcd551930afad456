import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader, type Tenant, type TestApp, withTestApp } from '../../../test/helpers.js';
import { type FakeModelServer, fakeLlmEnv, startFakeModelServer } from '../../../test/llm-providers.js';
import { sha256Tagged } from '../../ledger/canonical.js';
import { loadLlmSettings } from './config.js';

let server: FakeModelServer;
let a: Tenant;
let b: Tenant;

const ALLOW = {
  decision: 'allow',
  reason: 'Internal recipient.',
  failedArgument: null,
  matchedException: null,
};
const DENY = {
  decision: 'deny',
  reason: 'External recipient.',
  failedArgument: 'to',
  matchedException: null,
};
const LLM_POLICY = {
  toolName: 'send_email',
  mode: 'llm',
  llmConfig: {
    description: 'Emails may only go to recipients at example.com.',
    exceptions: ['The recipient is the security team'],
    preferredModel: 'anthropic',
  },
};

/** POST /v1/policies with the LLM policy, as the tenant's key, on that app. */
const createLlmPolicy = (app: Pick<TestApp, 'inject'>, tenant: Tenant) =>
  app.inject({ method: 'POST', url: '/v1/policies', headers: keyHeader(tenant.apiKey), payload: LLM_POLICY });

beforeAll(async () => {
  server = await startFakeModelServer(() => ({ object: ALLOW }));
});
afterAll(async () => server.close());
const t = useTestApp(() => ({ llm: loadLlmSettings(fakeLlmEnv(server.url, { SVC_LLM_TIMEOUT_MS: '500' })) }));
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
  for (const tenant of [a, b]) {
    expect((await createLlmPolicy(t, tenant)).statusCode).toBe(201);
  }
});
beforeEach(() => {
  server.seen.length = 0;
});

const validate = (tenant: Tenant, args: Record<string, unknown>) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: 'send_email', arguments: args },
  });

async function decision(tenant: Tenant, id: string) {
  const res = await t.inject({
    method: 'GET',
    url: `/v1/decisions/${id}`,
    headers: keyHeader(tenant.apiKey),
  });
  expect(res.statusCode).toBe(200);
  return res.json();
}

async function receipt(tenant: Tenant, id: string) {
  const res = await t.inject({
    method: 'GET',
    url: `/v1/decisions/${id}/receipt`,
    headers: keyHeader(tenant.apiKey),
  });
  expect(res.statusCode).toBe(200);
  return res.json();
}

describe('llm policies on POST /v1/tools/validate', () => {
  it('allows through the preferred provider and binds the judge into the receipt', async () => {
    server.script = () => ({ object: ALLOW });
    const res = await validate(a, { to: 'ann@example.com' });
    expect(res.json()).toMatchObject({ decision: 'allow', metadata: { mode: 'llm' } });
    expect(server.seen.map((s) => s.provider)).toEqual(['anthropic']);
    const id = res.json().metadata.decision_id;
    expect(await decision(a, id)).toMatchObject({
      mode: 'llm',
      decision: 'allow',
      failedArgument: null,
      matchedException: null,
      validations: null,
    });
    const r = await receipt(a, id);
    expect(r).toMatchObject({ mode: 'llm', judge_provider: 'anthropic', judge_model: 'claude-test' });
    expect(r.judge_prompt_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(r.judge_answer_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('denies with the failed argument and the judge reason in validations', async () => {
    server.script = () => ({ object: DENY });
    const res = await validate(a, { to: 'mallory@evil.test' });
    expect(res.json()).toMatchObject({
      decision: 'deny',
      failed_constraints: [{ parameter: 'to', constraint_type: 'llm', actual: 'mallory@evil.test' }],
    });
    expect(res.json().reason).toContain('External recipient.');
    const d = await decision(a, res.json().metadata.decision_id);
    expect(d).toMatchObject({ failedArgument: 'to', matchedException: null });
    expect(d.validations[0]).toMatchObject({ parameter: 'to', constraint_type: 'llm' });
  });

  it('reports the value of a blamed dotted argument (payee.iban) as actual', async () => {
    server.script = () => ({
      object: {
        decision: 'deny',
        reason: 'Not a German IBAN.',
        failedArgument: 'payee.iban',
        matchedException: null,
      },
    });
    const res = await validate(a, { to: 'dotted@example.com', payee: { iban: 'GB00XXXX' } });
    expect(res.json()).toMatchObject({
      decision: 'deny',
      failed_constraints: [{ parameter: 'payee.iban', constraint_type: 'llm', actual: 'GB00XXXX' }],
    });
    const d = await decision(a, res.json().metadata.decision_id);
    expect(d).toMatchObject({ failedArgument: 'payee.iban' });
    expect(d.validations[0]).toMatchObject({ parameter: 'payee.iban', actual: 'GB00XXXX' });
    // A top-level key holding a dot is found first, as the judge's answer was checked.
    server.script = () => ({
      object: { decision: 'deny', reason: 'No.', failedArgument: 'a.b', matchedException: null },
    });
    const top = await validate(a, { to: 'dotted@example.com', 'a.b': 'top', a: { b: 'nested' } });
    expect(top.json().failed_constraints[0]).toMatchObject({ parameter: 'a.b', actual: 'top' });
  });

  it('records a matched exception as an allow', async () => {
    server.script = () => ({
      object: { ...ALLOW, reason: 'Security team.', matchedException: 'The recipient is the security team' },
    });
    const res = await validate(a, { to: 'security@partner.test' });
    expect(res.json().decision).toBe('allow');
    const d = await decision(a, res.json().metadata.decision_id);
    expect(d.matchedException).toBe('The recipient is the security team');
  });

  it('fails closed on provider errors, timeouts and malformed answers, and records them', async () => {
    const cases = [
      { reply: { status: 429 }, says: /rate-limited/ },
      { reply: { status: 500 }, says: /HTTP 500/ },
      { reply: { stallMs: 3_000 }, says: /within 500 ms/ },
      { reply: { text: 'allow' }, says: /not the required JSON object/ },
    ];
    for (const [i, c] of cases.entries()) {
      server.script = () => c.reply;
      const res = await validate(a, { to: `x${i}@example.com` });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({
        decision: 'deny',
        failed_constraints: [{ constraint_type: 'llm_unavailable' }],
      });
      expect(res.json().reason).toMatch(c.says);
      const r = await receipt(a, res.json().metadata.decision_id);
      expect(r).toMatchObject({ decision: 'deny', judge_provider: 'anthropic' });
    }
  });

  it('answers a repeated call from the cache, and asks again after the policy is updated', async () => {
    server.script = () => ({ object: ALLOW });
    await validate(a, { to: 'cache@example.com' });
    await validate(a, { to: 'cache@example.com' });
    expect(server.seen).toHaveLength(1);
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/policies/send_email',
      headers: keyHeader(a.apiKey),
      payload: {
        mode: 'llm',
        llmConfig: { ...LLM_POLICY.llmConfig, description: 'Only example.com, never on Sundays.' },
      },
    });
    expect(put.statusCode).toBe(200);
    server.script = () => ({ object: DENY });
    const res = await validate(a, { to: 'cache@example.com' });
    expect(res.json().decision).toBe('deny');
    expect(server.seen).toHaveLength(2);
    expect(server.seen[1]!.system).toContain('never on Sundays');
  });

  it("never answers one organization's call from another's verdict", async () => {
    server.script = () => ({ object: ALLOW });
    await validate(a, { to: 'shared@example.com' });
    server.script = () => ({ object: DENY });
    const res = await validate(b, { to: 'shared@example.com' });
    expect(res.json().decision).toBe('deny');
    expect(server.seen).toHaveLength(2);
  });

  it('denies an answer holding "decision" twice from the default Anthropic model (json tool), binding the raw input', async () => {
    // claude-3-5-haiku-latest (the default) has no native structured output: the SDK asks through a
    // "json" tool and parses its input object, keeping the last "decision"; the raw body still shows both.
    const input =
      '{"decision":"deny","reason":"External recipient.","failedArgument":"to","matchedException":null,"decision":"allow","failedArgument":null}';
    const env = fakeLlmEnv(server.url, { SVC_LLM_TIMEOUT_MS: '5000' });
    delete env.SVC_LLM_ANTHROPIC_MODEL;
    await withTestApp({ llm: loadLlmSettings(env) }, async (app) => {
      const tenant = await createTenant(app);
      expect((await createLlmPolicy(app, tenant)).statusCode).toBe(201);
      server.script = () => ({ text: input });
      const res = await app.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: keyHeader(tenant.apiKey),
        payload: { tool_name: 'send_email', arguments: { to: 'mallory@evil.test' } },
      });
      expect((server.seen.at(-1)!.body.tools as { name: string }[])[0]!.name).toBe('json');
      expect(res.json()).toMatchObject({
        decision: 'deny',
        reason:
          'LLM judge unavailable, denied (fail closed): the answer is ambiguous: it holds "decision" twice',
        failed_constraints: [{ constraint_type: 'llm_unavailable', actual: 'invalid_output' }],
      });
      const r = await app.inject({
        method: 'GET',
        url: `/v1/decisions/${res.json().metadata.decision_id}/receipt`,
        headers: keyHeader(tenant.apiKey),
      });
      expect(r.json()).toMatchObject({
        judge_provider: 'anthropic',
        judge_model: 'claude-3-5-haiku-latest',
        judge_answer_hash: sha256Tagged(input),
      });
    });
  });

  it('keeps the receipt chain verifiable with judge bindings', async () => {
    const res = await t.inject({ method: 'GET', url: '/v1/receipts/export', headers: keyHeader(a.apiKey) });
    expect(res.statusCode).toBe(200);
    const lines = res.body.trim().split('\n');
    expect(lines.some((l) => JSON.parse(l).judge_provider)).toBe(true);
    const report = await verifyReceipts(lines);
    expect(report.errors).toEqual([]);
    expect(report.ok).toBe(true);
  });
});

describe('quality and dry run of llm policies', () => {
  it('says which provider would judge and whether it is configured', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/policies/send_email/validate',
      headers: keyHeader(a.apiKey),
      payload: { mode: 'llm', llmConfig: { description: 'Only example.com', preferredModel: 'google' } },
    });
    expect(res.json()).toMatchObject({
      valid: true,
      judge: { provider: 'google', model: 'gemini-test', configured: true },
    });
  });

  it('reports an empty description as invalid', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/policies/send_email/validate',
      headers: keyHeader(a.apiKey),
      payload: { mode: 'llm', llmConfig: { description: '   ' } },
    });
    expect(res.json()).toMatchObject({ valid: false, judge: { provider: 'openai', configured: true } });
    expect(res.json().issues.join(' ')).toContain('empty description');
  });

  it('without a configured provider, says so and every call is denied', async () => {
    await withTestApp({}, async (bare) => {
      const tenant = await createTenant(bare);
      const created = await createLlmPolicy(bare, tenant);
      expect(created.json().quality).toMatchObject({ judge: { provider: null, configured: false } });
      expect(created.json().quality.issues.join(' ')).toMatch(/No model provider is configured/);
      const res = await bare.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: keyHeader(tenant.apiKey),
        payload: { tool_name: 'send_email', arguments: { to: 'a@example.com' } },
      });
      expect(res.json()).toMatchObject({ decision: 'deny' });
      expect(res.json().reason).toMatch(/preferred provider "anthropic" is not configured/);
    });
  });
});
