import { NUM } from './numbers.js';

/** How a bound is written: ≤, <, ≥, >, or a range. */
export type BoundKind = 'le' | 'lt' | 'ge' | 'gt' | 'between';

/**
 * Bound phrases, most specific first ("no more than" before "more than"). `inherent` phrases state a
 * limit by themselves ("at most $5"); the others need a verb to say whether the range is allowed or not.
 * Those beginning with NUM are linear only because NUM cannot start inside a number (see NUM).
 */
export const BOUNDS: { re: RegExp; kind: BoundKind; inherent: boolean }[] = [
  { re: new RegExp(String.raw`\bbetween\s+${NUM}\s+and\s+${NUM}`, 'i'), kind: 'between', inherent: true },
  {
    re: new RegExp(String.raw`\bfrom\s+${NUM}\s+(?:up\s+)?to\s+${NUM}`, 'i'),
    kind: 'between',
    inherent: true,
  },
  {
    re: new RegExp(
      String.raw`(?:\bat or (?:below|under)|\bequal to or (?:less|lower|fewer|smaller) than|\bequal to or (?:below|under)|\b(?:less|lower|fewer|smaller) than or equal to|\bup to and including|\bat most|\bno more than|\bnot more than|\bup to|\bmaximum(?: of)?|\bmax(?:imum)?(?: of)?|\bno greater than|\bnot greater than|\bnot (?:to )?exceed(?:ing)?|\b(?:must|may|should|can|could|will) ?not exceed|\bcan't exceed|\bcannot exceed|\bnever exceed|\bcap(?:ped)?(?:\s+[\w$]+){0,4}?\s+at|\blimit(?:ed)?(?:\s+[\w$]+){0,4}?\s+to|\bno higher than|\bno larger than|<=|≤|=<)\s*${NUM}`,
      'i',
    ),
    kind: 'le',
    inherent: true,
  },
  {
    re: new RegExp(String.raw`${NUM}\s+(?:or less|or fewer|or lower|or below|at most|max(?:imum)?)\b`, 'i'),
    kind: 'le',
    inherent: true,
  },
  {
    re: new RegExp(
      String.raw`(?:\bat or (?:above|over)|\bequal to or (?:greater|more|higher|larger|bigger) than|\bequal to or (?:above|over)|\b(?:greater|more|higher|larger|bigger) than or equal to|\bat least|\bno less than|\bnot less than|\bno fewer than|\bminimum(?: of)?|\bmin(?:imum)?(?: of)?|\bno lower than|>=|≥|=>)\s*${NUM}`,
      'i',
    ),
    kind: 'ge',
    inherent: true,
  },
  {
    re: new RegExp(String.raw`${NUM}\s+(?:or more|or greater|or higher|or above|at least|minimum)\b`, 'i'),
    kind: 'ge',
    inherent: true,
  },
  {
    re: new RegExp(
      String.raw`(?:\bunder|\bless than|\bbelow|\blower than|\bfewer than|\bsmaller than|\bshorter than|\bbeneath|<)\s*${NUM}`,
      'i',
    ),
    kind: 'lt',
    inherent: false,
  },
  {
    re: new RegExp(
      String.raw`(?:\bover|\bmore than|\babove|\bgreater than|\bexceeds?|\bexceeding|\bin excess of|\bhigher than|\blarger than|\bbigger than|\blonger than|>)\s*${NUM}`,
      'i',
    ),
    kind: 'gt',
    inherent: false,
  },
];

