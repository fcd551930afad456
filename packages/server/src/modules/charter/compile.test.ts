import { describe, expect, it } from 'vitest';
import { compileMessage, splitClauses } from './compile.js';
import type { CompiledRule, ToolInfo } from './model.js';

const TOOLS: ToolInfo[] = [
  {
    name: 'send_payment',
    description: 'Pay someone',
    arguments: [
      { name: 'amount', type: 'number', required: true },
      { name: 'currency', type: 'string', enum: ['USD', 'EUR', 'GBP'] },
      { name: 'recipient', type: 'string' },
      { name: 'memo', type: 'string' },
    ],
  },
  {
    name: 'send_email',
    description: null,
    arguments: [
      { name: 'to', type: 'string', required: true },
      { name: 'subject', type: 'string' },
      { name: 'body', type: 'string' },
      { name: 'cc', type: 'array' },
    ],
  },
  {
    name: 'delete_user',
    description: null,
    arguments: [
      { name: 'user_id', type: 'string' },
      { name: 'reason', type: 'string' },
    ],
  },
];

type Expect = Partial<Pick<CompiledRule, 'toolName' | 'constraint' | 'maxCalls' | 'cumulative'>>;
const pay = (c: Record<string, unknown>): Expect => ({
  toolName: 'send_payment',
  constraint: { argumentName: 'amount', enabled: true, ...c } as never,
});
const on = (tool: string, arg: string, c: Record<string, unknown>): Expect => ({
  toolName: tool,
  constraint: { argumentName: arg, enabled: true, ...c } as never,
});

/** Each phrasing and the one rule it must compile to. */
const TABLE: [string, Expect][] = [
  ['Block send_payment over $1,000', pay({ maximum: 1000 })],
  ['Deny send payments above 5000 dollars', pay({ maximum: 5000 })],
  ['send_payment amounts must be under $10,000', pay({ lessThan: 10000 })],
  ['Limit send_payment amount to 2,500', pay({ maximum: 2500 })],
  ['send_payment: amount at most €750.50', pay({ maximum: 750.5 })],
  ['send_payment amount no more than 300 USD', pay({ maximum: 300 })],
  ['The amount for send_payment cannot exceed $1.5k', pay({ maximum: 1500 })],
  ['send_payment amount must not exceed 2 million', pay({ maximum: 2_000_000 })],
  ['send_payment amount should be at least $5', pay({ minimum: 5 })],
  ['Reject send_payment under $1', pay({ minimum: 1 })],
  ['Block send_payment below 10', pay({ minimum: 10 })],
  ['send_payment amount must be between $10 and $500', pay({ minimum: 10, maximum: 500 })],
  ['Only allow send_payment from 1 to 99', pay({ minimum: 1, maximum: 99 })],
  ['send_payment amount must be more than 0', pay({ greaterThan: 0 })],
  ['Never allow send_payment of $2,000 or more', pay({ lessThan: 2000 })],
  ['Block send_payment at least 100000', pay({ lessThan: 100000 })],
  ['Block send_payment of 50 or less', pay({ greaterThan: 50 })],
  ['send_payment amount up to £200', pay({ maximum: 200 })],
  ['Payments over $5,000 need approval on send_payment', pay({ maximum: 5000, action: 'require_approval' })],
  [
    'For send_payment, ask a person instead of blocking when the amount is above $1,000',
    pay({ maximum: 1000, action: 'require_approval' }),
  ],
  ['Require human review for send_payment over 10k', pay({ maximum: 10000, action: 'require_approval' })],
  ['Escalate send_payment exceeding 750', pay({ maximum: 750, action: 'require_approval' })],
  ['send_payment currency must be USD or EUR', on('send_payment', 'currency', { enum: ['USD', 'EUR'] })],
  [
    'Only allow send_payment currency usd, eur and gbp',
    on('send_payment', 'currency', { enum: ['USD', 'EUR', 'GBP'] }),
  ],
  ['Block send_payment currency RUB', on('send_payment', 'currency', { notEnum: ['RUB'] })],
  ['send_payment currency must not be GBP', on('send_payment', 'currency', { notEnum: ['GBP'] })],
  ['send_email to must be an @example.com address', on('send_email', 'to', { regex: '@example\\.com$' })],
  ['Only allow send_email to addresses at acme.io', on('send_email', 'to', { regex: '@acme\\.io$' })],
  ['Block send_email to gmail.com addresses', on('send_email', 'to', { notRegex: '@gmail\\.com$' })],
  ['send_email subject must start with "[ext]"', on('send_email', 'subject', { regex: '^\\[ext\\]' })],
  ['send_payment memo must match `^INV-[0-9]+$`', on('send_payment', 'memo', { regex: '^INV-[0-9]+$' })],
  ['send_payment memo is required', on('send_payment', 'memo', { required: true })],
  ['delete_user must always include a reason', on('delete_user', 'reason', { required: true })],
  ['Require a user_id on delete_user', on('delete_user', 'user_id', { required: true })],
  ['send_email body must be at most 2000 characters', on('send_email', 'body', { maxLength: 2000 })],
  ['send_email cc at most 5 recipients', on('send_email', 'cc', { maxItems: 5 })],
  ['At most 3 send_payment calls per session', { toolName: 'send_payment', maxCalls: 3 }],
  ['Allow send_email only twice per session', { toolName: 'send_email', maxCalls: 2 }],
  ['Block delete_user after 1 call per session', { toolName: 'delete_user', maxCalls: 1 }],
  ['send_payment no more than five times in a session', { toolName: 'send_payment', maxCalls: 5 }],
  [
    'The total send_payment amount per session must not exceed $5,000',
    { toolName: 'send_payment', cumulative: { argumentName: 'amount', maxValue: 5000 } },
  ],
  [
    'Block send_payment when the cumulative amount in a session is over 20,000',
    { toolName: 'send_payment', cumulative: { argumentName: 'amount', maxValue: 20000 } },
  ],
  [
    'send_payment: at most $1,000 in total per session',
    { toolName: 'send_payment', cumulative: { argumentName: 'amount', maxValue: 1000 } },
  ],
  ['send payment amount must be below 400', pay({ lessThan: 400 })],
  ['sendPayment amount <= 80', pay({ maximum: 80 })],
];

