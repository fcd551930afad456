import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The public entries must load in browsers, Deno, Bun and edge runtimes: no `node:` module (nor a
 * bare Node built-in) anywhere in what they import, the policy engine included.
 */
const BUILTINS = [
  'fs',
  'path',
  'crypto',
  'http',
  'https',
  'net',
  'os',
  'stream',
  'buffer',
  'util',
  'events',
  'url',
  'zlib',
  'child_process',
  'worker_threads',
];
const importRe = /(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')
        ? [join(dir, e.name)]
        : [],
  );
}

describe('runtime neutrality', () => {
  const root = join(import.meta.dirname, '..', '..');
  const files = [
    ...sources(join(root, 'sdk', 'src')),
    ...sources(join(root, 'policy-engine', 'src')),
    ...sources(join(root, 'capsules', 'src')),
  ];

  it.each(files.map((f) => [f.slice(root.length + 1), f]))('%s imports no Node built-in', (_name, file) => {
    const text = readFileSync(file, 'utf8');
    const specifiers = [...text.matchAll(importRe)].map((m) => m[1] ?? m[2]!);
    for (const s of specifiers) {
      expect(s.startsWith('node:'), `${s} in ${file}`).toBe(false);
      expect(BUILTINS.includes(s.split('/')[0]!), `${s} in ${file}`).toBe(false);
    }
    expect(text).not.toMatch(/\bBuffer\.|\bprocess\.|\brequire\(/);
  });
});

describe('the built package', () => {
  it('imports from plain node (built by the root install)', () => {
    const script = [
      "const sdk = await import('@svc/sdk');",
      "const verify = await import('@svc/sdk/verify');",
      "const capsules = await import('@svc/sdk/capsules');",
      "const c = sdk.createClient({ apiKey: 'svc_x', baseUrl: 'http://127.0.0.1:9', live: false });",
      'await c.close();',
      'console.log(typeof sdk.createClient, typeof verify.verifyReceiptChain, typeof capsules.verifyCapsule);',
    ].join('\n');
    const root = join(import.meta.dirname, '..', '..', '..');
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(out.trim()).toBe('function function function');
  });
});
