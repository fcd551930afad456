import type { Constraint, ConstraintAction, ToolArgument } from '@svc/policy-engine';
import type { CompiledRule, CompileResult, NotUnderstood, ToolInfo } from './model.js';
import { countOf, isMoney, NUM, NUM_RE, numberOf } from './numbers.js';
import {
  AFFIX,
  AMBIGUOUS_NUMBER,
  APPROVAL,
  APPROVAL_HINT,
  affixParts,
  BOUNDS,
  type BoundKind,
  CALL_COUNT,
  CALLS,
  DOMAIN,
  DOMAIN_WORDS,
  EXCEPTION,
  EXPLICIT_REGEX,
  ITEMS_UNIT,
  LENGTH_UNIT,
  NEGATION_WORD,
  NEGATIVE,
  ONLY,
  PERMISSION,
  POSITIVE,
  REQUIRED,
  SESSION,
  TOTAL,
} from './phrases.js';

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const DOMAINS = new RegExp(DOMAIN.source, 'gi');
/**
 * Names of arguments that hold e-mail addresses (to, cc, reply_to, customer_email, senderAddress),
 * for which "to example.com" names a domain. A name with a part of a URL or a host (redirect_to,
 * from_url, server_address, ip_address) holds none: a domain there is not an address's.
 */
const ADDRESS_WORD = /^(?:to|cc|bcc|from|e?mails?|recipients?|address(?:es)?|senders?)$/;
/** The address words of arguments that hold nothing but e-mail addresses (not a recipient's name). */
const EMAIL_WORD = /^(?:to|cc|bcc|e?mails?|address(?:es)?)$/;
const NOT_ADDRESS_WORD =
  /^(?:url|urls|uri|link|links|href|host|hostname|ip|ipv4|ipv6|redirect|return|callback|webhook|site|website|endpoint|path|server|domain|page|forward|proxy|next)$/;
const nameParts = (name: string): string[] =>
  name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .split(/[_\-.\s]+/);
function isAddressArgument(name: string): boolean {
  const parts = nameParts(name);
  return !parts.some((part) => NOT_ADDRESS_WORD.test(part)) && parts.some((part) => ADDRESS_WORD.test(part));
}
/** An address argument that holds nothing but e-mail addresses (a recipient or sender may be a name). */
function isEmailArgument(name: string): boolean {
  return isAddressArgument(name) && nameParts(name).some((part) => EMAIL_WORD.test(part));
}
/** Every number with its currency ("$500", "300 USD"). */
const NUM_ALL = new RegExp(NUM, 'gi');

/** Matches nothing: what a name that cannot be told in a message (empty, or spaces only) is looked for with. */
const NOTHING = /[^\s\S]/;

/**
 * The ways a registered name may be written: send_payment, send payment, send-payment, sendPayment.
 * A name of separators only (`-`, `_`, `...`) has no words: it is found only as written. A blank one
 * is never found (its spaces are in every sentence). Never a pattern that matches the empty string:
 * that one would find the name in every message (every sentence would name that tool, and another
 * tool with it, so no rule could be written for any tool of the organization).
 */
export function namePattern(name: string): RegExp {
  if (name.trim() === '') return NOTHING;
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[\s_.-]+/)
    .filter(Boolean)
    .map(escapeRegex);
  const exact = escapeRegex(name);
  const forms = words.length > 0 ? `${exact}|${words.join(String.raw`[\s_-]?`)}` : exact;
  const re = new RegExp(String.raw`(?<![\w.@])(?:${forms})(?:e?s)?(?![\w@]|\.\w)`, 'i');
  // Its lookarounds are negative, so they all hold in the empty text: matching there is matching empty.
  if (re.test(''))
    throw new Error(`the pattern for the name ${JSON.stringify(name)} matches the empty string`);
  return re;
}

function mentioned<T extends { name: string }>(items: readonly T[], text: string): T[] {
  // Longer names first so "payment_id" is not taken for "payment".
  const sorted = [...items].sort((a, b) => b.name.length - a.name.length);
  const found: T[] = [];
  let rest = text;
  for (const item of sorted) {
    const re = namePattern(item.name);
    if (re.test(rest)) {
      found.push(item);
      rest = rest.replace(re, ' ');
    }
  }
  return found;
}

/**
 * Tools named by a word that rules are written with ("block", "ask", "limit"): such a word in a
 * sentence is that word, not the tool, unless the tool is written as code (`block`, "block") or
 * called a tool ("the block tool", "tool block").
 */
const RULE_VERBS = new Set(
  'block deny reject forbid prevent stop disallow refuse ban allow limit cap ask require approve escalate review never only must should'.split(
    ' ',
  ),
);

/** A tool written as code (`block`, "block") or called a tool ("the block tool", "tool block"). */
function asTool(name: string): RegExp {
  const n = escapeRegex(name);
  return new RegExp(String.raw`[\`"']${n}[\`"']|\btool\s+${n}\b|\b${n}\s+tool\b`, 'i');
}

function toolsNamed(tools: readonly ToolInfo[], text: string): ToolInfo[] {
  return mentioned(tools, text).filter(
    (t) => !RULE_VERBS.has(t.name.toLowerCase()) || asTool(t.name).test(text),
  );
}

/*
 * No regex here may be tried, unanchored, at every character of a long run and backtrack over the rest
 * of the run each time (quadratic: seconds for a 20,000-character message, the service's event loop
 * stalled meanwhile). A regex that begins with a repeated class starts with a lookbehind refusing a
 * start inside a run of that class: the run's first character gives the same match, and is tried once.
 */

/** Punctuation closing a clause, removed. */
export const CLAUSE_END = /(?<![.!?;,])[.!?;,]+$/;
/** What separates listed values: "USD, EUR or GBP", "a/b", "a | b". */
export const VALUE_SEPARATOR = /(?<!\s)\s*(?:,|\bor\b|\band\b|\/|\|)\s*/i;
/** "… only" closing a value ("USD only"). */
export const TRAILING_ONLY = /(?<!\s)\s+only$/i;

/** Where "and" / "also" joins two rules: the next part starts with a rule word or an argument name. */
export function clauseJoiner(keywords: readonly string[]): RegExp {
  const starters = [
    'block',
    'deny',
    'reject',
    'require',
    'ask',
    'limit',
    'only',
    'never',
    'allow',
    'forbid',
    'prevent',
    'disallow',
    'cap',
    'at most',
    'at least',
    'at or',
    'equal to or',
    'greater than or equal',
    'more than or equal',
    'less than or equal',
    'lower than or equal',
    'up to',
    'no more than',
    'escalate',
    'make',
    'each',
    'every',
    ...keywords,
  ].map(escapeRegex);
  return new RegExp(
    String.raw`(?<!\s)\s*(?:,\s*|;\s*)?\b(?:and also|and|also|but|then)\s+(?=(?:${starters.join('|')})\b)`,
    'i',
  );
}

/** A comma before a rule verb: "block payments over $1,000, ask a person above $500". */
const COMMA_VERB =
  /,\s*(?=(?:block|deny|reject|require|ask|limit|never|forbid|prevent|disallow|escalate)\b)/i;

/** A part that begins as a rule does: with a rule verb, after at most a "tool:" label. */
const STARTS_A_RULE =
  /^(?:[^,:]*:\s*)?(?:please\s+)?(?:block|deny|reject|forbid|prevent|disallow|refuse|ban|never|allow|limit|cap|ask|require|escalate)\b/i;

/**
 * A part split at each comma before a rule verb, where both sides are rules of their own: the part
 * before begins with a rule verb, and each side gives its own number ("block payments over $1,000,
 * ask a person above $500"). "For send_payment, ask a person above $500", "At or above $1,000,
 * block send_payment" and "Should the amount exceed $1,000, block it" stay one rule: the first part
 * is the condition of the second.
 */
function splitAtCommas(part: string): string[] {
  const out: string[] = [];
  for (const piece of part.split(COMMA_VERB)) {
    const before = out[out.length - 1];
    if (before !== undefined && !(STARTS_A_RULE.test(before) && /\d/.test(before) && /\d/.test(piece)))
      out[out.length - 1] += `, ${piece}`;
    else out.push(piece);
  }
  return out;
}

