import type { Static } from '@sinclair/typebox';
import {
  type CategoryPolicy,
  codePointLength,
  combineConfigs,
  type EconomicConfig,
  toMicros,
} from '@svc/policy-engine';
import { AppError, forbidden, invalid } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import { type Authority, type ConfigAnswer, toConfigView } from './model.js';
import type { EconomicConfigRepository } from './repository.js';
import { type ConfigBody, MAX_ID_CHARS } from './schemas.js';

export type ConfigInput = Static<typeof ConfigBody>;
type Caller = Pick<OrgScope, 'organizationId' | 'projectId' | 'principal'>;

export const DEFAULT_APPROVAL_WINDOW_SECONDS = 3600;

/** Exact micros of an optional dollar field, or a 400 naming it. */
export function micros(field: string, usd: number | null | undefined): number | null {
  if (usd === undefined || usd === null) return null;
  const m = toMicros(usd);
  if (m === null)
    throw invalid(`${field} must be a dollar amount from 0 to 1000000000 with at most 6 decimals`);
  return m;
}

export interface ResolvedConfig {
  /** What decides: the organization's and the project's configurations combined. */
  effective: EconomicConfig | null;
  authority: Authority;
  answer: ConfigAnswer;
}

/**
 * A user acts on the organization's configuration; an API key on its project's. The project's can
 * only tighten the organization's (combineConfigs), so an agent holding a key cannot raise a limit
 * a person set for the organization, nor enable spending where the organization has no
 * configuration (the project's is kept, and applies once the organization is configured).
 */
export async function loadEffective(
  configs: EconomicConfigRepository,
  scope: Pick<OrgScope, 'organizationId' | 'projectId'>,
): Promise<ResolvedConfig> {
  const org = await configs.get(scope.organizationId, null);
  const project = scope.projectId ? await configs.get(scope.organizationId, scope.projectId) : undefined;
  const effective = combineConfigs(org?.config ?? null, project?.config ?? null);
  // Without the organization's configuration nothing applies, a project's included (combineConfigs).
  const authority: Authority = !org ? 'none' : project ? 'organization+project' : 'organization';
  const own = scope.projectId ? project : org;
  return {
    effective,
    authority,
    answer: {
      scope: scope.projectId ? 'project' : 'organization',
      projectId: scope.projectId,
      config: own ? toConfigView(own.config) : null,
      updatedAt: own?.updatedAt ?? null,
      effective: effective ? toConfigView(effective) : null,
      authority,
    },
  };
}

/** Validates and stores a whole configuration (PUT replaces; omitted fields take their defaults). */
export async function saveConfig(
  configs: EconomicConfigRepository,
  scope: Caller,
  body: ConfigInput,
  now: string,
): Promise<void> {
  if (scope.principal.kind === 'apiKey' && !scope.projectId) {
    throw forbidden("The organization's economic configuration is written with a user token");
  }
  const categoryPolicies: Record<string, CategoryPolicy> = {};
  for (const [name, p] of Object.entries(body.categoryPolicies ?? {})) {
    // A longer name could never be an action's category (the schemas' Id), so its policy never applies.
    const length = codePointLength(name);
    if (length > MAX_ID_CHARS) {
      throw invalid(
        `body/categoryPolicies: a category name of ${length} characters; names are at most ${MAX_ID_CHARS}`,
      );
    }
    categoryPolicies[name] = {
      limitMicros: micros(`body/categoryPolicies/${name}/limitUsd`, p.limitUsd),
      approvalThresholdMicros: micros(
        `body/categoryPolicies/${name}/approvalThresholdUsd`,
        p.approvalThresholdUsd,
      ),
    };
  }
  const defaultPayer = body.defaultPayer ?? null;
  if (defaultPayer !== null && !body.approvedPayers.includes(defaultPayer)) {
    throw invalid(`body/defaultPayer "${defaultPayer}" must be one of approvedPayers`);
  }
  let agentWindow = body.agentWindow ?? 'day';
  let categoryWindow = body.categoryWindow ?? 'day';
  if (scope.projectId) {
    // Both levels count in the same windows: the organization's, when it has a configuration.
    const org = await configs.get(scope.organizationId, null);
    if (org) {
      for (const [field, given, theirs] of [
        ['agentWindow', body.agentWindow, org.config.agentWindow],
        ['categoryWindow', body.categoryWindow, org.config.categoryWindow],
      ] as const) {
        if (given !== undefined && given !== theirs) {
          throw new AppError(
            'validation_failed',
            `body/${field}: budget windows are set by the organization's configuration ("${theirs}")`,
          );
        }
      }
      agentWindow = org.config.agentWindow;
      categoryWindow = org.config.categoryWindow;
    }
  }
  const config: EconomicConfig = {
    defaultPayer,
    approvedPayers: body.approvedPayers,
    perActionApprovalThresholdMicros: micros(
      'body/perActionApprovalThresholdUsd',
      body.perActionApprovalThresholdUsd,
    ),
    sessionLimitMicros: micros('body/sessionLimitUsd', body.sessionLimitUsd),
    agentLimitMicros: micros('body/agentLimitUsd', body.agentLimitUsd),
    categoryPolicies,
    approvalWindowSeconds: body.approvalWindowSeconds ?? DEFAULT_APPROVAL_WINDOW_SECONDS,
    agentWindow,
    categoryWindow,
  };
  await configs.put(scope.organizationId, scope.projectId, config, now);
}
