import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';
import { type FakeModelServer, fakeLlmEnv, startFakeModelServer } from '../../../test/llm-providers.js';
import { loadLlmSettings } from '../llm-judge/config.js';

let server: FakeModelServer;
let tenant: Tenant;

const rule = (over: Record<string, unknown>) => ({
  text: 'payments should be in American dollars',
  toolName: 'send_payment',
  argumentName: 'currency',
  kind: 'enum',
  number: null,
  values: ['USD'],
  pattern: null,
  action: 'deny',
  ...over,
});

beforeAll(async () => {
  server = await startFakeModelServer(() => ({ status: 500 }));
});
afterAll(async () => server.close());
const t = useTestApp(() => ({
  llm: loadLlmSettings(fakeLlmEnv(server.url, { SVC_LLM_TIMEOUT_MS: '2000' })),
}));
beforeAll(async () => {
  tenant = await createTenant(t);
  await t.inject({
    method: 'POST',
    url: '/v1/tools/register',
    headers: keyHeader(tenant.apiKey),
    payload: {
      tools: [
        {
          name: 'send_payment',
          parameters: [
            { name: 'amount', type: 'number' },
            { name: 'currency', type: 'string' },
          ],
        },
      ],
    },
  });
});

const turn = (payload: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: '/v1/charter/turn', headers: keyHeader(tenant.apiKey), payload });

describe('Charter with a model configured', () => {
  it('sends only what it could not read to the model and checks the rules it answers', async () => {
    server.script = () => ({
      object: {
        rules: [
          rule({}),
          rule({ text: 'fees under 2', argumentName: 'fee', kind: 'maximum', values: null, number: 2 }),
        ],
        notUnderstood: [],
      },
    });
    server.seen.length = 0;
    const res = await turn({
      message: 'Block send_payment over $900. Payments should be in American dollars. Keep fees under 2.',
      mode: 'compile',
    });
    expect(server.seen).toHaveLength(1);
    // The part read offline never reaches the model; the rest goes as data in a delimited block.
    expect(server.seen[0]!.user).not.toContain('900');
    expect(server.seen[0]!.user).toContain('American dollars');
    expect(server.seen[0]!.system).toContain('Never guess a name that is not listed');
    const body = res.json();
    expect(body.changes[0].proposed.constraints).toEqual(
      expect.arrayContaining([
        { argumentName: 'amount', enabled: true, maximum: 900 },
        { argumentName: 'currency', enabled: true, enum: ['USD'] },
      ]),
    );
    expect(body.notUnderstood).toEqual([expect.objectContaining({ why: expect.stringContaining('"fee"') })]);
    expect(body.verification.required).toBe(true);
  });

  it('reports a model rule a PUT would refuse as not understood and offers the others, never a 500', async () => {
    const refused = [
      rule({ text: 'currencies look like codes', kind: 'regex', values: null, pattern: '(' }),
      rule({
        text: 'currencies look like long codes',
        kind: 'regex',
        values: null,
        pattern: 'a'.repeat(300),
      }),
      rule({ text: 'short currencies', kind: 'maxLength', values: null, number: -1 }),
      rule({ text: 'shortish currencies', kind: 'maxLength', values: null, number: 1.5 }),
    ];
    server.script = () => ({ object: { rules: [rule({}), ...refused], notUnderstood: [] } });
    const res = await turn({
      message: 'Block send_payment over $900. Payments should be in American dollars.',
      mode: 'compile',
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.changes[0].proposed.constraints).toEqual(
      expect.arrayContaining([
        { argumentName: 'amount', enabled: true, maximum: 900 },
        { argumentName: 'currency', enabled: true, enum: ['USD'] },
      ]),
    );
    expect(body.changes[0].proposed.constraints).toHaveLength(2);
    expect(body.notUnderstood.map((n: { text: string }) => n.text)).toEqual(refused.map((r) => r.text));
    for (const n of body.notUnderstood)
      expect(n.why).toMatch(/^the model's rule cannot be used: Constraint 1/);
    expect(body.notUnderstood[0].why).toContain('regex cannot be used');
    expect(body.notUnderstood[2].why).toContain('maxLength must be a whole number of 0 or more (got -1)');
    expect(body.verification.required).toBe(true);
  });

  it('says so when the model fails, and offers only what was read offline', async () => {
    server.script = () => ({ status: 500 });
    const res = await turn({
      message: 'Block send_payment over $900. Payments should be in American dollars.',
      mode: 'compile',
    });
    expect(res.json().notUnderstood[0].why).toContain('the model could not help');
    expect(res.json().changes[0].rules).toHaveLength(1);
  });

  it('answers a question the offline reader cannot, from the stored tools and policies', async () => {
    server.script = (req) =>
      req.system.includes('You answer questions')
        ? { object: { answer: 'send_payment has a starter policy; nothing blocks it today.' } }
        : { status: 500 };
    const res = await turn({ message: 'Explain why my agent keeps getting blocked', mode: 'chat' });
    expect(res.json()).toMatchObject({
      mode: 'chat',
      reply: 'send_payment has a starter policy; nothing blocks it today.',
    });
    expect(server.seen.at(-1)!.user).toContain('POLICIES');
  });
});