/**
 * Framing that says nothing about which calls: read only as a whole phrase opening or closing a
 * sentence or a clause, and taken out before the rule is read, so that it never changes the
 * reading. Its words are no words of the rule elsewhere ("now", "cases" are refused).
 */
export const FILLER_PHRASES = [
  'from now on',
  'from here on',
  'going forward',
  'henceforth',
  'in all cases',
  'at all times',
  'always',
  'please',
] as const;
/** Framing that only opens a sentence ("Ensure that send_payment amount is at most $1,000"). */
export const OPENING_PHRASES = ['make sure that', 'make sure', 'ensure that', 'ensure'] as const;

/** Phrases as regex alternatives, longer ones first, their words apart by any spaces. */
const phraseAlternatives = (phrases: readonly string[]): string =>
  [...phrases]
    .sort((a, b) => b.length - a.length)
    .map((p) => p.split(' ').map(escapeRegex).join(String.raw`\s+`))
    .join('|');
const FILLER_ALTERNATIVES = phraseAlternatives(FILLER_PHRASES);
/** Opening framing, one phrase or several ("Please, from now on, …"), before the rule itself. */
const LEADING_FILLER = new RegExp(
  String.raw`^(?:(?:${phraseAlternatives([...OPENING_PHRASES, ...FILLER_PHRASES])})\b[\s,:]*)+(?=\S)`,
  'i',
);
/**
 * Closing framing, one phrase or several ("…, from now on, please."). It starts after a word that is
 * no such phrase, so a run of them is read from its first one only (linear, never once per phrase).
 */
const TRAILING_FILLER = new RegExp(
  String.raw`(?<=[^\s,])(?<!\b(?:${FILLER_ALTERNATIVES}))(?:[\s,]+(?:${FILLER_ALTERNATIVES})\b)+[\s.!?;,]*$`,
  'i',
);

/**
 * A sentence or a clause without the framing that opens or closes it (see FILLER_PHRASES). A phrase
 * a reading places whole that framing words begin stays ("Always include a reason": a required
 * argument). One that is nothing but framing ("From now on.") is kept, and refused as no rule.
 */
export function withoutFiller(text: string): string {
  const whole = text.trim();
  let out = whole;
  const lead = LEADING_FILLER.exec(out);
  if (lead) out = out.slice(Math.min(lead[0].length, REQUIRED.exec(out)?.index ?? out.length));
  const tail = TRAILING_FILLER.exec(out);
  const required = [...out.matchAll(REQUIRED_ALL)].pop();
  if (tail && (!required || required.index + required[0].length <= tail.index))
    out = out.slice(0, tail.index);
  return /\w/.test(out) ? out : whole;
}

/**
 * Sentences, then parts joined by "and" / "also" (or a comma) where the next part starts a new rule;
 * framing is taken out of each sentence (so that "From now on, block …, ask …" splits as "Block …,
 * ask …") and of each part.
 */
export function splitClauses(message: string, keywords: string[]): string[] {
  const joiner = clauseJoiner(keywords);
  return message
    .replace(/[\u2018\u2019]/g, "'")
    .replace(/[\u201c\u201d]/g, '"')
    .split(/(?<=[.!?;])\s+|\n+|;\s*/)
    .map(withoutFiller)
    .flatMap((s) => s.split(joiner))
    .flatMap(splitAtCommas)
    .map((s) => withoutFiller(s.trim().replace(CLAUSE_END, '')))
    .filter((s) => s.length > 0);
}

type Polarity = { action: ConstraintAction; restricted: boolean } | null;

