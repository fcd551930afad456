import { compilePolicy, evaluate } from '@svc/policy-engine';
import { describe, expect, it } from 'vitest';
import { answerQuestion } from './chat.js';
import {
  CLAUSE_END,
  clauseJoiner,
  compileMessage,
  FILLER_PHRASES,
  namePattern,
  OPENING_PHRASES,
  splitClauses,
  TRAILING_ONLY,
  VALUE_SEPARATOR,
} from './compile.js';
import type { CompiledRule, ToolInfo } from './model.js';
import { NUM, NUM_MAX_CHARS } from './numbers.js';
import * as phrases from './phrases.js';

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
  ['Block send_payment if the amount is over $500', pay({ maximum: 500 })],
  // Approval phrases and whom they name are read whole, words outside the vocabulary included.
  ['Ask an admin for send_payment over $500', pay({ maximum: 500, action: 'require_approval' })],
  [
    'Require approval from finance for send_payment over $500',
    pay({ maximum: 500, action: 'require_approval' }),
  ],
  ['Hold for review send_payment over $500', pay({ maximum: 500, action: 'require_approval' })],
  ['Require manual approval for send_payment over $500', pay({ maximum: 500, action: 'require_approval' })],
  ['Reject send_payment under $1', pay({ minimum: 1 })],
  ['Block send_payment below 10', pay({ minimum: 10 })],
  ['send_payment amount must be between $10 and $500', pay({ minimum: 10, maximum: 500 })],
  ['Only allow send_payment from 1 to 99', pay({ minimum: 1, maximum: 99 })],
  ['send_payment amount must be more than 0', pay({ greaterThan: 0 })],
  ['Never allow send_payment of $2,000 or more', pay({ lessThan: 2000 })],
  ['Block send_payment at least 100000', pay({ lessThan: 100000 })],
  ['Block send_payment of 50 or less', pay({ greaterThan: 50 })],
  // Inclusive bounds written with "at or" / "or equal to": the bound itself is on their side.
  ['Block send_payment up to and including 500', pay({ greaterThan: 500 })],
  ['send_payment amount must be equal to or bigger than 5', pay({ minimum: 5 })],
  ['Block send_payment at or above $1,000', pay({ lessThan: 1000 })],
  ['Block send_payment equal to or greater than 1000', pay({ lessThan: 1000 })],
  ['Block send_payment greater than or equal to 1000', pay({ lessThan: 1000 })],
  ['Block send_payment at or below 10', pay({ greaterThan: 10 })],
  ['send_payment amount must be at or above 5', pay({ minimum: 5 })],
  ['send_payment amount must be equal to or less than 500', pay({ maximum: 500 })],
  ['send_payment amount must be less than or equal to 500', pay({ maximum: 500 })],
  [
    'For send_payment, ask a person when the amount is at or above $500',
    pay({ lessThan: 500, action: 'require_approval' }),
  ],
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
  [
    'send_email to must be an @example.com address',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:example\\.com)$` }),
  ],
  [
    'Only allow send_email to addresses at acme.io',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  [
    'Block send_email to gmail.com addresses',
    on('send_email', 'to', { notRegex: '(?i)[@.](?:gmail\\.com)\\.?(?:$|[^a-z0-9.-])' }),
  ],
  ['send_email subject must start with "[ext]"', on('send_email', 'subject', { regex: '^\\[ext\\]' })],
  // An apostrophe inside a quoted value belongs to it, in either quotes.
  ["send_email body must not contain 'don't'", on('send_email', 'body', { notRegex: "don['’]t" })],
  ['send_email body must not contain "don\'t"', on('send_email', 'body', { notRegex: "don['’]t" })],
  [
    "Block send_email whose subject contains 'won't pay'",
    on('send_email', 'subject', { notRegex: "won['’]t pay" }),
  ],
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
  ['Block send_payment at 5 or more calls per session', { toolName: 'send_payment', maxCalls: 4 }],
  ['send_email fewer than 3 times per session', { toolName: 'send_email', maxCalls: 2 }],
  ['Block delete_user more than 2 times per session', { toolName: 'delete_user', maxCalls: 2 }],
  ['delete_user must never exceed 4 calls per session', { toolName: 'delete_user', maxCalls: 4 }],
  [
    'The total send_payment amount per session must never exceed $5,000',
    { toolName: 'send_payment', cumulative: { argumentName: 'amount', maxValue: 5000 } },
  ],
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
  ['send_payment amount should not go over 100', pay({ maximum: 100 })],
  ['Payments on send_payment must not go above $1,000', pay({ maximum: 1000 })],
  ['send_email cc must not have more than 2 entries', on('send_email', 'cc', { maxItems: 2 })],
  ['send_email subject must not exceed 10 characters', on('send_email', 'subject', { maxLength: 10 })],
  ['send_payment memo must not contain "secret"', on('send_payment', 'memo', { notRegex: 'secret' })],
  ['send_payment memo can\'t contain "password"', on('send_payment', 'memo', { notRegex: 'password' })],
  ['send_payment currency must not equal GBP', on('send_payment', 'currency', { notEnum: ['GBP'] })],
  [
    'send_payment amounts above $100 should be escalated to a person',
    pay({ maximum: 100, action: 'require_approval' }),
  ],
  ['send_payment over 100 must be approved by a manager', pay({ maximum: 100, action: 'require_approval' })],
  [
    'Block send_payment when the session total exceeds $5,000',
    { toolName: 'send_payment', cumulative: { argumentName: 'amount', maxValue: 5000 } },
  ],
  ['send_payment memo must never be empty', on('send_payment', 'memo', { required: true, minLength: 1 })],
  [
    'Only allow send_email to addresses at acme.io or acme.com',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io|acme\\.com)$` }),
  ],
  ['At or above $1,000, block send_payment', pay({ lessThan: 1000 })],
  [
    'For send_payment amounts of $500 or more, ask a person',
    pay({ lessThan: 500, action: 'require_approval' }),
  ],
  [
    'Block send_email to gmail.com',
    on('send_email', 'to', { notRegex: '(?i)[@.](?:gmail\\.com)\\.?(?:$|[^a-z0-9.-])' }),
  ],
  [
    'Block send_email to addresses ending with gmail.com',
    on('send_email', 'to', { notRegex: '(?i)gmail\\.com$' }),
  ],
  ['send_email fewer than three times per session', { toolName: 'send_email', maxCalls: 2 }],
  ['Block send_payment at five or more calls per session', { toolName: 'send_payment', maxCalls: 4 }],
  ['Block delete_user twice or more per session', { toolName: 'delete_user', maxCalls: 1 }],
  ['Only allow send_payment amounts from $10 up to $1,000', pay({ minimum: 10, maximum: 1000 })],
  [
    'send_email subject must start with "Dear customer"',
    on('send_email', 'subject', { regex: '^Dear customer' }),
  ],
  ['Block send_payment once the amount exceeds $1,000', pay({ maximum: 1000 })],
  ['Limit send_email subject to 100 characters', on('send_email', 'subject', { maxLength: 100 })],
  ['Block send_email to more than 5 recipients', on('send_email', 'cc', { maxItems: 5 })],
  [
    'send_email subject must not be longer than 80 characters',
    on('send_email', 'subject', { maxLength: 80 }),
  ],
  ['Escalate send_payment above 750 to a manager', pay({ maximum: 750, action: 'require_approval' })],
  ["delete_user reason can't be empty", on('delete_user', 'reason', { required: true, minLength: 1 })],
  [
    'Only for amounts over $1,000, ask a person for send_payment',
    pay({ maximum: 1000, action: 'require_approval' }),
  ],
  ['send_email subject must start with "Stop"', on('send_email', 'subject', { regex: '^Stop' })],
  ["send_email subject must start with 'Never'", on('send_email', 'subject', { regex: '^Never' })],
  ['Block send_payment 5 times or more in a session', { toolName: 'send_payment', maxCalls: 4 }],
  ['send_payment over $500 needs manager approval', pay({ maximum: 500, action: 'require_approval' })],
  ['send_payment over $1,000 is not allowed', pay({ maximum: 1000 })],
  ['send_payment over $1,000 is not permitted', pay({ maximum: 1000 })],
  ['send_email cc must have at most 3 entries', on('send_email', 'cc', { maxItems: 3 })],
  [
    'send_email subject must not contain "send_email"',
    on('send_email', 'subject', { notRegex: 'send_email' }),
  ],
  ['send payment amount must be below 400', pay({ lessThan: 400 })],
  ['sendPayment amount <= 80', pay({ maximum: 80 })],
  // Framing that opens or closes a sentence is read as nothing (see 'framing' below).
  ['From now on, block send_payment over $1,000', pay({ maximum: 1000 })],
  ['Block send_payment over $1,000 going forward', pay({ maximum: 1000 })],
  ['In all cases, block send_payment over $1,000', pay({ maximum: 1000 })],
  ['Henceforth block send_payment over $1,000', pay({ maximum: 1000 })],
  ['Ensure that send_payment amount is at most $1,000', pay({ maximum: 1000 })],
  ['Always include a reason on delete_user', on('delete_user', 'reason', { required: true })],
  // "allow" with a bound that states its limit by itself, or with "only": the allowed range.
  ['Allow send_payment up to $100', pay({ maximum: 100 })],
  ['Allow send_payment amounts of at most $100', pay({ maximum: 100 })],
  ['Allow send_payment between $10 and $100', pay({ minimum: 10, maximum: 100 })],
  ['Allow send_payment over $1,000 only', pay({ greaterThan: 1000 })],
  ['Allow only send_payment under $100', pay({ lessThan: 100 })],
  ['Only allow send_email subject under 80 characters', on('send_email', 'subject', { maxLength: 79 })],
  // Values, domains and patterns: "only" or a word that keeps the values makes the allow-list.
  [
    'Only allow send_email to acme.io',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  [
    'Allow only send_email to acme.io',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  [
    'Allow send_email to acme.io only',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  [
    'send_email must go to acme.io addresses',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  [
    'Restrict send_email to acme.io addresses',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  [
    'Keep send_email to acme.io addresses',
    on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }),
  ],
  ['Allow send_payment currency USD only', on('send_payment', 'currency', { enum: ['USD'] })],
  ['Limit send_payment currency to USD', on('send_payment', 'currency', { enum: ['USD'] })],
  ['Never allow send_payment currency GBP', on('send_payment', 'currency', { notEnum: ['GBP'] })],
  [
    'Only allow send_email subject starting with "[ext]"',
    on('send_email', 'subject', { regex: '^\\[ext\\]' }),
  ],
  // A domain on a recipient (which may hold a name) is stopped alone too, not only in an address.
  [
    'Block send_payment to recipient evil.corp',
    on('send_payment', 'recipient', { notRegex: '(?i)(?:^|[^a-z0-9-])(?:evil\\.corp)\\.?(?:$|[^a-z0-9.-])' }),
  ],
  [
    'Only allow send_payment recipients at good.com',
    on('send_payment', 'recipient', { regex: `(?i)^[^\\s@,;<>"']+@(?:good\\.com)$` }),
  ],
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
  'Block send_payment when the total amount per session is at or above $5,000',
  'Keep the send_payment total per session under $5,000',
  'Allow send_payment at least 3 times per session',
  'Block send_payment unless currency is USD',
  'Block send_payment currency other than USD',
  'Block send_email to addresses outside acme.io',
  'send_payment over 100 should go to someone in finance',
  'Block send_payment amounts over $1,000 and under $10',
  'send_payment amount must be more than 0 and less than 1000',
  'Limit send_payment to 3 calls',
  'At most 5 send_payment calls',
  'For send_payment over $100, allow at most 3 calls per session',
  'Allow at most 3 send_payment calls per session for amounts over 100',
  'Require approval for send_payment calls that include a memo',
  'Block send_payment of 1 000 or more',
  'No send_payment over $1,000 is allowed',
  'No send_payment may exceed $1,000',
  'Allow send_payment amounts not above $500',
  'send_payment amount must be not lower than 10',
  'send_payment currency must be not GBP',
  'Only allow send_payment currency not GBP',
  "Don't block send_payment amounts below 100",
  'Never deny send_payment under $100',
  "Don't require approval for send_payment under $100",
  'No need to ask a person for send_payment under $100',
  'Block send_payment over $500 with no human review',
  'For send_payment up to $100, never ask a person',
  'send_email: nothing to gmail.com addresses',
  'send_email to acme.io addresses and no others',
  'send_payment amount per session must not exceed 5000',
  'Block send_payment amounts above 5000 per session',
  'Allow delete_user at least once per session',
  'send_payment: at most $1,000 in total',
  'Combined send_payment amounts must stay under $10,000',
  'Block send_payment when the amount is over $1,000 or the currency is GBP',
  'send_payment memo should be optional',
  'Only allow send_payment in USD up to $500',
  'send_payment amount must never be missing and must be at most 1000',
  'send_payment memo must not be empty and must be at most 100 characters',
  'send_payment memo must never be empty and must start with "INV"',
  'At most $1,000 per send_payment, block anything above',
  'Should the amount exceed $1,000, block send_payment',
  'send_payment amount must be at most 1000, block bigger payments',
  'Cap send_payment at $1,000, block larger amounts',
  'send_email subject must be at most 80 characters, block longer ones',
  'send_payment amount at most 1000, block anything else',
  "send_email to can't be empty, must be an @acme.io address",
  'send_payment memo must never be empty, must start with "INV"',
  'send_payment amount must not be negative and must be at most 1000',
  'Block send_payment over $1,000 after 5pm',
  'Block send_payment over $1,000 on weekends',
  'Block send_payment over $1,000 per 24h',
  'Block send_payment over $1,000 in 2025',
  'Only allow send_email to acme.io addresses, block gmail.com',
  'Allow send_payment five times at least per session',
  'Block send_payment at 3 calls per session',
  'Block send_email body with links to evil.com',
  // A domain in words about text is not an address's domain, whatever else the sentence says.
  'Block send_email emails whose body links to evil.com',
  // Verbs Charter does not read, named limits, periods, conditions: refused, never flipped or dropped.
  'send_payment amounts over $1,000 should be stopped',
  'send_payment amounts of at least $10,000 must be double-checked',
  'send_email body containing "password" must be flagged',
  'send_email to gmail.com addresses should be quarantined',
  'send_payment amount must be reconciled above $500',
  'Block send_payment that exceed the maximum of $500',
  'Escalate send_payment amounts above the $5,000 maximum',
  'Require approval for send_payment amounts below the $10 minimum',
  'send_payment amount must not exceed $10,000 per month',
  'send_payment amount must be at most $5,000 daily',
  'Block send_payment amount over $1,000 in the first week',
  'Block send_payment over $2B',
  'Block send_payment amount over 10 grand',
  'Block send_payment over 1e6',
  'Only allow send_payment amount from $10 to under $500',
  'send_payment amount must be between 10 and 500 exclusive',
  'send_payment amount must be at most $100 if the payee is new',
  'Allow send_payment amount up to $50,000 for verified customers',
  'Block send_payment amounts above $5000 per session',
  'Block send_email subject starting with RE: or FW:',
  'send_email subject must not start with "RE:" / "FW:"',
  'send_email subject must not contain "free" as well as "winner"',
  'Only allow send_email subject starting with [ext] Acme',
  'Block send_email to gmail',
  "send_email subject must contain 'ok and it mustn't contain 'spam'",
  // Words Charter does not read, wherever they stand: refused, whatever the rest would compile to.
  'Block send_payment amounts save for amounts under $500',
  'Block send_payment amounts barring those under $500',
  'Block send_payment amounts, with the exception of those under $500',
  'Block send_payment amount excluding amounts under $500',
  'Deny send_payment amount, letting through amounts under $500',
  'Block send_payment amount, allowing under $500',
  'send_payment amounts over $500 should be routed to finance',
  'send_payment amounts over $500 must go to compliance',
  'send_payment amounts over $500 require the CFO approval',
  'send_payment amount must be at most $5,000 per calendar month',
  'Limit send_payment amount to $5,000 per billing cycle',
  'send_payment amount must be at most $5,000 per payee',
  'Allow send_payment amount up to $10,000 when the customer is verified',
  'Block send_payment amount over 50000 cents',
  'Block send_payment amount over $2T',
  // More numbers than the rule holds: one end of a range would be dropped.
  'Only allow send_payment amount from over $10 to $500',
  'Only allow send_payment amount between $10 and under $500',
  'Only allow send_payment amount strictly between $10 and $500',
  'Block send_payment amount over 10% of $5,000',
  // Words of the phrasings that change the meaning where they stand otherwise.
  'Block all send_payment but those under $1,000',
  'Block send_email to all domains but acme.io',
  'Block the first 3 send_payment calls per session',
  'send_payment amount can be over 1000',
  'send_payment amount may exceed 1000',
  'Block send_email with more than 5 attachments',
  'Only allow send_payment up to $1,000 for the team',
  'send_email to must be an @acme.io address or empty',
  'Block send_email if the email body contains links to the evil.com domain',
  'send_email subject must not contain "unsubscribe" or "no-reply"',
  'Block send_payment over $500 in EUR',
  'delete_user reason is not required',
  'Block send_payment over €1.000',
  'Block send_payment over 1,00,000',
  'Block send_payment over 1,5k',
  "Block send_payment over 1'000 dollars",
  'Block everything',
  // The words of framing phrases are no words of a rule on their own, nor framing inside a sentence.
  'Block send_email to gmail.com now',
  'Now block send_email to gmail.com',
  'Block send_email to gmail.com forward',
  'Block henceforth send_email to gmail.com',
  'Block send_payment in all cases over $1,000',
  'Block send_payment cases over $1,000',
  // Framing gives no direction: "always" is no "must" ("send_payment over $100" is refused too).
  'Always send_payment over $100',
  'From now on.',
  // A comparison the calls are only let through by: the others may or may not be meant to stop.
  'Allow send_payment over $1,000',
  'Allow send_payment under $100',
  'Allow send_payment amounts above $100',
  'send_payment over $1,000 is allowed',
  'send_payment amounts under $100 are always allowed',
  'send_payment amounts over $100 must be allowed',
  'Always allow send_payment under $100',
  'Allow send_email subject under 80 characters',
  // The same for values, domains and patterns: "allow" without "only" is no allow-list.
  'Allow send_email to acme.io',
  'Allow send_email to addresses at acme.io',
  'Allow send_email to acme.io or acme.com addresses',
  'Allow send_payment recipients at good.com',
  'Allow send_payment currency USD',
  'Allow send_payment currency usd, eur',
  'Permit send_payment currency EUR',
  'send_payment currency allowed values: USD, EUR',
  'Always allow send_payment currency USD',
  'Allow send_email subject starting with "[ext]"',
  'Allow send_email body containing "invoice"',
  'Allow send_payment memo matching `^INV-[0-9]+$`',
  'Let send_email go to acme.io',
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

  it('keeps both of two inclusive bounds joined by "and"', () => {
    for (const text of [
      'send_payment amount must be at or above 10 and at or below 20',
      'send_payment amount must be greater than or equal to 10 and less than or equal to 20',
    ]) {
      expect(
        compileMessage(text, TOOLS, null).rules.map((r) => r.constraint),
        text,
      ).toEqual([
        { argumentName: 'amount', enabled: true, minimum: 10 },
        { argumentName: 'amount', enabled: true, maximum: 20 },
      ]);
    }
  });

  it('refuses a session total that leaves its limit out, saying how to write it', () => {
    for (const text of [
      'Block send_payment when the total amount per session is at or above $5,000',
      'Keep the send_payment total per session under $5,000',
    ]) {
      const out = compileMessage(text, TOOLS, null);
      expect(out.rules, text).toEqual([]);
      expect(out.notUnderstood[0]?.why, text).toMatch(/including the limit itself.*at most 5000 in total/);
    }
  });

  it('splits at a comma before a rule verb once the part before gives a limit', () => {
    const out = compileMessage(
      'send_payment: block payments over $1,000, ask a person above $500',
      TOOLS,
      null,
    );
    expect(out.notUnderstood).toEqual([]);
    expect(out.rules.map((r) => r.constraint)).toEqual([
      { argumentName: 'amount', enabled: true, maximum: 1000 },
      { argumentName: 'amount', enabled: true, maximum: 500, action: 'require_approval' },
    ]);
  });

  it('blocks a domain in any case, with a display name, and its subdomains', () => {
    const rule = compileMessage('Block send_email to gmail.com and yahoo.com addresses', TOOLS, null)
      .rules[0]!;
    const re = new RegExp(rule.constraint!.notRegex!.replace('(?i)', ''), 'i');
    for (const to of ['bob@GMAIL.COM', 'Bob <bob@gmail.com>', 'bob@gmail.com ', 'a@mail.yahoo.com'])
      expect(re.test(to), to).toBe(true);
    for (const to of ['bob@notgmail.com', 'bob@gmail.company.example', 'bob@acme.io'])
      expect(re.test(to), to).toBe(false);
  });

  it('reads rules without the names of arguments: an argument named "stop" or "block" says nothing', () => {
    const tools: ToolInfo[] = [
      { name: 'get_blocks', description: null, arguments: [{ name: 'block', type: 'number' }] },
      { name: 'book_train', description: null, arguments: [{ name: 'stop', type: 'string' }] },
    ];
    expect(compileMessage('get_blocks block must be at most 500', tools, null).rules[0]?.constraint).toEqual({
      argumentName: 'block',
      enabled: true,
      maximum: 500,
    });
    expect(compileMessage('book_train stop must be Paris or Lyon', tools, null).rules[0]?.constraint).toEqual(
      {
        argumentName: 'stop',
        enabled: true,
        enum: ['Paris', 'Lyon'],
      },
    );
  });

  it('reads a domain only for an argument that holds addresses', () => {
    const tools: ToolInfo[] = [
      {
        name: 'notify',
        description: null,
        arguments: [
          { name: 'customer_email', type: 'string' },
          { name: 'replyTo', type: 'string' },
          { name: 'url', type: 'string' },
        ],
      },
    ];
    for (const arg of ['customer_email', 'replyTo']) {
      expect(
        compileMessage(`Only allow notify ${arg} at acme.io addresses`, tools, null).rules[0]?.constraint,
      ).toMatchObject({ argumentName: arg, regex: String.raw`(?i)^[^\s@,;<>"']+@(?:acme\.io)$` });
    }
    // An address pattern on a URL would stop every URL; the sentence is refused with how to write it.
    const url = compileMessage('Only allow notify url on the example.com domain', tools, null);
    expect(url.rules).toEqual([]);
    expect(url.notUnderstood[0]?.why).toMatch(/"url" is no address/);
  });

  it('reads no domain for an argument that holds a URL or a host, whatever its name says besides', () => {
    const tools: ToolInfo[] = [
      {
        name: 'fetch_page',
        description: null,
        arguments: [
          { name: 'redirect_to', type: 'string' },
          { name: 'from_url', type: 'string' },
          { name: 'server_address', type: 'string' },
          { name: 'url', type: 'string' },
          { name: 'host', type: 'string' },
        ],
      },
    ];
    for (const sentence of [
      'Block fetch_page redirect_to to evil.com',
      'Block fetch_page when redirect_to goes to evil.com',
      'Block fetch_page from_url to evil.com',
      'Block fetch_page server_address to evil.com',
      'Block fetch_page url evil.com',
      'Only allow fetch_page url example.com',
    ]) {
      expect(compileMessage(sentence, tools, null).rules, sentence).toEqual([]);
    }
    // A host holds exactly a domain.
    expect(compileMessage('Block fetch_page host evil.com', tools, null).rules[0]?.constraint).toEqual({
      argumentName: 'host',
      enabled: true,
      notEnum: ['evil.com'],
    });
  });

  it("refuses a sentence naming no tool that says a word of another tool's name", () => {
    const tools: ToolInfo[] = [
      ...TOOLS,
      { name: 'wire_transfer', description: null, arguments: [{ name: 'amount', type: 'number' }] },
    ];
    const both = compileMessage('Block send_payment over $500. Block transfers over $10,000.', tools, null);
    expect(both.rules.map((r) => [r.toolName, r.constraint?.maximum])).toEqual([['send_payment', 500]]);
    expect(both.notUnderstood[0]?.why).toMatch(/"transfer", which may mean "wire_transfer"/);
  });

  it('matches a value written with a curly apostrophe either way', () => {
    const rule = compileMessage('send_email body must not contain “don’t”', TOOLS, null).rules[0]!;
    const re = new RegExp(rule.constraint!.notRegex!);
    expect(re.test('I don’t')).toBe(true);
    expect(re.test("I don't")).toBe(true);
  });

  it("takes the conversation's tool for a sentence naming none only when the message names no other", () => {
    const tools: ToolInfo[] = [
      ...TOOLS,
      { name: 'issue_refund', description: null, arguments: [{ name: 'amount', type: 'number' }] },
    ];
    const both = compileMessage(
      'Block amounts over $1,000. For issue_refund, block amounts above $50.',
      tools,
      'send_payment',
    );
    expect(both.rules.map((r) => r.toolName)).toEqual(['issue_refund']);
    expect(both.notUnderstood[0]?.why).toMatch(/name the tool in this sentence/);
    const alone = compileMessage('Block amounts over $1,000.', tools, 'send_payment');
    expect(alone.rules.map((r) => r.toolName)).toEqual(['send_payment']);
    const named = compileMessage('Block amounts over $1,000 on send_payment.', tools, null);
    expect(named.rules.map((r) => r.toolName)).toEqual(['send_payment']);
  });

  it('allows one address at an allowed domain, not a list that ends with one', () => {
    const rule = compileMessage('Only allow send_email to acme.io', TOOLS, null).rules[0]!;
    const re = new RegExp(rule.constraint!.regex!.replace('(?i)', ''), 'i');
    expect(re.test('bob@ACME.io')).toBe(true);
    expect(re.test('eve@evil.com, bob@acme.io')).toBe(false);
    expect(re.test('Bob <bob@acme.io>')).toBe(false);
  });

  it('does not take a tool named by a rule word for that word', () => {
    const tools: ToolInfo[] = [
      ...TOOLS,
      { name: 'block', description: null, arguments: [{ name: 'minutes', type: 'number' }] },
      { name: 'ask', description: null, arguments: [{ name: 'budget', type: 'number' }] },
    ];
    const follow = compileMessage('Also block amounts over 50', tools, 'send_payment');
    expect(follow.rules.map((r) => r.toolName)).toEqual(['send_payment']);
    const ask = compileMessage('Ask a person above $500', tools, 'send_payment');
    expect(ask.rules.map((r) => r.toolName)).toEqual(['send_payment']);
    expect(compileMessage('Block send_payment over $1,000', tools, null).rules).toHaveLength(1);
    const named = compileMessage('Block `block` minutes over 60', tools, 'send_payment');
    expect(named.rules.map((r) => [r.toolName, r.constraint?.maximum])).toEqual([['block', 60]]);
    const called = compileMessage('For the block tool, minutes must be at most 60', tools, 'send_payment');
    expect(called.rules.map((r) => [r.toolName, r.constraint?.maximum])).toEqual([['block', 60]]);
  });

  it('does not split "between X and Y"', () => {
    expect(splitClauses('amount between 1 and 5 and block currency EUR', ['currency'])).toEqual([
      'amount between 1 and 5',
      'block currency EUR',
    ]);
  });
});

describe('long runs are read in linear time', () => {
  /** The regex made sticky: exec tries it at lastIndex only. */
  const at = (re: RegExp, text: string, index: number) => {
    const sticky = new RegExp(re.source, `${re.flags.replace(/[gy]/g, '')}y`);
    sticky.lastIndex = index;
    return sticky.exec(text);
  };

  // Unanchored, a regex beginning with NUM was tried at every digit of a run and backtracked over the
  // rest of it each time: 'block send_payment ' + 20,000 nines took 1.5 s per such regex. A number
  // that cannot start inside a run is read once per run.
  it('never reads a number from inside a run of digits, commas or points', () => {
    const texts = ['12345 or less', '1,000,000 or more', '2.50 at least', '$1,500 or fewer', 'under 99999'];
    const regexes = [new RegExp(NUM, 'i'), ...phrases.BOUNDS.map((b) => b.re)];
    let refused = 0;
    for (const text of texts) {
      for (let i = 1; i < text.length; i++) {
        if (!/[\d,.]/.test(text[i - 1]!)) continue;
        for (const re of regexes) {
          expect(at(re, text, i), `${re.source.slice(0, 30)}… at ${i} of "${text}"`).toBeNull();
          refused++;
        }
      }
    }
    expect(refused).toBeGreaterThan(100);
    // From the run's start the same phrases read as before.
    expect(compileMessage('send_payment amount 1,000,000 or more', TOOLS, null).rules[0]).toMatchObject({
      constraint: { minimum: 1_000_000 },
    });
    expect(compileMessage('send_payment amount $1,500 or fewer', TOOLS, null).rules[0]).toMatchObject({
      constraint: { maximum: 1500 },
    });
  });

  it(`reads at most ${NUM_MAX_CHARS} digits, commas and points as one number, never Infinity`, () => {
    const whole = new RegExp(`^${NUM}$`);
    expect(whole.exec(`$${'9'.repeat(NUM_MAX_CHARS)}`)?.[1]).toBe('9'.repeat(NUM_MAX_CHARS));
    expect(whole.test('9'.repeat(NUM_MAX_CHARS + 1))).toBe(false);
    expect(whole.test(`1,000${'.0'.repeat(NUM_MAX_CHARS)}`)).toBe(false);
    // 400 nines used to compile to '"amount" must be at most Infinity' (maximum: null in JSON).
    const out = compileMessage(`Block send_payment over ${'9'.repeat(400)}`, TOOLS, null);
    expect(out.rules).toEqual([]);
    expect(out.notUnderstood).toHaveLength(1);
  });

  it('starts no match inside a run of what the regex begins by repeating', () => {
    const cases: [RegExp, string, number, number][] = [
      // [regex, text, the run's first index (matches), an index inside the run (never)]
      [CLAUSE_END, 'block it,,,,', 8, 10],
      [CLAUSE_END, 'block it.;!?', 8, 9],
      [VALUE_SEPARATOR, 'USD     , EUR', 3, 6],
      [VALUE_SEPARATOR, 'USD     or EUR', 3, 5],
      [TRAILING_ONLY, 'USD     only', 3, 7],
      [clauseJoiner(['currency']), 'block x     and currency EUR', 7, 9],
      [clauseJoiner([]), 'block x     , and deny y', 7, 11],
    ];
    for (const [re, text, start, inside] of cases) {
      expect(at(re, text, start), `${re} at ${start} of "${text}"`).not.toBeNull();
      expect(at(re, text, inside), `${re} at ${inside} of "${text}"`).toBeNull();
    }
    // From one keyword the explicit-pattern regex scans no further than the next keyword, so a text
    // of many keywords is read once; the pattern is still the one after the last keyword.
    expect(at(phrases.EXPLICIT_REGEX, 'match pattern /^a+$/', 0)).toBeNull();
    expect(phrases.EXPLICIT_REGEX.exec('recipient must match the pattern /^a+$/')?.[1]).toBe('^a+$');
    expect(phrases.EXPLICIT_REGEX.exec(`${'match '.repeat(5)}\`x\``)?.[2]).toBe('x');
  });

  // The structural checks above are what keeps these fast; this runs every reader on long runs of
  // each kind (digits, spaces, letters, commas, points, '$'…), 100,000 characters, five times the
  // longest message the API takes. Each took seconds to minutes before (quadratic) and takes
  // milliseconds now: the bound is generous enough for a loaded machine.
  const RUNS: Record<string, string> = {
    digits: '9',
    spaces: ' ',
    letters: 'a',
    commas: ',',
    points: '.',
    dollars: '$',
    'digit comma': '1,',
    'digit point': '1.',
    'digit space': '1 ',
    'comma groups': '1,111',
    'dollar digit': '$1',
    'label point': 'a1.',
    'match word': 'match ',
    'contains quote': 'contains "',
    'cap word': 'cap x ',
    'space comma': ' ,',
    punctuation: ',.;!?',
    'framing word': 'always ',
    'framing phrase': 'from now on, ',
  };
  const chat = {
    tools: TOOLS,
    policies: new Map(),
    fallbackTool: null,
    judgeRoute: () => ({ provider: null, configured: false }),
  };
  it.each(Object.entries(RUNS))('reads a message made of a long run (%s) in linear time', (_, unit) => {
    const run = unit.repeat(Math.ceil(100_000 / unit.length)).slice(0, 100_000);
    for (const prefix of [
      'block send_payment ',
      'send_payment amount over ',
      'send_payment currency USD',
      '',
    ]) {
      const message = `${prefix}${run}x`;
      const started = performance.now();
      compileMessage(message, TOOLS, null);
      answerQuestion(`what if send_payment amount${run}?`, chat);
      answerQuestion(`${message}?`, chat);
      for (const re of Object.values(phrases).filter((v): v is RegExp => v instanceof RegExp))
        re.exec(message);
      expect(
        performance.now() - started,
        `${JSON.stringify(prefix)} + ${JSON.stringify(unit)}…`,
      ).toBeLessThan(2_000);
    }
  });
});

describe('tools named without words (separators or spaces only)', () => {
  const ODD = ['-', '_', '...', '--', '_-_', ' ', '   ', ' - '];
  const SENTENCES = [
    'Block send_payment over $1,000',
    'For send_payment, block amounts over $1,000 - and $5 at least',
    'what is the policy of send_payment?',
    '',
  ];

  it.each(ODD)('the pattern for %j never matches the empty string, nor a sentence not writing it', (name) => {
    const re = namePattern(name);
    expect(re.exec('')).toBeNull();
    for (const s of SENTENCES.slice(0, 3)) {
      for (let i = 0; i <= s.length; i++) {
        const sticky = new RegExp(re.source, 'iy');
        sticky.lastIndex = i;
        const m = sticky.exec(s);
        // Found only as written (a lone "-" is the name "-"), never as nothing.
        if (m) expect(m[0].trim().replace(/e?s$/i, '')).toBe(name.trim());
      }
    }
    // A name with words still matches as before.
    expect(namePattern('send_payment').test('Block send payments over 5')).toBe(true);
  });

  it.each(ODD)('a tool named %j does not take over sentences naming another tool', (name) => {
    const tools: ToolInfo[] = [
      TOOLS[0]!,
      { name, description: null, arguments: [{ name: 'x', type: 'string' }] },
    ];
    const out = compileMessage('Block send_payment over $1,000', tools, null);
    expect(out.notUnderstood).toEqual([]);
    expect(out.rules).toMatchObject([{ toolName: 'send_payment', constraint: { maximum: 1000 } }]);
    const chat = answerQuestion('what is the policy of send_payment?', {
      tools,
      policies: new Map(),
      fallbackTool: null,
      judgeRoute: () => ({ provider: null, configured: false }),
    });
    expect(chat.toolName).toBe('send_payment');
    expect(chat.reply).toMatch(/^send_payment /);
  });

  it('finds a separator name written exactly', () => {
    for (const name of ['-', '_']) {
      const tools: ToolInfo[] = [
        { name, description: null, arguments: [{ name: 'n', type: 'number' }] },
        TOOLS[0]!,
      ];
      const out = compileMessage(`Block ${name} over 5`, tools, 'send_payment');
      expect(out.rules).toMatchObject([{ toolName: name, constraint: { argumentName: 'n', maximum: 5 } }]);
    }
  });
});

/** What a message compiles to, without the clauses' own text (which framing is taken out of). */
const reading = (message: string) => {
  const out = compileMessage(message, TOOLS, null);
  return {
    rules: out.rules.map(({ text: _, ...rule }) => rule),
    why: out.notUnderstood.map((n) => n.why),
  };
};

describe('framing that opens or closes a sentence', () => {
  // Accepted and refused sentences alike: framing never changes what a sentence is read as.
  const SENTENCES = [
    'Block send_payment over $1,000',
    'send_payment amount must be at most $500',
    'Ask a person for send_payment over $500',
    'send_payment currency must be USD or EUR',
    'Only allow send_payment currency USD',
    'Block send_email to gmail.com',
    'send_email subject must start with "[ext]"',
    'delete_user reason is required',
    'At most 3 send_payment calls per session',
    'send_payment over $100',
    'Allow send_payment over $1,000',
    'Block send_payment unless currency is USD',
  ];

  it.each(FILLER_PHRASES)('reads "%s" at the start or the end of a sentence as nothing', (phrase) => {
    for (const sentence of SENTENCES) {
      const expected = reading(sentence);
      const lower = sentence[0]!.toLowerCase() + sentence.slice(1);
      const capital = phrase[0]!.toUpperCase() + phrase.slice(1);
      for (const framed of [
        `${capital}, ${lower}`,
        `${capital} ${lower}.`,
        `${sentence} ${phrase}`,
        `${sentence}, ${phrase}.`,
        `${capital}, ${lower} ${phrase}!`,
      ]) {
        expect(reading(framed), framed).toEqual(expected);
      }
    }
  });

  it.each(OPENING_PHRASES)('reads "%s" opening a sentence as nothing', (phrase) => {
    for (const sentence of SENTENCES) {
      const framed = `${phrase[0]!.toUpperCase()}${phrase.slice(1)} ${sentence[0]!.toLowerCase()}${sentence.slice(1)}`;
      expect(reading(framed), framed).toEqual(reading(sentence));
    }
  });

  it('reads several framing phrases, and splits a framed sentence as the sentence without them', () => {
    const two = reading('Block send_payment over $1,000, ask a person above $500');
    expect(two.rules).toHaveLength(2);
    for (const framed of [
      'From now on, block send_payment over $1,000, ask a person above $500',
      'Please, going forward, block send_payment over $1,000, ask a person above $500.',
      'Block send_payment over $1,000, ask a person above $500, from now on, please.',
    ]) {
      expect(reading(framed), framed).toEqual(two);
    }
    const joined = compileMessage(
      'From now on, block send_payment over $1,000 always and ask a person above $500 at all times.',
      TOOLS,
      null,
    );
    expect(joined.notUnderstood).toEqual([]);
    expect(joined.rules.map((r) => r.text)).toEqual([
      'block send_payment over $1,000',
      'ask a person above $500',
    ]);
  });

  it('keeps a phrase a reading places whole: "always include" is a required argument', () => {
    const required = [
      { toolName: 'delete_user', constraint: { argumentName: 'reason', enabled: true, required: true } },
    ];
    for (const sentence of [
      'Always include a reason on delete_user',
      'Please always include a reason on delete_user',
      'From now on, always include a reason on delete_user',
    ]) {
      expect(compileMessage(sentence, TOOLS, null).rules, sentence).toMatchObject(required);
    }
  });

  it('reads the words of framing nowhere else, and refuses a sentence of framing alone', () => {
    for (const sentence of [
      'Block send_email to gmail.com now',
      'Block send_payment cases over $1,000',
      'send_payment memo must not contain "x" onwards',
      'Block send_payment going forward over $1,000',
    ]) {
      const out = compileMessage(sentence, TOOLS, null);
      expect(out.rules, sentence).toEqual([]);
      expect(out.notUnderstood, sentence).toHaveLength(1);
    }
    for (const sentence of ['From now on.', 'Always, please.', 'Going forward']) {
      expect(compileMessage(sentence, TOOLS, 'send_payment').notUnderstood, sentence).toHaveLength(1);
    }
  });
});

describe('a comparison the calls are only let through by ("Allow X over $N")', () => {
  it('is refused, naming both readings in words that compile', () => {
    const over = compileMessage('Allow send_payment over $1,000', TOOLS, null);
    expect(over.rules).toEqual([]);
    expect(over.notUnderstood[0]?.why).toContain('"allow" says that calls over $1,000 may be made');
    expect(over.notUnderstood[0]?.why).toContain('"only allow … over $1,000"');
    expect(over.notUnderstood[0]?.why).toContain('"block … at or below $1,000"');
    expect(over.notUnderstood[0]?.why).toContain('"ask a person for … at or below $1,000"');
    const under = compileMessage('send_payment amounts under $100 are permitted', TOOLS, null);
    expect(under.notUnderstood[0]?.why).toContain('"only allow … under $100"');
    expect(under.notUnderstood[0]?.why).toContain('"block … at or above $100"');
    const length = compileMessage('Allow send_email subject under 80 characters', TOOLS, null);
    expect(length.notUnderstood[0]?.why).toContain('"only allow … under 80 characters"');
    // The suggested sentences compile, "only allow" and "block the other side" to the same rule.
    const rule = (m: string) => compileMessage(m, TOOLS, null).rules.map((r) => r.constraint);
    expect(rule('Only allow send_payment over $1,000')).toEqual([pay({ greaterThan: 1000 }).constraint]);
    expect(rule('Block send_payment at or below $1,000')).toEqual([pay({ greaterThan: 1000 }).constraint]);
    expect(rule('Ask a person for send_payment at or below $1,000')).toEqual([
      pay({ greaterThan: 1000, action: 'require_approval' }).constraint,
    ]);
    expect(rule('Only allow send_payment under $100')).toEqual([pay({ lessThan: 100 }).constraint]);
    expect(rule('Block send_payment at or above $100')).toEqual([pay({ lessThan: 100 }).constraint]);
  });

  it('reads a bound that states its limit by itself the same with "allow" as without', () => {
    for (const bound of [
      'up to $100',
      'at most $100',
      'no more than $100',
      'at least $10',
      'between $10 and $100',
    ]) {
      const plain = compileMessage(`send_payment amount ${bound}`, TOOLS, null).rules[0]?.constraint;
      expect(plain, bound).toBeDefined();
      expect(compileMessage(`Allow send_payment ${bound}`, TOOLS, null).rules[0]?.constraint, bound).toEqual(
        plain,
      );
    }
  });

  it('keeps "allow" with a person to ask: the calls over the limit go to a person', () => {
    expect(
      compileMessage('Allow send_payment over $1,000 with manager approval', TOOLS, null).rules,
    ).toMatchObject([pay({ maximum: 1000, action: 'require_approval' })]);
  });
});

describe('values, domains and patterns only let through by "allow" ("Allow X to acme.io")', () => {
  const rule = (m: string) => compileMessage(m, TOOLS, null).rules.map((r) => r.constraint);
  const why = (m: string) => {
    const out = compileMessage(m, TOOLS, null);
    expect(out.rules, m).toEqual([]);
    return out.notUnderstood[0]?.why ?? '';
  };

  it('is refused like a comparison, naming both readings in words that compile', () => {
    const domain = why('Allow send_email to acme.io');
    expect(domain).toContain('"allow" says that calls with "to" at acme.io may be made, not that the others');
    expect(domain).toContain('"only allow … to addresses at acme.io"');
    expect(domain).toContain('"block … to addresses at <the domains to stop>"');
    const values = why('Allow send_payment currency USD');
    expect(values).toContain('"allow" says that calls with "currency" USD may be made');
    expect(values).toContain('"only allow … currency USD"');
    // The declared values not allowed are the ones to block instead.
    expect(values).toContain('"block … currency EUR, GBP"');
    expect(why('Permit send_payment currency EUR')).toContain('"permit" says that calls');
    expect(why('Allow send_email subject starting with "[ext]"')).toContain(
      '"only allow … subject starting with "[ext]""',
    );
    expect(why('Allow send_payment memo matching `^INV-[0-9]+$`')).toContain(
      '"only allow … memo matching `^INV-[0-9]+$`"',
    );
    // The suggested "only allow" sentences compile to the allow-list, "block" to its complement.
    const to = on('send_email', 'to', { regex: `(?i)^[^\\s@,;<>"']+@(?:acme\\.io)$` }).constraint;
    expect(rule('Only allow send_email to addresses at acme.io')).toEqual([to]);
    expect(rule('Only allow send_payment currency USD')).toEqual([
      on('send_payment', 'currency', { enum: ['USD'] }).constraint,
    ]);
    expect(rule('Block send_payment currency EUR, GBP')).toEqual([
      on('send_payment', 'currency', { notEnum: ['EUR', 'GBP'] }).constraint,
    ]);
    expect(rule('Only allow send_payment recipient addresses at good.com')).toEqual(
      rule('Only allow send_payment recipients at good.com'),
    );
    expect(rule('Only allow send_payment memo matching `^INV-[0-9]+$`')).toEqual([
      on('send_payment', 'memo', { regex: '^INV-[0-9]+$' }).constraint,
    ]);
  });

  it('reads no value as the permission word', () => {
    expect(rule('Only allow send_email to allow.io')).toHaveLength(1);
    expect(rule('send_email subject must start with "Allow"')).toEqual([
      on('send_email', 'subject', { regex: '^Allow' }).constraint,
    ]);
    expect(why('Allow send_email to allow.io')).toContain('"only allow … to addresses at allow.io"');
  });

  it('leaves blocks, and clauses that ask a person, as they were', () => {
    expect(rule('Block send_email to gmail.com')).toHaveLength(1);
    expect(rule("Don't allow send_payment currency GBP")).toEqual([
      on('send_payment', 'currency', { notEnum: ['GBP'] }).constraint,
    ]);
    expect(why('Allow send_email to acme.io with manager approval')).toContain('asking a person');
  });
});

describe('a blocked domain on an argument that may hold more than an address', () => {
  /** Whether the engine denies each value of `arg` under the message's one rule. */
  const denies = (message: string, values: string[]) => {
    const out = compileMessage(message, TOOLS, null);
    expect(out.notUnderstood).toEqual([]);
    const constraint = out.rules[0]!.constraint!;
    const policy = compilePolicy({ mode: 'deterministic', constraints: [constraint] });
    return Object.fromEntries(
      values.map((v) => [v, evaluate(policy, { [constraint.argumentName]: v }).decision === 'deny']),
    );
  };

  it('stops the bare domain and its subdomains too, never another name', () => {
    const stopped = [
      'evil.corp',
      'EVIL.corp',
      'evil.corp.',
      'pay.evil.corp',
      'x@evil.corp',
      'x@pay.evil.corp',
      'Evil <x@evil.corp>',
      'acme.io, evil.corp',
    ];
    const passed = [
      'notevil.corp',
      'x@notevil.corp',
      'my-evil.corp',
      'evil.corp.example',
      'x@evil.corporate',
      'x@acme.io',
      'Acme Ltd',
    ];
    for (const message of [
      'Block send_payment to recipient evil.corp',
      'Block send_payment recipients at evil.corp addresses',
    ]) {
      const decided = denies(message, [...stopped, ...passed]);
      expect(decided, message).toEqual(
        Object.fromEntries([...stopped.map((v) => [v, true]), ...passed.map((v) => [v, false])]),
      );
    }
  });

  it('on an e-mail argument, stops addresses at the domain, a trailing dot included', () => {
    expect(
      denies('Block send_email to gmail.com', [
        'bob@gmail.com',
        'bob@gmail.com.',
        'Bob <bob@GMAIL.com.>',
        'bob@mail.gmail.com',
        'bob@gmail.company',
        'bob@notgmail.com',
      ]),
    ).toEqual({
      'bob@gmail.com': true,
      'bob@gmail.com.': true,
      'Bob <bob@GMAIL.com.>': true,
      'bob@mail.gmail.com': true,
      'bob@gmail.company': false,
      'bob@notgmail.com': false,
    });
  });

  it('keeps an allow-list to whole addresses at the domain', () => {
    const decided = denies('Only allow send_payment recipients at good.com', [
      'bob@good.com',
      'good.com',
      'bob@evil.corp',
      'eve@evil.com, bob@good.com',
    ]);
    expect(decided).toEqual({
      'bob@good.com': false,
      'good.com': true,
      'bob@evil.corp': true,
      'eve@evil.com, bob@good.com': true,
    });
  });
});
