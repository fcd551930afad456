import { RE2JS, RE2Set } from 're2js';
import { codePointLength, MAX_REGEX_LENGTH } from './limits.js';

/** A compiled pattern: unanchored search with RE2 syntax (linear time, so ReDoS-safe). */
export interface RegexMatcher {
  readonly source: string;
  /**
   * The longest input (in UTF-16 code units) this pattern is run on: longer ones are refused unread
   * (the constraint fails). See regexCost.
   */
  readonly maxInput: number;
  test(input: string): boolean;
}

export type RegexCompileResult = { ok: true; matcher: RegexMatcher } | { ok: false; reason: string };

/**
 * How a pattern is searched and how long a string it meets, so that one search holds the event loop
 * for at most a few tens of milliseconds (figures are CPU time on the development machine, warm).
 *
 * Linear in the input is not cheap enough. re2js searches with a lazily built DFA whose states are
 * sets of program instructions; building a state costs far more than following a built transition.
 * Most patterns have a few dozen states, but counted repetition (`(?:.*x.*){1000}`) or a suffix like
 * `a.{20}$` has thousands to millions: the DFA then builds a state for nearly every character, drops
 * its cache when its memory runs out, gives up and reruns the search on its NFA (Pike VM) from the
 * start. Under the former bound (input length times program size squared below 6·10¹⁰) such searches
 * took 0.2-1 s, and `a.{100}$`, 104 instructions, met a whole MiB in 1.9 s.
 *
 * So no DFA state is built during a search:
 * - `dfa`: a DFA of at most DFA_MAX_STATES states and DFA_PRIME_WORK of building work is built whole
 *   when the pattern is compiled; a search then follows built transitions only, after at most one
 *   `indexOf` for a required literal. It meets DFA_MAX_INPUT code units (a MiB), or proportionally
 *   fewer if it can cycle through more than DFA_HOT_STATES states.
 * - `nfa`: any other pattern never uses the DFA. Its search visits each instruction at most once per
 *   character and once more at the end (up to 20-45 ns per visit measured, captures the dearest), so
 *   it meets NFA_WORK / (instructions + NFA_STEP_OVERHEAD) - 1 code units: 98 for
 *   `(?:.*x.*){1000}[^x]` (5,003 instructions), 15,624 for `a.{20}$`, and at least 0 for any pattern
 *   of 256 characters (at most about 250,000 instructions).
 */
export interface RegexCost {
  readonly engine: 'dfa' | 'nfa';
  /** Instructions in the compiled program. */
  readonly programSize: number;
  /** DFA states built when the pattern was compiled; 0 for the NFA. */
  readonly dfaStates: number;
  /** The most of those states a search can keep cycling through (see largestCycle). */
  readonly hotStates: number;
  readonly maxInput: number;
}

/** The longest input a built DFA searches: a whole MiB, every string a request can carry. */
export const DFA_MAX_INPUT = 1 << 20;
/** A DFA with more states than this is not built. */
export const DFA_MAX_STATES = 4096;
/**
 * A search cycling through more states than this misses the CPU caches more and more (per code unit,
 * about 9 ns with 160 states, 12-18 with 320, 15-25 with 640, 22-26 with 1,280, 30 with 2,560
 * measured), so it meets DFA_MAX_INPUT * DFA_HOT_STATES / states code units instead of a MiB.
 */
export const DFA_HOT_STATES = 256;
/**
 * Building work allowed per pattern, in instructions handled (45-125 ns each measured, so at most
 * about 50 ms per pattern, once, when the policy is compiled).
 */
export const DFA_PRIME_WORK = 400_000;
/** Instruction visits allowed per NFA search. */
export const NFA_WORK = 500_000;
/** What the NFA spends per character besides visiting instructions, counted in instructions. */
export const NFA_STEP_OVERHEAD = 8;

/** The parts of re2js's lazy DFA used here (re2js exports no type for them). */
interface DfaState {
  readonly nfaStates: ArrayLike<number>;
  next: (DfaState | null)[] | null;
}
interface Dfa {
  failed: boolean;
  readonly numClasses: number;
  readonly classBounds: ArrayLike<number>;
  runeClass(rune: number): number;
  closure(pcs: ArrayLike<number>, flag: number): { pcs: ArrayLike<number> };
  start(input: { context(pos: number): number }, pos: number): DfaState | null;
  step(state: DfaState, cls: number, rune: number, anchor: number): DfaState | null;
  clearCache(): void;
}
interface Engine {
  onepass?: unknown;
  prefilter?: unknown;
  prog?: { inst?: unknown };
  readonly dfa?: unknown;
}

