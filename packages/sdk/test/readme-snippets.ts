import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * The code examples of a README, checked as a user would use them.
 *
 * - Every fenced block whose info string is exactly `ts`, `typescript`, `js` or `javascript` is an
 *   example: a complete ES module, as a user would paste it into a file of their project.
 * - A block preceded (blank lines aside) by the line `<!-- fragment -->` is a deliberate fragment:
 *   it is neither type-checked nor run. Keep such marks few (the test bounds their number).
 * - The names the examples leave to the reader (their bank client, their model...) are declared
 *   once, in READER_VALUES, with the types the libraries expect of them.
 */

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '../../..');

export interface Snippet {
  /** The README's path, relative to the repository root. */
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: 'ts' | 'js';
  code: string;
  fragment: boolean;
}

const LANGS: Record<string, Snippet['lang']> = { ts: 'ts', typescript: 'ts', js: 'js', javascript: 'js' };
const FRAGMENT_MARK = '<!-- fragment -->';

/** The ts/js fenced blocks of a Markdown text; other fences (sh, json, none) are skipped over. */
export function extractSnippets(markdown: string, file: string): Snippet[] {
  const lines = markdown.split('\n');
  const out: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/.exec(lines[i] ?? '');
    if (!open) continue;
    const fence = open[1] as string;
    const start = i;
    let end = i + 1;
    // A closing fence is the opening's character, at least as many, and nothing else (CommonMark).
    const closes = new RegExp(`^${fence[0]}{${fence.length},}\\s*$`);
    while (end < lines.length && !closes.test(lines[end] ?? '')) end++;
    i = end;
    const lang = LANGS[(open[2] ?? '').toLowerCase()];
    if (!lang) continue;
    let before = start - 1;
    while (before >= 0 && (lines[before] ?? '').trim() === '') before--;
    out.push({
      file,
      line: start + 1,
      lang,
      code: `${lines.slice(start + 1, end).join('\n')}\n`,
      fragment: (lines[before] ?? '').trim() === FRAGMENT_MARK,
    });
  }
  return out;
}

/**
 * The reader's own values the examples use, declared as globals of the type-check. A name added here
 * must be listed in the README's sentence before its Quick starts, which says they are the user's.
 */
export const READER_VALUES = `
import type { LanguageModel } from 'ai';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
declare global {
  /** The user's payment code, which a guarded tool calls. */
  const bank: { pay(args: { amount: number; to: string }): Promise<unknown> };
  /** A tool's implementation, as each tool library takes it. */
  function pay(args: { amount: number }): Promise<string>;
  const model: LanguageModel;
  const prompt: string;
  const connectedMcpClient: McpClient;
  const baseUrl: string;
  const key: string;
  const capsule: string;
}
`;

/** Where the examples are placed for the compiler: never written, only resolved from. */
const VIRTUAL_DIR = join(REPO_ROOT, 'packages/sdk/test/.readme-examples');

/**
 * A user's project: strict ESM on Node (NodeNext), with Node's types (the examples read
 * process.env). Workspace packages are read through their package.json `exports` with the
 * `@svc/source` condition: the sources the declarations in dist are built from, so the check never
 * runs against a stale or missing build (the tests themselves run on that condition too).
 */
const COMPILER_OPTIONS: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2023.d.ts'],
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  strict: true,
  noUncheckedIndexedAccess: true,
  verbatimModuleSyntax: true,
  isolatedModules: true,
  skipLibCheck: true,
  allowJs: true,
  checkJs: true,
  noEmit: true,
  types: ['node'],
  customConditions: ['@svc/source'],
};

const virtualName = (s: Snippet) =>
  join(VIRTUAL_DIR, `${s.file.replace(/[^\w.-]+/g, '_')}-L${s.line}.${s.lang === 'ts' ? 'mts' : 'mjs'}`);

/**
 * Type-checks every example in one program and returns its problems, each as
 * `README.md:LINE:COL error TSnnnn: message`, with the line of the README the problem is on.
 */