/** "Ask a person" and its many forms: the described calls go to a human instead of being blocked. */
export const APPROVAL =
  /\b(?:ask (?:a |the |an? )?(?:person|human|someone|somebody|me|us|manager|admin|administrator|reviewer|supervisor|owner)|(?:require|requires|required|need|needs|needing|get|getting|with) (?:an? |the )?(?:human |manual |explicit |prior |manager |managers' |manager's |admin |management |a person's |supervisor )?(?:approval|review|sign-?off|confirmation)|(?:human|manual) (?:approval|review|sign-?off)|escalat(?:e|es|ed|ing|ion)|approval (?:is )?(?:required|needed)|check with (?:a |the )?(?:person|human|someone|manager|me|us)|(?:have|let) (?:a |the )?(?:person|human|someone|manager) (?:approve|review|check|decide)|(?:must|should|to) be (?:approved|reviewed|signed off)|(?:approved|reviewed|signed off) by (?:a |an |the )?(?:person|human|someone|somebody|manager|admin|administrator|reviewer|supervisor|owner)|(?:go|goes|sent|send) to (?:a |an |the )?(?:person|human|manager|reviewer|supervisor|admin|administrator)|hold for (?:approval|review))\b/i;

/**
 * Words about a person or an approval. A clause that has one and no APPROVAL phrase says something
 * about people that is not read: it is refused, never taken for a block.
 */
export const APPROVAL_HINT =
  /\b(?:approv\w*|escalat\w*|review\w*|sign(?:ed|s)?[- ]?off|human|humans|person|manager|supervisor|someone|somebody|administrator)\b/i;

/** Words saying the described calls are not allowed. */
export const NEGATIVE =
  /\b(?:block|blocks|blocked|deny|denied|denies|reject|rejected|rejects|forbid|forbidden|forbids|prohibit|prohibited|prohibits|prevent|prevents|prevented|stop|stops|stopped|decline|declines|declined|cancel|cancels|cancell?ed|halt|halts|halted|disallow|disallowed|refuse|refused|never allow|never permit|don't allow|do not allow|dont allow|(?:is|are) not (?:allowed|permitted)|not allowed|not permitted|must never|should never|never|ban|banned|(?:must|should|may|can|could|will|would|shall|do|does|is|are|has to|have to|needs? to) not|mustn't|shouldn't|can't|cannot|couldn't|won't|wouldn't|isn't|aren't|doesn't|don't|dont)\b/i;

/** Words that make a clause an exception or a condition: "unless", "other than", "outside". */
export const EXCEPTION =
  /\b(?:unless|except|excepting|other than|outside|apart from|aside from|besides|anything but|but not|if not|only if|only when)\b/i;

/**
 * A count of calls ("3 calls", "five times", "twice", "only once", "once per session"); "once the
 * total exceeds $5,000" is no count.
 */
export const CALL_COUNT =
  /\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|fifty|hundred)\s+(?:calls?|times|requests?|uses|invocations?)\b|\b(?:twice|thrice)\b|(?<=\b(?:only|just|most|than)\s)once\b|\bonce(?=\s+(?:per|in|within|each|every|a (?:session|conversation|run))\b|\s*[,.;]|\s*$)/i;

/**
 * Numbers written in a way that reads two ways: thousands with spaces ("1 000"), points ("1.000",
 * "€12.500") or apostrophes ("1'000"), and commas not grouping by three ("1,00,000", "1,5k").
 */
export const AMBIGUOUS_NUMBER =
  /\d\s\d{3}(?!\d)|(?<![\d,.])[1-9]\d{0,2}\.\d{3}(?!\d)|\d'\d|\d,\d{1,2}(?!\d)|\d,\d{4,}/;

/** Words of negation, each of which a reading must account for. */
export const NEGATION_WORD = /\b(?:not|no|never|none|nothing|nobody|without|neither|nor)\b|n't\b/i;

/**
 * Words that let calls through ("allow", "is permitted", "always allowed"): they say the described
 * calls may be made, not that the others are stopped. A call no rule stops is allowed already.
 */
export const PERMISSION =
  /\b(?:always\s+)?(?:allow|allows|allowed|allowing|let|letting|permit|permits|permitted|permitting)\b/i;

/** "only": what the clause describes is all that is allowed. */
export const ONLY = /\bonly\b/i;

/** Words saying the described calls are the allowed ones. */
export const POSITIVE =
  /\b(?:must|should|only|allow|allowed|permit|permitted|limit|limited|restrict|restricted|can|may|has to|have to|needs? to|keep|always|require|requires|required|cap|capped|at most|at least)\b/i;

/** A session, however it is named ("per session", "the session total", "in one conversation"). */
export const SESSION =
  /\b(?:sessions?|conversations?)\b|\b(?:per|a|each|every|in (?:a|one|each)|within (?:a|one)) run\b/i;
export const CALLS =
  /\b(\d+|once|twice|thrice|one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|fifty|hundred)(?:\s+(?:calls?|times?|requests?|uses?|invocations?|runs?))?\b/i;
export const TOTAL =
  /\b(?:total|totals|cumulative|cumulatively|combined|altogether|in aggregate|aggregate|sum|overall|all together)\b/i;
export const REQUIRED =
  /\b(?:(?:is|are) (?:always )?(?:required|mandatory)|require|requires|must (?:always )?(?:be (?:provided|present|given|set|included|filled(?: in)?|specified|supplied)|include|have|contain an?)|always (?:include|provide|set|pass|send|give)|mandatory|never (?:be )?(?:empty|blank|missing|omitted)|(?:cannot|can't|can not|must not|mustn't|should not|shouldn't|may not) be (?:empty|blank|missing|omitted)|not (?:be )?(?:empty|blank))\b/i;
export const LENGTH_UNIT = /\b(?:characters?|chars?|letters?)\b/i;
export const ITEMS_UNIT = /\b(?:items?|entries|elements?|recipients|addresses|values|attachments|files)\b/i;

/** A domain as people write it in "only to @example.com addresses" or "emails to example.com". */
export const DOMAIN = /(?:^|[\s"'`(])@?((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24})\b/i;
export const DOMAIN_WORDS =
  /\b(?:domain|domains|address|addresses|email|emails|e-mail|mail|recipients?|@)|@/i;

/**
 * An explicit pattern: /…/ or `…` after "match" or "pattern". The words between stop at the next such
 * keyword: the match is then read from the last keyword before the pattern (the same pattern), and a
 * text of many keywords and no pattern is read once, not once per keyword (quadratic before).
 */
export const EXPLICIT_REGEX =
  /\b(?:match|matches|matching|pattern|regex|regexp)\b(?:(?!\b(?:match|matches|matching|pattern|regex|regexp)\b)[^/`])*(?:\/(.+)\/|`([^`]+)`)/i;
/**
 * A quoted value: "…", `…` or '…'. A single-quoted value keeps an apostrophe inside a word
 * ('don't' is one value, not "don"); one after a space opens a quote, never continues one.
 */
const QUOTED_VALUE = String.raw`(?:"([^"]+)"|'((?:[^']|(?<=\w)'(?=\w))+)'(?!\w)|` + '`([^`]+)`)';
/**
 * Groups: 1 the verb with "with", 2-4 a quoted value (spaces kept) or 5 a bare word; 6 the verb
 * without "with" and 7-9 its quoted value. `affixParts` reads them.
 */
export const AFFIX = new RegExp(
  String.raw`\b(start|starts|starting|begin|begins|beginning|end|ends|ending|contain|contains|containing)\s+with\s+(?:${QUOTED_VALUE}|([^"'` +
    '`' +
    String.raw`\s,;]+))|\b(contain|contains|containing|include|includes)\s+${QUOTED_VALUE}`,
  'i',
);

/** The verb and the value of an AFFIX match. */
export function affixParts(m: RegExpExecArray): { verb: string; value: string } {
  const verb = (m[1] ?? m[6])!.toLowerCase();
  const value = [m[2], m[3], m[4], m[5], m[7], m[8], m[9]].find((v) => v !== undefined)!;
  return { verb, value };
}
