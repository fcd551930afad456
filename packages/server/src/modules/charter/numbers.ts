/** The longest run of digits, commas and points read as one number (1,000,000,000,000.00 is 21). */
export const NUM_MAX_CHARS = 40;

/**
 * Amounts in the forms people write them: $1,000, 1000 USD, 2.5k, €3 million, 10,000.50.
 *
 * A number starts where no digit, comma or point precedes it, and its run of digits, commas and points
 * is at most NUM_MAX_CHARS long (a longer run is no number). Both keep every regex built on NUM linear:
 * unanchored, a regex beginning with NUM (`${NUM}\s+or less`) was tried at each digit of a long run
 * and backtracked over the rest of it each time (quadratic: 1.5 s for 20,000 digits); now a run is
 * tried at its start only, and reading one number backtracks over at most NUM_MAX_CHARS characters.
 * The bound also keeps a number finite (400 nines read as Infinity, a rule "at most Infinity").
 */
export const NUM = String.raw`(?<![\d,.])(?:(?:us\$|usd|eur|gbp|[$€£¥])\s?)?(-?(?=[\d,.]{1,${NUM_MAX_CHARS}}(?![\d,.]))(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?))(?:\s?(k|thousand|m|mm|million|bn|billion)\b)?(?:\s?(?:usd|eur|gbp|dollars?|euros?|pounds?|bucks)\b)?`;

/** One number, as NUM reads it (not global: `test` and `exec` keep no state between calls). */
export const NUM_RE = new RegExp(NUM, 'i');

const SCALE: Record<string, number> = {
  k: 1e3,
  thousand: 1e3,
  m: 1e6,
  mm: 1e6,
  million: 1e6,
  bn: 1e9,
  billion: 1e9,
};

/** The value of one NUM match's groups. */
export function numberOf(digits: string, scale: string | undefined): number {
  const n = Number(digits.replace(/,/g, ''));
  return scale ? n * SCALE[scale.toLowerCase()]! : n;
}

/** Whether the text writes a currency (symbol or word), so the number is money. */
export function isMoney(text: string): boolean {
  return /(?:us\$|[$€£¥]|\b(?:usd|eur|gbp|dollars?|euros?|pounds?|bucks)\b)/i.test(text);
}

const WORDS: Record<string, number> = {
  once: 1,
  twice: 2,
  thrice: 3,
  one: 1,
  two: 2,
  three: 3,
  four: 4,
  five: 5,
  six: 6,
  seven: 7,
  eight: 8,
  nine: 9,
  ten: 10,
  twelve: 12,
  twenty: 20,
  fifty: 50,
  hundred: 100,
};

/** A small count written as digits or a word ("5", "five", "twice"). */
export function countOf(word: string): number | null {
  const w = word.toLowerCase();
  if (/^\d+$/.test(w)) return Number(w);
  return WORDS[w] ?? null;
}