export function typeCheck(snippets: readonly Snippet[]): string[] {
  const files = new Map<string, { text: string; snippet?: Snippet }>();
  files.set(join(VIRTUAL_DIR, 'reader-values.d.mts'), { text: READER_VALUES });
  for (const s of snippets) files.set(virtualName(s), { text: s.code, snippet: s });

  const host = ts.createCompilerHost(COMPILER_OPTIONS);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, lang, ...rest) => {
    const file = files.get(name);
    return file ? ts.createSourceFile(name, file.text, lang) : getSourceFile.call(host, name, lang, ...rest);
  };
  host.fileExists = (name) => files.has(name) || fileExists.call(host, name);
  host.readFile = (name) => files.get(name)?.text ?? readFile.call(host, name);

  const program = ts.createProgram([...files.keys()], COMPILER_OPTIONS, host);
  // Only the examples' own diagnostics: the libraries and the workspace sources they import are
  // checked by their own builds, under their own settings.
  const diagnostics = [...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics()];
  for (const name of files.keys()) {
    const sf = program.getSourceFile(name);
    if (!sf) throw new Error(`the compiler did not read ${name}`);
    diagnostics.push(...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf));
  }
  return diagnostics.map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    const file = d.file ? files.get(d.file.fileName) : undefined;
    if (!d.file || d.start === undefined) return `error TS${d.code}: ${message}`;
    const at = d.file.getLineAndCharacterOfPosition(d.start);
    const where = file?.snippet
      ? `${file.snippet.file}:${file.snippet.line + 1 + at.line}:${at.character + 1}`
      : `${relative(REPO_ROOT, d.file.fileName)}:${at.line + 1}:${at.character + 1}`;
    return `${where} error TS${d.code}: ${message}`;
  });
}

/** The module specifiers a snippet imports, in order. */
export function importsOf(code: string): string[] {
  const sf = ts.createSourceFile('example.ts', code, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  return sf.statements.flatMap((s) =>
    ts.isImportDeclaration(s) && ts.isStringLiteral(s.moduleSpecifier) ? [s.moduleSpecifier.text] : [],
  );
}

/** The names a module declares at its top level (variables, functions, classes; not imports). */
export function topLevelNames(code: string): string[] {
  const sf = ts.createSourceFile('example.ts', code, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const names: string[] = [];
  const bind = (name: ts.BindingName) => {
    if (ts.isIdentifier(name)) names.push(name.text);
    else for (const el of name.elements) if (!ts.isOmittedExpression(el)) bind(el.name);
  };
  for (const statement of sf.statements) {
    if (ts.isVariableStatement(statement)) {
      for (const d of statement.declarationList.declarations) bind(d.name);
    } else if ((ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement)) && statement.name) {
      names.push(statement.name.text);
    }
  }
  return names;
}

/** The address the examples use for the service; a run replaces it with the test server's. */
export const EXAMPLE_BASE_URL = 'https://svc.example.com';

export interface RunOptions {
  /** The test server, put in place of EXAMPLE_BASE_URL. */
  baseUrl: string;
  /** What the example reads as `process.env.SVC_API_KEY`. */
  apiKey: string;
  /** The modules the example may import, by specifier. */
  modules: Record<string, unknown>;
  /** The reader's values (READER_VALUES) the example uses. */
  values?: Record<string, unknown>;
}

export interface RunResult {
  /** The example's top-level declarations, as they stood when it ended. */
  bindings: Record<string, unknown>;
  /** The arguments of every console.log of the example. */
  logs: unknown[][];
}

type AsyncFn = (...args: unknown[]) => Promise<Record<string, unknown>>;
const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor as new (
  ...paramsAndBody: string[]
) => AsyncFn;

/**
 * Runs an example as written: compiled to a CommonJS body inside an async function (so its
 * top-level `await`s work), its imports answered from `modules`, its `process.env.SVC_API_KEY` and
 * the reader's values given as parameters, and EXAMPLE_BASE_URL replaced by the test server's.
 * Rejects with what the example throws.
 */
export async function runSnippet(snippet: Snippet, options: RunOptions): Promise<RunResult> {
  const source = snippet.code.replaceAll(EXAMPLE_BASE_URL, options.baseUrl);
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
    fileName: `example.${snippet.lang}`,
  });
  const declared = topLevelNames(snippet.code);
  const values = Object.entries(options.values ?? {}).filter(([name]) => !declared.includes(name));
  const logs: unknown[][] = [];
  const require = (specifier: string) => {
    if (!(specifier in options.modules)) {
      throw new Error(`${snippet.file}:${snippet.line} imports ${specifier}, which the run does not provide`);
    }
    return options.modules[specifier];
  };
  const fn = new AsyncFunction(
    'require',
    'exports',
    'process',
    'console',
    ...values.map(([name]) => name),
    `${outputText}\nreturn { ${declared.join(', ')} };`,
  );
  const bindings = await fn(
    require,
    {},
    { env: { SVC_API_KEY: options.apiKey } },
    { ...console, log: (...args: unknown[]) => logs.push(args) },
    ...values.map(([, value]) => value),
  );
  return { bindings, logs };
}