/** Quoted values and patterns: values, never words of the rule ("must start with "Stop""). */
const QUOTED = /`[^`]*`|"[^"]*"|(?<!\w)'(?:[^']|(?<=\w)'(?=\w))*'(?!\w)|\/[^/\s][^/]*\//g;

/** Whether the clause describes calls to stop, to send to a person, or the allowed ones (null: cannot tell). */
function polarityOf(text: string, inherent: boolean): Polarity {
  const clause = text.replace(QUOTED, ' ');
  if (APPROVAL.test(clause)) return { action: 'require_approval', restricted: true };
  if (NEGATIVE.test(clause)) return { action: 'deny', restricted: true };
  if (inherent || POSITIVE.test(clause)) return { action: 'deny', restricted: false };
  return null;
}

interface Bound {
  kind: BoundKind;
  values: number[];
  inherent: boolean;
  text: string;
}

function findBound(clause: string): Bound | null {
  for (const b of BOUNDS) {
    const m = b.re.exec(clause);
    if (!m) continue;
    const values =
      b.kind === 'between' ? [numberOf(m[1]!, m[2]), numberOf(m[3]!, m[4])] : [numberOf(m[1]!, m[2])];
    return { kind: b.kind, values, inherent: b.inherent, text: m[0] };
  }
  return null;
}

const BOUNDS_ALL = BOUNDS.map((b) => new RegExp(b.re.source, `${b.re.flags}g`));

/** How many bounds the clause writes, each part of it read once ("no more than 5" is one bound, not two). */
function boundCount(clause: string): number {
  const taken: [number, number][] = [];
  for (const re of BOUNDS_ALL) {
    for (const m of clause.matchAll(re)) {
      const start = m.index;
      const end = start + m[0].length;
      if (!taken.some(([s, e]) => start < e && s < end)) taken.push([start, end]);
    }
  }
  return taken.length;
}

const TWO_BOUNDS =
  'it gives two limits in one rule; write one sentence per limit, or "between X and Y" for a range of allowed values';

/** The other side of a comparison that leaves its number out: "over 5" stops at or below 5. */
const OTHER_SIDE: Partial<Record<BoundKind, string>> = { gt: 'at or below', lt: 'at or above' };

/**
 * The permission word ("allow", "is permitted") of a clause that only lets the calls it describes
 * through, or null. Such a clause says those calls may be made, not that the others are stopped;
 * reading it as "only allow" would stop the others on a guess. It is null when the clause says so
 * itself: "only" ("Only allow …", "Allow only …", "… only"), a negation or a person to ask
 * (`restricted`), or no permission word at all ("must be", "limit … to", "keep …" keep the values).
 * `words` is the clause without the rule's own values (quoted values are dropped here), so that a
 * value ("allow.io", `"Allow"`) is never read as the word.
 */
function bareAllow(polarity: NonNullable<Polarity>, words: string): string | null {
  if (polarity.restricted) return null;
  const text = words.replace(QUOTED, ' ');
  const permission = PERMISSION.exec(text);
  return permission && !ONLY.test(text) ? permission[0].toLowerCase() : null;
}

/**
 * Why a bare permission is refused: calls `described` may be made. The reason suggests "only allow
 * … `kept`", or "block … `stop.block`": for a comparison the same rule (its other side), also to
 * ask a person for; for values or a pattern the values to stop instead, the others left allowed.
 */
function permissionWhy(
  word: string,
  described: string,
  kept: string,
  stop: { block: string; comparison?: boolean },
): string {
  const block = `"block … ${stop.block}"`;
  const fix = stop.comparison
    ? `write "only allow … ${kept}" (the same as ${block}) to stop the others, or "ask a person for … ${stop.block}" to send them to a person`
    : `write "only allow … ${kept}" to stop the others, or ${block} to stop only those`;
  return `"${word}" says that calls ${described} may be made, not that the others are stopped (a call no rule stops is allowed already): ${fix}`;
}

/**
 * Why a comparison the calls are only let through by ("Allow send_payment over $1,000", "amounts
 * under $100 are permitted") is refused, or null (see bareAllow). A bound that states its limit by
 * itself ("up to", "at most", "at least", "between") is read as that limit, allowed or not: "Allow
 * send_payment up to $100" is "send_payment up to $100". `rest` is the clause without the bound;
 * `unit` follows the number in the suggestions.
 */
function permissionOnly(
  bound: Bound,
  polarity: NonNullable<Polarity>,
  rest: string,
  unit = '',
): string | null {
  const other = OTHER_SIDE[bound.kind];
  const word = bound.inherent || !other ? null : bareAllow(polarity, rest);
  if (!word) return null;
  const n = `${NUM_RE.exec(bound.text)![0].trim()}${unit}`;
  const range = `${bound.text}${unit}`;
  return permissionWhy(word, range, range, { block: `${other} ${n}`, comparison: true });
}

type Field = 'minimum' | 'maximum' | 'greaterThan' | 'lessThan';

/** The allowed-range fields a bound sets, given whether it describes the allowed or the stopped calls. */
function boundFields(b: Bound, restricted: boolean): Partial<Record<Field, number>> | string {
  const [x, y] = b.values as [number, number?];
  if (b.kind === 'between') {
    if (restricted)
      return 'a range to stop in the middle cannot be written as one rule; say "under X" or "over Y"';
    return x <= y! ? { minimum: x, maximum: y! } : { minimum: y!, maximum: x };
  }
  const allowed: Record<BoundKind, Field> = {
    le: 'maximum',
    lt: 'lessThan',
    ge: 'minimum',
    gt: 'greaterThan',
    between: 'minimum',
  };
  const stopped: Record<BoundKind, Field> = {
    gt: 'maximum',
    ge: 'lessThan',
    lt: 'minimum',
    le: 'greaterThan',
    between: 'minimum',
  };
  return { [(restricted ? stopped : allowed)[b.kind]]: x };
}

const FIELD_WORDS: Record<Field, string> = {
  minimum: 'at least',
  maximum: 'at most',
  greaterThan: 'more than',
  lessThan: 'less than',
};

function describeBounds(fields: Partial<Record<Field, number>>): string {
  return (Object.entries(fields) as [Field, number][])
    .map(([f, v]) => `${FIELD_WORDS[f]} ${v}`)
    .join(' and ');
}

function sampleFor(fields: Partial<Record<Field, number>>): { allowed: number; denied: number } {
  const { minimum, maximum, greaterThan, lessThan } = fields;
  if (maximum !== undefined)
    return { allowed: minimum ?? Math.min(maximum, Math.max(0, maximum / 2)), denied: maximum + 1 };
  if (lessThan !== undefined) return { allowed: lessThan - 1, denied: lessThan };
  if (minimum !== undefined) return { allowed: minimum, denied: minimum - 1 };
  return { allowed: greaterThan! + 1, denied: greaterThan! };
}

interface Ctx {
  tool: ToolInfo;
  /** The clause without the names of the tool and its arguments, where the rule is read. */
  clause: string;
  /** The clause without the tool's name, where arguments are looked for. */
  body: string;
}

type Outcome = { rule: Omit<CompiledRule, 'toolName' | 'text'> } | { why: string } | null;

const argNames = (args: ToolArgument[]) => args.map((a) => `"${a.name}"`).join(', ');

/** Words that say how, not what: they never name an argument. */
const STOP = new Set(
  (
    'a an the of for to from on in at by with when whenever if any all each every per it its them this that these those ' +
    'block blocks blocking deny denies reject rejects forbid prevent stop disallow refuse ban never allow allows allowed ' +
    "only limit limited cap capped must should be is are was can cannot may might not no do does dont don't will would " +
    'need needs require requires required ask person human someone review approval approve escalate instead please ' +
    'than more less over under above below between and or but also then call calls payment payments amount amounts ' +
    'value values sum transfer transfers transaction transactions charge charges money spend spending exceed exceeds ' +
    'exceeding up most least maximum minimum max min equal greater lower higher larger bigger smaller fewer times once twice ' +
    'including inclusive ' +
    'dollars dollar usd eur euros gbp pounds bucks k thousand million billion make sure always any ' +
    'total totals cumulative cumulatively combined altogether aggregate overall session sessions conversation run ' +
    'get getting approved reviewed permitted team ' +
    'characters character chars letters items item entries elements recipients recipient addresses attachments files'
  ).split(' '),
);

/**
 * The words a rule may be written with (STOP's and these), beside the names of the tool and its
 * arguments, numbers, quoted values, domains and addresses, and the rule's own values. Anything else
 * is refused.
 */
const VOCABULARY = new Set([
  ...STOP,
  ...(
    'blocked denied rejected forbidden prohibited stopped prevented declined refused disallowed ' +
    "banned permit permits restrict restricted keep kept stay stays has have having had needed can't " +
    "mustn't shouldn't won't isn't aren't doesn't couldn't wouldn't nothing none neither nor anything " +
    'everything something just exactly start starts starting begin begins beginning end ends ending ' +
    'contain contains containing include includes match matches matching pattern regex regexp without ' +
    'present provided set given one two three four five six seven eight nine ten twelve twenty fifty ' +
    'hundred time conversations runs request requests use uses long longer short shorter length size ' +
    'big large small beyond exceeded go goes going gone reach reaches reached escalated escalates ' +
    'escalation send sent people humans manager supervisor somebody approves approvals reviews sign ' +
    'signed off else otherwise there their they which who whose what where while tool tools argument ' +
    'arguments field fields parameter parameters address domain domains email emails e-mail mail euro ' +
    'pound m mm bn equals or-more or-less included through down into onto out accept accepts accepted ' +
    'ok okay fine shall been being were did done doing don as some such other another together rule ' +
    'rules policy after'
  ).split(' '),
]);

// Words of the phrasings that change a rule's meaning when they stand elsewhere ("all but those
// under $1,000", "the first 3 calls", "can be over 1000", "per team", "or empty", "attachments" for
// the tool's one array): never read as filler.
for (const w of 'but first can may might could team same empty blank missing attachments files'.split(' ')) {
  VOCABULARY.delete(w);
}

/** How many numbers a rule holds (its bounds, its count or total). */
function numbersOf(rule: Omit<CompiledRule, 'toolName' | 'text'>): number {
  const c = (rule.constraint ?? {}) as Record<string, unknown>;
  const bounds = [
    'minimum',
    'maximum',
    'greaterThan',
    'lessThan',
    'minLength',
    'maxLength',
    'minItems',
    'maxItems',
  ];
  return (
    bounds.filter((k) => typeof c[k] === 'number').length +
    (rule.maxCalls === undefined ? 0 : 1) +
    (rule.cumulative === undefined ? 0 : 1)
  );
}

/**
 * The first word of a clause (names taken out) that Charter does not read, or a number the rule
 * does not hold ("between $10 and under $500" read as under $500 alone), or null.
 */
function unreadWord(words: string, rule: Omit<CompiledRule, 'toolName' | 'text'>): string | null {
  const constraint = rule.constraint;
  // The phrases a reading placed whole: an approval and whom it names, a required phrase.
  let text = words
    .replace(APPROVAL_WHO_ALL, ' ')
    .replace(PERSON, ' ')
    .replace(REQUIRED_ALL, ' ')
    .replace(QUOTED, ' ')
    .replace(EXPLICIT_REGEX, ' ')
    .replace(AFFIX, ' ')
    .replace(/[^\s@,;<>"']+@[^\s,;<>"']+/g, ' ')
    .replace(DOMAINS, ' ');
  for (const v of [...(constraint?.enum ?? []), ...(constraint?.notEnum ?? [])]) {
    if (typeof v === 'string' && v !== '')
      text = text.replace(new RegExp(`(?<![\\w.-])${escapeRegex(v)}(?![\\w.-])`, 'gi'), ' ');
  }
  const numbers = text.match(NUM_ALL) ?? [];
  if (numbers.length > numbersOf(rule)) return numbers.map((n) => n.trim()).join('" and "');
  text = text.replace(NUM_ALL, ' ');
  for (const w of text.toLowerCase().match(/[a-z][a-z'-]*/g) ?? []) {
    const word = w.replace(/'s$/, '');
    if (!VOCABULARY.has(word) && !VOCABULARY.has(word.replace(/s$/, ''))) return w;
  }
  return null;
}

/** A value another argument of the tool declares, written as a word in the clause, if any. */
function declaredValueIn(ctx: Ctx, picked: ToolArgument): { arg: string; value: string } | null {
  const words = ctx.clause.replace(NUM_ALL, ' ');
  for (const a of ctx.tool.arguments) {
    if (a === picked || !a.enum) continue;
    for (const v of a.enum) {
      // A value that is a common word ("a", "over") is read as the word; a currency code is a value.
      if (v.trim() === '' || (STOP.has(v.toLowerCase()) && !isMoney(v))) continue;
      if (new RegExp(String.raw`(?<![\w])${escapeRegex(v)}(?![\w])`, 'i').test(words))
        return { arg: a.name, value: v };
    }
  }
  return null;
}

/** An argument name that is also a short common word ("to", "for"): in a sentence, read as the word. */
function commonWord(name: string): boolean {
  const n = name.toLowerCase();
  return STOP.has(n) && n.length <= 4 && !RULE_VERBS.has(n);
}

/** A word the clause uses for its subject that is no registered argument ("the fee"), or null. */
function unknownSubject(body: string): string | null {
  const words = body
    .replace(/[$€£¥]?\d[\d,.]*\w*/g, ' ')
    .toLowerCase()
    .match(/[a-z][a-z'_-]*/g);
  return words?.find((w) => w.length >= 3 && !STOP.has(w)) ?? null;
}

/** The argument a clause is about: the one it names, else the only one of the wanted type. */
function pickArgument(ctx: Ctx, types: string[], hint: string): ToolArgument | { why: string } {
  const picked = whichArgument(ctx, types, hint);
  if ('why' in picked) return picked;
  // A declared value of another argument ("in EUR", "USD payments up to $500") is a condition the
  // rule would drop. A currency written with the amount ("300 USD") is the amount's.
  const value = declaredValueIn(ctx, picked);
  if (value) {
    return {
      why: `it speaks of "${value.value}", a value of "${value.arg}"; a rule cannot depend on another argument: write it for every call, and the allowed values of "${value.arg}" as a rule of their own`,
    };
  }
  return picked;
}

function whichArgument(ctx: Ctx, types: string[], hint: string): ToolArgument | { why: string } {
  const named = mentioned(ctx.tool.arguments, ctx.body);
  let typed = named.filter((a) => types.includes(a.type));
  // Beside another, an argument named like a common word ("to") is only that word.
  if (typed.length > 1 && typed.some((a) => !commonWord(a.name)))
    typed = typed.filter((a) => !commonWord(a.name));
  if (typed.length === 1) {
    // Another argument named beside it is a condition this rule would drop ("… or the currency is GBP").
    const other = named.find((a) => a !== typed[0] && !commonWord(a.name));
    if (other) {
      return {
        why: `it also speaks of "${other.name}"; write one rule per argument (a rule cannot depend on another argument)`,
      };
    }
    return typed[0]!;
  }
  if (typed.length > 1) {
    return { why: `it names several arguments (${argNames(typed)}); write one rule per argument` };
  }
  const wrong = named.find((a) => !commonWord(a.name));
  if (wrong) {
    return {
      why: `argument "${wrong.name}" of "${ctx.tool.name}" is a ${wrong.type}, and this rule needs ${hint}`,
    };
  }
  const candidates = ctx.tool.arguments.filter((a) => types.includes(a.type));
  const other = unknownSubject(ctx.body);
  if (other) {
    return { why: `"${other}" is not an argument of "${ctx.tool.name}" (${argNames(ctx.tool.arguments)})` };
  }
  if (candidates.length === 1) return candidates[0]!;
  if (candidates.length === 0) return { why: `tool "${ctx.tool.name}" has no argument that is ${hint}` };
  return {
    why: `it does not say which argument of "${ctx.tool.name}" it is about (${argNames(candidates)})`,
  };
}

/** The allowed side of a bound that describes the stopped calls: stopping over X allows at most X. */
const ALLOWED_SIDE: Record<BoundKind, BoundKind | null> = {
  gt: 'le',
  ge: 'lt',
  le: 'gt',
  lt: 'ge',
  between: null,
};

function sessionRule(ctx: Ctx): Outcome {
  if (!SESSION.test(ctx.clause)) return null;
  const total = TOTAL.test(ctx.clause);
  if (!total && isMoney(ctx.clause) && !/\b(?:calls?|times?|requests?|uses?)\b/i.test(ctx.clause)) {
    return {
      why: 'say "in total per session" for a cap on the session\'s total, or leave "per session" out for a limit on each call',
    };
  }
  if (total) {
    const bound = findBound(ctx.clause);
    if (!bound || bound.kind === 'between')
      return { why: 'a session total needs an upper limit, such as "at most $5,000 in total per session"' };
    const polarity = polarityOf(ctx.clause.replace(bound.text, ' '), bound.inherent);
    if (!polarity) return { why: 'it does not say whether totals like this are allowed or stopped' };
    if (polarity.action === 'require_approval')
      return { why: 'session totals can only be enforced by blocking, not by asking a person' };
    // "stop when the total goes over X" and "total at most X" both cap the total at X. A cap that
    // leaves X itself out ("stop at or above X", "under X") has no exact form: a cumulative limit
    // lets a total equal to it through.
    const cap = polarity.restricted ? ALLOWED_SIDE[bound.kind] : bound.kind;
    if (cap !== 'le' && cap !== 'lt') return { why: 'a session total needs an upper limit' };
    if (cap === 'lt') {
      return {
        why: `a session total can only be capped including the limit itself; write "at most ${bound.values[0]} in total per session" to let a total of exactly ${bound.values[0]} through, or name a lower cap`,
      };
    }
    const arg = pickArgument(ctx, ['number'], 'a number');
    if ('why' in arg) return arg;
    const maxValue = bound.values[0]!;
    return {
      rule: {
        summary: `the total of "${arg.name}" over a session is at most ${maxValue}`,
        cumulative: { argumentName: arg.name, maxValue },
      },
    };
  }
  // A limit on an argument "per session" is neither a count of calls nor (without "total") a total.
  if (!/\b(?:calls?|times?|requests?|uses?|invocations?|once|twice|thrice)\b/i.test(ctx.clause)) {
    return {
      why: 'say "in total per session" for a limit on the sum over a session, or leave out "per session" for a limit on each call',
    };
  }
  // The count of calls: a number written with "calls" or "times" first, else the first number.
  const counted = ctx.clause.match(CALL_COUNT) ?? ctx.clause.match(CALLS);
  const word = counted ? counted[0].match(/^\S+/)![0] : '';
  const n = counted ? countOf(word) : null;
  if (n === null) return { why: 'it mentions a session but no number of calls' };
  const at = counted!.index!;
  const rest = ctx.clause.slice(0, at) + ' ' + ctx.clause.slice(at + counted![0].length);
  if (isMoney(ctx.clause) || NUM_RE.test(rest)) {
    return {
      why: 'a limit on calls per session counts every call of the tool; it cannot depend on the arguments (write that limit on its own)',
    };
  }
  // The count in digits and without its unit, so that a bound reads it however it is written
  // ("fewer than three times", "5 times or more").
  const numbered = `${ctx.clause.slice(0, at)}${n}${ctx.clause.slice(at + counted![0].length)}`;
  // The bound, when it is the one on the number of calls ("no more than 5 calls", "5 or more calls").
  const found = findBound(numbered);
  const bound = found && found.kind !== 'between' && found.values[0] === n ? found.kind : null;
  const polarity = polarityOf(bound ? numbered.replace(found!.text, ' ') : numbered, true);
  if (polarity?.action === 'require_approval')
    return { why: 'calls per session can only be limited by blocking, not by asking a person' };
  // A bound word not on the count, or a count "at" which calls stop: which side is meant is unclear.
  if (
    !bound &&
    /\b(?:or more|or fewer|or less|at least|at most|minimum|maximum|more than|fewer than|less than|starting|reaching|from \d|at \d)\b/i.test(
      numbered,
    )
  ) {
    return { why: 'it does not say plainly how many calls are allowed; write "at most N calls per session"' };
  }
  // "block after 5 calls", "no more than 5 calls", "block more than 5 calls", "5 times per session":
  // at most n; "fewer than 5 calls", "block 5 or more calls": at most n - 1.
  const cap = bound && polarity?.restricted ? ALLOWED_SIDE[bound] : bound;
  if (cap === 'ge' || cap === 'gt') {
    return { why: 'a session limit needs an upper limit on calls, such as "at most 5 calls per session"' };
  }
  const max = cap === 'lt' ? n - 1 : n;
  if (max < 1) return { why: 'a session limit below one call would block every call' };
  return { rule: { summary: `at most ${max} call${max === 1 ? '' : 's'} per session`, maxCalls: max } };
}

function lengthRule(ctx: Ctx): Outcome {
  const isLength = LENGTH_UNIT.test(ctx.clause);
  const isItems = !isLength && ITEMS_UNIT.test(ctx.clause);
  if (!isLength && !isItems) return null;
  const bound = findBound(ctx.clause);
  if (!bound) return null;
  if (boundCount(ctx.clause) > 1) return { why: TWO_BOUNDS };
  const rest = ctx.clause.replace(bound.text, ' ');
  const polarity = polarityOf(rest, bound.inherent);
  if (!polarity) return { why: 'it does not say whether such values are allowed or stopped' };
  const arg = pickArgument(ctx, isLength ? ['string'] : ['array'], isLength ? 'a string' : 'an array');
  if ('why' in arg) return isItems ? null : arg;
  const written = (isLength ? LENGTH_UNIT : ITEMS_UNIT).exec(ctx.clause)![0];
  const permitted = permissionOnly(bound, polarity, rest, ` ${written}`);
  if (permitted) return { why: permitted };
  const fields = boundFields(bound, polarity.restricted);
  if (typeof fields === 'string') return { why: fields };
  const [lo, hi] = isLength ? (['minLength', 'maxLength'] as const) : (['minItems', 'maxItems'] as const);
  const c: Constraint = { argumentName: arg.name, enabled: true };
  if (fields.maximum !== undefined) c[hi] = fields.maximum;
  if (fields.lessThan !== undefined) c[hi] = Math.ceil(fields.lessThan) - 1;
  if (fields.minimum !== undefined) c[lo] = fields.minimum;
  if (fields.greaterThan !== undefined) c[lo] = Math.floor(fields.greaterThan) + 1;
  if (polarity.action === 'require_approval') c.action = 'require_approval';
  const unit = isLength ? 'characters' : 'items';
  const parts = [
    c[lo] !== undefined ? `at least ${c[lo]}` : null,
    c[hi] !== undefined ? `at most ${c[hi]}` : null,
  ].filter(Boolean);
  return {
    rule: {
      summary: `"${arg.name}" has ${parts.join(' and ')} ${unit}${c.action ? ', else a person approves' : ''}`,
      constraint: c,
    },
  };
}

function numericRule(ctx: Ctx): Outcome {
  const bound = findBound(ctx.clause);
  if (!bound) return null;
  if (boundCount(ctx.clause) > 1) return { why: TWO_BOUNDS };
  const rest = ctx.clause.replace(bound.text, ' ');
  const polarity = polarityOf(rest, bound.inherent);
  if (!polarity) {
    return { why: 'it does not say whether such calls are allowed, blocked or sent to a person' };
  }
  const arg = pickArgument(ctx, ['number'], 'a number');
  if ('why' in arg) return arg;
  const permitted = permissionOnly(bound, polarity, rest);
  if (permitted) return { why: permitted };
  const fields = boundFields(bound, polarity.restricted);
  if (typeof fields === 'string') return { why: fields };
  const c: Constraint = { argumentName: arg.name, enabled: true, ...fields };
  if (polarity.action === 'require_approval') c.action = 'require_approval';
  const s = sampleFor(fields);
  return {
    rule: {
      summary:
        polarity.action === 'require_approval'
          ? `"${arg.name}" must be ${describeBounds(fields)}, else a person approves the call`
          : `"${arg.name}" must be ${describeBounds(fields)}`,
      constraint: c,
      samples: { argumentName: arg.name, allowed: s.allowed, denied: s.denied },
    },
  };
}

/**
 * The pattern stopping values at any of `alts` (domains as regex alternatives), in any case. An
 * e-mail argument holds addresses: a domain, or a subdomain of it, follows "@" or "." and ends a name
 * ("Bob <bob@GMAIL.com>" too). Another address argument (a recipient, a sender) may hold the domain
 * itself, or a name beside an address: the domain is stopped wherever it stands whole ("evil.corp",
 * "evil.corp.", "pay.evil.corp", "Evil <x@evil.corp>"), never inside another name ("notevil.corp",
 * "evil.corp.example").
 */
function blockedDomains(alts: string, email: boolean): string {
  return email
    ? String.raw`(?i)[@.](?:${alts})\.?(?:$|[^a-z0-9.-])`
    : String.raw`(?i)(?:^|[^a-z0-9-])(?:${alts})\.?(?:$|[^a-z0-9.-])`;
}

function patternRule(ctx: Ctx): Outcome {
  const explicit = EXPLICIT_REGEX.exec(ctx.clause);
  const affix = explicit ? null : AFFIX.exec(ctx.clause);
  // "to example.com" names a domain only for an address argument ("emails to gmail.com").
  const domainWords = DOMAIN_WORDS.test(ctx.body);
  const viaTo = !domainWords && /\bto\b/i.test(ctx.body);
  const domain = explicit || affix || !(domainWords || viaTo) ? null : DOMAIN.exec(ctx.clause);
  const domains = domain
    ? [...new Set([...ctx.clause.matchAll(DOMAINS)].map((m) => m[1]!.toLowerCase()))]
    : [];
  const alts = domains.map(escapeRegex).join('|');
  if (!explicit && !affix && !domain) return null;
  const polarity = polarityOf(ctx.clause, false);
  if (!polarity) return { why: 'it does not say whether matching values are allowed or stopped' };
  const arg = pickArgument(ctx, ['string'], 'a string');
  if ('why' in arg) return arg;
  // A domain is read as the domain of an address; links or words in text are "must not contain …".
  if (domain && !isAddressArgument(arg.name)) {
    return {
      why: `"${arg.name}" is no address: say "${arg.name} must not contain …" for text, or name the address argument`,
    };
  }
  // What follows the pattern's value.
  const after = affix ? ctx.clause.slice(affix.index + affix[0].length) : '';
  // A second quoted value would be dropped ("must not contain "a" or "b"").
  if (affix && /^\s*(?:[,/(]|\b(?:or|and|nor|plus|as well as)\b)/i.test(after)) {
    return { why: 'write one rule per value ("… must not contain "a"", then "… must not contain "b"")' };
  }
  // A value written without quotes ends at the first space: more words after it were part of it.
  if (affix?.[5] !== undefined && !/^\s*(?:only|please|always)?\s*$/i.test(after)) {
    return { why: `quote a value that holds spaces or is followed by more words ("${affix[5]} …")` };
  }
  let regex: string;
  let words: string;
  let sample: { allowed?: unknown; denied?: unknown } = {};
  if (explicit) {
    regex = (explicit[1] ?? explicit[2])!;
    words = `match ${regex}`;
  } else if (affix) {
    const { verb, value } = affixParts(affix);
    // The message's curly apostrophes were made straight: the value matches either ("don’t").
    const text = escapeRegex(value).replace(/'/g, "['\u2019]");
    // A domain is matched in any case ("ends with gmail.com" also stops bob@GMAIL.COM).
    const any = /^@?[a-z0-9-]+(?:\.[a-z0-9-]+)+$/i.test(value) ? '(?i)' : '';
    if (/^(?:start|begin)/.test(verb)) {
      regex = `${any}^${text}`;
      words = `start with "${value}"`;
      sample = { allowed: `${value}example`, denied: `example${value === 'x' ? 'y' : 'x'}` };
    } else if (/^end/.test(verb)) {
      regex = `${any}${text}$`;
      words = `end with "${value}"`;
      sample = { allowed: `example${value}`, denied: `${value}example-` };
    } else {
      regex = `${any}${text}`;
      words = `contain "${value}"`;
      sample = { allowed: `a ${value} b`, denied: 'example' };
    }
  } else {
    // Domains are matched in any case. An allowed value is one address, ending with one of them
    // (not "eve@evil.com, bob@acme.io"); a blocked one is refused as blockedDomains says.
    regex = String.raw`(?i)^[^\s@,;<>"']+@(?:${alts})$`;
    words = `be an address at ${domains.join(' or ')}`;
    sample = { allowed: `someone@${domains[0]}`, denied: 'someone@elsewhere.example' };
  }
  const c: Constraint = { argumentName: arg.name, enabled: true };
  if (polarity.restricted && polarity.action === 'deny') {
    const email = isEmailArgument(arg.name);
    c.notRegex = domain ? blockedDomains(alts, email) : regex;
    sample = { allowed: sample.denied, denied: sample.allowed };
    if (domain && !email) words = `name ${domains.join(' or ')} or a subdomain, alone or in an address`;
    return {
      rule: {
        summary: `"${arg.name}" must not ${words}`,
        constraint: c,
        samples: { argumentName: arg.name, ...sample },
      },
    };
  }
  if (polarity.action === 'require_approval') {
    return {
      why: 'asking a person for values that match a pattern cannot be written as a rule; say which values are allowed',
    };
  }
  // "Allow send_email to acme.io" lets those calls through; it does not say the others stop.
  const valueWords = ctx.clause.replace(explicit?.[0] ?? DOMAINS, ' ');
  const word = bareAllow(polarity, affix?.[5] ? valueWords.replace(affix[0], ' ') : valueWords);
  if (word) {
    const [held, stop] = explicit
      ? [explicit[0], 'matching <a pattern of the values to stop>']
      : affix
        ? [affix[0], `${affix[1] ? `${affix[1]} with` : affix[6]} "<the text to stop>"`]
        : [`at ${domains.join(' or ')}`, 'at <the domains to stop>'];
    const name = domain ? `${arg.name} addresses` : arg.name;
    return {
      why: permissionWhy(word, `with "${arg.name}" ${held}`, `${name} ${held}`, { block: `${name} ${stop}` }),
    };
  }
  c.regex = regex;
  return {
    rule: {
      summary: `"${arg.name}" must ${words}`,
      constraint: c,
      samples: { argumentName: arg.name, ...sample },
    },
  };
}

