import { compileRegex, type RegexMatcher } from '@svc/policy-engine';

/**
 * The worst-case cost of a pack condition, computed from its syntax tree before it is ever run.
 *
 * A condition runs synchronously at consume, under the organization's spend-ledger lock: nothing can
 * interrupt it, and the CEL library has no step or time limit of its own. So what a condition may
 * cost is bounded when it is saved (and checked again before it runs, for packs saved before): every
 * node is charged an upper bound of its evaluation steps, knowing an upper bound of the size of every
 * value (a string's length, a list's or map's number of members, and the same of their members). A
 * comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) costs its body times the most
 * members its range can have; `+` and comparisons cost the sizes they copy or compare; a regex search
 * costs what the policy engine's RE2 plan says a search of that length costs. Only the functions
 * modelled here may be called; anything else is refused.
 *
 * One step is about one node evaluated: conditions built to reach the budget (nested comprehensions,
 * string copies, lists built by map, regex searches) took 2-70 ns per charged step on the development
 * machine, so a pack at COST_BUDGET holds the event loop (and the lock) for at most about 35 ms.
 */

/** Worst-case steps of all of a pack's conditions together. */
export const COST_BUDGET = 500_000;
/** Comprehensions nest at most this deep (`a.all(x, b.all(y, c.all(z, …)))` is 3). */
export const MAX_COMPREHENSION_DEPTH = 3;
/**
 * Steps charged for a regex search of the longest input its plan allows (RegexMatcher.maxInput): the
 * policy engine bounds such a search to a few tens of milliseconds; shorter inputs cost proportionally.
 */
export const REGEX_SEARCH_STEPS = 1_000_000;
/** Steps charged for each regex search besides its length: setting a search up costs up to tens of µs. */
export const REGEX_CALL_STEPS = 1000;

/**
 * The longest each member of `payment` can be, in UTF-16 code units (what JavaScript's length
 * counts): the request schemas count characters (code points), and one is at most two units.
 * evaluateConditions refuses facts longer than this, so the bound holds whatever the capsule.
 */
export const PAYMENT_STRING_BOUNDS = {
  currency: 10,
  rail: 64,
  entity_id: 400,
  agent_id: 400,
  beneficiary: 71,
  invoice_hash: 71,
} as const;

/** An upper bound of a value's size: its length or number of members, and the same of a member. */
interface Shape {
  readonly len: number;
  readonly elem: Shape | null;
}

const SCALAR: Shape = { len: 1, elem: null };
const str = (len: number): Shape => ({ len: Math.max(1, len), elem: null });
const PAYMENT: Shape = {
  len: 8,
  elem: str(Math.max(...Object.values(PAYMENT_STRING_BOUNDS))),
};

/** Everything a value of this shape holds, members of members included (what a copy or compare visits). */
function weight(s: Shape): number {
  return s.elem === null ? s.len : s.len * (1 + weight(s.elem));
}

function join(a: Shape, b: Shape): Shape {
  const elem = a.elem === null ? b.elem : b.elem === null ? a.elem : join(a.elem, b.elem);
  return { len: Math.max(a.len, b.len), elem };
}

/** Why a condition cannot be saved (or run): answered as 400 at save, policy_eval_error at consume. */
export class ConditionBoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConditionBoundError';
  }
}

/** The node shape of the CEL library's parsed tree (`op`, `args`), as walked here. */
export interface CelNode {
  readonly op: string;
  readonly args: unknown;
  /** Set by the type check on a call node: the function evaluation runs. Replaced for `matches`. */
  handle?: unknown;
}

interface Bound {
  cost: number;
  shape: Shape;
}

type Scope = ReadonlyMap<string, Shape>;

const MACROS = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);

const show = (s: string) => JSON.stringify(s.length > 60 ? `${s.slice(0, 57)}...` : s);

/**
 * The compiled RE2 search that replaces the CEL library's `matches` (JavaScript RegExp, which
 * backtracks: `^([a-z0-9]+-?)*$` against 30 characters takes a minute). RE2 syntax is what CEL's
 * `matches` is specified with; the search is the policy engine's, linear in the input.
 */
function regexHandle(matcher: RegexMatcher) {
  return (args: readonly unknown[]) => {
    const input = args[0];
    if (typeof input !== 'string') throw new Error('matches() needs a string');
    // Never reached for a condition that passed the bound; kept so a search never runs unbounded.
    if (input.length > matcher.maxInput) {
      throw new Error(`the string is too long to be searched with ${show(matcher.source)}`);
    }
    return matcher.test(input);
  };
}

/**
 * Computes the worst-case cost of a parsed and type-checked condition, refusing (ConditionBoundError)
 * what cannot be bounded or is too deep; replaces the `matches` calls' evaluation with RE2 searches.
 */
