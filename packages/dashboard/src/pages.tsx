import type { ComponentType } from 'react';
import { Approvals } from './Approvals.js';
import { Budgets } from './Budgets.js';
import { Charter } from './Charter.js';
import { Decisions } from './Decisions.js';
import { Drafts } from './Drafts.js';
import { Policies } from './Policies.js';
import { Settings } from './Settings.js';

/** What every page receives: the organization chosen in the header and the signed-in person. */
export interface PageProps {
  organizationId: string;
  userId: string;
  /** The organization's plan (`tier`), when the page knows it. */
  tier?: string;
}

export interface Page {
  /** The page's path; everything under it belongs to the page too (its client routes on the server). */
  path: string;
  label: string;
  component: ComponentType<PageProps>;
}

/** The dashboard's pages, in navigation order. The first is where `/` leads. */
export const PAGES: Page[] = [
  { path: '/approvals', label: 'Approvals', component: Approvals },
  { path: '/decisions', label: 'Decisions', component: Decisions },
  { path: '/policies', label: 'Policies', component: Policies },
  { path: '/drafts', label: 'Drafts', component: Drafts },
  { path: '/charter', label: 'Charter', component: Charter },
  { path: '/budgets', label: 'Budgets', component: Budgets },
  { path: '/settings', label: 'Settings', component: Settings },
];

/** The page a path belongs to (its own path or anything under it), else the first page. */
export function pageOf(path: string): Page {
  return PAGES.find((p) => path === p.path || path.startsWith(`${p.path}/`)) ?? PAGES[0]!;
}