const VAGUE = new Set(
  'optional required mandatory necessary needed empty blank present missing provided given valid invalid safe unsafe reasonable sensible meaningful small large big short long positive negative anything something everything nothing set unset'.split(
    ' ',
  ),
);

const FILLER =
  /^(?:(?:must|should|has to|have to|can|may|could|will|only|always|never|not|be|is|are|one|of|either|in|limited|restricted|to|allowed|permitted|set|equal|exactly|the|values?|value|:|=|any|other|than|allow|accept|use|block|deny|reject|forbid|disallow|prevent|stop|don't|do|dont|a|an|with|where|whose|when|if|for|that|which)\b\s*|[:=]\s*)+/i;

function enumRule(ctx: Ctx): Outcome {
  const args = mentioned(ctx.tool.arguments, ctx.body).filter((a) => a.type === 'string');
  if (args.length !== 1) return null;
  const arg = args[0]!;
  const polarity = polarityOf(ctx.clause, false);
  if (!polarity) return null;
  const at = namePattern(arg.name).exec(ctx.body);
  if (!at) return null;
  const after = ctx.body
    .slice(at.index + at[0].length)
    .trimStart()
    .replace(FILLER, '');
  const before = ctx.body
    .slice(0, at.index)
    .replace(
      /^(?:(?:only|allow|accept|block|deny|reject|never allow|forbid|disallow|don't allow|do not allow)\s+)+/i,
      '',
    );
  const source = after.trim() !== '' ? after : before;
  const values = source
    .split(VALUE_SEPARATOR)
    .map((v) =>
      v
        .trim()
        .replace(/^["'`]|["'`]$/g, '')
        .replace(TRAILING_ONLY, ''),
    )
    .filter((v) => v !== '' && !/^(?:either|etc|only)$/i.test(v));
  if (values.length === 0 || values.length > 50 || values.some((v) => !/^[\w.+\-@:#]{1,100}$/.test(v)))
    return null;
  // Words that describe values rather than list them ("memo should be optional").
  const vague = arg.enum ? undefined : values.find((v) => VAGUE.has(v.toLowerCase()));
  if (vague) {
    return {
      why: `"${vague}" describes values rather than naming one; list the allowed or blocked values, or give a limit`,
    };
  }
  // A domain is part of what a URL or an address holds, never all of it: as an exact value
  // ("Block fetch url evil.com") it would stop nothing real. A host or domain argument holds one.
  const domain = arg.enum
    ? undefined
    : values.find((v) => /^[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}$/i.test(v));
  if (domain && !/(?:^|_|-|[a-z](?=[A-Z]))(?:host|hostname|domain)s?$/i.test(arg.name)) {
    return {
      why: `"${domain}" is a domain: say "${arg.name} must not contain "${domain}"" (or "must end with"), or for an address "${arg.name} must not be an address at ${domain}"`,
    };
  }
  // An e-mail argument holds addresses: a bare word ("Block send_email to gmail") matches none.
  const bare = isEmailArgument(arg.name) ? values.find((v) => !v.includes('@')) : undefined;
  if (bare !== undefined) {
    return {
      why: `"${bare}" is no address: name whole addresses, or the domain ("${arg.name} must not be an address at example.com")`,
    };
  }
  // Values the tool declares are written as declared ("usd" → "USD").
  const declared = arg.enum ?? [];
  const written = values.map((v) => declared.find((d) => d.toLowerCase() === v.toLowerCase()) ?? v);
  if (polarity.action === 'require_approval') {
    return {
      why: 'asking a person for some values cannot be written as one rule; say which values are allowed',
    };
  }
  const list = written.map((v) => `"${v}"`).join(', ');
  // "Allow send_payment currency USD" lets those calls through; it does not say the others stop.
  const word = bareAllow(
    polarity,
    values.reduce(
      (text, v) => text.replace(new RegExp(`(?<![\\w.@-])${escapeRegex(v)}(?![\\w.@-])`, 'gi'), ' '),
      ctx.clause,
    ),
  );
  if (word) {
    const others = declared.filter((d) => !written.includes(d));
    return {
      why: permissionWhy(
        word,
        `with "${arg.name}" ${written.join(' or ')}`,
        `${arg.name} ${written.join(', ')}`,
        {
          block: `${arg.name} ${others.length > 0 ? others.join(', ') : '<the values to stop>'}`,
        },
      ),
    };
  }
  if (polarity.restricted) {
    return {
      rule: {
        summary: `"${arg.name}" must not be ${list}`,
        constraint: { argumentName: arg.name, enabled: true, notEnum: written },
        samples: { argumentName: arg.name, denied: written[0], allowed: `not-${written[0]}` },
      },
    };
  }
  return {
    rule: {
      summary: `"${arg.name}" must be one of ${list}`,
      constraint: { argumentName: arg.name, enabled: true, enum: written },
      samples: { argumentName: arg.name, allowed: written[0], denied: `not-${written[0]}` },
    },
  };
}

function requiredRule(ctx: Ctx): Outcome {
  if (!REQUIRED.test(ctx.clause)) return null;
  const args = mentioned(ctx.tool.arguments, ctx.body);
  if (args.length === 0)
    return { why: `it does not name an argument of "${ctx.tool.name}" (${argNames(ctx.tool.arguments)})` };
  if (args.length > 1) return { why: 'write one required argument per sentence' };
  if (APPROVAL.test(ctx.clause)) {
    return {
      why: 'asking a person depending on whether an argument is given cannot be written as a rule; say which argument is required',
    };
  }
  const arg = args[0]!;
  // "never empty" asks for more than presence: a string of at least one character.
  const nonEmpty = /\b(?:empty|blank)\b/i.test(ctx.clause) && arg.type === 'string';
  return {
    rule: {
      summary: nonEmpty ? `"${arg.name}" is required and not empty` : `"${arg.name}" is required`,
      constraint: {
        argumentName: arg.name,
        enabled: true,
        required: true,
        ...(nonEmpty ? { minLength: 1 } : {}),
      },
      samples: { argumentName: arg.name, denied: nonEmpty ? '' : undefined },
    },
  };
}

/** Each clause becomes at most one rule; the first reading that applies wins, in this order. */
const READINGS = [sessionRule, lengthRule, numericRule, patternRule, requiredRule, enumRule];

const NEGATIVE_ALL = new RegExp(NEGATIVE.source, 'gi');
const APPROVAL_ALL = new RegExp(APPROVAL.source, 'gi');
const REQUIRED_ALL = new RegExp(REQUIRED.source, 'gi');
/** Words that allow, beside a word that blocks, make a clause read two ways ("Only allow X, block Y"). */
const ALLOWS = new RegExp(
  String.raw`${PERMISSION.source}|\b(?:must|should|has to|have to|needs? to|keep|kept|stay|stays)\b`,
  'i',
);
/** A comparison without its number ("block larger amounts", "anything above", "the rest"): than what? */
const BARE_COMPARISON =
  /\b(?:larger|bigger|smaller|higher|lower|longer|shorter|greater|above|below|over|under|beyond|exceeding|else|rest|others|otherwise|remaining)\b/i;
/** Conditions on the time or the day, or a period ("per 24h", "in 2025"), which no policy can hold. */
const TIME =
  /\b(?:per|every|each|a|in|within|over)\s+\d+\s*(?:h|hrs?|hours?|d|days?|weeks?|months?|years?|mins?|minutes?)\b|\b(?:in|during|since|until|before|after)\s+(?:19|20)\d{2}\b|\b\d{1,2}(?::\d{2})?\s*(?:am|pm)\b|\b(?:before|after|until|till)\s+\d{1,2}(?::\d{2}\b|\s*o'clock)|\b(?:weekends?|weekdays?|overnight|at night|morning|evening|today|tomorrow|mondays?|tuesdays?|wednesdays?|thursdays?|fridays?|saturdays?|sundays?|business hours|office hours|hourly|daily|weekly|monthly|yearly|annually|quarterly|nightly)\b|\b(?:per|a|an|each|every|this|next|last)\s+(?:hour|day|week|month|year|quarter)\b|\bin\s+the\s+(?:first|last|next|past|coming)\b/i;
/** What to do with a call in words Charter writes no rule for: flag it, hold it, check it twice. */
const UNCLEAR_ACTION =
  /\b(?:flag|flags|flagged|quarantine|quarantined|hold|held|double-?check(?:ed)?|check(?:ed)? twice|log|logged|alert(?:ed)?|warn(?:ed)?|notif(?:y|ied)|audit(?:ed)?|monitor(?:ed)?|investigat\w*|queue|queued|pause|paused|fail|fails|failed)\b/i;
/** Participles a rule may end in: the ones Charter reads (allowed, blocked, sent to a person…). */
const READ_PARTICIPLES = new Set(
  'allowed permitted limited restricted capped constrained bounded kept blocked denied rejected forbidden prohibited stopped prevented declined cancelled canceled halted refused disallowed banned approved escalated reviewed required provided given included set signed sent routed forwarded passed'.split(
    ' ',
  ),
);
/** "must be flagged", "should be reconciled": a verb Charter does not read, which no rule may guess. */
function unknownParticiple(words: string): string | null {
  const re =
    /\b(?:must|should|shall|will|has to|have to|needs? to|is to|are to|to)\s+(?:all\s+|always\s+|also\s+)?be\s+([a-z]{3,}ed|taken|written|chosen|hidden|broken|frozen|shown|known|drawn|thrown|seen|done|spoken|driven)\b/gi;
  for (const m of words.matchAll(re)) {
    if (!READ_PARTICIPLES.has(m[1]!.toLowerCase())) return m[0];
  }
  return null;
}
/** A comparison whose number comes later, named: "exceed the maximum of $500", "above the $5,000 cap". */
const ARTICLE_COMPARISON =
  /\b(?:exceed\w*|surpass\w*|above|over|below|under|beyond|past|more than|less than|greater than|higher than|lower than|bigger than|larger than|smaller than)\s+(?:the|a|an|its|our|their|this|that|your|any)\b/i;
/** A number with a scale word Charter does not read ("$2B", "5 mn", "10 grand", "1e6"). */
const UNKNOWN_SCALE =
  /(?<![\d.,])\d[\d.,]*\s?(?:b|mn|mil|mio|mill|grand|lakhs?|crores?|hundreds?)\b|(?<![\d.,])\d[\d.,]*[eE][+-]?\d+/i;
/**
 * A condition on something other than the argument the rule is on ("if the payee is new", "for
 * new customers"), which a rule on that argument would drop. The argument's own name is taken out of
 * the clause before this is looked for, so "if the amount is over $500" reads "if the  is over".
 */
const CONDITION =
  /\b(?:if|whenever|provided|as long as|in case)\s+(?:the\s+|a\s+|an\s+)?(?!(?:the|a|an|it|its|is|are|was|were|exceeds?|goes|reaches|value|total|sum)\b)[a-z]+|\bfor\s+(?:new|existing|verified|unverified|international|domestic|first-time|trusted|untrusted|unknown|known|internal|external|premium|free|vip|foreign|large|small|certain|some|specific)\b/i;
/** A range other than "between X and Y" / "from X to Y": "from $10 to under $500", "… exclusive". */
const LOOSE_RANGE = new RegExp(
  String.raw`\bfrom\s+${NUM}\s+(?:up\s+)?to\s+(?!${NUM})|\b(?:exclusive|exclusively|inclusive|inclusively)\b`,
  'i',
);

/** Counts written as words, read as digits where bounds are looked for ("no more than five times"). */
const COUNT_WORDS = /\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|fifty|hundred)\b/gi;

/**
 * What a clause says that Charter does not read, so that no reading of the rest may guess it.
 * `clause` is without the names of the tool and of its arguments.
 */
function unreadable(clause: string): string | null {
  // Quoted values and patterns are values, not words: "must not contain "no"", `a{2,1}`.
  const words = clause.replace(QUOTED, ' ');
  if (AMBIGUOUS_NUMBER.test(words)) {
    return 'write numbers as 1000 or 1,000 (a point only before decimals: 2.5); this one reads two ways';
  }
  if (TIME.test(words)) return 'Charter cannot write rules that depend on the time or the day';
  const unapproved = words.replace(APPROVAL_ALL, ' ');
  const unclear = UNCLEAR_ACTION.exec(unapproved) ?? unknownParticiple(unapproved);
  if (unclear) {
    return `Charter does not read "${unclear}": say whether such calls are blocked, allowed, or sent to a person ("block …", "only allow …", "ask a person for …")`;
  }
  if (ARTICLE_COMPARISON.test(words)) {
    return 'write the number right after the comparison ("over $500"), not a named limit ("over the maximum of $500")';
  }
  const scale = UNKNOWN_SCALE.exec(words);
  if (scale)
    return `Charter does not read "${scale[0].trim()}": write the number in full (1000000), or with k, thousand, million or billion`;
  const condition = CONDITION.exec(words);
  if (condition) {
    return `Charter does not read the condition "${condition[0]}": a rule holds for every call of the tool; write a limit on the argument itself`;
  }
  if (LOOSE_RANGE.test(words)) {
    return 'write a range as "between X and Y" (both included), or as two limits in two sentences';
  }
  const exception = EXCEPTION.exec(words);
  if (exception) {
    return `Charter does not read "${exception[0]}": write the values that are allowed ("only allow …") or the ones that are blocked ("block …")`;
  }
  const approval = APPROVAL.test(words);
  if (!approval && APPROVAL_HINT.test(words)) {
    return 'it speaks of a person or an approval in words Charter does not read; write "ask a person for …" or "require approval for …"';
  }
  // Every negation must be one a reading places: in a bound ("no more than"), a required phrase
  // ("never empty"), or the one phrase that says the calls are stopped. Any other ("No payment over
  // $1,000 is allowed", "not above", "don't block") would be read as its opposite.
  const unrequired = words.replace(REQUIRED, ' ');
  let rest = unrequired.replace(COUNT_WORDS, (w) => String(countOf(w)));
  for (const re of BOUNDS_ALL) rest = rest.replace(re, ' ');
  if (approval && (NEGATIVE.test(rest) || NEGATION_WORD.test(rest))) {
    return 'it both asks a person and says "not" or "no"; write the calls to send to a person as a sentence of their own ("ask a person for …")';
  }
  // "Must never be empty" with a limit or a pattern: the required phrase's negation would be read as
  // the limit's direction, and one of the two dropped (a required phrase without one cannot do that).
  const required = REQUIRED.exec(words);
  if (
    !approval &&
    required &&
    (NEGATIVE.test(required[0]) || NEGATION_WORD.test(required[0])) &&
    (rest !== unrequired || AFFIX.test(clause) || EXPLICIT_REGEX.test(clause) || /\band\b|,/i.test(rest))
  ) {
    return 'write the required argument as a sentence of its own ("memo is required"), and the other rule in another';
  }
  const stops = rest.match(NEGATIVE_ALL) ?? [];
  if (stops.length > 1) {
    return `it says "${stops[0]}" and "${stops[1]}": write what is blocked, or what is allowed, without a double negation`;
  }
  const unstopped = rest.replace(NEGATIVE, ' ');
  if (stops.length === 1 && BARE_COMPARISON.test(unstopped)) {
    return `"${BARE_COMPARISON.exec(unstopped)![0]}" compares with no number: write the limit in the blocking rule itself ("block … over 1,000")`;
  }
  if (stops.length === 1 && ALLOWS.test(unstopped)) {
    return `it both allows and blocks ("${ALLOWS.exec(unstopped)![0]}" and "${stops[0]}"); write one sentence for what is allowed and one for what is blocked`;
  }
  const left = NEGATION_WORD.exec(unstopped);
  if (left) {
    return `Charter cannot tell what "${left[0]}" applies to here; write what is blocked ("block … over 1,000") or what is allowed ("… must be at most 1,000")`;
  }
  if (TOTAL.test(words) && !SESSION.test(words)) {
    return 'totals are counted per session: write "at most X in total per session"';
  }
  const count = CALL_COUNT.exec(words);
  if (count && !SESSION.test(words)) {
    const n = countOf(count[0].match(/^\S+/)![0]) ?? 1;
    return `calls are counted per session: write "at most ${n} call${n === 1 ? '' : 's'} per session"`;
  }
  return null;
}

/** Whom a call is sent to or approved by ("to a manager", "by the finance team"): no argument. */
const PERSON =
  /\b(?:to|from|by)\s+(?:an?\s+|the\s+|my\s+|our\s+)?(?:person|human|someone|somebody|manager|admin|administrator|reviewer|supervisor|owner|finance|team|lead)\b/gi;

/** An approval phrase and whom it names ("approval from finance"): none of it names an argument. */
const APPROVAL_WHO = new RegExp(
  String.raw`${APPROVAL.source}(?:\s+(?:from|by|to)\s+(?:an?\s+|the\s+)?[\w-]+)?`,
  'i',
);
const APPROVAL_WHO_ALL = new RegExp(APPROVAL_WHO.source, 'gi');

function compileClause(tool: ToolInfo, clause: string): Outcome {
  // Names are no words of the rule: "the block tool" or an argument named "stop" say nothing about
  // blocking. Rules are read without them; arguments are looked for in the body, which keeps them.
  // A tool named by a rule word is taken out where it is written as a tool; any other by its name.
  const written = RULE_VERBS.has(tool.name.toLowerCase()) ? asTool(tool.name) : null;
  const text = clause.replace(written?.test(clause) ? written : namePattern(tool.name), ' ');
  let words = text;
  for (const a of tool.arguments) {
    if (!commonWord(a.name)) words = words.replace(namePattern(a.name), ' ');
  }
  const why = unreadable(words);
  if (why) return { why };
  const ctx = { tool, clause: words, body: text.replace(APPROVAL_WHO, ' ').replace(PERSON, ' ') };
  for (const read of READINGS) {
    const out = read(ctx);
    if (!out) continue;
    // Every word of the clause must be one Charter reads: a word it does not ("save for", "routed to
    // finance", "per calendar month", "if the payee is new") may change what the rule means.
    const unread = 'rule' in out ? unreadWord(words, out.rule) : null;
    if (unread) {
      return {
        why: `Charter does not read "${unread}"; write the rule with a limit, allowed or blocked values, a pattern or a required argument, and nothing else (put values in quotes)`,
      };
    }
    return out;
  }
  if (APPROVAL.test(clause) || NEGATIVE.test(clause)) {
    return {
      why: 'it does not say which calls: give a limit, a list of values, a pattern or a required argument',
    };
  }
  return null;
}

/** A word of the clause that is a word of another tool's name and not of `current`'s, if any. */
function otherToolWord(
  tools: readonly ToolInfo[],
  current: ToolInfo,
  clause: string,
): { word: string; tool: string } | null {
  const own = new Set(nameParts(current.name));
  const words = new Set(
    (clause.toLowerCase().match(/[a-z]+/g) ?? []).flatMap((w) => [
      w,
      w.replace(/s$/, ''),
      w.replace(/es$/, ''),
    ]),
  );
  for (const t of tools) {
    if (t === current) continue;
    for (const part of nameParts(t.name)) {
      // Rule words ('block', 'ask') name what to do, not a tool.
      if (part.length >= 4 && !own.has(part) && !RULE_VERBS.has(part) && words.has(part)) {
        return { word: part, tool: t.name };
      }
    }
  }
  return null;
}

/**
 * Turns the common English phrasings of tool-call rules into rules on registered tools and their
 * arguments, without a model. Whatever it cannot read is returned in `notUnderstood` with the reason,
 * never guessed. `fallbackTool` is the tool the conversation was about.
 */
export function compileMessage(
  message: string,
  tools: readonly ToolInfo[],
  fallbackTool: string | null,
): CompileResult {
  const keywords = [...new Set(tools.flatMap((t) => t.arguments.map((a) => a.name)))];
  const clauses = splitClauses(message, keywords);
  const rules: CompiledRule[] = [];
  const notUnderstood: NotUnderstood[] = [];
  const messageTools = toolsNamed(tools, message.replace(QUOTED, ' '));
  const fallback = tools.find((t) => t.name === fallbackTool) ?? null;
  // A clause naming no tool is about the last one named before it. Before any is named: the
  // conversation's, unless the message names another one, when the clause could be about either.
  const elsewhere = messageTools.some((t) => t !== fallback);
  let current: ToolInfo | null = fallback
    ? elsewhere
      ? null
      : fallback
    : messageTools.length === 1
      ? messageTools[0]!
      : tools.length === 1
        ? tools[0]!
        : null;
  for (const clause of clauses) {
    const named = toolsNamed(tools, clause);
    if (named.length > 1) {
      notUnderstood.push({
        text: clause,
        why: `it names several tools (${named.map((t) => `"${t.name}"`).join(', ')}); write one sentence per tool`,
      });
      continue;
    }
    if (named.length === 1) current = named[0]!;
    // A clause naming no tool but a word of another tool's name ("Block transfers over $10,000"
    // beside wire_transfer) may be about that tool: refused rather than put on the current one.
    const other = named.length === 0 && current ? otherToolWord(tools, current, clause) : null;
    if (other) {
      notUnderstood.push({
        text: clause,
        why: `it names no tool but says "${other.word}", which may mean "${other.tool}": name the tool in this sentence`,
      });
      continue;
    }
    if (!current) {
      notUnderstood.push({
        text: clause,
        why:
          tools.length === 0
            ? 'no tools are registered yet; register them first'
            : messageTools.length > 0
              ? `it names no tool, and the message names ${messageTools.map((t) => `"${t.name}"`).join(', ')}${fallback ? ` while the conversation is about "${fallback.name}"` : ''}: name the tool in this sentence`
              : `it does not name a registered tool (${tools.map((t) => `"${t.name}"`).join(', ')})`,
      });
      continue;
    }
    const out = compileClause(current, clause);
    if (out && 'rule' in out) rules.push({ toolName: current.name, text: clause, ...out.rule });
    else
      notUnderstood.push({
        text: clause,
        why:
          out?.why ??
          'it is not a rule I can read (a limit, allowed values, a pattern, a required argument, calls per session or a session total)',
      });
  }
  return { rules, notUnderstood };
}