export function boundCondition(root: CelNode, opts: { matches: boolean }): number {
  const visit = (node: CelNode, scope: Scope, depth: number): Bound => {
    const args = node.args;
    switch (node.op) {
      case 'value': {
        if (typeof args === 'string') return { cost: 1, shape: str(args.length) };
        if (args instanceof Uint8Array) return { cost: 1, shape: str(args.length) };
        return { cost: 1, shape: SCALAR };
      }
      case 'id': {
        const name = args as string;
        const bound = scope.get(name);
        if (bound) return { cost: 1, shape: bound };
        return { cost: 1, shape: name === 'payment' ? PAYMENT : SCALAR };
      }
      case '.': {
        const [receiver, field] = args as [CelNode, string];
        const r = visit(receiver, scope, depth);
        if (receiver.op === 'id' && receiver.args === 'payment' && !scope.has('payment')) {
          const b = PAYMENT_STRING_BOUNDS[field as keyof typeof PAYMENT_STRING_BOUNDS];
          return { cost: r.cost + 1, shape: b === undefined ? SCALAR : str(b) };
        }
        return { cost: r.cost + 1, shape: r.shape.elem ?? SCALAR };
      }
      case '[]': {
        const [receiver, index] = args as [CelNode, CelNode];
        const r = visit(receiver, scope, depth);
        const i = visit(index, scope, depth);
        return { cost: r.cost + i.cost + weight(i.shape) + 1, shape: r.shape.elem ?? SCALAR };
      }
      case 'list': {
        const items = (args as CelNode[]).map((n) => visit(n, scope, depth));
        return {
          cost: items.reduce((c, b) => c + b.cost, 1 + items.length),
          shape: { len: Math.max(1, items.length), elem: items.map((b) => b.shape).reduce(join, SCALAR) },
        };
      }
      case 'map': {
        const entries = (args as [CelNode, CelNode][]).flatMap(([k, v]) => [
          visit(k, scope, depth),
          visit(v, scope, depth),
        ]);
        return {
          cost: entries.reduce((c, b) => c + b.cost + weight(b.shape), 1),
          shape: {
            len: Math.max(1, entries.length / 2),
            elem: entries.map((b) => b.shape).reduce(join, SCALAR),
          },
        };
      }
      case '?:': {
        const [c, a, b] = (args as CelNode[]).map((n) => visit(n, scope, depth)) as [Bound, Bound, Bound];
        return { cost: c.cost + a.cost + b.cost + 1, shape: join(a.shape, b.shape) };
      }
      case '!_':
      case '-_': {
        const a = visit(args as CelNode, scope, depth);
        return { cost: a.cost + 1, shape: SCALAR };
      }
      case '&&':
      case '||':
      case '-':
      case '*':
      case '/':
      case '%': {
        const [a, b] = (args as CelNode[]).map((n) => visit(n, scope, depth)) as [Bound, Bound];
        return { cost: a.cost + b.cost + 1, shape: SCALAR };
      }
      case '+': {
        const [a, b] = (args as CelNode[]).map((n) => visit(n, scope, depth)) as [Bound, Bound];
        const elem = a.shape.elem === null && b.shape.elem === null ? null : join(a.shape, b.shape).elem;
        return {
          cost: a.cost + b.cost + weight(a.shape) + weight(b.shape) + 1,
          shape: { len: a.shape.len + b.shape.len, elem },
        };
      }
      case '==':
      case '!=':
      case '<':
      case '<=':
      case '>':
      case '>=': {
        const [a, b] = (args as CelNode[]).map((n) => visit(n, scope, depth)) as [Bound, Bound];
        return { cost: a.cost + b.cost + weight(a.shape) + weight(b.shape) + 1, shape: SCALAR };
      }
      case 'in': {
        // Membership in a list compares with every member; in a map it is one lookup (charged as a list).
        const [a, b] = (args as CelNode[]).map((n) => visit(n, scope, depth)) as [Bound, Bound];
        return {
          cost: a.cost + b.cost + b.shape.len * (weight(a.shape) + 1) + weight(b.shape) + 1,
          shape: SCALAR,
        };
      }
      case 'call': {
        const [name, callArgs] = args as [string, CelNode[]];
        return call(name, null, callArgs, scope, depth);
      }
      case 'rcall': {
        const [name, receiver, callArgs] = args as [string, CelNode, CelNode[]];
        if (MACROS.has(name)) return comprehension(name, receiver, callArgs, scope, depth);
        if (name === 'bind' && receiver.op === 'id' && receiver.args === 'cel' && !scope.has('cel')) {
          const [variable, init, body] = callArgs as [CelNode, CelNode, CelNode];
          const i = visit(init, scope, depth);
          const inner = new Map(scope).set(variable.args as string, i.shape);
          const b = visit(body, inner, depth);
          return { cost: i.cost + b.cost + 1, shape: b.shape };
        }
        if (name === 'matches') return matches(node, receiver, callArgs, scope, depth);
        return call(name, visit(receiver, scope, depth), callArgs, scope, depth);
      }
      default:
        throw new ConditionBoundError(`uses ${node.op}, which conditions do not support`);
    }
  };

  const comprehension = (
    name: string,
    receiver: CelNode,
    callArgs: CelNode[],
    scope: Scope,
    depth: number,
  ): Bound => {
    if (depth + 1 > MAX_COMPREHENSION_DEPTH) {
      throw new ConditionBoundError(
        `nests comprehensions (all, exists, exists_one, map, filter) more than ${MAX_COMPREHENSION_DEPTH} deep`,
      );
    }
    const [variable, ...bodies] = callArgs;
    if (variable?.op !== 'id' || bodies.length === 0) {
      throw new ConditionBoundError(`uses ${name}() in a form conditions do not support`);
    }
    const range = visit(receiver, scope, depth);
    const n = range.shape.len;
    // A map's range is its keys; its shape's member bounds keys and values alike.
    const member = range.shape.elem ?? SCALAR;
    const inner = new Map(scope).set(variable.args as string, member);
    const body = bodies.map((b) => visit(b, inner, depth + 1));
    const last = body[body.length - 1]!;
    // map and filter also build a list of what they keep.
    const kept = name === 'map' ? weight(last.shape) : name === 'filter' ? weight(member) : 0;
    const perMember = body.reduce((c, b) => c + b.cost, 2 + kept);
    const shape =
      name === 'map' ? { len: n, elem: last.shape } : name === 'filter' ? { len: n, elem: member } : SCALAR;
    return { cost: range.cost + 1 + n * perMember, shape };
  };

  const matches = (
    node: CelNode,
    receiver: CelNode,
    callArgs: CelNode[],
    scope: Scope,
    depth: number,
  ): Bound => {
    if (!opts.matches) {
      throw new ConditionBoundError(
        'calls matches(), which this server cannot evaluate safely (its CEL library changed)',
      );
    }
    const pattern = callArgs[0];
    if (callArgs.length !== 1 || pattern?.op !== 'value' || typeof pattern.args !== 'string') {
      throw new ConditionBoundError('calls matches() with a pattern that is not a string literal');
    }
    const compiled = compileRegex(pattern.args);
    if (!compiled.ok) {
      throw new ConditionBoundError(
        `has a pattern ${show(pattern.args)} that is unusable: ${compiled.reason}`,
      );
    }
    const r = visit(receiver, scope, depth);
    const { maxInput } = compiled.matcher;
    if (r.shape.len > maxInput) {
      throw new ConditionBoundError(
        `searches strings of up to ${r.shape.len} characters with the pattern ${show(pattern.args)}, which can search at most ${maxInput} within its work budget`,
      );
    }
    node.handle = regexHandle(compiled.matcher);
    return {
      cost:
        r.cost +
        REGEX_CALL_STEPS +
        Math.ceil(((r.shape.len + 1) / Math.max(1, maxInput)) * REGEX_SEARCH_STEPS),
      shape: SCALAR,
    };
  };

  const call = (
    name: string,
    receiver: Bound | null,
    callArgs: CelNode[],
    scope: Scope,
    depth: number,
  ): Bound => {
    const a = callArgs.map((n) => visit(n, scope, depth));
    const argCost = a.reduce((c, b) => c + b.cost, receiver === null ? 1 : receiver.cost + 1);
    // The subject: the receiver of a method, the first argument of a global function.
    const subject = receiver?.shape ?? a[0]?.shape ?? SCALAR;
    const other = (receiver === null ? a[1] : a[0])?.shape ?? SCALAR;
    switch (name) {
      case 'has':
      case 'type':
        return { cost: argCost, shape: SCALAR };
      case 'size':
        // A string's size counts its code points.
        return { cost: argCost + subject.len, shape: SCALAR };
      case 'dyn':
        return { cost: argCost, shape: subject };
      case 'int':
      case 'uint':
      case 'double':
      case 'bool':
        return { cost: argCost + weight(subject), shape: SCALAR };
      case 'string': {
        // string(double) of a finite number is at most 24 characters; of bytes, their length.
        const len = Math.max(subject.len, 32);
        return { cost: argCost + len, shape: str(len) };
      }
      case 'startsWith':
      case 'endsWith':
        if (receiver === null) break;
        return { cost: argCost + subject.len + other.len, shape: SCALAR };
      case 'contains':
      case 'indexOf':
      case 'lastIndexOf':
        if (receiver === null) break;
        return { cost: argCost + (subject.len + 1) * (other.len + 1), shape: SCALAR };
      case 'lowerAscii':
      case 'upperAscii':
      case 'trim':
      case 'substring':
        if (receiver === null) break;
        return { cost: argCost + subject.len, shape: str(subject.len) };
      case 'split':
        if (receiver === null) break;
        return {
          cost: argCost + (subject.len + 1) * (other.len + 1),
          shape: { len: subject.len + 1, elem: str(subject.len) },
        };
      case 'join': {
        if (receiver === null) break;
        const len = weight(subject) + subject.len * (a[0] ? other.len : 0);
        return { cost: argCost + len, shape: str(len) };
      }
    }
    throw new ConditionBoundError(`calls ${name}(), which conditions do not support`);
  };

  return visit(root, new Map(), 0).cost;
}
