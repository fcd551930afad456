import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader } from '../../test/helpers.js';
import { compileSchema, isUserId, Nullable, OneOf, PatternRecord } from '../lib/schemas.js';

const t = useTestApp();

/** One character, two UTF-16 code units. */
const EMOJI = '😀';

const messageOf = (res: { json: () => unknown }) =>
  (res.json() as { error: { message: string } }).error.message;

describe('string lengths count characters (code points), not UTF-16 units', () => {
  it('names of API keys, organizations and projects: 1-100 characters', async () => {
    const tenant = await createTenant(t);
    const createKey = (name: string) =>
      t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: asUser(tenant),
        payload: { name, projectId: tenant.projectId },
      });
    const hundred = EMOJI.repeat(100);
    const ok = await createKey(hundred);
    expect(ok.statusCode).toBe(201);
    expect(ok.json().name).toBe(hundred);
    // Over the limit in characters: refused with the limit as written, however many units it has.
    for (const name of [EMOJI.repeat(101), 'a'.repeat(101), EMOJI.repeat(150), 'a'.repeat(300)]) {
      const res = await createKey(name);
      expectError(res, 400, 'validation_failed');
      expect(messageOf(res)).toBe('body/name Expected string length less or equal to 100');
    }
    const empty = await createKey('');
    expectError(empty, 400, 'validation_failed');
    expect(messageOf(empty)).toBe('body/name Expected string length greater or equal to 1');

    const org = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: { authorization: `Bearer ${tenant.token}` },
      payload: { name: hundred, slug: `emoji-${tenant.orgId.slice(-8)}` },
    });
    expect(org.statusCode).toBe(201);
    expect(org.json().name).toBe(hundred);
    const project = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: asUser(tenant),
      payload: { organizationId: tenant.orgId, name: hundred },
    });
    expect(project.statusCode).toBe(201);
    expect(project.json().name).toBe(hundred);
  });

  it('tool names (1-200) on the validate path, draft names (200) and descriptions (5000)', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const tool = `${EMOJI.repeat(199)}x`;
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: h,
      payload: { toolName: tool, constraints: [{ argumentName: EMOJI.repeat(200), required: true }] },
    });
    expect(policy.statusCode).toBe(201);
    const validate = (toolName: string) =>
      t.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: h,
        payload: { tool_name: toolName, arguments: {} },
      });
    const denied = await validate(tool);
    expect(denied.statusCode).toBe(200);
    expect(denied.json().decision).toBe('deny');
    const tooLong = await validate(`${tool}x`);
    expectError(tooLong, 400, 'validation_failed');
    expect(messageOf(tooLong)).toBe('body/tool_name Expected string length less or equal to 200');

    const draft = (name: string, description: string) =>
      t.inject({
        method: 'POST',
        url: '/v1/policy-drafts',
        headers: h,
        payload: { name, description, projectId: tenant.projectId, createdByAgentId: 'agent', rules: [] },
      });
    expect((await draft(EMOJI.repeat(200), EMOJI.repeat(5000))).statusCode).toBe(201);
    const longDescription = await draft('d', EMOJI.repeat(5001));
    expectError(longDescription, 400, 'validation_failed');
    expect(messageOf(longDescription)).toBe('body/description Expected string length less or equal to 5000');
  });

  it('compileSchema counts characters for lower bounds above 1 and keeps formats', () => {
    const check = compileSchema(
      Type.Object({ code: Type.String({ minLength: 3, maxLength: 4 }), id: Type.String({ format: 'uuid' }) }),
    );
    const id = '00000000-0000-7000-8000-000000000000';
    expect(check.Check({ code: EMOJI.repeat(3), id })).toBe(true);
    expect(check.Check({ code: EMOJI.repeat(4), id })).toBe(true);
    expect(check.Check({ code: 'abc', id })).toBe(true);
    expect(check.Check({ code: EMOJI.repeat(2), id })).toBe(false);
    expect(check.Errors({ code: EMOJI.repeat(2), id }).First()?.message).toBe(
      'Expected string length greater or equal to 3',
    );
    expect(check.Errors({ code: EMOJI.repeat(5), id }).First()?.message).toBe(
      'Expected string length less or equal to 4',
    );
    // A bounded string with a format checks both.
    const bounded = compileSchema(Type.String({ format: 'uuid', maxLength: 36 }));
    expect(bounded.Check(id)).toBe(true);
    expect(bounded.Errors('not-a-uuid').First()?.message).toBe("Expected string to match 'uuid' format");
    // Compiling the same schema twice (or a compiled copy) changes nothing.
    expect(compileSchema(Type.String({ maxLength: 1 })).Check(EMOJI)).toBe(true);
  });

  it("a person's id is 1-200 characters", () => {
    expect(isUserId(EMOJI.repeat(200))).toBe(true);
    expect(isUserId(EMOJI.repeat(201))).toBe(false);
  });
});

