/** SPEC §8: human-in-the-loop approvals need the Team plan or above. */
export const APPROVALS_NEED_TEAM = 'human-in-the-loop approvals need the Team plan or above';

/** Whether an organization's plan (`tier`) has approvals: every plan but `free`. */
export function approvalsAllowed(tier: string): boolean {
  return tier !== 'free';
}

/** The reason of a call that requires approval, denied because the plan has no approvals. */
export function deniedWithoutApprovals(reason: string): string {
  return `${reason}: human approval is required, but ${APPROVALS_NEED_TEAM}; denied`;
}