function engineOf(re: RE2JS): Engine | null {
  const engine = re.re2() as unknown;
  return engine && typeof engine === 'object' ? (engine as Engine) : null;
}

/**
 * re2js picks its one-pass engine for anchored patterns (`^...$`), which is 3-5x slower than its DFA
 * for a boolean match. Clearing the field routes `test` to the DFA, which gives identical answers
 * (it is the engine re2js itself uses for every other pattern). If a later re2js renames the field this
 * only costs speed, never correctness.
 */
function preferDfa(engine: Engine | null): void {
  if (engine && 'onepass' in engine) engine.onepass = null;
}

/**
 * The compiled program's instruction count; if a later re2js hides it, an estimate from the
 * pattern's length that errs high (about 1,000 instructions per character at most: `(?:.....){1000}`).
 */
function programSizeOf(engine: Engine | null, pattern: string): number {
  const inst = engine?.prog?.inst;
  return Array.isArray(inst) ? inst.length : 1000 * (pattern.length + 2);
}

function dfaOf(engine: Engine | null): Dfa | null {
  const dfa = engine?.dfa as Partial<Dfa> | null | undefined;
  if (!dfa || typeof dfa !== 'object') return null;
  const usable =
    typeof dfa.failed === 'boolean' &&
    typeof dfa.numClasses === 'number' &&
    dfa.classBounds !== undefined &&
    typeof dfa.runeClass === 'function' &&
    typeof dfa.closure === 'function' &&
    typeof dfa.start === 'function' &&
    typeof dfa.step === 'function' &&
    typeof dfa.clearCache === 'function';
  return usable ? (dfa as Dfa) : null;
}

/**
 * Builds every state and transition of the DFA that an unanchored search from the start of a string
 * can reach, within the limits: the states, or null when the DFA is larger (or re2js fails to build
 * a state, e.g. out of its memory budget). Transitions are built per character class with one
 * representative character, exactly as re2js caches them when a search meets that class first.
 */
function buildDfa(dfa: Dfa): DfaState[] | null {
  if (dfa.failed) return null;
  // The work is what re2js's closures (sets of instructions followed through empty-width steps)
  // take in and give out, plus the instructions each transition tests against its character.
  let work = 0;
  const closure = dfa.closure;
  const own = Object.hasOwn(dfa, 'closure');
  dfa.closure = function counted(this: Dfa, pcs, flag) {
    const result = closure.call(this, pcs, flag);
    work += pcs.length + result.pcs.length;
    return result;
  };
  try {
    // Position 0 is the beginning of the text whatever the string: any context with that bit selects
    // the same start state a search uses.
    const start = dfa.start({ context: () => -1 }, 0);
    if (!start) return null;
    const classes = dfa.numClasses;
    const bounds = dfa.classBounds;
    const seen = new Set<DfaState>([start]);
    const states: DfaState[] = [start];
    for (let q = 0; q < states.length; q++) {
      const state = states[q]!;
      for (let cls = 0; cls <= classes; cls++) {
        // Class 0 starts at U+0000, class c at bound c-1; `classes` is the end of the text (rune -1).
        const rune = cls === classes ? -1 : cls === 0 ? 0 : bounds[cls - 1]!;
        const next = dfa.step(state, cls, rune, RE2Set.UNANCHORED);
        if (!next) return null;
        work += state.nfaStates.length + 1;
        if (work > DFA_PRIME_WORK) return null;
        if (!seen.has(next)) {
          if (seen.size >= DFA_MAX_STATES) return null;
          seen.add(next);
          states.push(next);
        }
      }
    }
    for (const state of states) {
      const table = state.next;
      if (!table || table.length !== classes + 1 || table.some((t) => t === null)) return null;
    }
    return states;
  } finally {
    if (own) dfa.closure = closure;
    else delete (dfa as Partial<Dfa>).closure;
  }
}

