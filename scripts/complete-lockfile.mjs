#!/usr/bin/env node
/**
 * Completes package-lock.json with the platform-specific optional packages (other operating systems
 * and CPUs) that a registry mirror without them leaves out. `npm install` skips an optional package it
 * cannot fetch and writes no lock entry for it; `npm ci` then refuses the lock as out of sync. Each
 * added entry carries its os/cpu/libc, so npm skips it on every other platform without fetching it.
 * Run after `npm install` changes the lock: `node scripts/complete-lockfile.mjs`.
 */
import { readFileSync, writeFileSync } from 'node:fs';

const LOCK = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(LOCK, 'utf8'));
const packages = lock.packages;

const OS = [
  'android',
  'darwin',
  'freebsd',
  'linux',
  'openbsd',
  'openharmony',
  'win32',
  'sunos',
  'aix',
  'netbsd',
];
const CPU = {
  arm: 'arm',
  arm64: 'arm64',
  x64: 'x64',
  ia32: 'ia32',
  loong64: 'loong64',
  ppc64: 'ppc64',
  riscv64: 'riscv64',
  s390x: 's390x',
  mips64el: 'mips64el',
};

/** Reads os, cpu and libc from names like cli-darwin-arm64, rollup-linux-arm-musleabihf, win32-x64-msvc. */
function platformOf(name) {
  const parts = name.split('/').pop().split('-');
  const osIndex = parts.findIndex((p) => OS.includes(p));
  if (osIndex === -1) return null;
  const cpu = CPU[parts[osIndex + 1]];
  if (!cpu) return null;
  const rest = parts.slice(osIndex + 2).join('-');
  const meta = { os: [parts[osIndex]], cpu: [cpu] };
  if (parts[osIndex] === 'linux') meta.libc = [rest.startsWith('musl') ? 'musl' : 'glibc'];
  return meta;
}

let added = 0;
for (const [path, entry] of Object.entries(packages)) {
  for (const [dep, range] of Object.entries(entry.optionalDependencies ?? {})) {
    const base = path === '' ? '' : `${path}/`;
    if (packages[`${base}node_modules/${dep}`] || packages[`node_modules/${dep}`]) continue;
    const platform = platformOf(dep);
    if (!platform) continue;
    packages[`node_modules/${dep}`] = {
      version: range.replace(/^[\^~=]/, ''),
      ...(entry.dev ? { dev: true } : {}),
      optional: true,
      ...platform,
    };
    added++;
  }
}
lock.packages = Object.fromEntries(
  Object.entries(packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : 1)),
);
writeFileSync(LOCK, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`complete-lockfile: added ${added} platform entries`);