/** Phrasings that must be refused (nothing compiled, a reason given). */
const REFUSE: string[] = [
  'Make send_payment safe',
  'Block bad payments on send_payment',
  'Only allow reasonable amounts for send_payment',
  'Block send_payment over a lot of money',
  'Limit the fee of send_payment to $10',
  'Block transfer_funds over $100',
  'send_payment over $100',
  'Ask a person for send_payment currency EUR',
  'Block send_payment amounts between 10 and 20',
  'Require approval for send_payment',
  'Limit send_payment calls per session',
  'Block everything',
];

describe('compileMessage: the phrasing table', () => {
  it('has at least 40 phrasings', () => {
    expect(TABLE.length).toBeGreaterThanOrEqual(40);
  });

  it.each(TABLE)('%s', (phrase, expected) => {
    const out = compileMessage(phrase, TOOLS, null);
    expect(out.notUnderstood).toEqual([]);
    expect(out.rules).toHaveLength(1);
    const rule = out.rules[0]!;
    expect(rule.toolName).toBe(expected.toolName);
    if (expected.constraint) expect(rule.constraint).toEqual(expected.constraint);
    else expect(rule.constraint).toBeUndefined();
    expect(rule.maxCalls).toBe(expected.maxCalls);
    expect(rule.cumulative).toEqual(expected.cumulative);
  });

  it.each(REFUSE)('refuses: %s', (phrase) => {
    const out = compileMessage(phrase, TOOLS, null);
    expect(out.rules).toEqual([]);
    expect(out.notUnderstood).toHaveLength(1);
    expect(out.notUnderstood[0]!.why.length).toBeGreaterThan(10);
  });
});

describe('compileMessage: messages with several rules', () => {
  it('splits sentences and "and"-joined rules, keeping ranges and value lists whole', () => {
    const out = compileMessage(
      'For send_payment, block amounts over $1,000 and require approval above $500. Currency must be USD, EUR and GBP. Make it nice.',
      TOOLS,
      null,
    );
    expect(out.rules.map((r) => r.constraint)).toEqual([
      { argumentName: 'amount', enabled: true, maximum: 1000 },
      { argumentName: 'amount', enabled: true, maximum: 500, action: 'require_approval' },
      { argumentName: 'currency', enabled: true, enum: ['USD', 'EUR', 'GBP'] },
    ]);
    expect(out.notUnderstood.map((n) => n.text)).toEqual(['Make it nice']);
  });

  it('uses the conversation tool when a follow-up names none', () => {
    const out = compileMessage('Also block amounts over 50', TOOLS, 'send_payment');
    expect(out.rules[0]).toMatchObject({ toolName: 'send_payment', constraint: { maximum: 50 } });
  });

  it('does not split "between X and Y"', () => {
    expect(splitClauses('amount between 1 and 5 and block currency EUR', ['currency'])).toEqual([
      'amount between 1 and 5',
      'block currency EUR',
    ]);
  });
});