/**
 * The most states a long search can keep revisiting: the largest strongly connected component of the
 * DFA (Tarjan's algorithm, iterative). An anchored pattern's states form a chain (`^[a-z]{1,1000}$`
 * has 1,000 states but visits each at most once); `a.{9}$` cycles through all its 1,282.
 */
function largestCycle(states: readonly DfaState[]): number {
  const id = new Map<DfaState, number>();
  for (const [i, state] of states.entries()) id.set(state, i);
  const n = states.length;
  const order = new Int32Array(n).fill(-1);
  const low = new Int32Array(n);
  const onStack = new Uint8Array(n);
  const stack: number[] = [];
  const frames: number[] = []; // pairs: state, next edge to follow
  let counter = 0;
  let largest = 0;
  const enter = (v: number) => {
    order[v] = low[v] = counter++;
    stack.push(v);
    onStack[v] = 1;
    frames.push(v, 0);
  };
  for (let root = 0; root < n; root++) {
    if (order[root] !== -1) continue;
    enter(root);
    while (frames.length > 0) {
      const v = frames[frames.length - 2]!;
      const edge = frames[frames.length - 1]!;
      const table = states[v]!.next!;
      if (edge < table.length) {
        frames[frames.length - 1] = edge + 1;
        const w = id.get(table[edge]!)!;
        if (order[w] === -1) enter(w);
        else if (onStack[w]) low[v] = Math.min(low[v]!, order[w]!);
        continue;
      }
      frames.length -= 2;
      if (frames.length > 0) {
        const parent = frames[frames.length - 2]!;
        low[parent] = Math.min(low[parent]!, low[v]!);
      }
      if (low[v] === order[v]) {
        let size = 0;
        let w: number;
        do {
          w = stack.pop()!;
          onStack[w] = 0;
          size++;
        } while (w !== v);
        largest = Math.max(largest, size);
      }
    }
  }
  return largest;
}

/**
 * Before searching, re2js scans the input for literals the pattern needs. One literal is one
 * `indexOf` (up to 8 ms per MiB measured, usually far less); several literals mean up to 32 such
 * scans (240 ms on a MiB for 32 literals), and alternatives an Aho-Corasick automaton run
 * in JavaScript: either can cost more than a built DFA's whole search. So a pattern with a built DFA
 * keeps a single literal only.
 */
function keepSingleLiteralPrefilter(engine: Engine): void {
  const prefilter = engine.prefilter as { subs?: unknown; str?: unknown } | null | undefined;
  if (prefilter === null || prefilter === undefined) return;
  const single =
    Array.isArray(prefilter.subs) &&
    prefilter.subs.length === 0 &&
    typeof prefilter.str === 'string' &&
    prefilter.str !== '';
  if (!single) engine.prefilter = null;
}

const BLOCK_BITS = 8;
const BLOCK = 1 << BLOCK_BITS;

interface TabulatedDfa extends Dfa {
  classTop: Int32Array;
  classPages: Uint16Array | Int32Array;
}

/** One function for every pattern, so that re2js's search loop keeps a single call target. */
function tabulatedRuneClass(this: TabulatedDfa, r: number): number {
  const block = r >> BLOCK_BITS;
  const top = this.classTop;
  if (block >= top.length) return this.numClasses - 1;
  const t = top[block]!;
  return t >= 0 ? t : this.classPages[((-1 - t) << BLOCK_BITS) | (r & (BLOCK - 1))]!;
}

/**
 * re2js finds the character class of a character above U+00FF by binary search over the class
 * bounds, which makes such characters cost 2-5x a Latin-1 one (whose class comes from a table). This
 * gives them a two-level table up to the last bound (blocks of 256 code points; a block within one
 * class is a single number), so that every character costs about the same.
 */
function tabulateClasses(dfa: Dfa): void {
  const bounds = dfa.classBounds;
  const last = bounds.length;
  const blocks = last === 0 ? 0 : (bounds[last - 1]! >> BLOCK_BITS) + 1;
  const top = new Int32Array(blocks);
  const pages: number[] = [];
  let b = 0; // bounds[0..b) are at or below the block's first code point
  for (let block = 0; block < blocks; block++) {
    const lo = block << BLOCK_BITS;
    while (b < last && bounds[b]! <= lo) b++;
    if (b === last || bounds[b]! >= lo + BLOCK) {
      top[block] = b;
      continue;
    }
    top[block] = -1 - pages.length / BLOCK;
    let k = b;
    for (let r = lo; r < lo + BLOCK; r++) {
      while (k < last && bounds[k]! <= r) k++;
      pages.push(k);
    }
  }
  const tabulated = dfa as TabulatedDfa;
  tabulated.classTop = top;
  tabulated.classPages = last < 0x10000 ? Uint16Array.from(pages) : Int32Array.from(pages);
  tabulated.runeClass = tabulatedRuneClass;
}