describe('validation messages of closed sets name the allowed values', () => {
  it('a union of literals: POST /v1/charter/turn mode, POST /v1/decisions decision', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const turn = await t.inject({
      method: 'POST',
      url: '/v1/charter/turn',
      headers: h,
      payload: { message: 'hello', mode: 'shout' },
    });
    expectError(turn, 400, 'validation_failed');
    expect(messageOf(turn)).toBe('body/mode must be one of: auto, chat, compile');
    const logged = await t.inject({
      method: 'POST',
      url: '/v1/decisions',
      headers: h,
      payload: {
        tool_name: 'pay',
        arguments: {},
        decision: 'maybe',
        mode: 'deterministic',
        latency_ms: 1,
        source: 'client',
      },
    });
    expectError(logged, 400, 'validation_failed');
    expect(messageOf(logged)).toBe('body/decision must be one of: allow, deny');
  });

  it('a OneOf string set, and a nullable set', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'pay', mode: 'fuzzy' },
    });
    expectError(res, 400, 'validation_failed');
    expect(messageOf(res)).toBe('body/mode must be one of: deterministic, llm');

    const nullable = TypeCompiler.Compile(
      Type.Object({ n: Nullable(Type.Union([Type.Literal(1), Type.Literal('b')])) }),
    );
    expect(nullable.Errors({ n: 2 }).First()?.message).toBe('must be one of: 1, b, null');
    const oneOf = TypeCompiler.Compile(OneOf(['x', 'y']));
    expect(oneOf.Errors(3).First()?.message).toBe('must be one of: x, y');
    // A nullable schema says what its schema finds wrong, and where.
    const record = TypeCompiler.Compile(
      Type.Object({ c: Nullable(PatternRecord('^[a-z]+$', Type.String(), { maxProperties: 2 })) }),
    );
    expect(record.Errors({ c: { 'Bad Name': 'v' } }).First()?.message).toBe(
      'at /Bad Name: is not an allowed name: names match ^[a-z]+$',
    );
    expect(record.Errors({ c: 5 }).First()?.message).toBe('Expected object (or null)');
    expect(
      TypeCompiler.Compile(Nullable(Type.Number({ minimum: 0 })))
        .Errors(-1)
        .First()?.message,
    ).toBe('Expected number to be greater or equal to 0 (or null)');
    // Any other union keeps TypeBox's message.
    const open = TypeCompiler.Compile(Type.Union([Type.String(), Type.Number()]));
    expect(open.Errors(true).First()?.message).toBe('Expected union value');
  });
});

describe('integers in a query string are written in decimal digits', () => {
  it('refuses 1.5, 0x10, 1e1 or a padded number instead of reading it as another integer', async () => {
    const tenant = await createTenant(t);
    const resolved = (limit: string) =>
      t.inject({
        method: 'GET',
        url: `/v1/approvals/resolved?limit=${encodeURIComponent(limit)}`,
        headers: asUser(tenant),
      });
    for (const limit of ['1.5', '0x10', '1e1', ' 3', '2.0', '']) {
      const res = await resolved(limit);
      expectError(res, 400, 'validation_failed');
      expect(messageOf(res), limit).toBe('querystring/limit must be an integer from 1 to 200');
    }
    for (const limit of ['3', '007', '200']) expect((await resolved(limit)).statusCode, limit).toBe(200);
    // The schema's own bounds still apply.
    expectError(await resolved('0'), 400, 'validation_failed');
  });
});