/** Chooses the engine for a compiled pattern and the longest input it meets. */
function plan(re: RE2JS, pattern: string): RegexCost {
  const engine = engineOf(re);
  preferDfa(engine);
  const programSize = Math.max(1, programSizeOf(engine, pattern));
  const nfaMaxInput = Math.max(0, Math.floor(NFA_WORK / (programSize + NFA_STEP_OVERHEAD)) - 1);
  const dfa = dfaOf(engine);
  if (!engine || !dfa) {
    // A later re2js without these internals: its DFA cannot be built ahead or turned off, and a DFA
    // that keeps building states costs up to several times the NFA per character.
    return { engine: 'nfa', programSize, dfaStates: 0, hotStates: 0, maxInput: Math.floor(nfaMaxInput / 10) };
  }
  // A state can hold the whole program: past half the building work, even the start state of
  // `(?:x?x?…){1000}` (246,002 instructions) took 100 ms to build, so such a DFA is not started.
  const states = programSize * 2 <= DFA_PRIME_WORK ? buildDfa(dfa) : null;
  if (states !== null) {
    tabulateClasses(dfa);
    keepSingleLiteralPrefilter(engine);
    const hotStates = largestCycle(states);
    const maxInput =
      hotStates <= DFA_HOT_STATES ? DFA_MAX_INPUT : Math.floor((DFA_MAX_INPUT * DFA_HOT_STATES) / hotStates);
    return { engine: 'dfa', programSize, dfaStates: states.length, hotStates, maxInput };
  }
  // re2js searches with its NFA (or, for short inputs of small programs, its bit-state backtracker,
  // also linear in instructions times characters) when the DFA reports failure.
  dfa.clearCache();
  dfa.failed = true;
  return { engine: 'nfa', programSize, dfaStates: 0, hotStates: 0, maxInput: nfaMaxInput };
}

function parse(pattern: unknown): { ok: true; re: RE2JS } | { ok: false; reason: string } {
  if (typeof pattern !== 'string') return { ok: false, reason: 'it is not a string' };
  // Counted in characters (code points), as SPEC's "max 256 chars" and every other length limit.
  const length = codePointLength(pattern);
  if (length > MAX_REGEX_LENGTH) {
    return { ok: false, reason: `it is ${length} characters long; the limit is ${MAX_REGEX_LENGTH}` };
  }
  try {
    return { ok: true, re: RE2JS.compile(pattern) };
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    return { ok: false, reason: `it does not compile as an RE2 pattern (${detail})` };
  }
}

/** Why a pattern is unusable, or null. Checked when a policy is written, never at call time. */
export function regexProblem(pattern: unknown): string | null {
  const parsed = parse(pattern);
  return parsed.ok ? null : parsed.reason;
}

/** A valid pattern compiled and prepared for searching, with its plan; null if invalid. */
export function prepareRegex(pattern: unknown): { re: RE2JS; cost: RegexCost } | null {
  const parsed = parse(pattern);
  return parsed.ok ? { re: parsed.re, cost: plan(parsed.re, pattern as string) } : null;
}

/** How compileRegex searches a valid pattern and the longest input it meets; null if invalid. */
export function regexCost(pattern: unknown): RegexCost | null {
  return prepareRegex(pattern)?.cost ?? null;
}

export function compileRegex(pattern: unknown): RegexCompileResult {
  const parsed = parse(pattern);
  if (!parsed.ok) return parsed;
  const re = parsed.re;
  const { maxInput } = plan(re, pattern as string);
  return { ok: true, matcher: { source: pattern as string, maxInput, test: (input) => re.test(input) } };
}

/** A pattern matching `literal` anywhere in a string (used for contains / starts_with / ends_with). */
export function quoteRegex(literal: string): string {
  return RE2JS.quote(literal);
}
